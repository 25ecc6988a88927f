// Package slots is one host's slots for requests in flight, as a
// [policy.ConcurrencyLimit] allows them, and the queue of requests that
// wait for one. transport.Concurrency wires it to requests.
package slots

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// Host is one host's limit and the requests waiting for a slot.
type Host struct {
	Lim     *policy.ConcurrencyLimit
	Key     string       // the host key, for events and errors
	waiting atomic.Int32 // len(queue), read without the lock
	mu      sync.Mutex
	queue   []*waiter // last come, first served: see Wait
	eager   int       // waiters in queue that came while the limit was eager
}

// waiter is a request waiting for a slot: ready is closed when it is
// granted one.
type waiter struct {
	ready   chan struct{}
	granted bool // under the host's mu
	recheck bool // under the host's mu: woken to ask the limit again
	eager   bool // came while the limit was eager (see [policy.ConcurrencyLimit.Eager])
}

// Live reports whether h must be kept: requests hold or wait for its
// slots.
func (h *Host) Live(time.Time) bool {
	return h.Lim.InFlight() > 0 || h.waiting.Load() > 0
}

// Waiting returns how many requests wait for a slot.
func (h *Host) Waiting() int { return int(h.waiting.Load()) }

// Release gives back a slot, teaching the limit o (see
// [policy.ConcurrencyLimit.Release]), and hands free slots to the
// requests waiting.
func (h *Host) Release(now time.Time, rtt time.Duration, o policy.ConcurrencyOutcome) (changed bool, from, to int) {
	changed, from, to = h.Lim.Release(now, rtt, o)
	if h.waiting.Load() > 0 {
		h.mu.Lock()
		h.grantLocked()
		if h.eager > 0 && !h.Lim.Eager() {
			h.recheckLocked()
		}
		h.mu.Unlock()
	}
	return changed, from, to
}

// recheckLocked wakes the requests that came to wait while the limit
// was eager, to ask it again: the host strained, and the waits it
// allowed while the host kept up are no longer allowed (see
// [policy.ConcurrencyLimit.Wait]). h.mu is held.
func (h *Host) recheckLocked() {
	kept := h.queue[:0]
	for _, w := range h.queue {
		if !w.eager {
			kept = append(kept, w)
			continue
		}
		w.recheck = true
		close(w.ready)
	}
	clear(h.queue[len(kept):])
	h.waiting.Add(-int32(len(h.queue) - len(kept)))
	h.queue = kept
	h.eager = 0
}

// grantLocked gives free slots to the first requests waiting. h.mu is
// held.
func (h *Host) grantLocked() {
	for len(h.queue) > 0 {
		if ok, _ := h.Lim.Acquire(); !ok {
			return
		}
		last := len(h.queue) - 1
		w := h.queue[last] // the latest first: see Wait
		h.queue[last] = nil
		h.queue = h.queue[:last]
		h.waiting.Add(-1)
		if w.eager {
			h.eager--
		}
		w.granted = true
		close(w.ready)
	}
}

// Wait waits for a slot of h for at most d, or until ctx is done. It
// reports whether it took one; done is ctx's cause when ctx ended the
// wait (a slot granted as it did is given back); again, that the wait
// was cut short for the request to ask the limit again, since the host
// strained.
//
// A slot that frees goes to the request that came last. Under a burst
// below capacity, every waiter gets one soon either way. Under overload,
// first come first served would make every request wait the longest a
// wait may last and then send it late; last come first served sends most
// requests at once and refuses those that waited longest, which would
// have been late anyway.
func (h *Host) Wait(ctx context.Context, d time.Duration) (ok bool, done error, again bool) {
	w := &waiter{ready: make(chan struct{}), eager: h.Lim.Eager()}
	h.mu.Lock()
	h.queue = append(h.queue, w)
	h.waiting.Add(1)
	if w.eager {
		h.eager++
	}
	h.grantLocked() // a slot freed since Acquire failed
	h.mu.Unlock()

	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-w.ready:
		h.mu.Lock()
		again = w.recheck
		h.mu.Unlock()
		return !again, nil, again
	case <-timer.C:
	case <-ctx.Done():
		done = context.Cause(ctx)
	}
	h.mu.Lock()
	granted, again := w.granted, w.recheck
	if !granted && !again {
		for i, q := range h.queue {
			if q == w {
				h.queue = append(h.queue[:i], h.queue[i+1:]...)
				h.waiting.Add(-1)
				if w.eager {
					h.eager--
				}
				break
			}
		}
	}
	h.mu.Unlock()
	if granted {
		if done == nil {
			return true, nil, false // granted as the wait ended: use it
		}
		h.Release(time.Now(), 0, policy.ConcurrencyIgnored)
	}
	return false, done, again && done == nil
}

// Await waits for a slot of h as long as the limit's rule (see
// [policy.ConcurrencyLimit.Wait]) and ctx allow; dl is the operation's
// deadline, when hasDeadline. It reports whether it took one; if not,
// how long it waited (0: refused at once) and done, ctx's cause when ctx
// ended the wait.
func (h *Host) Await(ctx context.Context, dl time.Time, hasDeadline bool) (ok bool, waited time.Duration, done error) {
	start := time.Now()
	d, may := h.Lim.Wait(h.Waiting(), dl.Sub(start), hasDeadline)
	for may {
		got, done, again := h.Wait(ctx, d)
		if !again {
			if got {
				return true, 0, nil
			}
			return false, time.Since(start), done
		}
		// The host strained while the request waited as the rule for a
		// host that keeps up allows: it waits on only as the rule for a
		// strained host allows, counting what it has waited.
		d, may = h.Lim.Wait(h.Waiting(), time.Until(dl), hasDeadline)
		d = min(d, h.Lim.Reference()-time.Since(start))
		may, waited = may && d > 0, time.Since(start)
	}
	return false, waited, nil
}
