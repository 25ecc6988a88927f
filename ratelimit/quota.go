package ratelimit

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// Unknown is the value of a [Quota] count that the server did not send,
// or sent in a form that could not be used.
const Unknown = -1

// Limits on what a header may say before it is taken as garbage.
const (
	// maxCount is the largest Limit or Remaining taken at face value:
	// 15 digits, the range of a Structured Field Integer.
	maxCount = 999_999_999_999_999
	// maxReset is the furthest ahead a reset may be: a little over a
	// year covers yearly quotas; anything further is not believed.
	maxReset = 400 * 24 * time.Hour
	// maxResetSeconds is maxReset in seconds: a bare reset number up to
	// this is delta seconds, and above it Unix epoch seconds. No delta is
	// longer, and no epoch this small (February 1971) is still to come.
	maxResetSeconds = int64(maxReset / time.Second)
	// epochMillis is where a bare reset number becomes Unix epoch
	// milliseconds: 1e12 ms is September 2001, while 1e12 s is 33 000
	// years away.
	epochMillis = 1_000_000_000_000
)

// Family names the header family a [Quota] was read from.
type Family uint8

// The header families [ParseHeaders] reads, in the order it tries them.
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
	// Family is the header family the quota was read from.
	Family Family
}

// ParseHeaders reads the rate-limit quota that response headers h report,
// computed at time now. It reports false when h carries no usable quota:
// a Quota is usable when its Limit or its Remaining is known.
//
// h is read by canonical keys, as net/http stores response headers. The
// families are tried in the order of the [Family] constants and the first
// that gives a usable quota is returned. When a family reports several
// quotas (OpenAI's requests and tokens; Anthropic's requests, tokens,
// input and output tokens; several IETF policies) the most restrictive
// one is returned: an exhausted quota (Remaining 0) before any other, the
// one that resets last among exhausted ones, otherwise the one with the
// smallest fraction of its Limit left.
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
// the time the server meant: Reset = now + (reset - Date).
//
// Values that cannot be used are ignored field by field, never trusted:
// a count that is not a plain non-negative integer or exceeds 15 digits;
// a reset that is negative, not a number or date, or more than 400 days
// away (ahead, or behind for absolute resets; one less than that behind
// has already happened, and reads as now). A Remaining above Limit is lowered to Limit. A malformed
// RateLimit or RateLimit-Policy field is ignored as a whole, as the draft
// requires, and so are its policies that lack their r= or q=.
//
// A response served from a cache (an Age header above 0) says nothing
// about the client's quota now: ParseHeaders reports false for it.
func ParseHeaders(h http.Header, now time.Time) (Quota, bool) {
	return parseSeen(h, scan(h), now)
}

// scan reports which families h may carry.
func scan(h http.Header) familySet {
	var seen familySet
	for k := range h {
		seen |= familyOf(k)
	}
	return seen
}

