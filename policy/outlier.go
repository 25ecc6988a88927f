package policy

import (
	"net/http"
	"time"
)

// Defaults of [Outlier], used where a field is zero.
const (
	DefaultOutlierFailures       = 5
	DefaultOutlierEjectionTime   = 30 * time.Second
	DefaultOutlierMaxEjection    = 300 * time.Second
	DefaultOutlierEjectedPercent = 50
)

// Outlier says when one address of a host is ejected, taken out of the
// addresses that requests are spread over, and for how long. It is
// Envoy's outlier detection on consecutive failures, in the client:
//
//   - an address is ejected after ConsecutiveFailures failures in a row
//     (see [AddressFailed] for what fails);
//   - its ejection lasts BaseEjectionTime times the number of times it
//     was ejected, up to MaxEjectionTime;
//   - at most MaxEjectedPercent of a host's addresses (never more than
//     half, and never its only one) are ejected at once;
//   - after its ejection time the address gets requests again. Its first
//     failure then ejects it again, for longer; each success takes one
//     off the count of its ejections.
//
// The zero value is ready to use with the documented defaults. Outlier
// holds no state: the caller keeps an [Address] per address and passes it
// to [Outlier.Record], so the rule is tested without a clock or network.
type Outlier struct {
	// ConsecutiveFailures is how many failures in a row eject an
	// address. Zero means [DefaultOutlierFailures] (5); negative means
	// that no address is ever ejected.
	ConsecutiveFailures int
	// BaseEjectionTime is how long a first ejection lasts; the n-th lasts
	// n times as long. Zero or negative means [DefaultOutlierEjectionTime]
	// (30s).
	BaseEjectionTime time.Duration
	// MaxEjectionTime caps one ejection. Zero or negative means
	// [DefaultOutlierMaxEjection] (300s); less than BaseEjectionTime
	// means BaseEjectionTime.
	MaxEjectionTime time.Duration
	// MaxEjectedPercent is the largest share of a host's addresses that
	// may be ejected at once, in percent. Zero, negative or above 50
	// means 50: never more than half.
	MaxEjectedPercent int
}

// Address is what [Outlier] knows of one address of a host. Its zero
// value is an address never seen to fail.
type Address struct {
	// Failures counts the address's failures since its last success.
	Failures int
	// Ejections counts its ejections, less one per success since.
	Ejections int
	// EjectedUntil is when its current ejection ends; zero if never.
	EjectedUntil time.Time
}

// Ejected reports whether a is ejected at now.
func (a Address) Ejected(now time.Time) bool { return now.Before(a.EjectedUntil) }

// AddressFailed reports whether an attempt whose host verdict is v (see
// [Judge]) counts against the address it was sent to: a 5xx, a timeout,
// a refused or reset connection. A caller's cancellation, a layer's
// refusal and the caller's own error count neither way. So does a
// connection that net/http proves the server did not use (a graceful
// GOAWAY): a draining server is not failing. A connection refused
// counts: nothing answers at that address.
func AddressFailed(v HostVerdict) bool { return v == HostFailing }

// AddressCounted reports whether an attempt whose host verdict is v
// says anything of its address: a success or a failure.
func AddressCounted(v HostVerdict) bool { return v != HostIgnored }

// MaxEjected returns how many of a host's total addresses may be ejected
// at once: MaxEjectedPercent of them, rounded down, so never more than
// half and never a host's only address.
func (o Outlier) MaxEjected(total int) int {
	p := o.MaxEjectedPercent
	if p <= 0 || p > 50 {
		p = 50
	}
	if total <= 0 {
		return 0
	}
	return total * p / 100
}

// EjectionTime returns how long the n-th ejection of an address lasts
// (n counts from 1): BaseEjectionTime times n, up to MaxEjectionTime.
func (o Outlier) EjectionTime(n int) time.Duration {
	base, most := o.BaseEjectionTime, o.MaxEjectionTime
	if base <= 0 {
		base = DefaultOutlierEjectionTime
	}
	if most <= 0 {
		most = DefaultOutlierMaxEjection
	}
	most = max(most, base)
	n = max(n, 1)
	if time.Duration(n) > most/base {
		return most
	}
	return min(base*time.Duration(n), most)
}

// Record returns a's record after an attempt sent to it that ended at
// now, failed or not (see [AddressFailed]). ejected is how many of the
// host's total addresses are ejected at now, a not counted. eject
// reports whether the attempt ejects a: the record's EjectedUntil then
// says until when.
//
// An outcome that arrives while a is ejected (an attempt sent before its
// ejection) changes nothing.
func (o Outlier) Record(a Address, failed bool, now time.Time, ejected, total int) (next Address, eject bool) {
	if a.Ejected(now) {
		return a, false
	}
	if !failed {
		a.Failures = 0
		a.Ejections = max(a.Ejections-1, 0)
		return a, false
	}
	a.Failures++
	n := o.ConsecutiveFailures
	if n == 0 {
		n = DefaultOutlierFailures
	}
	if n < 0 || a.Failures < n || ejected >= o.MaxEjected(total) {
		return a, false
	}
	a.Ejections++
	a.EjectedUntil = now.Add(o.EjectionTime(a.Ejections))
	return a, true
}

// FailsOver reports whether an attempt with outcome o sends its
// operation's next attempt to another origin, when the host it went to
// has alternates: it failed in a way that the next attempt may avoid (an
// error other than the caller's end, a 5xx, a 429, or a layer's refusal
// of that host). Whether there is a next attempt at all is still
// [Retry]'s decision, under its rules of what is safe to send again.
func FailsOver(o Outcome) bool {
	switch {
	case o.Err == nil && o.Response != nil:
		c := o.Response.StatusCode
		return c >= 500 || c == http.StatusTooManyRequests
	case o.Err == nil:
		return true // no response and no error: a broken RoundTripper
	case o.CallerEnded, o.canceled(), IsCallerError(o.Request, o.Err):
		return false
	}
	return true
}
