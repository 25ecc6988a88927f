package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

type testOpKey struct{}

// The table's "failed fast (no request sent)" counts only operations that
// sent nothing: one that sent a request, got a 503, waited out a backoff
// and then met a breaker that had opened meanwhile fails with an error
// that matches transport.ErrCircuitOpen too, but it waited on the server.
// Against a server that always answers 503, each operation's requests
// are counted apart (by its own OnAttempt), and no operation counted as
// failed fast sent one.
func TestFailedFastSentNothing(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(503)
	}))
	defer srv.Close()
	c := tiny(0)
	var sent sync.Map // op id -> *atomic.Int64, requests that reached the wire
	onAttempt := func(ev policy.AttemptEvent) {
		if ev.Err != nil && isOpen(ev.Err) {
			return
		}
		if v, ok := sent.Load(ev.Request.Context().Value(testOpKey{})); ok {
			v.(*atomic.Int64).Add(1)
		}
	}
	call, closeIdle := newClient(c, kindSturdy, srv.URL, nil, func(string, transport.BreakerState, transport.BreakerState) {}, onAttempt)
	defer closeIdle()
	var (
		wg                sync.WaitGroup
		mu                sync.Mutex
		open, openButSent int
		openSentWaited    time.Duration
	)
	for g := range 30 {
		wg.Go(func() {
			for i := range 20 {
				id := g*1000 + i
				n := new(atomic.Int64)
				sent.Store(id, n)
				ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), testOpKey{}, id), c.Deadline)
				t0 := time.Now()
				o := call(ctx)
				lat := time.Since(t0)
				cancel()
				if o.open {
					mu.Lock()
					open++
					if n.Load() > 0 {
						openButSent++
						openSentWaited = max(openSentWaited, lat)
					}
					mu.Unlock()
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	if open == 0 {
		t.Error("no operation failed fast: the breaker never opened")
	}
	if openButSent > 0 {
		t.Errorf("%d of them had sent a request to the server (one waited %v): counted as \"failed fast (no request sent)\"", openButSent, openSentWaited)
	}
}

func isOpen(err error) bool { return errors.Is(err, transport.ErrCircuitOpen) }
