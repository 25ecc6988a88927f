package ratelimit

import (
	"net/http"
	"slices"
	"time"

	"github.com/sturdyhttp/sturdy/internal/lex"
)

// Verdict is what one response says about its host's pace, as
// [ResponseVerdict] reads it.
type Verdict uint8

// The verdicts of [ResponseVerdict].
const (
	// VerdictNone: the response asks nothing of the host's pace.
	VerdictNone Verdict = iota
	// VerdictPause: a 429 or 503 with Retry-After (or retry-after-ms):
	// every request to the host waits until the time the server named.
	VerdictPause
	// VerdictThrottle: a 429 that names no wait and reports no exhausted
	// quota: the host is sent requests more slowly (see the Tracker).
	VerdictThrottle
)

// ResponseVerdict decides what a response with status and header h,
// received at now, asks of its host: a pause until a time (VerdictPause,
// with the end), a slower pace (VerdictThrottle), or nothing. quotas are
// the quotas h reports (see [ParseAll]); one that is exhausted already
// holds the requests it counts until its reset, so its 429 asks nothing
// more, even with a Retry-After, when the quota is named (a GitHub
// resource, an IETF policy) and its reset is no sooner than the wait
// asked (within a second, and it is then held until the wait's end):
// that quota's routes wait, and the host's others go on. A Retry-After
// date is measured from the response's Date, as
// quota resets are. Other statuses, 503 without Retry-After included,
// ask nothing: a server that is down is the circuit breaker's business.
func ResponseVerdict(status int, h http.Header, quotas []Quota, now time.Time) (Verdict, time.Time) {
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		quotas = slices.Clone(quotas) // responseVerdict may move a reset
	}
	return responseVerdict(status, h, quotas, now, true)
}

// responseVerdict is ResponseVerdict. With explain, a named quota spent
// until the end of a Retry-After (within a second: resets come in whole
// seconds) explains it: the quota holds its own routes, and no others,
// and its Reset in quotas is moved to that end if it came sooner, so
// that they wait as long as the server asked. Without explain (quotas
// that never hold, Options.Reserve < 0), Retry-After always pauses the
// host.
func responseVerdict(status int, h http.Header, quotas []Quota, now time.Time, explain bool) (Verdict, time.Time) {
	if status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
		return VerdictNone, time.Time{}
	}
	if d, ok := lex.ResponseRetryAfter(h, now); ok {
		if d <= 0 || d > maxReset { // now, or garbage as a reset that far would be
			return VerdictNone, time.Time{}
		}
		until := now.Add(d)
		explained := false
		for i := range quotas {
			q := &quotas[i]
			if explain && q.Remaining == 0 && fleetName(q.Resource, q.Policy, q.Family) != "" && !q.Reset.Add(time.Second).Before(until) {
				if q.Reset.Before(until) {
					q.Reset = until
				}
				explained = true
			}
		}
		if explained {
			return VerdictNone, time.Time{}
		}
		return VerdictPause, until
	}
	if status != http.StatusTooManyRequests {
		return VerdictNone, time.Time{}
	}
	for _, q := range quotas {
		if q.Remaining == 0 && q.Reset.After(now) {
			return VerdictNone, time.Time{}
		}
	}
	return VerdictThrottle, time.Time{}
}