// parseSeen is ParseHeaders once h has been scanned.
func parseSeen(h http.Header, seen familySet, now time.Time) (Quota, bool) {
	if seen == 0 {
		return Quota{}, false
	}
	if age, ok := parseCount(first(h, "Age")); ok && age > 0 {
		return Quota{}, false
	}
	c := &clock{now: now, h: h}
	if seen&seenRateLimit != 0 {
		if q, ok := parseStructured(h, c); ok {
			return q, true
		}
		if q, ok := parseTriple(h, c, FamilyRateLimitDraft,
			"Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Reset", ""); ok {
			return q, true
		}
	}
	if seen&seenAnthropic != 0 {
		if q, ok := parseAnthropic(h, c); ok {
			return q, true
		}
	}
	if seen&seenXRateLimit != 0 {
		if q, ok := parseOpenAI(h, c); ok {
			return q, true
		}
		if q, ok := parseTriple(h, c, FamilyXRateLimit,
			"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "X-Ratelimit-Reset-After"); ok {
			return q, true
		}
	}
	if seen&seenXRateLimitDashed != 0 {
		if q, ok := parseTriple(h, c, FamilyXRateLimitDashed,
			"X-Rate-Limit-Limit", "X-Rate-Limit-Remaining", "X-Rate-Limit-Reset", ""); ok {
			return q, true
		}
	}
	return Quota{}, false
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

// clock turns the resets of one response into times on the client's
// clock. It parses the Date header only when an absolute reset needs it.
type clock struct {
	now    time.Time
	h      http.Header
	server time.Time
	parsed bool
}

// serverNow is the time the response was made, by the server's clock:
// its Date header, or now when it has none that parses.
func (c *clock) serverNow() time.Time {
	if !c.parsed {
		c.parsed = true
		c.server = c.now
		if v := first(c.h, "Date"); v != "" {
			if t, ok := parseIMFFixdate(v); ok {
				c.server = t
			} else if t, err := http.ParseTime(v); err == nil {
				c.server = t
			}
		}
	}
	return c.server
}

// absolute converts a reset given as a point in time by the server's
// clock.
func (c *clock) absolute(t time.Time) (time.Time, bool) {
	d := t.Sub(c.serverNow())
	if d > maxReset || d < -maxReset {
		return time.Time{}, false
	}
	return c.now.Add(max(d, 0)), true
}

// delta converts a reset given as a duration from now.
func (c *clock) delta(d time.Duration) (time.Time, bool) {
	if d < 0 || d > maxReset {
		return time.Time{}, false
	}
	return c.now.Add(d), true
}

// resetAuto reads a reset that may be delta seconds, epoch seconds or
// milliseconds (with decimals), an RFC 3339 date or an HTTP date.
func (c *clock) resetAuto(s string) (time.Time, bool) {
	s = trimOWS(s)
	if s == "" {
		return time.Time{}, false
	}
	whole, frac, ok := parseDecimal(s)
	if !ok {
		if !isDigit(s[0]) && !isAlpha(s[0]) {
			return time.Time{}, false
		}
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			return c.absolute(t)
		}
		if t, err := http.ParseTime(s); err == nil {
			return c.absolute(t)
		}
		return time.Time{}, false
	}
	switch {
	case whole >= epochMillis:
		return c.absolute(time.UnixMilli(whole))
	case whole > maxResetSeconds:
		return c.absolute(time.Unix(whole, int64(frac)))
	}
	return c.delta(time.Duration(whole)*time.Second + frac)
}

// resetSeconds reads a reset in delta seconds, decimals allowed.
func (c *clock) resetSeconds(s string) (time.Time, bool) {
	whole, frac, ok := parseDecimal(trimOWS(s))
	if !ok || whole > maxResetSeconds {
		return time.Time{}, false
	}
	return c.delta(time.Duration(whole)*time.Second + frac)
}

// resetDuration reads a reset written as a Go duration ("6m0s"), or as
// bare seconds.
func (c *clock) resetDuration(s string) (time.Time, bool) {
	s = trimOWS(s)
	if s == "" {
		return time.Time{}, false
	}
	if isDigit(s[len(s)-1]) {
		return c.resetSeconds(s)
	}
	if !isDigit(s[0]) && s[0] != '.' {
		return time.Time{}, false // no sign: a negative reset is garbage
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return time.Time{}, false
	}
	return c.delta(d)
}

// parseTriple reads the Limit/Remaining/Reset families. afterKey, when
// set, names a delta-seconds reset that is preferred to resetKey.
func parseTriple(h http.Header, c *clock, f Family, limitKey, remKey, resetKey, afterKey string) (Quota, bool) {
	q := Quota{Limit: Unknown, Remaining: Unknown, Family: f}
	if f == FamilyRateLimitDraft {
		q.Limit, q.Window = draftLimit(h)
	} else if n, ok := parseCount(first(h, limitKey)); ok {
		q.Limit = n
	}
	if n, ok := parseCount(first(h, remKey)); ok {
		q.Remaining = n
	}
	if q.Limit == Unknown && q.Remaining == Unknown {
		return Quota{}, false
	}
	var ok bool
	if afterKey != "" {
		if v := first(h, afterKey); v != "" {
			q.Reset, ok = c.resetSeconds(v)
		}
	}
	if !ok {
		if v := first(h, resetKey); v != "" {
			q.Reset, _ = c.resetAuto(v)
		}
	}
	return q.normal(), true
}

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
	l := newSFList(v)
	m, ok := l.next()
	if !ok || m.inner || m.item.kind != sfInteger || m.item.num < 0 || m.item.num > maxCount {
		return Unknown, 0
	}
	if all := newSFList(v); !all.valid() {
		return Unknown, 0
	}
	n := int(m.item.num)
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
	l := newSFList(policies)
	var w time.Duration
	for {
		m, ok := l.next()
		if !ok {
			break
		}
		if w != 0 || m.inner || m.item.kind != sfInteger || m.item.num != int64(limit) {
			continue
		}
		if s, ok := sfParamInt(m.params, "w"); ok && s > 0 && s <= maxResetSeconds {
			w = time.Duration(s) * time.Second
		}
	}
	if l.err {
		return 0
	}
	return w
}

