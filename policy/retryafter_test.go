package policy_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// saturated is where a too-long wait saturates: the longest whole number
// of seconds a time.Duration holds.
const saturated = 9223372036 * time.Second

// hdr builds a header from name, value pairs; a name may repeat.
func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestParseRetryAfter(t *testing.T) {
	// RFC 9110 §5.6.7's example instant.
	rfcDate := time.Date(1994, time.November, 6, 8, 49, 37, 0, time.UTC)
	rfcNow := rfcDate.Add(-90 * time.Second)
	y2k := time.Date(1999, time.December, 31, 23, 59, 0, 0, time.UTC)
	now := time.Date(2026, time.March, 14, 12, 0, 0, 0, time.UTC)

	tests := []struct {
		name   string
		h      http.Header
		now    time.Time
		want   time.Duration
		wantOK bool
	}{
		// RFC 9110 §10.2.3's examples.
		{"rfc9110 date", hdr("Retry-After", "Fri, 31 Dec 1999 23:59:59 GMT"), y2k, 59 * time.Second, true},
		{"rfc9110 seconds", hdr("Retry-After", "120"), now, 120 * time.Second, true},

		// RFC 9110 §5.6.7: the three date forms, same instant.
		{"IMF-fixdate", hdr("Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT"), rfcNow, 90 * time.Second, true},
		{"rfc850", hdr("Retry-After", "Sunday, 06-Nov-94 08:49:37 GMT"), rfcNow, 90 * time.Second, true},
		{"asctime", hdr("Retry-After", "Sun Nov  6 08:49:37 1994"), rfcNow, 90 * time.Second, true},
		{"asctime two-digit day", hdr("Retry-After", "Sun Nov 06 08:49:37 1994"), rfcNow, 90 * time.Second, true},
		{"date now", hdr("Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT"), rfcDate, 0, true},
		{"date in the past", hdr("Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT"), now, 0, true},
		{"rfc850 in the past", hdr("Retry-After", "Sunday, 06-Nov-94 08:49:37 GMT"), now, 0, true},
		{"asctime in the past", hdr("Retry-After", "Sun Nov  6 08:49:37 1994"), now, 0, true},
		{"now in another zone", hdr("Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT"), rfcNow.In(time.FixedZone("X", -5*3600)), 90 * time.Second, true},
		{"leap second", hdr("Retry-After", "Sat, 31 Dec 2016 23:59:60 GMT"), time.Date(2016, 12, 31, 23, 59, 0, 0, time.UTC), 60 * time.Second, true},
		{"leap day", hdr("Retry-After", "Thu, 29 Feb 2024 00:00:10 GMT"), time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC), 10 * time.Second, true},
		{"weekday not checked against date", hdr("Retry-After", "Mon, 06 Nov 1994 08:49:37 GMT"), rfcNow, 90 * time.Second, true},

		// rfc850's two-digit year is taken within 50 years of now (2026).
		{"rfc850 year 76 is 2076", hdr("Retry-After", "Wednesday, 01-Jan-76 00:00:00 GMT"), now, time.Date(2076, 1, 1, 0, 0, 0, 0, time.UTC).Sub(now), true},
		{"rfc850 year 77 is 1977", hdr("Retry-After", "Saturday, 01-Jan-77 00:00:00 GMT"), now, 0, true},
		{"rfc850 year 30 is 2030", hdr("Retry-After", "Tuesday, 01-Jan-30 00:00:00 GMT"), now, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Sub(now), true},

		// delay-seconds.
		{"zero", hdr("Retry-After", "0"), now, 0, true},
		{"leading zeros", hdr("Retry-After", "0120"), now, 120 * time.Second, true},
		{"surrounding whitespace", hdr("Retry-After", " \t120\t "), now, 120 * time.Second, true},
		{"largest exact", hdr("Retry-After", "9223372035"), now, 9223372035 * time.Second, true},
		{"saturates exactly", hdr("Retry-After", "9223372036"), now, saturated, true},
		{"saturates above", hdr("Retry-After", "9223372037"), now, saturated, true},
		{"saturates huge", hdr("Retry-After", strings.Repeat("9", 100)), now, saturated, true},
		{"far future date saturates", hdr("Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT"), now, saturated, true},

		// Invalid Retry-After values.
		{"absent", hdr(), now, 0, false},
		{"nil header", nil, now, 0, false},
		{"empty", hdr("Retry-After", ""), now, 0, false},
		{"only spaces", hdr("Retry-After", "   "), now, 0, false},
		{"plus sign", hdr("Retry-After", "+120"), now, 0, false},
		{"negative", hdr("Retry-After", "-1"), now, 0, false},
		{"fraction", hdr("Retry-After", "1.5"), now, 0, false},
		{"exponent", hdr("Retry-After", "1e3"), now, 0, false},
		{"NaN", hdr("Retry-After", "NaN"), now, 0, false},
		{"Inf", hdr("Retry-After", "Inf"), now, 0, false},
		{"hex", hdr("Retry-After", "0x10"), now, 0, false},
		{"unit", hdr("Retry-After", "120s"), now, 0, false},
		{"list", hdr("Retry-After", "120, 60"), now, 0, false},
		{"inner space", hdr("Retry-After", "1 20"), now, 0, false},
		{"non-ASCII digit", hdr("Retry-After", "١٢٠"), now, 0, false},
		{"ISO 8601", hdr("Retry-After", "2026-03-14T12:02:00Z"), now, 0, false},
		{"RFC 3339 with offset", hdr("Retry-After", "2026-03-14T12:02:00+00:00"), now, 0, false},
		{"other zone", hdr("Retry-After", "Sun, 06 Nov 1994 08:49:37 UTC"), rfcNow, 0, false},
		{"numeric zone", hdr("Retry-After", "Sun, 06 Nov 1994 08:49:37 +0000"), rfcNow, 0, false},
		{"lowercase names", hdr("Retry-After", "sun, 06 nov 1994 08:49:37 GMT"), rfcNow, 0, false},
		{"bad weekday", hdr("Retry-After", "Sux, 06 Nov 1994 08:49:37 GMT"), rfcNow, 0, false},
		{"bad month", hdr("Retry-After", "Sun, 06 Nox 1994 08:49:37 GMT"), rfcNow, 0, false},
		{"Feb 30", hdr("Retry-After", "Sun, 30 Feb 1994 08:49:37 GMT"), rfcNow, 0, false},
		{"Feb 29 of a common year", hdr("Retry-After", "Mon, 29 Feb 2100 00:00:00 GMT"), rfcNow, 0, false},
		{"day 0", hdr("Retry-After", "Sun, 00 Nov 1994 08:49:37 GMT"), rfcNow, 0, false},
		{"hour 24", hdr("Retry-After", "Sun, 06 Nov 1994 24:00:00 GMT"), rfcNow, 0, false},
		{"minute 60", hdr("Retry-After", "Sun, 06 Nov 1994 08:60:00 GMT"), rfcNow, 0, false},
		{"second 61", hdr("Retry-After", "Sun, 06 Nov 1994 08:49:61 GMT"), rfcNow, 0, false},
		{"one-digit day in IMF-fixdate", hdr("Retry-After", "Sun, 6 Nov 1994 08:49:37 GMT"), rfcNow, 0, false},
		{"signed digit", hdr("Retry-After", "Sun, +6 Nov 1994 08:49:37 GMT"), rfcNow, 0, false},
		{"asctime single space", hdr("Retry-After", "Sun Nov 6 08:49:37 1994"), rfcNow, 0, false},
		{"rfc850 four-digit year", hdr("Retry-After", "Sunday, 06-Nov-1994 08:49:37 GMT"), rfcNow, 0, false},
		{"rfc850 short weekday", hdr("Retry-After", "Sun, 06-Nov-94 08:49:37 GMT"), rfcNow, 0, false},
		{"rfc850 wrong separators", hdr("Retry-After", "Sunday, 06 Nov 94 08:49:37 GMT"), rfcNow, 0, false},
		{"time separators", hdr("Retry-After", "Sun, 06 Nov 1994 08.49.37 GMT"), rfcNow, 0, false},
		{"trailing text", hdr("Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT x"), rfcNow, 0, false},

		// retry-after-ms.
		{"ms", hdr("Retry-After-Ms", "1500"), now, 1500 * time.Millisecond, true},
		{"ms lowercase name via Set", func() http.Header { h := http.Header{}; h.Set("retry-after-ms", "20"); return h }(), now, 20 * time.Millisecond, true},
		{"ms zero", hdr("Retry-After-Ms", "0"), now, 0, true},
		{"ms fraction", hdr("Retry-After-Ms", "1500.5"), now, 1500*time.Millisecond + 500*time.Microsecond, true},
		{"ms nanosecond", hdr("Retry-After-Ms", "0.000001"), now, time.Nanosecond, true},
		{"ms below a nanosecond", hdr("Retry-After-Ms", "0.0000009"), now, 0, true},
		{"ms long fraction", hdr("Retry-After-Ms", "2.123456789123"), now, 2123456 * time.Nanosecond, true},
		{"ms whitespace", hdr("Retry-After-Ms", " 250 "), now, 250 * time.Millisecond, true},
		{"ms saturates", hdr("Retry-After-Ms", strings.Repeat("9", 30)+".5"), now, saturated, true},
		{"ms largest exact", hdr("Retry-After-Ms", "9223372035999.999999"), now, 9223372035999999999, true},
		{"ms saturates exactly", hdr("Retry-After-Ms", "9223372036000"), now, saturated, true},
		{"ms wins over Retry-After", hdr("Retry-After", "120", "Retry-After-Ms", "250"), now, 250 * time.Millisecond, true},
		{"ms wins over a date", hdr("Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT", "Retry-After-Ms", "250"), rfcNow, 250 * time.Millisecond, true},
		{"invalid ms falls back", hdr("Retry-After", "2", "Retry-After-Ms", "soon"), now, 2 * time.Second, true},
		{"ms trailing dot", hdr("Retry-After-Ms", "1500."), now, 0, false},
		{"ms leading dot", hdr("Retry-After-Ms", ".5"), now, 0, false},
		{"ms two dots", hdr("Retry-After-Ms", "1.5.5"), now, 0, false},
		{"ms negative", hdr("Retry-After-Ms", "-5"), now, 0, false},
		{"ms plus", hdr("Retry-After-Ms", "+5"), now, 0, false},
		{"ms exponent", hdr("Retry-After-Ms", "1e3"), now, 0, false},
		{"ms NaN", hdr("Retry-After-Ms", "NaN"), now, 0, false},
		{"ms Infinity", hdr("Retry-After-Ms", "Infinity"), now, 0, false},
		{"ms empty", hdr("Retry-After-Ms", ""), now, 0, false},
		{"ms date", hdr("Retry-After-Ms", "Sun, 06 Nov 1994 08:49:37 GMT"), rfcNow, 0, false},

		// Several lines: the first valid one wins.
		{"first of two", hdr("Retry-After", "7", "Retry-After", "5"), now, 7 * time.Second, true},
		{"garbage then valid", hdr("Retry-After", "soon", "Retry-After", "5"), now, 5 * time.Second, true},
		{"garbage then date", hdr("Retry-After", "-3", "Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT"), rfcNow, 90 * time.Second, true},
		{"ms garbage then valid", hdr("Retry-After-Ms", "x", "Retry-After-Ms", "300"), now, 300 * time.Millisecond, true},
		{"all garbage", hdr("Retry-After", "x", "Retry-After", "y", "Retry-After-Ms", "z"), now, 0, false},
	}
	for _, tt := range tests {
		got, ok := policy.ParseRetryAfter(tt.h, tt.now)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("%s: ParseRetryAfter(%q, %v) = %v, %t; want %v, %t", tt.name, tt.h, tt.now, got, ok, tt.want, tt.wantOK)
		}
	}
}

