package ratelimit

import (
	"math"
	"net/http"
	"time"

	"github.com/sturdyhttp/sturdy/internal/lex"
)

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

// This file turns the resets of every family into times on the
// client's clock, and reads the numbers they are written in.

// clock turns the resets of one response into times on the client's
// clock. It parses the Date header only when an absolute reset needs it.
type clock struct {
	now    time.Time
	h      http.Header
	server time.Time
	parsed bool
}

// serverNow is the time the response was made, by the server's clock:
// its Date header, or now when it has none that parses (lex.ServerNow,
// as for a Retry-After date of the same response).
func (c *clock) serverNow() time.Time {
	if !c.parsed {
		c.parsed = true
		c.server = lex.ServerNow(c.h, c.now)
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
	s = lex.TrimOWS(s)
	if s == "" {
		return time.Time{}, false
	}
	whole, frac, ok := parseDecimal(s)
	if !ok {
		if !lex.IsDigit(s[0]) && !lex.IsAlpha(s[0]) {
			return time.Time{}, false
		}
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			return c.absolute(t)
		}
		if t, ok := lex.ParseHTTPDate(s, c.serverNow()); ok {
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
	whole, frac, ok := parseDecimal(lex.TrimOWS(s))
	if !ok || whole > maxResetSeconds {
		return time.Time{}, false
	}
	return c.delta(time.Duration(whole)*time.Second + frac)
}

// resetDuration reads a reset written as a Go duration ("6m0s"), or as
// bare seconds.
func (c *clock) resetDuration(s string) (time.Time, bool) {
	s = lex.TrimOWS(s)
	if s == "" {
		return time.Time{}, false
	}
	if lex.IsDigit(s[len(s)-1]) {
		return c.resetSeconds(s)
	}
	if !lex.IsDigit(s[0]) && s[0] != '.' {
		return time.Time{}, false // no sign: a negative reset is garbage
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return time.Time{}, false
	}
	return c.delta(d)
}

// parseCount reads a count: digits only, at most 15 of them, optional
// surrounding whitespace.
func parseCount(s string) (int, bool) {
	s = lex.TrimOWS(s)
	if s == "" || len(s) > 15 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if !lex.IsDigit(s[i]) {
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
	for i < len(s) && lex.IsDigit(s[i]) {
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
		if !lex.IsDigit(s[i]) {
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
