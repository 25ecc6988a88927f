package transport

import (
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/sturdyhttp/sturdy/policy"
)

// flipServer answers 503 while down and 200 while up, counting requests.
type flipServer struct {
	down atomic.Bool
	hits atomic.Int32
}

func (s *flipServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.hits.Add(1)
	if s.down.Load() {
		http.Error(w, "down", 503)
		return
	}
	w.Write([]byte("ok"))
}

// outageRun is what a stack did through an outage: requests sent while
// the host was down, calls refused by an open circuit, and whether the
// calls after the host's return succeeded.
type outageRun struct {
	sentWhileDown int32
	refused       int
	notSent       int // refusals that said the circuit ended the call
	recovered     bool
	bare          int // calls the bare client beside delivered after the return
}

// throughOutage sends 10 calls through a down host, then 5 after its
// return and a cooldown, through the stack of o, with the bare client
// beside it after the return.
func throughOutage(t *testing.T, o Options) outageRun {
	srv := &flipServer{}
	env := newFakeEnv(t, srv)
	o.Retry.Backoff = constant(10 * time.Millisecond)
	c := newStack(env, o)
	var run outageRun
	srv.down.Store(true)
	for range 10 {
		resp, err := c.Get(env.url)
		if err == nil {
			readAll(t, resp)
			continue
		}
		if errors.Is(err, ErrCircuitOpen) {
			run.refused++
			var re *RetryError
			if errors.As(err, &re) && re.Reason == policy.ReasonCircuitOpen {
				run.notSent++
			}
			continue
		}
		t.Errorf("err = %v, want a 503 or a refusal", err)
	}
	run.sentWhileDown = srv.hits.Load()
	srv.down.Store(false)
	time.Sleep(time.Second) // past both cooldowns
	run.recovered = true
	bare := &http.Client{Transport: env.base}
	for range 5 {
		resp, err := c.Get(env.url)
		if err != nil || resp.StatusCode != 200 {
			run.recovered = false
		}
		if err == nil {
			readAll(t, resp)
		}
		if resp, err := bare.Get(env.url); err == nil {
			readAll(t, resp)
			run.bare++
		}
	}
	return run
}

// fiveInARow is gobreaker's settings closest to the default circuit's
// for a quiet host: five failures in a row open it for 200ms.
func fiveInARow() gobreaker.Settings {
	return gobreaker.Settings{
		Timeout:     200 * time.Millisecond,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 5 },
	}
}

// Promise: gobreaker's circuits, from its own Settings, take the place of
// the default circuit in New, and behave as it does through an outage:
// they open on the host's failures, refuse unsent (ErrCircuitOpen, not
// retried, no attempt), and close after the host's return. Its
// IsSuccessful and ReadyToTrip are obeyed.
func TestGoBreakerBesideDefaultCircuit(t *testing.T) {
	tests := []struct {
		name        string
		o           Options
		wantRefused bool
		maxSent     int32 // requests sent while down, at most
	}{
		{"default circuit", Options{}, true, 8},
		{"gobreaker, five in a row", Options{GoBreaker: &GoBreakerSettings{Settings: fiveInARow()}}, true, 8},
		{"gobreaker, IsSuccessful counts 503 as success", Options{GoBreaker: &GoBreakerSettings{Settings: func() gobreaker.Settings {
			s := fiveInARow()
			s.IsSuccessful = func(err error) bool {
				var fs *FailedStatusError
				return err == nil || errors.As(err, &fs) && fs.StatusCode == 503
			}
			return s
		}()}}, false, 40},
		{"gobreaker, default ReadyToTrip (more than 5)", Options{GoBreaker: &GoBreakerSettings{Settings: gobreaker.Settings{Timeout: 200 * time.Millisecond}}}, true, 8},
		{"no circuit", Options{Disable: LayerBreaker}, false, 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				run := throughOutage(t, tt.o)
				if got := run.refused > 0; got != tt.wantRefused {
					t.Errorf("calls refused by an open circuit: %d, want some: %v", run.refused, tt.wantRefused)
				}
				if run.refused != run.notSent {
					t.Errorf("%d of %d refusals said the circuit ended the call, want all", run.notSent, run.refused)
				}
				if run.sentWhileDown > tt.maxSent {
					t.Errorf("the down host got %d requests, want at most %d", run.sentWhileDown, tt.maxSent)
				}
				if !run.recovered || run.bare != 5 {
					t.Errorf("after the return: stack recovered %v, bare client delivered %d of 5; want both", run.recovered, run.bare)
				}
			})
		})
	}
}

// memStore is a gobreaker.SharedDataStore in memory, shared by the
// stacks of a test as Redis would be by processes. fail makes it fail as
// a store that is down does.
type memStore struct {
	mu     sync.Mutex
	data   map[string][]byte
	locked map[string]bool
	fail   atomic.Bool
}

var errStoreDown = errors.New("store down")

func (s *memStore) Lock(name string) error {
	if s.fail.Load() {
		return errStoreDown
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.locked[name] {
		return errors.New("locked")
	}
	s.locked[name] = true
	return nil
}

func (s *memStore) Unlock(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.locked, name)
	return nil
}

func (s *memStore) GetData(name string) ([]byte, error) {
	if s.fail.Load() {
		return nil, errStoreDown
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data[name], nil
}

func (s *memStore) SetData(name string, data []byte) error {
	if s.fail.Load() {
		return errStoreDown
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data[name] = data
	return nil
}

// Promise: a DistributedCircuitBreaker plugs in through NewCircuit: the
// circuit one stack opens refuses the requests of another that shares
// its store. While the store is down, requests are sent without a
// circuit, as the bare client sends them.
func TestGoBreakerDistributed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &memStore{data: map[string][]byte{}, locked: map[string]bool{}}
		settings := &GoBreakerSettings{
			Settings: fiveInARow(),
			NewCircuit: func(s gobreaker.Settings) (GoCircuit, error) {
				return gobreaker.NewDistributedCircuitBreaker[*http.Response](store, s)
			},
		}
		srv := &flipServer{}
		env := newFakeEnv(t, srv)
		a := newStack(env, Options{GoBreaker: settings, Retry: policy.Retry{MaxAttempts: 1}})
		b := newStack(env, Options{GoBreaker: settings, Retry: policy.Retry{MaxAttempts: 1}})
		srv.down.Store(true)
		for i := range 5 {
			resp, err := a.Get(env.url)
			if err != nil {
				t.Fatalf("call %d through a: %v, want a 503", i+1, err)
			}
			readAll(t, resp)
		}
		before := srv.hits.Load()
		_, err := b.Get(env.url)
		var open *GoBreakerOpenError
		if !errors.Is(err, ErrCircuitOpen) || !errors.As(err, &open) || !errors.Is(err, gobreaker.ErrOpenState) {
			t.Errorf("b's first call: err = %v, want the circuit a opened (gobreaker.ErrOpenState)", err)
		}
		if got := srv.hits.Load() - before; got != 0 {
			t.Errorf("b sent %d requests to the host a's circuit holds open, want 0", got)
		}

		// The store goes down: no circuit is read, and requests are sent.
		store.fail.Store(true)
		srv.down.Store(false)
		before = srv.hits.Load()
		resp, err := b.Get(env.url)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("with the store down: %v, want the host's 200", err)
		}
		readAll(t, resp)
		if got := srv.hits.Load() - before; got != 1 {
			t.Errorf("with the store down, the host got %d requests, want 1", got)
		}
	})
}