// maxPolicies is how many RateLimit-Policy members are matched against
// RateLimit; further ones are ignored.
const maxPolicies = 16

type sfPolicy struct {
	name   string
	quota  int64
	window int64
}

// parseStructured reads the current IETF RateLimit and RateLimit-Policy
// fields.
func parseStructured(h http.Header, c *clock) (Quota, bool) {
	var (
		pols [maxPolicies]sfPolicy
		np   int
	)
	if v := joined(h, "Ratelimit-Policy"); v != "" {
		l := newSFList(v)
		for {
			m, ok := l.next()
			if !ok {
				break
			}
			name, isName := sfName(m.item)
			if m.inner || !isName || np == maxPolicies {
				continue
			}
			q, ok := sfParamInt(m.params, "q")
			if !ok || q > maxCount {
				continue
			}
			w, _ := sfParamInt(m.params, "w")
			pols[np] = sfPolicy{name: name, quota: q, window: w}
			np++
		}
		if l.err {
			np = 0
		}
	}
	policy := func(name string) (sfPolicy, bool) {
		for _, p := range pols[:np] {
			if p.name == name {
				return p, true
			}
		}
		return sfPolicy{}, false
	}
	apply := func(q *Quota, p sfPolicy) {
		q.Limit = int(p.quota)
		if p.window > 0 && p.window <= maxResetSeconds {
			q.Window = time.Duration(p.window) * time.Second
		}
	}

	var (
		best  Quota
		found bool
	)
	if v := joined(h, "Ratelimit"); v != "" {
		l := newSFList(v)
		for {
			m, ok := l.next()
			if !ok {
				break
			}
			name, isName := sfName(m.item)
			if m.inner || !isName {
				continue
			}
			r, ok := sfParamInt(m.params, "r")
			if !ok || r > maxCount {
				continue
			}
			q := Quota{Limit: Unknown, Remaining: int(r), Policy: name, Family: FamilyRateLimit}
			if t, ok := sfParamInt(m.params, "t"); ok {
				q.Reset, _ = c.delta(secondsOrMax(t))
			}
			if p, ok := policy(name); ok {
				apply(&q, p)
			}
			q = q.normal()
			if !found || tighter(q, best) {
				best, found = q, true
			}
		}
		if l.err {
			found = false
		}
	}
	if found {
		return best, true
	}
	// Policies alone: what the server allows, not what is left. The one
	// with the lowest rate rules.
	for _, p := range pols[:np] {
		q := Quota{Limit: Unknown, Remaining: Unknown, Policy: p.name, Family: FamilyRateLimit}
		apply(&q, p)
		if !found || slower(q, best) {
			best, found = q, true
		}
	}
	return best, found
}

// parseOpenAI reads OpenAI's per-dimension headers.
func parseOpenAI(h http.Header, c *clock) (Quota, bool) {
	a, aok := parseDimension(h, c, FamilyOpenAI, "requests",
		"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests")
	b, bok := parseDimension(h, c, FamilyOpenAI, "tokens",
		"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens")
	return pick(a, aok, b, bok)
}

// parseAnthropic reads Anthropic's per-dimension headers.
func parseAnthropic(h http.Header, c *clock) (Quota, bool) {
	q, ok := parseDimension(h, c, FamilyAnthropic, "requests",
		"Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset")
	b, bok := parseDimension(h, c, FamilyAnthropic, "tokens",
		"Anthropic-Ratelimit-Tokens-Limit", "Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset")
	q, ok = pick(q, ok, b, bok)
	b, bok = parseDimension(h, c, FamilyAnthropic, "input-tokens",
		"Anthropic-Ratelimit-Input-Tokens-Limit", "Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset")
	q, ok = pick(q, ok, b, bok)
	b, bok = parseDimension(h, c, FamilyAnthropic, "output-tokens",
		"Anthropic-Ratelimit-Output-Tokens-Limit", "Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset")
	return pick(q, ok, b, bok)
}

func parseDimension(h http.Header, c *clock, f Family, policy, limitKey, remKey, resetKey string) (Quota, bool) {
	q := Quota{Limit: Unknown, Remaining: Unknown, Policy: policy, Family: f}
	if n, ok := parseCount(first(h, remKey)); ok {
		q.Remaining = n
	}
	if n, ok := parseCount(first(h, limitKey)); ok {
		q.Limit = n
	}
	if q.Limit == Unknown && q.Remaining == Unknown {
		return Quota{}, false
	}
	if v := first(h, resetKey); v != "" {
		if f == FamilyOpenAI {
			q.Reset, _ = c.resetDuration(v)
		} else {
			q.Reset, _ = c.resetAuto(v)
		}
	}
	return q.normal(), true
}

