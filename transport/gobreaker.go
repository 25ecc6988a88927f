package transport

import (
	"errors"
	"github.com/sturdyhttp/sturdy/internal/reqbody"
	"net/http"
	"strconv"

	"github.com/sony/gobreaker/v2"

	"github.com/sturdyhttp/sturdy/internal/gocircuit"
	"github.com/sturdyhttp/sturdy/policy"
)

// GoCircuit is a gobreaker circuit for HTTP responses.
// *gobreaker.CircuitBreaker[*http.Response] and
// *gobreaker.DistributedCircuitBreaker[*http.Response] are both one.
type GoCircuit interface {
	Execute(req func() (*http.Response, error)) (*http.Response, error)
}

// GoBreakerSettings configures [GoBreaker]: circuits of
// github.com/sony/gobreaker/v2, one per scheme and host, in place of the
// default [Breaker].
type GoBreakerSettings struct {
	// Settings are gobreaker's own (MaxRequests, Interval, BucketPeriod,
	// Timeout, ReadyToTrip, OnStateChange, IsSuccessful, IsExcluded), for
	// each host's circuit. Name is set to the host's key,
	// "https://api.example.com". IsSuccessful and IsExcluded see an
	// attempt's error, or a [*FailedStatusError] for a response that
	// counts against its host (a 5xx). An attempt that says nothing of its
	// host (the caller canceled it, it could not be sent as written, a
	// 4xx) is excluded before IsExcluded is asked.
	Settings gobreaker.Settings
	// NewCircuit makes the circuit of one host from Settings, its Name
	// set. Return a *gobreaker.DistributedCircuitBreaker to share each
	// host's circuit across processes. It is called once per host, and
	// again after it fails; while it fails, the host's requests are sent
	// without a circuit. Nil means gobreaker.NewCircuitBreaker.
	NewCircuit func(s gobreaker.Settings) (GoCircuit, error)
}

// FailedStatusError is the error a [GoBreaker] circuit's IsSuccessful
// and IsExcluded see for an attempt answered with a status that counts
// against its host: a 5xx. The caller gets the response itself.
type FailedStatusError struct {
	StatusCode int
}

// Error says the status.
func (e *FailedStatusError) Error() string {
	return "transport: status " + strconv.Itoa(e.StatusCode)
}

// GoBreakerOpenError is the error of a request that a [GoBreaker]
// circuit refused to send: gobreaker's ErrOpenState or
// ErrTooManyRequests, which it wraps. It matches [ErrCircuitOpen] with
// errors.Is, is not retried, and is no attempt, as a [*CircuitOpenError].
type GoBreakerOpenError struct {
	Key string // the host's key, "https://api.example.com"
	Err error  // gobreaker's error
}

// Error names the key and gobreaker's reason.
func (e *GoBreakerOpenError) Error() string {
	return "transport: circuit open for " + e.Key + " (gobreaker: " + e.Err.Error() + ")"
}

// Is reports whether target is [ErrCircuitOpen].
func (e *GoBreakerOpenError) Is(target error) bool { return target == ErrCircuitOpen }

// Unwrap returns gobreaker's error.
func (e *GoBreakerOpenError) Unwrap() error { return e.Err }

// Retriable returns false: an open circuit is reported at once.
func (e *GoBreakerOpenError) Retriable() bool { return false }

// RefusedBy returns "circuit open": the request was refused unsent.
func (e *GoBreakerOpenError) RefusedBy() string { return string(policy.ReasonCircuitOpen) }

// GoBreaker returns a middleware that sends each request through its
// host's gobreaker circuit, for teams that already tune
// gobreaker.Settings or run its DistributedCircuitBreaker. In [New], set
// Options.GoBreaker: it takes the place of the default Breaker layer.
//
// What counts against a host is what counts for [Breaker]
// ([policy.Judge]): an error or a 5xx is a failure, a response below 500
// a success, and an attempt that says nothing of the host (canceled by
// its caller, invalid, a 4xx such as 429) is excluded. A refusal is a
// [*GoBreakerOpenError]. When a shared circuit's store fails before the
// request is sent, the request is sent without it: the stack is never
// worse than no circuit. Unlike the default circuit, a gobreaker circuit
// is not asked before a retry's wait: a call whose own failures open it
// ends with the refusal of its next attempt rather than with its last
// response. docs/design.md in the repository says why the default
// circuit is not gobreaker's.
func GoBreaker(s GoBreakerSettings) Middleware {
	var newCircuit func(gobreaker.Settings) (gocircuit.Circuit, error)
	if user := s.NewCircuit; user != nil {
		newCircuit = func(s gobreaker.Settings) (gocircuit.Circuit, error) {
			c, err := user(s)
			return c, err
		}
	}
	g := gocircuit.New(s.Settings, newCircuit)
	return func(next http.RoundTripper) http.RoundTripper {
		return &goBreakerTransport{g: g, next: orDefault(next)}
	}
}

type goBreakerTransport struct {
	g    *gocircuit.Set
	next http.RoundTripper
}

// CloseIdleConnections forwards to the next RoundTripper.
func (t *goBreakerTransport) CloseIdleConnections() { closeIdle(t.next) }

// RoundTrip sends req through its host's circuit.
func (t *goBreakerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil { // nothing to key a circuit by: let the base report the error
		return t.next.RoundTrip(req)
	}
	req, err := reqbody.CheckCaller(req, false)
	if err != nil {
		return nil, err // the caller's error counts neither way
	}
	key := HostKey(req)
	c := t.g.Circuit(key)
	if c == nil {
		return t.next.RoundTrip(req)
	}
	resp, rerr, sent, cerr := gocircuit.Send(c,
		func() (*http.Response, error) { return t.next.RoundTrip(req) },
		func(resp *http.Response, err error) policy.Verdict { return verdictOf(req, resp, err) },
		func(resp *http.Response) error { return &FailedStatusError{StatusCode: status(resp)} })
	if sent {
		return resp, rerr // what the attempt got: the circuit's verdict, or its store's error, is not the caller's
	}
	if errors.Is(cerr, gobreaker.ErrOpenState) || errors.Is(cerr, gobreaker.ErrTooManyRequests) {
		reqbody.CloseBody(req)
		return nil, &GoBreakerOpenError{Key: key, Err: cerr}
	}
	return t.next.RoundTrip(req) // the circuit's store failed: send without it
}
