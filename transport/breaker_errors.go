package transport

import (
	"errors"
	"github.com/sturdyhttp/sturdy/internal/circuit"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// ErrCircuitOpen is matched by errors.Is for every request that a
// [Breaker] refused to send: the breaker of its host was open, or it was
// half-open and all its probes were already taken. The error itself is a
// [*CircuitOpenError].
var ErrCircuitOpen = errors.New("transport: circuit open")

// CircuitOpenError is the error of a request that a [Breaker] refused to
// send. It matches [ErrCircuitOpen] with errors.Is, and is not retriable:
// an open circuit is reported to the caller at once, not waited on.
type CircuitOpenError struct {
	// Key is the key of the breaker that refused, "https://api.example.com"
	// by default.
	Key string
	// State is BreakerOpen, or BreakerHalfOpen when the breaker's probes
	// were all in flight.
	State BreakerState
	// RetryIn is how long until an open breaker lets a probe through; zero
	// when half-open, where a place frees up as soon as a probe ends.
	RetryIn time.Duration
}

// Error returns a one-line message that names the key and says when the
// breaker will try again.
func (e *CircuitOpenError) Error() string {
	if e.State == BreakerHalfOpen {
		return "transport: circuit half-open for " + e.Key + " (all probes in flight, retry when they end)"
	}
	return "transport: circuit open for " + e.Key + " (retry in " + e.RetryIn.Round(time.Millisecond).String() + ")"
}

// Is reports whether target is [ErrCircuitOpen].
func (e *CircuitOpenError) Is(target error) bool { return target == ErrCircuitOpen }

// Retriable returns false: the policy package's DefaultClassifier obeys it,
// so [Retry] does not retry a request refused by an open circuit.
func (e *CircuitOpenError) Retriable() bool { return false }

// RefusedBy returns "circuit open": the request was refused unsent (see
// [policy.Refusal]).
func (e *CircuitOpenError) RefusedBy() string { return string(policy.ReasonCircuitOpen) }

// openError is the error of a request that the circuit e refused, as r
// says.
func openError(e *circuit.Circuit, r *circuit.Refusal) *CircuitOpenError {
	if r.HalfOpen {
		return &CircuitOpenError{Key: e.Name(), State: BreakerHalfOpen}
	}
	return &CircuitOpenError{Key: e.Name(), State: BreakerOpen, RetryIn: r.RetryIn}
}
