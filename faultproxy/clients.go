package faultproxy

import (
	"math"
	"net/http"
	"time"

	"github.com/sturdyhttp/sturdy/transport"
)

// Sturdy is the default stack, transport.New, with the run's
// AttemptTimeout; the operation's deadline is its caller's context.
func Sturdy() Client {
	return Client{Name: "sturdy", New: func(s Settings) (Doer, func()) {
		return newSturdy(s, false)
	}}
}

// SturdyDeadline is [Sturdy] with Options.PropagateDeadline: each
// attempt tells the upstream, whose handler runs behind
// idempotency.DeadlineHandler, how long it has left.
func SturdyDeadline() Client {
	return Client{Name: "sturdy+deadline", New: func(s Settings) (Doer, func()) {
		return newSturdy(s, true)
	}}
}

func newSturdy(s Settings, propagate bool) (Doer, func()) {
	return newSturdyWith(s, transport.Options{PropagateDeadline: propagate})
}

// SturdyWith is a client named name that runs transport.New(o) with the
// run's AttemptTimeout (o's own is replaced): the default stack with a
// layer switched off (o.Disable), or with hooks that count what it does.
func SturdyWith(name string, o transport.Options) Client {
	return Client{Name: name, New: func(s Settings) (Doer, func()) {
		return newSturdyWith(s, o)
	}}
}

func newSturdyWith(s Settings, o transport.Options) (Doer, func()) {
	// Idempotency.Hosts is empty: the stack keys no request itself, so a
	// request is vouched for only when its caller set a key.
	o.AttemptTimeout = s.Attempt
	c := &http.Client{Transport: transport.New(o)}
	return c.Do, c.CloseIdleConnections
}

// BareAttempts and BareBackoff are the bare client's retry loop: up to 4
// attempts, 100 ms apart.
const (
	BareAttempts = 4
	BareBackoff  = 100 * time.Millisecond
)

// Bare is what many services have: an http.Client with a timeout per
// request, over a clone of http.DefaultTransport, and a loop that sends
// the request again on an error or a 5xx, up to [BareAttempts] times,
// [BareBackoff] apart, with the same body (and the same Idempotency-Key
// header, when the caller set one). It passes the caller's context, as
// most do; its sleep does not watch it, as many do not.
func Bare() Client {
	return Client{Name: "bare", Bare: true, New: func(s Settings) (Doer, func()) {
		c := &http.Client{Timeout: s.Attempt, Transport: http.DefaultTransport.(*http.Transport).Clone()}
		do := func(req *http.Request) (*http.Response, error) {
			var (
				resp *http.Response
				err  error
			)
			for attempt := 1; ; attempt++ {
				r := req.Clone(req.Context())
				if req.GetBody != nil {
					r.Body, _ = req.GetBody()
				}
				resp, err = c.Do(r)
				if err == nil && resp.StatusCode < 500 || attempt == BareAttempts || req.Context().Err() != nil {
					return resp, err
				}
				if resp != nil {
					resp.Body.Close()
				}
				time.Sleep(BareBackoff)
			}
		}
		return do, c.CloseIdleConnections
	}}
}

// NetHTTP is no kit at all: an http.Client over a clone of
// http.DefaultTransport, with no retry loop, and the run's attempt limit
// as its Timeout, as sturdy has it (AttemptTimeout). The suite's
// differential compares sturdy with it: under every fault, sturdy may
// fail no more operations than this client (see [Allowed]).
func NetHTTP() Client {
	return Client{Name: "net/http", Bare: true, New: func(s Settings) (Doer, func()) {
		c := &http.Client{Timeout: s.Attempt, Transport: http.DefaultTransport.(*http.Transport).Clone()}
		return c.Do, c.CloseIdleConnections
	}}
}

// Allowed is how many of n operations sturdy may fail in a phase where
// the plain net/http client ([NetHTTP]) failed bareFailed of bareOps,
// failed being how many sturdy failed. Faults are random (toxiproxy picks
// the connections it hits), so the two counts differ by chance alone. It
// is a two-sample test: under the hypothesis that both clients fail at
// one rate, estimated from both counts, sturdy's excess over the bare
// client's rate (scaled to n) stays within four standard deviations of
// that difference; 1 more absorbs the rounding of small counts. Four, not
// three: the suite makes 16 such comparisons per run, and toxiproxy deals
// its toxics per connection, several requests each, so failures come in
// clusters that spread the counts wider than the binomial model says.
func Allowed(failed, n, bareFailed, bareOps int) float64 {
	if bareOps == 0 || n == 0 {
		return math.Inf(1)
	}
	expected := float64(bareFailed) / float64(bareOps) * float64(n)
	p := float64(failed+bareFailed) / float64(n+bareOps)
	sd := math.Sqrt(p * (1 - p) * (float64(n) + float64(n)*float64(n)/float64(bareOps)))
	return expected + 4*sd + 1
}
