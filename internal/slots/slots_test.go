package slots

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// full returns a host with a limit of 2 and both slots taken.
func full(t *testing.T) *Host {
	h := &Host{Lim: (&policy.Concurrency{Initial: 2, Min: 2}).NewLimit(time.Now()), Key: "http://a.test"}
	for range 2 {
		if ok, _ := h.Lim.Acquire(); !ok {
			t.Fatal("Acquire of a free slot failed")
		}
	}
	return h
}

// TestWaitLastComeFirstServed: a slot that frees goes to the request
// that came last; the others wait on, and one whose wait ends is
// refused and leaves the queue.
func TestWaitLastComeFirstServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := full(t)
		got := make(chan int, 3)
		for i := range 3 {
			go func() {
				ok, done, _ := h.Wait(context.Background(), time.Second)
				if done != nil {
					t.Errorf("waiter %d: done %v, want nil", i, done)
				}
				if ok {
					got <- i
				} else {
					got <- -1 - i
				}
			}()
			synctest.Wait() // in order of arrival
		}
		if n := h.Waiting(); n != 3 {
			t.Fatalf("Waiting() = %d, want 3", n)
		}
		h.Release(time.Time{}, 0, policy.ConcurrencyIgnored)
		if w := <-got; w != 2 {
			t.Errorf("granted to waiter %d, want 2 (the latest)", w)
		}
		time.Sleep(2 * time.Second)
		a, b := <-got, <-got
		if a+b != -1-2 || h.Waiting() != 0 {
			t.Errorf("after the wait: %d, %d, %d waiting; want waiters 0 and 1 refused, none waiting", a, b, h.Waiting())
		}
		if h.Live(time.Time{}) != true {
			t.Error("Live() = false with slots held, want true")
		}
	})
}

// TestWaitCanceled: a wait that its context ends reports the cause and
// takes no slot.
func TestWaitCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := full(t)
		ctx, cancel := context.WithCancelCause(context.Background())
		errCaller := context.Canceled
		go func() {
			time.Sleep(time.Millisecond)
			cancel(errCaller)
		}()
		ok, done, _ := h.Wait(ctx, time.Hour)
		if ok || done != errCaller {
			t.Errorf("Wait = %v, %v; want false, %v", ok, done, errCaller)
		}
		if n := h.Lim.InFlight(); n != 2 || h.Waiting() != 0 {
			t.Errorf("%d in flight, %d waiting; want 2, 0", n, h.Waiting())
		}
	})
}
