package policy

import (
	"net/http"
	"time"

	"github.com/sturdyhttp/sturdy/internal/lex"
)

// ResponseRetryAfter is [ParseRetryAfter] for a response's header h. A
// Retry-After date is measured from the response's own Date header when it
// has a valid one, else from now. Quota resets (package ratelimit) are
// measured from the same Date in the same way.
func ResponseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	return lex.ResponseRetryAfter(h, now)
}

// ParseRetryAfter returns the wait a response asks for before the next
// request, and whether it asks for one. now is the time the response was
// received; an HTTP-date is measured from it.
//
// Two fields are read, with the canonical keys net/http gives them:
//
//   - retry-after-ms (OpenAI, Anthropic): a decimal number of
//     milliseconds, digits with an optional fraction ("1500", "1500.5").
//     Digits past the nanosecond are dropped. A valid retry-after-ms wins
//     over Retry-After.
//   - Retry-After (RFC 9110 §10.2.3): delay-seconds ("120") or an
//     HTTP-date. All three date forms of RFC 9110 §5.6.7 are read:
//     IMF-fixdate "Sun, 06 Nov 1994 08:49:37 GMT", RFC 850 "Sunday,
//     06-Nov-94 08:49:37 GMT" and asctime "Sun Nov  6 08:49:37 1994". A
//     two-digit year is taken within 50 years of now. Dates are
//     case-sensitive and in GMT; the weekday is checked for form only. A
//     date in the past, or now, means a wait of 0.
//
// Leading and trailing spaces and tabs are ignored. Anything else is
// invalid and ignored: a sign ("+120", "-1"), an empty value, "NaN", "Inf",
// exponents, ISO 8601 dates, other time zones, impossible dates (Feb 30,
// 25:00). When a field has several lines, the first valid one wins.
//
// The result is never negative, and parsing does not allocate. A wait too
// long for a time.Duration saturates at 9223372036 s, about 292 years.
// Callers compare the result with their own limit, such as
// [Retry.MaxRetryAfter].
func ParseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	return lex.RetryAfter(h, now)
}
