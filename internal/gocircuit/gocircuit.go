// Package gocircuit keeps the github.com/sony/gobreaker/v2 circuits of a
// transport.GoBreaker layer, one per host, and sends attempts through
// them with the outcomes that say nothing of their host excluded.
package gocircuit

import (
	"errors"
	"net/http"
	"sync"

	"github.com/sony/gobreaker/v2"

	"github.com/sturdyhttp/sturdy/policy"
)

// Circuit is a gobreaker circuit for HTTP responses, as
// transport.GoCircuit.
type Circuit interface {
	Execute(req func() (*http.Response, error)) (*http.Response, error)
}

// Set is the circuits of one layer, one per host key.
type Set struct {
	settings   gobreaker.Settings
	newCircuit func(s gobreaker.Settings) (Circuit, error)
	mu         sync.Mutex
	circuits   map[string]Circuit
}

// New returns the circuits made by newCircuit (nil means
// gobreaker.NewCircuitBreaker) from s, whose IsExcluded also excludes
// the outcomes that [Set.Send] finds say nothing of their host.
func New(s gobreaker.Settings, newCircuit func(s gobreaker.Settings) (Circuit, error)) *Set {
	g := &Set{settings: s, newCircuit: newCircuit, circuits: map[string]Circuit{}}
	user := s.IsExcluded
	g.settings.IsExcluded = func(err error) bool {
		var n *notCounted
		return errors.As(err, &n) || user != nil && user(err)
	}
	if g.newCircuit == nil {
		g.newCircuit = func(s gobreaker.Settings) (Circuit, error) {
			return gobreaker.NewCircuitBreaker[*http.Response](s), nil
		}
	}
	return g
}

// Circuit returns the circuit of key, made on first use; nil when
// making it fails.
func (g *Set) Circuit(key string) Circuit {
	g.mu.Lock()
	c, ok := g.circuits[key]
	g.mu.Unlock()
	if ok {
		return c
	}
	s := g.settings
	s.Name = key
	c, err := g.newCircuit(s) // not under the lock: it may ask a store
	if err != nil || c == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if old, ok := g.circuits[key]; ok {
		return old
	}
	g.circuits[key] = c
	return c
}

// notCounted marks an attempt's outcome that says nothing of its host.
type notCounted struct{ err error }

func (e *notCounted) Error() string {
	if e.err == nil {
		return "transport: not counted"
	}
	return e.err.Error()
}

// Send makes the attempt send through c. The circuit sees the attempt's
// error, failed(resp) for a response that judge finds counts against
// its host, and an excluded error for an outcome that says nothing of
// it. It returns what the attempt got, and whether it was sent; when it
// was not, cerr is the circuit's error (a refusal, or its store's).
func Send(c Circuit, send func() (*http.Response, error), judge func(*http.Response, error) policy.Verdict, failed func(*http.Response) error) (resp *http.Response, err error, sent bool, cerr error) {
	_, cerr = c.Execute(func() (*http.Response, error) {
		sent = true
		resp, err = send()
		switch judge(resp, err).Host {
		case policy.HostFailing:
			if err != nil {
				return nil, err
			}
			return nil, failed(resp)
		case policy.HostIgnored:
			return nil, &notCounted{err: err}
		}
		return nil, err
	})
	return resp, err, sent, cerr
}
