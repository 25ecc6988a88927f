package policy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// Seed corpora beyond these f.Add seeds live in testdata/fuzz/<FuzzName>/.

func FuzzParseRetryAfter(f *testing.F) {
	rfc := time.Date(1994, time.November, 6, 8, 48, 0, 0, time.UTC).Unix()
	f.Add("120", "", int64(0))
	f.Add("Fri, 31 Dec 1999 23:59:59 GMT", "", time.Date(1999, 12, 31, 23, 59, 0, 0, time.UTC).Unix())
	f.Add("Sun, 06 Nov 1994 08:49:37 GMT", "", rfc)
	f.Add("Sunday, 06-Nov-94 08:49:37 GMT", "", rfc)
	f.Add("Sun Nov  6 08:49:37 1994", "", rfc)
	f.Add("1", "1500.5", int64(1700000000))
	f.Add("", "20", int64(1700000000))
	f.Add("+120", "-1", int64(0))
	f.Add("99999999999999999999", "NaN", int64(0))
	f.Add("2026-03-14T12:00:00Z", "1e3", int64(0))

	f.Fuzz(func(t *testing.T, ra, ms string, nowSec int64) {
		now := time.Unix(nowSec, 0).UTC()
		h := http.Header{}
		if ra != "" {
			h["Retry-After"] = []string{ra}
		}
		if ms != "" {
			h["Retry-After-Ms"] = []string{ms}
		}
		d, ok := policy.ParseRetryAfter(h, now)
		if d < 0 {
			t.Fatalf("ParseRetryAfter(%q, %q, %v) = %v, want >= 0", ra, ms, now, d)
		}
		if !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q, %q, %v) = %v, false; want 0 when not ok", ra, ms, now, d)
		}
		if d2, ok2 := policy.ParseRetryAfter(h, now); d2 != d || ok2 != ok {
			t.Fatalf("ParseRetryAfter(%q, %q, %v) = %v, %t, then %v, %t; want the same twice", ra, ms, now, d, ok, d2, ok2)
		}

		msv := strings.Trim(ms, " \t")
		if msDigits(msv) {
			if !ok {
				t.Fatalf("retry-after-ms %q: not ok, want ok", ms)
			}
			checkMillis(t, msv, d)
			return
		}
		if ms != "" && ok && ra == "" {
			t.Fatalf("retry-after-ms %q alone accepted as %v, want it invalid", ms, d)
		}

		v := strings.Trim(ra, " \t")
		if allDigits(v) {
			// A valid delay-seconds.
			if !ok || d%time.Second != 0 {
				t.Fatalf("Retry-After %q = %v, %t; want a whole number of seconds, true", ra, d, ok)
			}
			if n, err := strconv.ParseUint(v, 10, 64); err == nil && n < 9223372036 {
				if want := time.Duration(n) * time.Second; d != want {
					t.Fatalf("Retry-After %q = %v, want %v", ra, d, want)
				}
			} else if d != saturated {
				t.Fatalf("Retry-After %q = %v, want saturated %v", ra, d, saturated)
			}
			// Formatting the wait back and parsing it gives the same wait.
			back := strconv.FormatInt(int64(d/time.Second), 10)
			if d2, ok2 := policy.ParseRetryAfter(http.Header{"Retry-After": {back}}, now); d2 != d || !ok2 {
				t.Fatalf("Retry-After %q = %v, formatted back %q = %v, %t; want %v, true", ra, d, back, d2, ok2, d)
			}
			return
		}
		if !ok || v == "" {
			return
		}
		// Accepted as an HTTP-date: net/http's parser accepts a superset
		// of the forms, except the leap second. Its two-digit years follow
		// POSIX, not RFC 9110, so rfc850 dates are compared only in form.
		want, err := http.ParseTime(v)
		if err != nil {
			if !strings.Contains(v, ":60") {
				t.Fatalf("Retry-After %q accepted as %v, but http.ParseTime fails: %v", ra, d, err)
			}
			return
		}
		if len(v) == 29 || len(v) == 24 { // IMF-fixdate, asctime
			w := max(0, min(want.Sub(now), saturated))
			if d != w {
				t.Fatalf("Retry-After %q at %v = %v, want %v (http.ParseTime)", ra, now, d, w)
			}
		}
	})
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// msDigits reports whether s is 1*DIGIT [ "." 1*DIGIT ].
func msDigits(s string) bool {
	i, f, dot := strings.Cut(s, ".")
	return allDigits(i) && (!dot || allDigits(f))
}

// checkMillis compares a retry-after-ms result with strconv.ParseFloat's
// reading of it.
func checkMillis(t *testing.T, v string, d time.Duration) {
	t.Helper()
	f, _ := strconv.ParseFloat(v, 64)
	ns := f * 1e6
	if ns >= float64(saturated) {
		// Within float rounding of the saturation point either side is right.
		if d != saturated && ns > float64(saturated)*(1+1e-12) {
			t.Fatalf("retry-after-ms %q = %v, want saturated %v", v, d, saturated)
		}
		return
	}
	if diff := math.Abs(float64(d) - ns); diff > 1+ns*1e-12 {
		t.Fatalf("retry-after-ms %q = %v (%d ns), want about %.0f ns", v, d, int64(d), ns)
	}
}

