package ratelimit

import (
	"net/http"
	"time"

	"github.com/sturdyhttp/sturdy/internal/lex"
)

// This file reads each header family into quotas; reset.go turns their
// resets into times, and tightest.go chooses among several.

// maxPolicies is how many quotas one response is read for (IETF
// RateLimit members, RateLimit-Policy members); further ones are ignored.
const maxPolicies = 16

// tripleKeys are the field names of a Limit/Remaining/Reset family.
// after, when set, names a delta-seconds reset preferred to reset;
// resource, the field naming the quota's resource.
type tripleKeys struct {
	limit, remaining, reset, after, resource string
}

var triples = [...]tripleKeys{
	FamilyRateLimitDraft:   {limit: "Ratelimit-Limit", remaining: "Ratelimit-Remaining", reset: "Ratelimit-Reset"},
	FamilyXRateLimit:       {"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "X-Ratelimit-Reset-After", "X-Ratelimit-Resource"},
	FamilyXRateLimitDashed: {limit: "X-Rate-Limit-Limit", remaining: "X-Rate-Limit-Remaining", reset: "X-Rate-Limit-Reset"},
}

// parseTriple reads the Limit/Remaining/Reset families.
func parseTriple(h http.Header, c *clock, f Family, dst []Quota) []Quota {
	k := &triples[f]
	q := Quota{Limit: Unknown, Remaining: Unknown, Family: f}
	if f == FamilyRateLimitDraft {
		q.Limit, q.Window = draftLimit(h)
	} else if n, ok := parseCount(first(h, k.limit)); ok {
		q.Limit = n
	}
	if n, ok := parseCount(first(h, k.remaining)); ok {
		q.Remaining = n
	}
	if q.Limit == Unknown && q.Remaining == Unknown {
		return dst
	}
	var ok bool
	if k.after != "" {
		if v := first(h, k.after); v != "" {
			q.Reset, ok = c.resetSeconds(v)
		}
	}
	if !ok {
		if v := first(h, k.reset); v != "" {
			q.Reset, _ = c.resetAuto(v)
		}
	}
	if k.resource != "" {
		if r := lex.TrimOWS(first(h, k.resource)); lex.IsToken(r) && len(r) <= maxNameLen {
			q.Resource = r
		}
	}
	return append(dst, q.normal())
}

// maxNameLen bounds a resource or policy name; a longer one is not
// believed (and would cost memory per host).
const maxNameLen = 64

// draftLimit reads RateLimit-Limit of the first IETF generation, which is
// either a number or a list of quota policies whose first member is the
// limit in force ("10, 10;w=1, 1000;w=3600"), and the window of that
// limit from the list or from RateLimit-Policy ("100;w=60").
func draftLimit(h http.Header) (int, time.Duration) {
	v := first(h, "Ratelimit-Limit")
	if v == "" {
		return Unknown, 0
	}
	if n, ok := parseCount(v); ok {
		return n, draftWindow(first(h, "Ratelimit-Policy"), n)
	}
	l := lex.NewList(v)
	m, ok := l.Next()
	if !ok || m.Inner || m.Item.Kind != lex.Integer || m.Item.Int < 0 || m.Item.Int > maxCount {
		return Unknown, 0
	}
	if all := lex.NewList(v); !all.Valid() {
		return Unknown, 0
	}
	n := int(m.Item.Int)
	w := draftWindow(v, n)
	if w == 0 {
		w = draftWindow(first(h, "Ratelimit-Policy"), n)
	}
	return n, w
}

// draftWindow finds, in a list of first-generation quota policies
// ("100;w=60, 1000;w=3600"), the window of the policy whose quota is
// limit.
func draftWindow(policies string, limit int) time.Duration {
	if policies == "" {
		return 0
	}
	l := lex.NewList(policies)
	var w time.Duration
	for {
		m, ok := l.Next()
		if !ok {
			break
		}
		if w != 0 || m.Inner || m.Item.Kind != lex.Integer || m.Item.Int != int64(limit) {
			continue
		}
		if s, ok := m.Params.Int("w"); ok && s > 0 && s <= maxResetSeconds {
			w = time.Duration(s) * time.Second
		}
	}
	if l.Err() {
		return 0
	}
	return w
}

type sfPolicy struct {
	name   string
	quota  int64
	window int64
}

// policyName returns the name an IETF policy item stands for: a String's
// value or a Token, at most maxNameLen long.
func policyName(m lex.Member) (string, bool) {
	if m.Inner {
		return "", false
	}
	s, ok := m.Item.Str()
	return s, ok && len(s) <= maxNameLen
}

// parseStructured reads the current IETF RateLimit and RateLimit-Policy
// fields: a quota per RateLimit member, with the limit and window of the
// policy of the same name; or, when there is no RateLimit, a quota per
// policy, Remaining unknown.
func parseStructured(h http.Header, c *clock, dst []Quota) []Quota {
	var (
		pols [maxPolicies]sfPolicy
		np   int
	)
	if v := joined(h, "Ratelimit-Policy"); v != "" {
		l := lex.NewList(v)
		for {
			m, ok := l.Next()
			if !ok {
				break
			}
			name, isName := policyName(m)
			if !isName || np == maxPolicies {
				continue
			}
			q, ok := m.Params.Int("q")
			if !ok || q > maxCount {
				continue
			}
			w, _ := m.Params.Int("w")
			pols[np] = sfPolicy{name: name, quota: q, window: w}
			np++
		}
		if l.Err() {
			np = 0
		}
	}
	apply := func(q *Quota, p sfPolicy) {
		q.Limit = int(p.quota)
		if p.window > 0 && p.window <= maxResetSeconds {
			q.Window = time.Duration(p.window) * time.Second
		}
	}

	n := len(dst)
	if v := joined(h, "Ratelimit"); v != "" {
		l := lex.NewList(v)
		for {
			m, ok := l.Next()
			if !ok {
				break
			}
			name, isName := policyName(m)
			if !isName || len(dst)-n == maxPolicies { // past the kept ones, read on only to find a malformed field
				continue
			}
			r, ok := m.Params.Int("r")
			if !ok || r > maxCount {
				continue
			}
			q := Quota{Limit: Unknown, Remaining: int(r), Policy: name, Family: FamilyRateLimit}
			if t, ok := m.Params.Int("t"); ok {
				q.Reset, _ = c.delta(secondsOrMax(t))
			}
			for _, p := range pols[:np] {
				if p.name == name {
					apply(&q, p)
					break
				}
			}
			dst = append(dst, q.normal())
		}
		if l.Err() {
			dst = dst[:n]
		}
	}
	if len(dst) > n {
		return dst
	}
	// Policies alone: what the server allows, not what is left.
	for _, p := range pols[:np] {
		q := Quota{Limit: Unknown, Remaining: Unknown, Policy: p.name, Family: FamilyRateLimit}
		apply(&q, p)
		dst = append(dst, q)
	}
	return dst
}

// dimension names the fields of one of OpenAI's or Anthropic's quotas.
type dimension struct {
	policy, limit, remaining, reset string
}

var openAI = [...]dimension{
	{"requests", "X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"},
	{"tokens", "X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"},
}

var anthropic = [...]dimension{
	{"requests", "Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset"},
	{"tokens", "Anthropic-Ratelimit-Tokens-Limit", "Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset"},
	{"input-tokens", "Anthropic-Ratelimit-Input-Tokens-Limit", "Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset"},
	{"output-tokens", "Anthropic-Ratelimit-Output-Tokens-Limit", "Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset"},
}

// parseOpenAI reads OpenAI's per-dimension headers.
func parseOpenAI(h http.Header, c *clock, dst []Quota) []Quota {
	for i := range openAI {
		dst = parseDimension(h, c, FamilyOpenAI, &openAI[i], dst)
	}
	return dst
}

// parseAnthropic reads Anthropic's per-dimension headers.
func parseAnthropic(h http.Header, c *clock, dst []Quota) []Quota {
	for i := range anthropic {
		dst = parseDimension(h, c, FamilyAnthropic, &anthropic[i], dst)
	}
	return dst
}

func parseDimension(h http.Header, c *clock, f Family, d *dimension, dst []Quota) []Quota {
	q := Quota{Limit: Unknown, Remaining: Unknown, Policy: d.policy, Family: f}
	if n, ok := parseCount(first(h, d.remaining)); ok {
		q.Remaining = n
	}
	if n, ok := parseCount(first(h, d.limit)); ok {
		q.Limit = n
	}
	if q.Limit == Unknown && q.Remaining == Unknown {
		return dst
	}
	if v := first(h, d.reset); v != "" {
		if f == FamilyOpenAI {
			q.Reset, _ = c.resetDuration(v)
		} else {
			q.Reset, _ = c.resetAuto(v)
		}
	}
	return append(dst, q.normal())
}