// TestParseRetryAfterAgreesWithNetHTTP checks the date forms against
// net/http's own parser, which accepts a superset of them.
func TestParseRetryAfterAgreesWithNetHTTP(t *testing.T) {
	now := time.Date(1994, time.November, 1, 0, 0, 0, 0, time.UTC)
	values := []string{
		"Sun, 06 Nov 1994 08:49:37 GMT",
		"Sunday, 06-Nov-94 08:49:37 GMT",
		"Sun Nov  6 08:49:37 1994",
		"Wed, 30 Nov 1994 23:59:59 GMT",
		"Thu, 01 Dec 1994 00:00:00 GMT",
		"Wednesday, 28-Feb-96 12:00:00 GMT",
		"Thu Feb 29 12:00:00 1996",
		"Fri, 31 Dec 1999 23:59:59 GMT",
	}
	for _, v := range values {
		want, err := http.ParseTime(v)
		if err != nil {
			t.Fatalf("http.ParseTime(%q): %v", v, err)
		}
		got, ok := policy.ParseRetryAfter(hdr("Retry-After", v), now)
		if !ok || got != want.Sub(now) {
			t.Errorf("ParseRetryAfter(%q) = %v, %t; want %v, true", v, got, ok, want.Sub(now))
		}
	}
}

func TestParseRetryAfterDoesNotAllocate(t *testing.T) {
	now := time.Date(1994, time.November, 6, 8, 0, 0, 0, time.UTC)
	for _, h := range []http.Header{
		hdr("Retry-After", "120"),
		hdr("Retry-After-Ms", "1500.5"),
		hdr("Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT"),
		hdr("Retry-After", "Sunday, 06-Nov-94 08:49:37 GMT"),
		hdr("Retry-After", "Sun Nov  6 08:49:37 1994"),
		hdr("Retry-After", "garbage"),
		hdr(),
	} {
		if got := testing.AllocsPerRun(100, func() { policy.ParseRetryAfter(h, now) }); got != 0 {
			t.Errorf("ParseRetryAfter(%q): %v allocations, want 0", h, got)
		}
	}
}