var standardMembers = []string{"type", "title", "detail", "instance", "status", "is_retriable", "is_retryable", "retriable", "retryable"}

func FuzzParseProblem(f *testing.F) {
	f.Add(problemJSON, []byte(rfc9457OutOfCredit))
	f.Add(problemJSON+"; charset=utf-8", []byte(rfc9457Validation))
	f.Add("Application/Problem+JSON", []byte(rfc7807InvalidParams))
	f.Add(problemJSON, []byte(`{"status":503,"is_retriable":true,"retryable":false}`))
	f.Add(problemJSON, []byte(`{"status":"503","type":5,"is_retriable":"yes"}`))
	f.Add(problemJSON, []byte(`{"x":1e400}`))
	f.Add(problemJSON, []byte(`[1]`))
	f.Add(problemJSON, []byte(`null`))
	f.Add("application/json", []byte(`{}`))

	f.Fuzz(func(t *testing.T, ct string, body []byte) {
		p, err := policy.ParseProblem(ct, body)
		p2, err2 := policy.ParseProblem(ct, body)
		if !reflect.DeepEqual(p, p2) || (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Fatalf("ParseProblem(%q, %q) = %v, %v, then %v, %v; want the same twice", ct, body, p, err, p2, err2)
		}
		if err != nil {
			if p != nil {
				t.Fatalf("ParseProblem(%q, %q) = %v with error %v, want nil", ct, body, p, err)
			}
			if !errors.Is(err, policy.ErrNotProblem) && !errors.Is(err, policy.ErrProblemBody) {
				t.Fatalf("ParseProblem(%q, %q) error %v, want ErrNotProblem or ErrProblemBody", ct, body, err)
			}
			if !strings.HasPrefix(err.Error(), "policy: ") {
				t.Fatalf("error %q, want the prefix %q", err, "policy: ")
			}
			if policy.IsProblem(ct) && json.Valid(body) && bytes.HasPrefix(bytes.TrimLeft(body, " \t\r\n"), []byte("{")) {
				t.Fatalf("ParseProblem(%q, %q) error %v for a JSON object, want none", ct, body, err)
			}
			return
		}
		if !policy.IsProblem(ct) {
			t.Fatalf("ParseProblem(%q, ...) succeeded, want ErrNotProblem", ct)
		}

		// Retriable is nil or the first boolean spelling, read here
		// independently from the raw members.
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(body, &raw); err != nil {
			t.Fatalf("ParseProblem(%q) succeeded, but the body is not an object: %v", body, err)
		}
		var want *bool
		for _, k := range []string{"is_retriable", "is_retryable", "retriable", "retryable"} {
			if s := string(raw[k]); s == "true" || s == "false" {
				b := s == "true"
				want = &b
				break
			}
		}
		if (want == nil) != (p.Retriable == nil) || (want != nil && *want != *p.Retriable) {
			t.Fatalf("ParseProblem(%q).Retriable = %s, want %v", body, show(p), fmtBoolPtr(want))
		}
		if p.Status != 0 && (p.Status < 100 || p.Status > 599) {
			t.Fatalf("ParseProblem(%q).Status = %d, want 0 or 100..599", body, p.Status)
		}
		if p.Extensions != nil && len(p.Extensions) == 0 {
			t.Fatalf("ParseProblem(%q).Extensions is empty but not nil", body)
		}
		for _, k := range standardMembers {
			if _, found := p.Extensions[k]; found {
				t.Fatalf("ParseProblem(%q).Extensions holds the standard member %q", body, k)
			}
		}

		// Marshalling the Problem back and parsing it gives the same Problem.
		m := map[string]any{"type": p.Type}
		for k, v := range p.Extensions {
			m[k] = v
		}
		for k, v := range map[string]string{"title": p.Title, "detail": p.Detail, "instance": p.Instance} {
			if v != "" {
				m[k] = v
			}
		}
		if p.Status != 0 {
			m["status"] = p.Status
		}
		if p.Retriable != nil {
			m["is_retriable"] = *p.Retriable
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("json.Marshal(%v): %v", m, err)
		}
		q, err := policy.ParseProblem(policy.ProblemMediaType, again)
		if err != nil {
			t.Fatalf("ParseProblem(%q) (marshalled back from %q): %v", again, body, err)
		}
		if !reflect.DeepEqual(p, q) {
			t.Fatalf("ParseProblem(%q) = %s, marshalled back %q parses to %s; want the same", body, show(p), again, show(q))
		}
	})
}

func fmtBoolPtr(b *bool) string {
	if b == nil {
		return "nil"
	}
	return strconv.FormatBool(*b)
}
