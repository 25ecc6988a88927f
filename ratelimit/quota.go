package ratelimit

import "time"

// Unknown is the value of a [Quota] count that the server did not send,
// or sent in a form that could not be used.
const Unknown = -1

// Family names the header family a [Quota] was read from.
type Family uint8

// The header families [ParseHeaders] reads, in the order it tries them:
// the first family that gives a usable quota is the one read.
const (
	// FamilyUnknown is the Family of the zero Quota.
	FamilyUnknown Family = iota
	// FamilyRateLimit is the current IETF draft
	// (draft-ietf-httpapi-ratelimit-headers), in Structured Fields:
	// RateLimit: "default";r=50;t=30 with
	// RateLimit-Policy: "default";q=100;w=60.
	FamilyRateLimit
	// FamilyAnthropic is anthropic-ratelimit-{requests,tokens,
	// input-tokens,output-tokens}-{limit,remaining,reset}, resets in
	// RFC 3339.
	FamilyAnthropic
	// FamilyOpenAI is x-ratelimit-{limit,remaining,reset}-{requests,
	// tokens}, resets as Go durations ("6m0s", "20ms").
	FamilyOpenAI
	// FamilyRateLimitDraft is the first generation of the IETF draft:
	// RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset (delta
	// seconds; GitLab sends epoch seconds), with an optional
	// RateLimit-Policy: 100;w=60.
	FamilyRateLimitDraft
	// FamilyXRateLimit is X-RateLimit-Limit, X-RateLimit-Remaining,
	// X-RateLimit-Reset (GitHub: epoch seconds; many others: delta
	// seconds) and X-RateLimit-Reset-After (Discord: decimal seconds).
	FamilyXRateLimit
	// FamilyXRateLimitDashed is x-rate-limit-{limit,remaining,reset}
	// (X, formerly Twitter: reset in epoch seconds).
	FamilyXRateLimitDashed
)

// String returns the family's name in lower case, as used in logs:
// "ratelimit", "anthropic", "openai", "ratelimit-draft", "x-ratelimit",
// "x-rate-limit", or "unknown".
func (f Family) String() string {
	switch f {
	case FamilyRateLimit:
		return "ratelimit"
	case FamilyAnthropic:
		return "anthropic"
	case FamilyOpenAI:
		return "openai"
	case FamilyRateLimitDraft:
		return "ratelimit-draft"
	case FamilyXRateLimit:
		return "x-ratelimit"
	case FamilyXRateLimitDashed:
		return "x-rate-limit"
	}
	return "unknown"
}

// Quota is a server's account of a client's rate limit, as read from one
// response's headers by [ParseHeaders].
type Quota struct {
	// Limit is how many units (requests, or tokens) the window allows;
	// [Unknown] when the server did not say.
	Limit int
	// Remaining is how many units are left in the current window;
	// [Unknown] when the server did not say. It is never above Limit
	// when both are known.
	Remaining int
	// Reset is when the window ends and Remaining is whole again, on the
	// client's clock; the zero Time when unknown. It is never before the
	// time given to ParseHeaders: a reset the server places in the past
	// has already happened, and reads as "now".
	Reset time.Time
	// Window is the length of the quota window when the server says it
	// (IETF policies); 0 when unknown.
	Window time.Duration
	// Policy names the quota among several the server tracks: the IETF
	// policy name, or "requests", "tokens", "input-tokens" or
	// "output-tokens" for OpenAI and Anthropic; "" when there is only one.
	Policy string
	// Resource names the pool of quota the response was counted against
	// when the server says so (GitHub's X-RateLimit-Resource: "core",
	// "search", "graphql"); "" otherwise. Requests counted against one
	// resource leave the others alone.
	Resource string
	// Family is the header family the quota was read from.
	Family Family
}

// rate returns Limit per second over Window, or -1 when either is
// unknown.
func (q Quota) rate() float64 {
	if q.Limit < 0 || q.Window <= 0 {
		return -1
	}
	return float64(q.Limit) / q.Window.Seconds()
}

// normal enforces the invariants: Remaining is never above Limit.
func (q Quota) normal() Quota {
	if q.Limit != Unknown && q.Remaining > q.Limit {
		q.Remaining = q.Limit
	}
	return q
}