func BenchmarkParseRetryAfter(b *testing.B) {
	now := time.Date(1994, time.November, 6, 8, 0, 0, 0, time.UTC)
	for _, bc := range []struct {
		name string
		h    http.Header
	}{
		{"seconds", hdr("Retry-After", "120")},
		{"date", hdr("Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT")},
		{"rfc850", hdr("Retry-After", "Sunday, 06-Nov-94 08:49:37 GMT")},
		{"asctime", hdr("Retry-After", "Sun Nov  6 08:49:37 1994")},
		{"ms", hdr("Retry-After-Ms", "1500.5", "Retry-After", "2")},
		{"absent", hdr("Content-Type", "application/json")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				policy.ParseRetryAfter(bc.h, now)
			}
		})
	}
}

func ExampleParseRetryAfter() {
	now := time.Date(2026, time.March, 14, 12, 0, 0, 0, time.UTC)

	h := http.Header{}
	h.Set("Retry-After", "Sat, 14 Mar 2026 12:00:30 GMT")
	fmt.Println(policy.ParseRetryAfter(h, now))

	h.Set("Retry-After-Ms", "1500") // OpenAI and Anthropic send both; ms wins
	fmt.Println(policy.ParseRetryAfter(h, now))

	h = http.Header{}
	h.Set("Retry-After", "soon")
	fmt.Println(policy.ParseRetryAfter(h, now))
	// Output:
	// 30s true
	// 1.5s true
	// 0s false
}
