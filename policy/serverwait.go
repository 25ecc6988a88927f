package policy

import "time"

// DefaultMaxHold is the longest one server-asked wait holds a host by
// default: [ServerWait].MaxHold when zero.
const DefaultMaxHold = time.Minute

// ServerWait is the one rule for a wait a server asks for: a 429's or a
// 503's Retry-After, or the reset of a quota it says is spent.
//
//   - The request that got the answer waits the ask when it is at most
//     Limit ([ServerWait.Waits]), then is sent again; a longer ask hands
//     the answer back to the caller at once.
//   - The answer's host is held for the ask, but at most MaxHold
//     ([ServerWait.Hold]); then one request goes to ask the server again.
//   - A request that comes while the host is held waits for the hold under
//     the same Limit (and its own deadline), and otherwise fails at once
//     with an error that says what holds the host.
//
// So no request waits for a server longer than Limit, whether it got the
// answer or came after it. In a stack built by transport.New, Limit is
// [Retry].MaxRetryAfter and MaxHold is ratelimit.Options.MaxPause; the
// rate-limit layer's limit on server-asked waits,
// ratelimit.Options.MaxServerWait, is made the same (see
// [ServerWaitLimit]). Waits that no server asked for (a client-side rate)
// keep their own bound, ratelimit.Options.MaxWait.
type ServerWait struct {
	// Limit is the longest asked wait a request waits. Zero means
	// [DefaultMaxRetryAfter] (60s); negative means none is waited on.
	Limit time.Duration
	// MaxHold is the longest one ask holds a host. Zero means
	// [DefaultMaxHold] (1m); negative means no cap.
	MaxHold time.Duration
}

// Waits reports whether a request waits for an ask of d: when d is at
// most the Limit.
func (w ServerWait) Waits(d time.Duration) bool {
	lim := w.Limit
	if lim == 0 {
		lim = DefaultMaxRetryAfter
	}
	return lim >= 0 && d <= lim
}

// Hold returns how long an ask of d holds its host: d, at most MaxHold.
// A negative d holds nothing.
func (w ServerWait) Hold(d time.Duration) time.Duration {
	switch {
	case d <= 0:
		return 0
	case w.MaxHold == 0:
		return min(d, DefaultMaxHold)
	case w.MaxHold < 0:
		return d
	}
	return min(d, w.MaxHold)
}

// ServerWaitLimit returns the one Limit of a stack whose retries wait at
// most maxRetryAfter ([Retry].MaxRetryAfter) for a server's ask and
// whose rate-limit layer lets a request wait at most maxWait for one
// (ratelimit.Options.MaxServerWait, and its MaxWait, which bounds every
// wait of that layer), each zero when not set: the shorter of those set,
// negative when either is, and zero (the default, 60s for both) when
// neither is. transport.New takes it of all three and makes it both
// MaxRetryAfter and MaxServerWait, so that the request that got an ask
// and those that come after it wait as long; MaxWait stays as set, the
// bound of the client-side rate.
func ServerWaitLimit(maxRetryAfter, maxWait time.Duration) time.Duration {
	switch {
	case maxRetryAfter < 0 || maxWait < 0:
		return -1
	case maxRetryAfter == 0:
		return maxWait
	case maxWait == 0:
		return maxRetryAfter
	}
	return min(maxRetryAfter, maxWait)
}