// pick returns the more restrictive of two optional quotas, a when they
// tie.
func pick(a Quota, aok bool, b Quota, bok bool) (Quota, bool) {
	switch {
	case !bok:
		return a, aok
	case !aok:
		return b, true
	case tighter(b, a):
		return b, true
	}
	return a, true
}

// tighter reports whether quota a leaves less room than b: a known
// Remaining before an unknown one; an exhausted quota before one with
// room, and the later reset among exhausted ones; then the smaller
// fraction of the limit left (the smaller Remaining when a limit is
// unknown); then the later reset.
func tighter(a, b Quota) bool {
	ak, bk := a.Remaining != Unknown, b.Remaining != Unknown
	if ak != bk {
		return ak
	}
	if !ak {
		return slower(a, b)
	}
	aOut, bOut := a.Remaining == 0, b.Remaining == 0
	if aOut != bOut {
		return aOut
	}
	if !aOut {
		if a.Limit > 0 && b.Limit > 0 {
			fa := float64(a.Remaining) / float64(a.Limit)
			fb := float64(b.Remaining) / float64(b.Limit)
			if fa != fb {
				return fa < fb
			}
		} else if a.Remaining != b.Remaining {
			return a.Remaining < b.Remaining
		}
	}
	return a.Reset.After(b.Reset)
}

// slower reports whether policy a allows a lower sustained rate than b;
// a policy with a known rate is slower than one without.
func slower(a, b Quota) bool {
	ra, rb := a.rate(), b.rate()
	if (ra >= 0) != (rb >= 0) {
		return ra >= 0
	}
	return ra < rb
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

func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// parseCount reads a count: digits only, at most 15 of them, optional
// surrounding whitespace.
func parseCount(s string) (int, bool) {
	s = trimOWS(s)
	if s == "" || len(s) > 15 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}

// parseDecimal reads "digits[.digits]" as whole seconds (at most 15
// digits) and a fraction of a second; digits past nanoseconds are
// dropped.
func parseDecimal(s string) (whole int64, frac time.Duration, ok bool) {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		if i == 15 {
			return 0, 0, false
		}
		whole = whole*10 + int64(s[i]-'0')
		i++
	}
	if i == 0 {
		return 0, 0, false
	}
	if i == len(s) {
		return whole, 0, true
	}
	if s[i] != '.' || i+1 == len(s) {
		return 0, 0, false
	}
	scale := time.Second
	for i++; i < len(s); i++ {
		if !isDigit(s[i]) {
			return 0, 0, false
		}
		scale /= 10
		frac += time.Duration(s[i]-'0') * scale
	}
	return whole, frac, true
}

// secondsOrMax converts s seconds to a Duration, saturating past
// maxReset so that the caller rejects it.
func secondsOrMax(s int64) time.Duration {
	if s > maxResetSeconds {
		return math.MaxInt64
	}
	return time.Duration(s) * time.Second
}

// parseIMFFixdate parses the preferred HTTP date form,
// "Mon, 01 Jul 2013 17:27:06 GMT", which nearly every server sends in
// Date, several times faster than time.Parse. It reports false for
// anything else; the caller then tries http.ParseTime.
func parseIMFFixdate(s string) (time.Time, bool) {
	if len(s) != 29 || s[3] != ',' || s[4] != ' ' || s[7] != ' ' || s[11] != ' ' ||
		s[16] != ' ' || s[19] != ':' || s[22] != ':' || s[25:] != " GMT" {
		return time.Time{}, false
	}
	num := func(a string) int {
		n := 0
		for i := 0; i < len(a); i++ {
			if !isDigit(a[i]) {
				return -1
			}
			n = n*10 + int(a[i]-'0')
		}
		return n
	}
	day, year := num(s[5:7]), num(s[12:16])
	hour, minute, sec := num(s[17:19]), num(s[20:22]), num(s[23:25])
	month := 0
	for i, m := range [...]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"} {
		if s[8:11] == m {
			month = i + 1
			break
		}
	}
	if day < 1 || day > 31 || year < 0 || month == 0 || hour < 0 || hour > 23 ||
		minute < 0 || minute > 59 || sec < 0 || sec > 60 {
		return time.Time{}, false
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, 0, time.UTC)
	if t.Day() != day { // Feb 30 and the like
		return time.Time{}, false
	}
	return t, true
}
