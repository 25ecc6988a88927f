package ratelimit

import (
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The first answer of a burst sent before the host had state tells a
// quota that does not count the rest of the burst, still out: a request
// sent after it waits for their answers rather than spend what they
// took. Before, it went at once, and so did every request after it while
// the burst's answers came back (a fixed window of 20 a second refused
// 11 to 13 of them in the first second).
func TestFirstBurstStillOutIsCounted(t *testing.T) {
	for _, tc := range []struct {
		name string
		// answers of the other requests of the burst, in the order they
		// come: each says how many are left.
		others []int
		// A request sent after the first answer goes between lo and hi
		// after it: at the reset when the burst spent the quota (a second
		// after the last answer, 19 ms after the first), at once when it
		// left room.
		lo, hi time.Duration
	}{
		{"the burst spent the window", []int{18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, 1019 * time.Millisecond, 1019 * time.Millisecond},
		{"the burst left room", []int{18, 17, 16, 15, 14}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := NewTracker(Options{})
				u := "https://api.example.com/v1/items"
				answer := func(remaining int) *http.Response {
					return &http.Response{StatusCode: 200, Header: quotaHeader(20, remaining, time.Second)}
				}
				// The burst: 1 + len(others) requests out before any state.
				burst := make([]Reservation, 1+len(tc.others))
				for i := range burst {
					res, err := tr.Reserve(newReq(t, nil, u))
					if err != nil {
						t.Fatal(err)
					}
					burst[i] = res
				}
				start := time.Now()
				burst[0].Settle(answer(19)) // the host has state from here
				var took time.Duration
				done := make(chan struct{})
				go func() {
					defer close(done)
					res, err := tr.Reserve(newReq(t, nil, u))
					if err != nil {
						t.Errorf("Reserve = %v", err)
						return
					}
					took = time.Since(start)
					res.Settle(answer(max(tc.others[len(tc.others)-1]-1, 0)))
				}()
				for i, left := range tc.others {
					time.Sleep(time.Millisecond) // the answers come a millisecond apart
					burst[1+i].Settle(answer(left))
				}
				<-done
				if took < tc.lo || took > tc.hi {
					t.Errorf("the request sent after the first answer went at %v, want %v to %v", took, tc.lo, tc.hi)
				}
			})
		})
	}
}

// The answers waited for are waited for at most awaitNewsMax after the
// last one: a burst whose other requests never come back holds nothing
// longer.
func TestFirstBurstStillOutWaitsAtMostASecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		u := "https://api.example.com/v1/items"
		var burst [5]Reservation
		for i := range burst {
			burst[i], _ = tr.Reserve(newReq(t, nil, u))
		}
		start := time.Now()
		burst[0].Settle(&http.Response{StatusCode: 200, Header: quotaHeader(5, 4, time.Minute)})
		res, err := tr.Reserve(newReq(t, nil, u))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := time.Since(start), awaitNewsMax; got != want {
			t.Errorf("waited %v for answers that never came, want %v", got, want)
		}
		res.Settle(nil)
		for i := range burst[1:] {
			burst[1+i].Cancel()
		}
	})
}

// A spent quota of a second or two lets the requests it held go at its
// rate, the first an interval after its reset: a window that slides
// (go-chi/httprate) still counts the whole of the last one at its reset
// and refused all of a burst there. A lone request goes at the reset.
func TestTrackerShortWindowResetSpreads(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int
		window time.Duration // the reset each answer says
		want   []time.Duration
	}{
		{"a burst, a window of a second", 4, time.Second, []time.Duration{1050 * time.Millisecond, 1100 * time.Millisecond, 1150 * time.Millisecond, 1200 * time.Millisecond}},
		{"a lone request", 1, time.Second, []time.Duration{time.Second}},
		{"a burst, a window of a minute", 3, time.Minute, []time.Duration{time.Minute, time.Minute, time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := NewTracker(Options{})
				u := "https://api.example.com/v1/items"
				start := time.Now()
				tr.Observe(newReq(t, nil, u), quotaHeader(20, 0, tc.window))
				var (
					mu  sync.Mutex
					out []time.Duration
					wg  sync.WaitGroup
				)
				for range tc.n {
					wg.Go(func() {
						res, err := tr.Reserve(newReq(t, nil, u))
						if err != nil {
							t.Errorf("Reserve = %v", err)
							return
						}
						mu.Lock()
						out = append(out, time.Since(start))
						mu.Unlock()
						res.Settle(nil)
					})
				}
				wg.Wait()
				slices.Sort(out)
				if !slices.Equal(out, tc.want) {
					t.Errorf("let through at %v, want %v", out, tc.want)
				}
			})
		})
	}
}

// The count of requests still out and the successes of a span are kept
// apart: each change keeps the other.
func TestFirstBurstsCounts(t *testing.T) {
	var b firstBursts
	now := time.Now()
	var slots []uint8
	for range 5 {
		slots = append(slots, b.went("api.example.com"))
	}
	s := slots[0]
	for _, o := range slots[1:] {
		if o != s {
			t.Fatalf("slots %v, want one", slots)
		}
	}
	for range 3 {
		b.back(s)
		b.add("api.example.com")
	}
	if got, want := b.outstanding(s), 2; got != want {
		t.Errorf("outstanding after 5 went, 3 settled = %d, want %d", got, want)
	}
	if got, want := b.count("api.example.com", now), 3; got != want {
		t.Errorf("count = %d, want %d", got, want)
	}
	if got, want := b.outstanding(s), 2; got != want {
		t.Errorf("outstanding after count = %d, want %d (count empties the span only)", got, want)
	}
	b.back(s)
	b.back(s)
	if got := b.outstanding(s); got != 0 {
		t.Errorf("outstanding once all settled = %d, want 0", got)
	}
}
