package policy

import (
	"net/http"
	"time"

	"github.com/sturdyhttp/sturdy/internal/lex"
)

// ResponseRetryAfter is [ParseRetryAfter] for a response's header h: a
// Retry-After date is measured from the response's own Date header when it
// has a valid one, so that a skewed client clock neither stretches nor
// shrinks the wait; else from now. Quota resets (package ratelimit) are
// measured from the same Date in the same way.
func ResponseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	return lex.ResponseRetryAfter(h, now)
}

// ParseRetryAfter returns the wait a response asks for before the next
// request, and whether it asks for one. now is the time the response was
// received; an HTTP-date is measured from it.
//
// Two fields are read, keys in the canonical form net/http gives them:
//
//   - retry-after-ms (OpenAI, Anthropic): a decimal number of
//     milliseconds, digits with an optional fraction ("1500", "1500.5"),
//     read as their SDKs read it. Digits past the nanosecond are dropped.
//     A valid retry-after-ms wins over Retry-After, which is read only when
//     retry-after-ms is absent or invalid.
//   - Retry-After (RFC 9110 §10.2.3): delay-seconds (1*DIGIT, "120") or an
//     HTTP-date in any of the three forms recipients must accept (RFC 9110
//     §5.6.7): IMF-fixdate "Sun, 06 Nov 1994 08:49:37 GMT", the obsolete
//     RFC 850 form "Sunday, 06-Nov-94 08:49:37 GMT" (its two-digit year is
//     taken within 50 years of now) and asctime "Sun Nov  6 08:49:37 1994".
//     Dates are case-sensitive and in GMT, as RFC 9110 defines them; the
//     weekday is checked for form only. A date in the past, or now, means
//     a wait of 0.
//
// Leading and trailing spaces and tabs are ignored. Anything else is
// invalid and ignored: a sign ("+120", "-1"), an empty value, "NaN",
// "Inf", exponents, ISO 8601 dates, other time zones, impossible dates
// (Feb 30, 25:00). When a field has several lines, the first valid one
// wins. A wait too long for a time.Duration saturates at 9223372036 s
// (about 292 years) and never wraps around; callers compare the result
// with their own limit, such as [Retry.MaxRetryAfter].
//
// The result is never negative, and parsing does not allocate.
func ParseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	return lex.RetryAfter(h, now)
}
