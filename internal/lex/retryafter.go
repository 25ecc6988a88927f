package lex

import (
	"math"
	"net/http"
	"time"
)

// MaxRetryAfter is where a server-asked wait saturates: the longest whole
// number of seconds a time.Duration holds (9223372036 s, about 292 years).
// It is a whole number of seconds so that a saturated delay-seconds value
// still formats back to the same wait.
const MaxRetryAfter = time.Duration(math.MaxInt64/int64(time.Second)) * time.Second

// RetryAfter reads retry-after-ms and Retry-After as policy.ParseRetryAfter
// documents; an HTTP-date is measured from now. It does not allocate.
func RetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	for _, v := range h["Retry-After-Ms"] {
		if d, ok := parseMillis(TrimOWS(v)); ok {
			return d, true
		}
	}
	for _, v := range h["Retry-After"] {
		v = TrimOWS(v)
		if d, ok := parseSeconds(v); ok {
			return d, true
		}
		if t, ok := ParseHTTPDate(v, now); ok {
			if !t.After(now) {
				return 0, true
			}
			return min(t.Sub(now), MaxRetryAfter), true
		}
	}
	return 0, false
}

// ResponseRetryAfter is [RetryAfter] with a Retry-After date measured
// from the response's own Date (see [ServerNow]).
func ResponseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if len(h["Retry-After"]) > 0 {
		now = ServerNow(h, now)
	}
	return RetryAfter(h, now)
}

// parseSeconds parses delay-seconds = 1*DIGIT, saturating at MaxRetryAfter.
func parseSeconds(s string) (time.Duration, bool) {
	n, rest, ok := parseDigits(s, int64(MaxRetryAfter/time.Second))
	if !ok || rest != "" {
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}

// parseMillis parses 1*DIGIT [ "." 1*DIGIT ] milliseconds, saturating at
// MaxRetryAfter.
func parseMillis(s string) (time.Duration, bool) {
	const maxMillis = int64(MaxRetryAfter / time.Millisecond)
	ms, rest, ok := parseDigits(s, maxMillis)
	if !ok {
		return 0, false
	}
	var frac int64 // nanoseconds
	if rest != "" {
		if rest[0] != '.' || len(rest) == 1 {
			return 0, false
		}
		scale := int64(time.Millisecond)
		for i := 1; i < len(rest); i++ {
			c := rest[i]
			if c < '0' || c > '9' {
				return 0, false
			}
			scale /= 10
			frac += int64(c-'0') * scale
		}
	}
	if ms == maxMillis {
		return MaxRetryAfter, true
	}
	return time.Duration(ms)*time.Millisecond + time.Duration(frac), true
}

// parseDigits reads the leading run of ASCII digits of s, at least one, as
// a number, saturating at limit. It returns the rest of s.
func parseDigits(s string, limit int64) (n int64, rest string, ok bool) {
	i := 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		d := int64(s[i] - '0')
		if n > (limit-d)/10 { // n*10+d > limit
			n = limit
			continue
		}
		n = n*10 + d
	}
	return n, s[i:], i > 0
}
