package ratelimit

import (
	"net/http"
	"strings"
	"time"
)

// ParseHeaders reads the rate-limit quota that response headers h report,
// computed at time now. It reports false when h carries no usable quota:
// a Quota is usable when its Limit or its Remaining is known.
//
// h is read by canonical keys, as net/http stores response headers. The
// families are tried in the order of the [Family] constants (IETF
// RateLimit, Anthropic, OpenAI, the first IETF draft, X-RateLimit,
// x-rate-limit) and the first that gives a usable quota is read; the
// others are ignored, so an exhausted Anthropic quota is not hidden by a
// generic RateLimit-Remaining sent beside it. When that family reports
// several quotas (OpenAI's requests and tokens; Anthropic's requests,
// tokens, input and output tokens; several IETF policies) the most
// restrictive one is returned: an exhausted quota (Remaining 0) before any
// other, the one that resets last among exhausted ones, otherwise the one
// with the smallest fraction of its Limit left. [ParseAll] returns them
// all.
//
// Resets come in several forms, told apart this way:
//
//   - A bare number (X-RateLimit-Reset, RateLimit-Reset, x-rate-limit-reset)
//     up to 34 560 000 (400 days in seconds, the longest reset believed)
//     is delta seconds; above that it is Unix epoch seconds, and from
//     1e12 Unix epoch milliseconds. Decimals are allowed (Discord). No
//     real delta is longer than 400 days, and the smallest epoch, in
//     February 1971, is long past, so no real value is ambiguous.
//   - X-RateLimit-Reset-After is always delta seconds, and is preferred
//     to X-RateLimit-Reset when both are sent.
//   - OpenAI's resets are Go durations ("1s", "6m0s", "2m59.56s").
//   - Anthropic's resets, and any reset that is not a number, are read as
//     RFC 3339 or HTTP dates.
//   - IETF Structured Field resets (t=) are delta seconds.
//
// Absolute resets (epochs and dates) are taken relative to the response's
// Date header when it has one, so a client whose clock is off still waits
// the time the server meant: Reset = now + (reset - Date). A Retry-After
// date of the same response is measured from the same Date (see
// policy.ResponseRetryAfter), so the two agree whatever the client's
// clock says.
//
// Values that cannot be used are ignored field by field, never trusted:
// a count that is not a plain non-negative integer or exceeds 15 digits;
// a reset that is negative, not a number or date, or more than 400 days
// away (ahead, or behind for absolute resets; one less than that behind
// has already happened, and reads as now). A Remaining above Limit is
// lowered to Limit. A malformed RateLimit or RateLimit-Policy field is
// ignored as a whole, as the draft requires, and so are its policies that
// lack their r= or q=.
//
// A response served from a cache (an Age header above 0) says nothing
// about the client's quota now: ParseHeaders reports false for it.
func ParseHeaders(h http.Header, now time.Time) (Quota, bool) {
	var buf [maxPolicies]Quota
	return tightest(ParseAll(h, now, buf[:0]))
}

// ParseAll is [ParseHeaders] returning every quota the response reports
// instead of the tightest: it appends them to dst, in the order the
// response lists them, and returns the extended slice. They all come from
// one family, and each names its quota by its Resource and Policy.
func ParseAll(h http.Header, now time.Time, dst []Quota) []Quota {
	return parseSeen(h, scan(h), now, dst)
}

// scan reports which families h may carry.
func scan(h http.Header) familySet {
	var seen familySet
	for k := range h {
		seen |= familyOf(k)
	}
	return seen
}

// parseSeen is ParseAll once h has been scanned.
func parseSeen(h http.Header, seen familySet, now time.Time, dst []Quota) []Quota {
	if seen == 0 {
		return dst
	}
	if age, ok := parseCount(first(h, "Age")); ok && age > 0 {
		return dst
	}
	n := len(dst)
	c := &clock{now: now, h: h}
	if seen&seenRateLimit != 0 {
		if dst = parseStructured(h, c, dst); len(dst) > n {
			return dst
		}
	}
	if seen&seenAnthropic != 0 {
		if dst = parseAnthropic(h, c, dst); len(dst) > n {
			return dst
		}
	}
	if seen&seenXRateLimit != 0 {
		if dst = parseOpenAI(h, c, dst); len(dst) > n {
			return dst
		}
	}
	if seen&seenRateLimit != 0 {
		if dst = parseTriple(h, c, FamilyRateLimitDraft, dst); len(dst) > n {
			return dst
		}
	}
	if seen&seenXRateLimit != 0 {
		if dst = parseTriple(h, c, FamilyXRateLimit, dst); len(dst) > n {
			return dst
		}
	}
	if seen&seenXRateLimitDashed != 0 {
		dst = parseTriple(h, c, FamilyXRateLimitDashed, dst)
	}
	return dst
}

// familySet records which header families a response may carry, from
// one pass over its keys: cheaper than a dozen map lookups when, as on
// most responses, there are none.
type familySet uint8

const (
	seenRateLimit familySet = 1 << iota
	seenAnthropic
	seenXRateLimit
	seenXRateLimitDashed
)

func familyOf(k string) familySet {
	if len(k) < 9 {
		return 0
	}
	switch k[0] {
	case 'R':
		if strings.HasPrefix(k, "Ratelimit") {
			return seenRateLimit
		}
	case 'A':
		if strings.HasPrefix(k, "Anthropic-Ratelimit-") {
			return seenAnthropic
		}
	case 'X':
		if strings.HasPrefix(k, "X-Ratelimit-") {
			return seenXRateLimit
		}
		if strings.HasPrefix(k, "X-Rate-Limit-") {
			return seenXRateLimitDashed
		}
	}
	return 0
}

// first returns the first value of canonical key k, or "".
func first(h http.Header, k string) string {
	if v := h[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// joined returns every value of canonical key k as one list, as RFC 9110
// combines field lines. Only several lines allocate.
func joined(h http.Header, k string) string {
	switch v := h[k]; len(v) {
	case 0:
		return ""
	case 1:
		return v[0]
	default:
		return strings.Join(v, ", ")
	}
}
