package ratelimit

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// hdr builds response headers from name, value pairs, canonicalising
// names as net/http does.
func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// clientNow is the client's clock in these tests: deliberately far from
// the servers' Date headers, so that a reset computed against the wrong
// clock shows.
var clientNow = time.Date(2030, 6, 15, 12, 0, 0, 0, time.UTC)

type parseCase struct {
	name string
	h    http.Header
	want Quota
	ok   bool
}

func runParseCases(t *testing.T, cases []parseCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseHeaders(tc.h, clientNow)
			if ok != tc.ok {
				t.Fatalf("ParseHeaders ok = %v, want %v (quota %+v)", ok, tc.ok, got)
			}
			if !ok {
				return
			}
			if !got.Reset.Equal(tc.want.Reset) {
				t.Errorf("Reset = now%+v, want now%+v", got.Reset.Sub(clientNow), tc.want.Reset.Sub(clientNow))
			}
			got.Reset, tc.want.Reset = time.Time{}, time.Time{}
			if got != tc.want {
				t.Errorf("ParseHeaders = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func in(d time.Duration) time.Time { return clientNow.Add(d) }

func TestParseHeadersXRateLimit(t *testing.T) {
	// GitHub's documented example: Date 17:27:06, reset 1372700873
	// (17:47:53), so the reset is 20m47s away whatever the client's clock.
	github := hdr(
		"Date", "Mon, 01 Jul 2013 17:27:06 GMT",
		"X-RateLimit-Limit", "60",
		"X-RateLimit-Remaining", "56",
		"X-RateLimit-Used", "4",
		"X-RateLimit-Reset", "1372700873",
		"X-RateLimit-Resource", "core",
	)
	runParseCases(t, []parseCase{
		{"github epoch against Date", github,
			Quota{Limit: 60, Remaining: 56, Reset: in(20*time.Minute + 47*time.Second), Resource: "core", Family: FamilyXRateLimit}, true},
		{"resource that is not a token", hdr("X-RateLimit-Remaining", "5", "X-RateLimit-Resource", "co re"),
			Quota{Limit: Unknown, Remaining: 5, Family: FamilyXRateLimit}, true},
		{"epoch without Date uses now", hdr(
			"X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "0",
			"X-RateLimit-Reset", "1907755230"), // clientNow + 30s
			Quota{Limit: 5000, Remaining: 0, Reset: in(30 * time.Second), Family: FamilyXRateLimit}, true},
		{"400 days of delta seconds", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "34560000"),
			Quota{Limit: Unknown, Remaining: 0, Reset: in(400 * 24 * time.Hour), Family: FamilyXRateLimit}, true},
		{"epoch just before Date by 399 days is past", hdr(
			"Date", "Mon, 01 Jul 2013 17:27:06 GMT",
			"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1338226026"),
			Quota{Limit: Unknown, Remaining: 0, Reset: clientNow, Family: FamilyXRateLimit}, true},
		{"delta seconds", hdr(
			"X-RateLimit-Limit", "100", "X-RateLimit-Remaining", "7", "X-RateLimit-Reset", "42"),
			Quota{Limit: 100, Remaining: 7, Reset: in(42 * time.Second), Family: FamilyXRateLimit}, true},
		{"delta zero", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "0"),
			Quota{Limit: Unknown, Remaining: 0, Reset: clientNow, Family: FamilyXRateLimit}, true},
		{"epoch decades before Date is absurd", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "999999999"),
			Quota{Limit: Unknown, Remaining: 0, Family: FamilyXRateLimit}, true},
		{"discord reset-after wins over epoch", hdr(
			"Date", "Tue, 02 Aug 2016 21:23:40 GMT",
			"X-RateLimit-Limit", "5",
			"X-RateLimit-Remaining", "1",
			"X-RateLimit-Reset", "1470173023.123",
			"X-RateLimit-Reset-After", "1.234",
			"X-RateLimit-Bucket", "abcd1234"),
			Quota{Limit: 5, Remaining: 1, Reset: in(1234 * time.Millisecond), Family: FamilyXRateLimit}, true},
		{"discord epoch with decimals against Date", hdr(
			"Date", "Tue, 02 Aug 2016 21:23:40 GMT", // 1470173020
			"X-RateLimit-Limit", "5",
			"X-RateLimit-Remaining", "0",
			"X-RateLimit-Reset", "1470173023.123"),
			Quota{Limit: 5, Remaining: 0, Reset: in(3123 * time.Millisecond), Family: FamilyXRateLimit}, true},
		{"garbage reset-after falls back to reset", hdr(
			"X-RateLimit-Remaining", "1", "X-RateLimit-Reset-After", "soon", "X-RateLimit-Reset", "2"),
			Quota{Limit: Unknown, Remaining: 1, Reset: in(2 * time.Second), Family: FamilyXRateLimit}, true},
		{"epoch milliseconds", hdr(
			"Date", "Tue, 14 Nov 2023 22:13:20 GMT", // 1700000000
			"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1700000060000"),
			Quota{Limit: Unknown, Remaining: 0, Reset: in(time.Minute), Family: FamilyXRateLimit}, true},
		{"reset as RFC 3339", hdr(
			"Date", "Mon, 24 Apr 2017 20:25:39 GMT",
			"X-RateLimit-Limit", "100", "X-RateLimit-Remaining", "0",
			"X-RateLimit-Reset", "2017-04-24T20:26:39+00:00"),
			Quota{Limit: 100, Remaining: 0, Reset: in(time.Minute), Family: FamilyXRateLimit}, true},
		{"reset as HTTP date", hdr(
			"Date", "Mon, 24 Apr 2017 20:25:39 GMT",
			"X-RateLimit-Remaining", "3",
			"X-RateLimit-Reset", "Mon, 24 Apr 2017 20:25:49 GMT"),
			Quota{Limit: Unknown, Remaining: 3, Reset: in(10 * time.Second), Family: FamilyXRateLimit}, true},
		{"epoch in the past has already reset", hdr(
			"Date", "Mon, 01 Jul 2013 17:27:06 GMT",
			"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1372699000"),
			Quota{Limit: Unknown, Remaining: 0, Reset: clientNow, Family: FamilyXRateLimit}, true},
		{"garbage Date falls back to now", hdr(
			"Date", "yesterday",
			"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1907755230"),
			Quota{Limit: Unknown, Remaining: 0, Reset: in(30 * time.Second), Family: FamilyXRateLimit}, true},
		{"remaining above limit is lowered", hdr("X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "11"),
			Quota{Limit: 10, Remaining: 10, Family: FamilyXRateLimit}, true},
		{"limit only", hdr("X-RateLimit-Limit", "10"),
			Quota{Limit: 10, Remaining: Unknown, Family: FamilyXRateLimit}, true},
		{"whitespace around values", hdr("X-RateLimit-Remaining", " 4\t", "X-RateLimit-Reset", " 9 "),
			Quota{Limit: Unknown, Remaining: 4, Reset: in(9 * time.Second), Family: FamilyXRateLimit}, true},
		{"negative remaining unusable", hdr("X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "-1"),
			Quota{Limit: 10, Remaining: Unknown, Family: FamilyXRateLimit}, true},
		{"x-ratelimit-used alone is nothing", hdr("X-RateLimit-Used", "4", "X-RateLimit-Reset", "9"), Quota{}, false},
		{"reset alone is nothing", hdr("X-RateLimit-Reset", "9"), Quota{}, false},
		{"twitter dashed family", hdr(
			"Date", "Tue, 16 Jan 2024 15:45:00 GMT", // 1705419900
			"x-rate-limit-limit", "900",
			"x-rate-limit-remaining", "847",
			"x-rate-limit-reset", "1705420800"),
			Quota{Limit: 900, Remaining: 847, Reset: in(15 * time.Minute), Family: FamilyXRateLimitDashed}, true},
	})
}

func TestParseHeadersGarbage(t *testing.T) {
	// Each value, put in turn in each field, must make that field
	// unusable and nothing else.
	garbage := []string{
		"", "-1", "+5", "abc", "1e3", "0x10", "1_000", "1.5.5", ".", "1.", "NaN", "Inf", "-Inf",
		"99999999999999999999", "1000000000000000", "९", "5 5", "5,5", "\x00", "1\n2",
	}
	for _, g := range garbage {
		h := hdr("X-RateLimit-Limit", "10", "X-RateLimit-Remaining", g, "X-RateLimit-Reset", "5")
		got, ok := ParseHeaders(h, clientNow)
		if !ok || got.Limit != 10 || got.Remaining != Unknown || !got.Reset.Equal(in(5*time.Second)) {
			t.Errorf("Remaining %q: got %+v, %v, want Limit 10, Remaining unknown, Reset +5s", g, got, ok)
		}
		h = hdr("X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "3", "X-RateLimit-Reset", g)
		got, ok = ParseHeaders(h, clientNow)
		if !ok || got.Remaining != 3 || !got.Reset.IsZero() {
			t.Errorf("Reset %q: got %+v, %v, want Remaining 3, no Reset", g, got, ok)
		}
	}
	absurd := []string{
		"34560001",        // past 400 days of delta: epoch seconds of 1971
		"99999999999",     // epoch seconds in the year 5138
		"999999999999999", // epoch milliseconds in the year 33658
		"-30",
		"1.0000000000000000001e9",
	}
	for _, a := range absurd {
		h := hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", a)
		got, ok := ParseHeaders(h, clientNow)
		if !ok || !got.Reset.IsZero() {
			t.Errorf("Reset %q: got %+v, %v, want no Reset", a, got, ok)
		}
	}
}

func TestParseHeadersNoneAndCached(t *testing.T) {
	quota := []string{"X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "5"}
	runParseCases(t, []parseCase{
		{"nil header", nil, Quota{}, false},
		{"no quota headers", hdr("Content-Type", "application/json", "Date", "Mon, 01 Jul 2013 17:27:06 GMT"), Quota{}, false},
		{"cached response", hdr(append([]string{"Age", "12"}, quota...)...), Quota{}, false},
		{"Age 0 is fresh", hdr(append([]string{"Age", "0"}, quota...)...),
			Quota{Limit: 10, Remaining: 0, Reset: in(5 * time.Second), Family: FamilyXRateLimit}, true},
		{"garbage Age is ignored", hdr(append([]string{"Age", "old"}, quota...)...),
			Quota{Limit: 10, Remaining: 0, Reset: in(5 * time.Second), Family: FamilyXRateLimit}, true},
		{"lower-case keys are not canonical", http.Header{"x-ratelimit-remaining": {"0"}}, Quota{}, false},
	})
}

func TestParseHeadersOpenAI(t *testing.T) {
	runParseCases(t, []parseCase{
		{"documented example: requests rule", hdr(
			"x-ratelimit-limit-requests", "60",
			"x-ratelimit-limit-tokens", "150000",
			"x-ratelimit-remaining-requests", "59",
			"x-ratelimit-remaining-tokens", "149984",
			"x-ratelimit-reset-requests", "1s",
			"x-ratelimit-reset-tokens", "6m0s"),
			Quota{Limit: 60, Remaining: 59, Reset: in(time.Second), Policy: "requests", Family: FamilyOpenAI}, true},
		{"tokens exhausted rule", hdr(
			"x-ratelimit-limit-requests", "5000",
			"x-ratelimit-limit-tokens", "40000",
			"x-ratelimit-remaining-requests", "4999",
			"x-ratelimit-remaining-tokens", "0",
			"x-ratelimit-reset-requests", "12ms",
			"x-ratelimit-reset-tokens", "2m59.56s"),
			Quota{Limit: 40000, Remaining: 0, Reset: in(2*time.Minute + 59560*time.Millisecond), Policy: "tokens", Family: FamilyOpenAI}, true},
		{"smaller fraction rules", hdr(
			"x-ratelimit-limit-requests", "100",
			"x-ratelimit-limit-tokens", "1000",
			"x-ratelimit-remaining-requests", "50",
			"x-ratelimit-remaining-tokens", "100",
			"x-ratelimit-reset-requests", "20ms",
			"x-ratelimit-reset-tokens", "1m"),
			Quota{Limit: 1000, Remaining: 100, Reset: in(time.Minute), Policy: "tokens", Family: FamilyOpenAI}, true},
		{"both exhausted: later reset rules", hdr(
			"x-ratelimit-limit-requests", "100",
			"x-ratelimit-limit-tokens", "1000",
			"x-ratelimit-remaining-requests", "0",
			"x-ratelimit-remaining-tokens", "0",
			"x-ratelimit-reset-requests", "20ms",
			"x-ratelimit-reset-tokens", "1.5s"),
			Quota{Limit: 1000, Remaining: 0, Reset: in(1500 * time.Millisecond), Policy: "tokens", Family: FamilyOpenAI}, true},
		{"requests only, 20ms", hdr(
			"x-ratelimit-limit-requests", "10000",
			"x-ratelimit-remaining-requests", "9999",
			"x-ratelimit-reset-requests", "20ms"),
			Quota{Limit: 10000, Remaining: 9999, Reset: in(20 * time.Millisecond), Policy: "requests", Family: FamilyOpenAI}, true},
		{"bare seconds reset", hdr(
			"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "3"),
			Quota{Limit: Unknown, Remaining: 0, Reset: in(3 * time.Second), Policy: "requests", Family: FamilyOpenAI}, true},
		{"negative duration unusable", hdr(
			"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "-1s"),
			Quota{Limit: Unknown, Remaining: 0, Policy: "requests", Family: FamilyOpenAI}, true},
		{"garbage duration unusable", hdr(
			"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "6 minutes"),
			Quota{Limit: Unknown, Remaining: 0, Policy: "requests", Family: FamilyOpenAI}, true},
		{"absurd duration unusable", hdr(
			"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "10000h"),
			Quota{Limit: Unknown, Remaining: 0, Policy: "requests", Family: FamilyOpenAI}, true},
		{"known remaining beats unknown", hdr(
			"x-ratelimit-limit-requests", "60",
			"x-ratelimit-limit-tokens", "150000",
			"x-ratelimit-remaining-tokens", "149000"),
			Quota{Limit: 150000, Remaining: 149000, Policy: "tokens", Family: FamilyOpenAI}, true},
	})
}

func TestParseHeadersAnthropic(t *testing.T) {
	date := "Mon, 01 Jan 2024 00:00:00 GMT"
	runParseCases(t, []parseCase{
		{"requests, tokens, input and output", hdr(
			"Date", date,
			"anthropic-ratelimit-requests-limit", "50",
			"anthropic-ratelimit-requests-remaining", "49",
			"anthropic-ratelimit-requests-reset", "2024-01-01T00:00:01Z",
			"anthropic-ratelimit-tokens-limit", "100000",
			"anthropic-ratelimit-tokens-remaining", "90000",
			"anthropic-ratelimit-tokens-reset", "2024-01-01T00:00:06Z",
			"anthropic-ratelimit-input-tokens-limit", "80000",
			"anthropic-ratelimit-input-tokens-remaining", "8000",
			"anthropic-ratelimit-input-tokens-reset", "2024-01-01T00:00:07Z",
			"anthropic-ratelimit-output-tokens-limit", "20000",
			"anthropic-ratelimit-output-tokens-remaining", "19000",
			"anthropic-ratelimit-output-tokens-reset", "2024-01-01T00:00:02Z"),
			Quota{Limit: 80000, Remaining: 8000, Reset: in(7 * time.Second), Policy: "input-tokens", Family: FamilyAnthropic}, true},
		{"output tokens exhausted", hdr(
			"Date", date,
			"anthropic-ratelimit-requests-limit", "50",
			"anthropic-ratelimit-requests-remaining", "1",
			"anthropic-ratelimit-requests-reset", "2024-01-01T00:00:01Z",
			"anthropic-ratelimit-output-tokens-limit", "20000",
			"anthropic-ratelimit-output-tokens-remaining", "0",
			"anthropic-ratelimit-output-tokens-reset", "2024-01-01T00:00:30.5Z"),
			Quota{Limit: 20000, Remaining: 0, Reset: in(30500 * time.Millisecond), Policy: "output-tokens", Family: FamilyAnthropic}, true},
		{"offset time zone", hdr(
			"Date", date,
			"anthropic-ratelimit-requests-remaining", "0",
			"anthropic-ratelimit-requests-reset", "2024-01-01T01:00:05+01:00"),
			Quota{Limit: Unknown, Remaining: 0, Reset: in(5 * time.Second), Policy: "requests", Family: FamilyAnthropic}, true},
		{"garbage reset", hdr(
			"anthropic-ratelimit-requests-remaining", "0",
			"anthropic-ratelimit-requests-reset", "2024-13-01T00:00:00Z"),
			Quota{Limit: Unknown, Remaining: 0, Policy: "requests", Family: FamilyAnthropic}, true},
		{"anthropic wins over the generic family", hdr(
			"x-ratelimit-remaining", "99",
			"anthropic-ratelimit-requests-remaining", "3"),
			Quota{Limit: Unknown, Remaining: 3, Policy: "requests", Family: FamilyAnthropic}, true},
	})
}

func TestParseHeadersIETFDraft(t *testing.T) {
	runParseCases(t, []parseCase{
		{"delta seconds", hdr("RateLimit-Limit", "100", "RateLimit-Remaining", "50", "RateLimit-Reset", "50"),
			Quota{Limit: 100, Remaining: 50, Reset: in(50 * time.Second), Family: FamilyRateLimitDraft}, true},
		{"gitlab epoch", hdr(
			"Date", "Tue, 05 Jan 2021 10:59:00 GMT",
			"RateLimit-Limit", "60",
			"RateLimit-Observed", "67",
			"RateLimit-Remaining", "0",
			"RateLimit-Reset", "1609844400", // 11:00:00
			"RateLimit-ResetTime", "Tue, 05 Jan 2021 11:00:00 GMT"),
			Quota{Limit: 60, Remaining: 0, Reset: in(time.Minute), Family: FamilyRateLimitDraft}, true},
		{"quota policies in the limit", hdr(
			"RateLimit-Limit", "10, 10;w=1, 50;w=60, 1000;w=3600",
			"RateLimit-Remaining", "9",
			"RateLimit-Reset", "1"),
			Quota{Limit: 10, Remaining: 9, Reset: in(time.Second), Window: time.Second, Family: FamilyRateLimitDraft}, true},
		{"window from RateLimit-Policy", hdr(
			"RateLimit-Limit", "100",
			"RateLimit-Remaining", "0",
			"RateLimit-Reset", "30",
			"RateLimit-Policy", "100;w=60"),
			Quota{Limit: 100, Remaining: 0, Reset: in(30 * time.Second), Window: time.Minute, Family: FamilyRateLimitDraft}, true},
		{"policy of another limit is no window", hdr(
			"RateLimit-Limit", "100",
			"RateLimit-Remaining", "1",
			"RateLimit-Policy", "5000;w=3600"),
			Quota{Limit: 100, Remaining: 1, Family: FamilyRateLimitDraft}, true},
		{"malformed limit list", hdr("RateLimit-Limit", "10, 10;w=", "RateLimit-Remaining", "9"),
			Quota{Limit: Unknown, Remaining: 9, Family: FamilyRateLimitDraft}, true},
	})
}

func TestParseHeadersStructured(t *testing.T) {
	runParseCases(t, []parseCase{
		{"draft example", hdr(
			"RateLimit-Policy", `"default";q=100;w=60`,
			"RateLimit", `"default";r=50;t=30`),
			Quota{Limit: 100, Remaining: 50, Reset: in(30 * time.Second), Window: time.Minute, Policy: "default", Family: FamilyRateLimit}, true},
		{"several policies: smallest fraction rules", hdr(
			"RateLimit-Policy", `"burst";q=100;w=60,"daily";q=1000;w=86400`,
			"RateLimit", `"burst";r=50;t=30, "daily";r=5;t=3600`),
			Quota{Limit: 1000, Remaining: 5, Reset: in(time.Hour), Window: 24 * time.Hour, Policy: "daily", Family: FamilyRateLimit}, true},
		{"several policies: exhausted rules", hdr(
			"RateLimit-Policy", `"burst";q=100;w=60, "daily";q=1000;w=86400`,
			"RateLimit", `"burst";r=0;t=30, "daily";r=5;t=3600`),
			Quota{Limit: 100, Remaining: 0, Reset: in(30 * time.Second), Window: time.Minute, Policy: "burst", Family: FamilyRateLimit}, true},
		{"policy over two field lines", hdr(
			"RateLimit-Policy", `"burst";q=100;w=60`,
			"RateLimit-Policy", `"daily";q=1000;w=86400`,
			"RateLimit", `"daily";r=0;t=3600`),
			Quota{Limit: 1000, Remaining: 0, Reset: in(time.Hour), Window: 24 * time.Hour, Policy: "daily", Family: FamilyRateLimit}, true},
		{"no matching policy", hdr("RateLimit", `"default";r=5;t=10`),
			Quota{Limit: Unknown, Remaining: 5, Reset: in(10 * time.Second), Policy: "default", Family: FamilyRateLimit}, true},
		{"no reset", hdr("RateLimit", `"default";r=5`),
			Quota{Limit: Unknown, Remaining: 5, Policy: "default", Family: FamilyRateLimit}, true},
		{"partition key and quota unit", hdr(
			"RateLimit-Policy", `"peruser";q=100;w=60;qu="requests";pk=:cHsdsRa894==:`,
			"RateLimit", `"peruser";r=1;t=20;pk=:cHsdsRa894==:`),
			Quota{Limit: 100, Remaining: 1, Reset: in(20 * time.Second), Window: time.Minute, Policy: "peruser", Family: FamilyRateLimit}, true},
		{"token names", hdr("RateLimit-Policy", `default;q=10;w=1`, "RateLimit", `default;r=3;t=1`),
			Quota{Limit: 10, Remaining: 3, Reset: in(time.Second), Window: time.Second, Policy: "default", Family: FamilyRateLimit}, true},
		{"escaped name", hdr("RateLimit-Policy", `"a\"b";q=10`, "RateLimit", `"a\"b";r=3`),
			Quota{Limit: 10, Remaining: 3, Policy: `a"b`, Family: FamilyRateLimit}, true},
		{"item without r is ignored", hdr(
			"RateLimit-Policy", `"a";q=10;w=1, "b";q=20;w=1`,
			"RateLimit", `"a";t=1, "b";r=7;t=1`),
			Quota{Limit: 20, Remaining: 7, Reset: in(time.Second), Window: time.Second, Policy: "b", Family: FamilyRateLimit}, true},
		{"negative and decimal r are ignored", hdr(
			"RateLimit", `"a";r=-1;t=1, "b";r=1.5;t=1, "c";r=4;t=2`),
			Quota{Limit: Unknown, Remaining: 4, Reset: in(2 * time.Second), Policy: "c", Family: FamilyRateLimit}, true},
		{"duplicate parameter: last wins", hdr("RateLimit", `"a";r=9;r=2;t=5`),
			Quota{Limit: Unknown, Remaining: 2, Reset: in(5 * time.Second), Policy: "a", Family: FamilyRateLimit}, true},
		{"remaining above quota is lowered", hdr("RateLimit-Policy", `"a";q=10`, "RateLimit", `"a";r=50`),
			Quota{Limit: 10, Remaining: 10, Policy: "a", Family: FamilyRateLimit}, true},
		{"absurd t makes the reset unusable", hdr("RateLimit", `"a";r=0;t=999999999999999`),
			Quota{Limit: Unknown, Remaining: 0, Policy: "a", Family: FamilyRateLimit}, true},
		{"malformed RateLimit is ignored whole: policy remains", hdr(
			"RateLimit-Policy", `"default";q=100;w=60`,
			"RateLimit", `"default";r=50;t=30,`),
			Quota{Limit: 100, Remaining: Unknown, Window: time.Minute, Policy: "default", Family: FamilyRateLimit}, true},
		{"policy alone: slowest rules", hdr(
			"RateLimit-Policy", `"burst";q=100;w=60, "daily";q=1000;w=86400`),
			Quota{Limit: 1000, Remaining: Unknown, Window: 24 * time.Hour, Policy: "daily", Family: FamilyRateLimit}, true},
		{"malformed policy is ignored whole", hdr(
			"RateLimit-Policy", `"default";q=100;w=60 "x"`,
			"RateLimit", `"default";r=50;t=30`),
			Quota{Limit: Unknown, Remaining: 50, Reset: in(30 * time.Second), Policy: "default", Family: FamilyRateLimit}, true},
		{"both malformed", hdr("RateLimit-Policy", `"default;q=100`, "RateLimit", `default;r=`), Quota{}, false},
		{"inner lists and other items are ignored", hdr(
			"RateLimit", `("a" "b");r=1, 5;r=1, ?1;r=1, "ok";r=2;t=3`),
			Quota{Limit: Unknown, Remaining: 2, Reset: in(3 * time.Second), Policy: "ok", Family: FamilyRateLimit}, true},
		{"structured wins over the first generation", hdr(
			"RateLimit", `"default";r=1;t=3`,
			"RateLimit-Limit", "100", "RateLimit-Remaining", "99"),
			Quota{Limit: Unknown, Remaining: 1, Reset: in(3 * time.Second), Policy: "default", Family: FamilyRateLimit}, true},
		{"malformed structured falls back to the first generation", hdr(
			"RateLimit", `"default";r=1;;t=3`,
			"RateLimit-Limit", "100", "RateLimit-Remaining", "99"),
			Quota{Limit: 100, Remaining: 99, Family: FamilyRateLimitDraft}, true},
	})
}

func TestFamilyString(t *testing.T) {
	for f, want := range map[Family]string{
		FamilyUnknown: "unknown", FamilyRateLimit: "ratelimit", FamilyAnthropic: "anthropic",
		FamilyOpenAI: "openai", FamilyRateLimitDraft: "ratelimit-draft", FamilyXRateLimit: "x-ratelimit",
		FamilyXRateLimitDashed: "x-rate-limit", Family(200): "unknown",
	} {
		if got := f.String(); got != want {
			t.Errorf("Family(%d).String() = %q, want %q", f, got, want)
		}
	}
}

// TestParseHeadersDateForms checks that a reset is measured from the
// response's Date in any of the three forms RFC 9110 accepts, and from
// the client's clock when Date is missing or garbage.
func TestParseHeadersDateForms(t *testing.T) {
	cases := []struct {
		date string
		want time.Duration
	}{
		{"Mon, 01 Jul 2013 17:27:06 GMT", 20*time.Minute + 47*time.Second},
		{"Monday, 01-Jul-13 17:27:06 GMT", 20*time.Minute + 47*time.Second},
		{"Mon Jul  1 17:27:06 2013", 20*time.Minute + 47*time.Second},
		{" Mon, 01 Jul 2013 17:27:06 GMT ", 20*time.Minute + 47*time.Second},
	}
	for _, tc := range cases {
		h := hdr("Date", tc.date, "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1372700873")
		if q, ok := ParseHeaders(h, clientNow); !ok || !q.Reset.Equal(in(tc.want)) {
			t.Errorf("Date %q: Reset = now%+v, want now%+v", tc.date, q.Reset.Sub(clientNow), tc.want)
		}
	}
	// Without a usable Date, the epoch is read on the client's clock:
	// 2013 is long past, so the reset has happened.
	for _, d := range []string{"", "Mon, 30 Feb 2013 17:27:06 GMT", "yesterday"} {
		h := hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1372700873")
		if d != "" {
			h.Set("Date", d)
		}
		if q, ok := ParseHeaders(h, clientNow); ok && !q.Reset.IsZero() && !q.Reset.Equal(clientNow) {
			t.Errorf("Date %q: Reset = now%+v, want now or unknown", d, q.Reset.Sub(clientNow))
		}
	}
}

// TestParseHeadersFamilyOrder checks that the families are read in the
// order the Family constants give, the first usable one winning.
func TestParseHeadersFamilyOrder(t *testing.T) {
	anthropicOut := []string{
		"Anthropic-Ratelimit-Requests-Limit", "50", "Anthropic-Ratelimit-Requests-Remaining", "0",
		"Anthropic-Ratelimit-Requests-Reset", "2030-06-15T12:00:30Z",
	}
	cases := []struct {
		name string
		kv   []string
		want Family
		rem  int
	}{
		{"anthropic exhausted beside RateLimit-Remaining 999",
			append([]string{"RateLimit-Remaining", "999", "RateLimit-Limit", "1000"}, anthropicOut...), FamilyAnthropic, 0},
		{"IETF RateLimit before anthropic",
			append([]string{"RateLimit", `"d";r=7;t=1`}, anthropicOut...), FamilyRateLimit, 7},
		{"openai before the first draft",
			[]string{"RateLimit-Remaining", "999", "X-RateLimit-Remaining-Requests", "3"}, FamilyOpenAI, 3},
		{"first draft before X-RateLimit",
			[]string{"RateLimit-Remaining", "9", "X-RateLimit-Remaining", "0"}, FamilyRateLimitDraft, 9},
		{"X-RateLimit before x-rate-limit",
			[]string{"X-Rate-Limit-Remaining", "9", "X-RateLimit-Remaining", "4"}, FamilyXRateLimit, 4},
		{"a malformed IETF field falls through",
			[]string{"RateLimit", `"d";r=7;t=1,`, "X-Rate-Limit-Remaining", "2"}, FamilyXRateLimitDashed, 2},
	}
	for _, tc := range cases {
		q, ok := ParseHeaders(hdr(tc.kv...), clientNow)
		if !ok || q.Family != tc.want || q.Remaining != tc.rem {
			t.Errorf("%s: ParseHeaders = %v %d (ok %v), want %v %d", tc.name, q.Family, q.Remaining, ok, tc.want, tc.rem)
		}
	}
}

func TestParseAll(t *testing.T) {
	h := hdr(
		"X-RateLimit-Limit-Requests", "60", "X-RateLimit-Remaining-Requests", "59", "X-RateLimit-Reset-Requests", "1s",
		"X-RateLimit-Limit-Tokens", "150000", "X-RateLimit-Remaining-Tokens", "0", "X-RateLimit-Reset-Tokens", "6m0s",
	)
	got := ParseAll(h, clientNow, nil)
	want := []Quota{
		{Limit: 60, Remaining: 59, Reset: in(time.Second), Policy: "requests", Family: FamilyOpenAI},
		{Limit: 150000, Remaining: 0, Reset: in(6 * time.Minute), Policy: "tokens", Family: FamilyOpenAI},
	}
	if len(got) != len(want) {
		t.Fatalf("ParseAll = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("ParseAll[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	var buf [4]Quota
	if n := testing.AllocsPerRun(50, func() { ParseAll(h, clientNow, buf[:0]) }); n != 0 {
		t.Errorf("ParseAll allocations = %v, want 0", n)
	}
	ietf := hdr("RateLimit-Policy", `"burst";q=100;w=60, "daily";q=1000;w=86400`,
		"RateLimit", `"burst";r=50;t=30, "daily";r=5;t=3600`)
	if got := ParseAll(ietf, clientNow, nil); len(got) != 2 || got[0].Policy != "burst" || got[1].Policy != "daily" ||
		got[1].Limit != 1000 || got[1].Window != 24*time.Hour {
		t.Errorf("ParseAll(IETF) = %+v, want burst and daily with their policies", got)
	}
}

// A malformed RateLimit field is ignored as a whole, as the draft
// requires, however many members come before its fault: past the 16
// quotas kept, the rest is still read to find one. A well-formed field of
// 20 members keeps its first 16.
func TestMalformedRateLimitIgnoredAsAWhole(t *testing.T) {
	members := func(n int) string {
		var m []string
		for i := range n {
			m = append(m, fmt.Sprintf(`"p%d";r=%d;t=1`, i, i+1))
		}
		return strings.Join(m, ", ")
	}
	tests := []struct {
		name  string
		field string
	}{
		{"15 members then garbage (control)", members(15) + `, ?garbage`},
		{"16 members then garbage", members(16) + `, ?garbage`},
		{"16 members then trailing comma", members(16) + `,`},
		{"17 members, the 17th unterminated", members(16) + `, "p16;r=1`},
	}
	if got := ParseAll(hdr("RateLimit", members(20)), clientNow, nil); len(got) != maxPolicies || got[15].Policy != "p15" {
		t.Errorf("20 well-formed members: %d quotas; want the first %d", len(got), maxPolicies)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := hdr("RateLimit", tt.field)
			if all := ParseAll(h, clientNow, nil); len(all) != 0 {
				t.Errorf("malformed RateLimit gave %d quotas (first %+v), want none", len(all), all[0])
			}
			if q, ok := ParseHeaders(h, clientNow); ok {
				t.Errorf("ParseHeaders = %+v, true; want false", q)
			}
		})
	}
}
