package httptestutil

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Family names a family of rate-limit response headers, as servers in the
// wild send them: [FamilyGitHub], [FamilyOpenAI], [FamilyAnthropic],
// [FamilyIETF] or [FamilyIETFStructured] ([Families] lists them all).
type Family string

// The header families [QuotaHeaders] can write.
const (
	// FamilyGitHub is X-RateLimit-Limit, X-RateLimit-Remaining,
	// X-RateLimit-Used and X-RateLimit-Reset as Unix epoch seconds (GitHub,
	// and many APIs after it).
	FamilyGitHub Family = "github"
	// FamilyOpenAI is x-ratelimit-{limit,remaining,reset}-requests and, when
	// the quota has tokens, -tokens; resets are Go-style durations ("1s",
	// "6m0s", "20ms").
	FamilyOpenAI Family = "openai"
	// FamilyAnthropic is anthropic-ratelimit-requests-{limit,remaining,reset}
	// and, when the quota has tokens, anthropic-ratelimit-tokens-*; resets
	// are RFC 3339 times.
	FamilyAnthropic Family = "anthropic"
	// FamilyIETF is the first generation of the IETF RateLimit header
	// draft: RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset in
	// delta seconds, with RateLimit-Policy "limit;w=window" when the
	// window is known.
	FamilyIETF Family = "ietf"
	// FamilyIETFStructured is the current IETF draft, in Structured Fields:
	// RateLimit: "default";r=remaining;t=reset and
	// RateLimit-Policy: "default";q=limit;w=window.
	FamilyIETFStructured Family = "ietf-structured"
)

// Families lists every [Family], for table tests that run once per family.
func Families() []Family {
	return []Family{FamilyGitHub, FamilyOpenAI, FamilyAnthropic, FamilyIETF, FamilyIETFStructured}
}

// Quota is the state of a rate limit as a server reports it.
type Quota struct {
	// Limit is the number of requests allowed per window.
	Limit int
	// Remaining is the number of requests left now.
	Remaining int
	// Reset is how long from now until the quota is whole again. Families
	// that send whole seconds round it up.
	Reset time.Duration
	// Window is the length of the quota window; 0 leaves it out of the
	// families that can carry it (IETF policies).
	Window time.Duration
	// TokenLimit, when above 0, adds token headers for the families that
	// have them (OpenAI, Anthropic).
	TokenLimit int
	// TokenRemaining is the number of tokens left; used when TokenLimit > 0.
	TokenRemaining int
	// TokenReset is how long until the tokens are whole again; used when
	// TokenLimit > 0.
	TokenReset time.Duration
}

// QuotaHeaders writes q into h in family f, as a server would at time now.
// An unknown family writes nothing. Negative counts and durations are
// written as 0.
func QuotaHeaders(h http.Header, f Family, q Quota, now time.Time) {
	limit, rem := max(q.Limit, 0), max(q.Remaining, 0)
	reset, window := max(q.Reset, 0), max(q.Window, 0)
	tokens := q.TokenLimit > 0
	tlimit, trem, treset := q.TokenLimit, max(q.TokenRemaining, 0), max(q.TokenReset, 0)
	switch f {
	case FamilyGitHub:
		h["X-Ratelimit-Limit"] = []string{strconv.Itoa(limit)}
		h["X-Ratelimit-Remaining"] = []string{strconv.Itoa(rem)}
		h["X-Ratelimit-Used"] = []string{strconv.Itoa(max(limit-rem, 0))}
		h["X-Ratelimit-Reset"] = []string{strconv.FormatInt(now.Add(reset).Add(time.Second-1).Unix(), 10)}
		h["X-Ratelimit-Resource"] = []string{"core"}
	case FamilyOpenAI:
		h["X-Ratelimit-Limit-Requests"] = []string{strconv.Itoa(limit)}
		h["X-Ratelimit-Remaining-Requests"] = []string{strconv.Itoa(rem)}
		h["X-Ratelimit-Reset-Requests"] = []string{openAIDuration(reset)}
		if tokens {
			h["X-Ratelimit-Limit-Tokens"] = []string{strconv.Itoa(tlimit)}
			h["X-Ratelimit-Remaining-Tokens"] = []string{strconv.Itoa(trem)}
			h["X-Ratelimit-Reset-Tokens"] = []string{openAIDuration(treset)}
		}
	case FamilyAnthropic:
		h["Anthropic-Ratelimit-Requests-Limit"] = []string{strconv.Itoa(limit)}
		h["Anthropic-Ratelimit-Requests-Remaining"] = []string{strconv.Itoa(rem)}
		h["Anthropic-Ratelimit-Requests-Reset"] = []string{now.Add(reset).UTC().Format(time.RFC3339)}
		if tokens {
			h["Anthropic-Ratelimit-Tokens-Limit"] = []string{strconv.Itoa(tlimit)}
			h["Anthropic-Ratelimit-Tokens-Remaining"] = []string{strconv.Itoa(trem)}
			h["Anthropic-Ratelimit-Tokens-Reset"] = []string{now.Add(treset).UTC().Format(time.RFC3339)}
		}
	case FamilyIETF:
		h["Ratelimit-Limit"] = []string{strconv.Itoa(limit)}
		h["Ratelimit-Remaining"] = []string{strconv.Itoa(rem)}
		h["Ratelimit-Reset"] = []string{strconv.FormatInt(ceilSeconds(reset), 10)}
		if window > 0 {
			h["Ratelimit-Policy"] = []string{fmt.Sprintf("%d;w=%d", limit, ceilSeconds(window))}
		}
	case FamilyIETFStructured:
		h["Ratelimit"] = []string{fmt.Sprintf(`"default";r=%d;t=%d`, rem, ceilSeconds(reset))}
		if window > 0 {
			h["Ratelimit-Policy"] = []string{fmt.Sprintf(`"default";q=%d;w=%d`, limit, ceilSeconds(window))}
		} else {
			h["Ratelimit-Policy"] = []string{fmt.Sprintf(`"default";q=%d`, limit)}
		}
	}
}

// RateLimitHeaders is a step that answers code with body and q's headers
// in each of families, computed against the time of the request.
func RateLimitHeaders(code int, body string, q Quota, families ...Family) Step {
	return newStep(fmt.Sprintf("RateLimitHeaders(%d)", code), func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		for _, f := range families {
			QuotaHeaders(w.Header(), f, q, now)
		}
		writeResponse(w, code, nil, body)
	})
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	return int64(math.Ceil(d.Seconds()))
}

// openAIDuration writes d as OpenAI does: a Go duration string rounded to
// milliseconds ("6m0s", "1s", "20ms", "2m59.56s").
func openAIDuration(d time.Duration) string {
	return d.Round(time.Millisecond).String()
}
