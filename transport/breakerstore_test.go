package transport

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// claimStore is a fleet's BreakerStore in memory with the Redis store's
// rules: every publish overwrites the state; a probe claim lasts its ttl;
// publishing an opening holds the claim until its Until, anything else
// frees it; a process gives up only a claim it holds. Each process uses
// its own handle.
type claimStore struct {
	mu         sync.Mutex
	st         SharedBreakerState
	claimUntil time.Time
	holder     string
}

type claimHandle struct {
	*claimStore
	id string
}

func (h claimHandle) Publish(_ string, st SharedBreakerState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.st = st
	h.holder = ""
	if st.State == BreakerOpen && time.Now().Before(st.Until) {
		h.claimUntil = st.Until
	} else {
		h.claimUntil = time.Time{}
	}
}

func (h claimHandle) Load(string) SharedBreakerState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.st
}

func (h claimHandle) ClaimProbe(_ context.Context, _ string, ttl time.Duration) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if now.Before(h.claimUntil) {
		return false, nil
	}
	h.claimUntil, h.holder = now.Add(ttl), h.id
	return true, nil
}

func (h claimHandle) ReleaseProbe(string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.holder == h.id {
		h.claimUntil, h.holder = time.Time{}, ""
	}
}

// hangingHost answers 200 at once, except requests with X-Hang, which
// wait until their context ends.
type hangingHost struct{ hang chan struct{} }

func (h *hangingHost) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("X-Hang") != "" {
		close(h.hang)
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	return (&breakerHost{}).RoundTrip(req)
}

// A probe that says nothing of the host (its caller canceled it)
// publishes nothing, and gives its claim up. Process A's probe hangs;
// its caller cancels at once (cut short) or after its claim has expired
// and B has probed and closed the fleet (late). Either way the fleet is
// left as it was (half-open, or B's closed), and B's next request goes
// out at once: it does not wait for A's claim to expire.
func TestFleetIgnoredProbe(t *testing.T) {
	const key = "https://api.test"
	for _, late := range []bool{false, true} {
		t.Run(map[bool]string{false: "cut short", true: "late"}[late], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &claimStore{}
				a, b := claimHandle{store, "a"}, claimHandle{store, "b"}
				a.Publish(key, SharedBreakerState{State: BreakerOpen, Until: time.Now().Add(-time.Millisecond)}) // half-open
				set := BreakerSettings{ConsecutiveFailures: 3, Cooldown: 10 * time.Second}
				set.Store = a
				ba := NewBreakers(set)
				set.Store = b
				bb := NewBreakers(set)
				hostA := &hangingHost{hang: make(chan struct{})}
				rtA, rtB := ba.Middleware()(hostA), bb.Middleware()(&hangingHost{})

				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error)
				go func() {
					req, _ := http.NewRequestWithContext(ctx, "GET", key+"/slow", nil)
					req.Header.Set("X-Hang", "1")
					_, err := rtA.RoundTrip(req)
					done <- err
				}()
				<-hostA.hang        // A holds the fleet's probe claim
				want := BreakerOpen // half-open: open, its Until passed
				if late {
					time.Sleep(maxProbeClaim + time.Second)
					if code, err := breakerSend(t, rtB, key+"/x"); err != nil || code != 200 {
						t.Fatalf("B's probe after A's claim expired: %d %v", code, err)
					}
					want = BreakerClosed
				}
				cancel() // A's caller gives up: that says nothing of the host
				if err := <-done; !errors.Is(err, context.Canceled) {
					t.Fatalf("A: %v", err)
				}
				if st := store.st; st.State != want {
					t.Errorf("the fleet after A's canceled probe: %v; want %v, as it was", st.State, want)
				}
				if code, err := breakerSend(t, rtB, key+"/y"); err != nil || code != 200 {
					t.Errorf("B's request after A's canceled probe: %d, %v; want it sent at once", code, err)
				}
			})
		})
	}
}

// An open state in the fleet is believed unless no process of a fleet
// could have published it: one from a process with a longer Cooldown (5
// minutes), or whose clock runs 2 s ahead, holds the host open here; one
// a day ahead is treated as absent, and the request goes out under the
// process's own state.
func TestFleetOpenStatesBelieved(t *testing.T) {
	const key = "https://api.test"
	for _, tc := range []struct {
		name  string
		ahead time.Duration
		want  BreakerState
	}{
		{"a longer cooldown", 5 * time.Minute, BreakerOpen},
		{"a clock 2 s ahead", 2*time.Second + DefaultBreakerCooldown, BreakerOpen},
		{"a day ahead", 24 * time.Hour, BreakerClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := claimHandle{&claimStore{}, "other"}
				store.Publish(key, SharedBreakerState{State: BreakerOpen, Until: time.Now().Add(tc.ahead)})
				b := NewBreakers(BreakerSettings{Cooldown: 10 * time.Second, Store: claimHandle{store.claimStore, "this"}})
				u, _ := url.Parse(key + "/x")
				if got := b.State(u); got != tc.want {
					t.Errorf("State = %v; want %v", got, tc.want)
				}
				_, err := breakerSend(t, b.Middleware()(&hangingHost{}), key+"/x")
				if refused := errors.Is(err, ErrCircuitOpen); refused != (tc.want == BreakerOpen) {
					t.Errorf("request: %v; want refused: %t", err, tc.want == BreakerOpen)
				}
			})
		})
	}
}
