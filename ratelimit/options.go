package ratelimit

import (
	"net/http"
	"time"

	"golang.org/x/time/rate"

	"github.com/sturdyhttp/sturdy/policy"
)

// Defaults of [Options], used where a field is zero.
const (
	DefaultMaxWait     = 60 * time.Second
	DefaultMaxHosts    = 4096
	DefaultReleaseRate = rate.Limit(20) // per second, when the quota says nothing better
	DefaultMaxPause    = policy.DefaultMaxHold
)

// Options configures a [Tracker]. The zero value is ready to use: it
// waits out exhausted quotas and server-asked pauses of up to a minute,
// with no client-side rate.
type Options struct {
	// Reserve is how many units of a quota are left untouched: a request
	// waits for the reset once Remaining is at or below Reserve. Zero
	// means 0 (use the quota to the last unit); a negative Reserve means
	// that quota headers never cause a wait (Retry-After pauses still
	// do).
	Reserve int

	// Rate is a client-side limit, in requests per second per key, for
	// APIs that publish their limits but send no headers. Zero means no
	// client-side limit. When a server announces its policy (q= and w=
	// of an IETF RateLimit-Policy, or a window in the first-generation
	// RateLimit-Limit), the limiter adopts the server's rate, quota per
	// window, in place of Rate; of several policies, that of the
	// shortest window (a daily quota is counted as a quota, not made a
	// pace).
	Rate rate.Limit

	// Burst is how many requests the client-side limiter lets through at
	// once. Zero means 1. Unused when Rate is zero.
	Burst int

	// MaxWait is the longest a request waits for a quota reset, a pause
	// or the client-side limiter. A request that would wait longer fails
	// at once with a [*QuotaError]. Zero means [DefaultMaxWait] (60s);
	// negative means a request never waits and fails whenever it would
	// have to. transport.New leaves it as set: a Retry.MaxRetryAfter of
	// the stack bounds only server-asked waits (see MaxServerWait).
	MaxWait time.Duration

	// MaxServerWait is the longest a request waits for what a server
	// asked: a pause (a Retry-After) or a spent quota's reset. A request
	// that would wait longer fails at once with a [*QuotaError]. It
	// bounds those waits within MaxWait, never the client-side limiter's,
	// the Tracker's own pacing, or a Store's (which may be a place in
	// the fleet's rate). Zero means MaxWait alone; negative means no
	// server-asked wait is waited for. It is the Limit of
	// policy.ServerWait: transport.New makes it the same as the stack's
	// Retry.MaxRetryAfter (the shortest of MaxRetryAfter, MaxServerWait
	// and MaxWait that are set), so that the request that got an ask and
	// those that come after it wait as long.
	MaxServerWait time.Duration

	// MaxPause is the longest one server-asked pause (a Retry-After) or
	// one exhausted quota's reset holds a host, or the quota's routes.
	// A longer ask holds them for MaxPause; then a request goes to ask
	// the server again, whose answer counts as any other. A request whose
	// wait the server's own end puts past its budget still fails at once.
	// Zero means [DefaultMaxPause] (1m); negative means no cap (up to the
	// 400 days a reset may be). It is the MaxHold of policy.ServerWait.
	MaxPause time.Duration

	// Key returns the key that quota state is kept under. Nil means the
	// request URL's scheme and host, lowercased, the scheme's default
	// port left out ("https://api.example.com"), the one host key of the
	// module, so quotas, breakers and retry budgets line up. Within a
	// key, quotas are kept per resource (see [Tracker]); a custom key
	// (one per model, say) splits them further.
	Key func(*http.Request) string

	// MaxHosts bounds how many keys are tracked, each with at most 8
	// quotas and 32 routes. Keys unused the longest are dropped to make
	// room, unless something of theirs still holds requests back (a
	// waiter, a pause, an exhausted quota whose reset is ahead); a key
	// whose reset has passed can go. When nothing can go, a new key is
	// not tracked. Zero means [DefaultMaxHosts] (4096).
	MaxHosts int

	// Store shares quotas with the other processes of a fleet: a
	// fleet-wide rate per host, and the pauses and exhausted quotas any
	// process sees (see [QuotaStore]; the fleet module implements it on
	// Redis). Nil means each process knows only what it sees itself.
	Store QuotaStore

	// OnWait, when set, is called before a request waits, with the key,
	// how long and why. It runs on the request's goroutine and must not
	// block. Nil costs nothing.
	OnWait func(WaitEvent)

	// OnReject, when set, is called when a request fails fast because its
	// wait cannot finish in time. Nil costs nothing.
	OnReject func(RejectEvent)
}

// The reasons of [WaitEvent] and [RejectEvent].
const (
	ReasonQuota       = "quota"       // the server's quota is exhausted until its reset
	ReasonRetryAfter  = "retry-after" // the server asked the host to pause (429 or 503 with Retry-After)
	ReasonClientRate  = "client-rate" // the client-side limiter (Options.Rate)
	ReasonAwaitQuota  = "await-quota" // the window rolled over and its new reset is not known yet, or the answers of a first burst still out will tell the quota
	ReasonReleaseRate = "release"     // spreading the requests released at the end of a pause, or at the reset of a quota of a second or two
	ReasonThrottle    = "throttle"    // the rate learned from 429s that gave no hint
	ReasonFleet       = "fleet"       // the fleet's shared rate, or a pause another process saw (Options.Store)
)

// WaitEvent describes a wait about to happen.
type WaitEvent struct {
	Request *http.Request // the request that waits
	Key     string        // its quota key
	Wait    time.Duration // how long it is expected to wait; 0 when not known in advance
	Reason  string        // one of the Reason constants
}

// RejectEvent describes a request failed fast: its wait could not end
// before its deadline or Options.MaxWait.
type RejectEvent struct {
	Request *http.Request // the rejected request
	Key     string        // its quota key
	Wait    time.Duration // the wait that was refused
	Reason  string        // one of the Reason constants
	Err     *QuotaError   // the error the request fails with
}

func (o Options) maxWait() time.Duration {
	if o.MaxWait == 0 {
		return DefaultMaxWait
	}
	return o.MaxWait
}

// maxServerWait is the longest server-asked wait: MaxServerWait within
// MaxWait; negative when none is allowed.
func (o Options) maxServerWait() time.Duration {
	mw := o.maxWait()
	switch s := o.MaxServerWait; {
	case s == 0:
		return mw
	case s < 0 || mw < 0:
		return -1
	default:
		return min(s, mw)
	}
}

func (o Options) maxPause() time.Duration {
	switch {
	case o.MaxPause == 0:
		return DefaultMaxPause
	case o.MaxPause < 0:
		return maxReset
	}
	return o.MaxPause
}

func (o Options) maxHosts() int {
	if o.MaxHosts <= 0 {
		return DefaultMaxHosts
	}
	return o.MaxHosts
}

func (o Options) burst() int {
	if o.Burst <= 0 {
		return 1
	}
	return o.Burst
}
