package ratelimit

import (
	"context"
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
// longer. Those that never reached the server (cancelled) or got no
// answer tell the host so, as an answer would.
func TestFirstBurstStillOutWaitsAtMostASecond(t *testing.T) {
	for _, tc := range []struct {
		name   string
		after  time.Duration // when the next request comes, after the first answer
		cancel bool          // the other requests of the burst are cancelled first
		want   time.Duration // how long it waits
	}{
		{"at once", 0, false, awaitNewsMax},
		{"late", 900 * time.Millisecond, false, 100 * time.Millisecond},
		{"the others cancelled", 0, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := NewTracker(Options{})
				u := "https://api.example.com/v1/items"
				var burst [5]Reservation
				for i := range burst {
					burst[i], _ = tr.Reserve(newReq(t, nil, u))
				}
				burst[0].Settle(&http.Response{StatusCode: 200, Header: quotaHeader(5, 4, time.Minute)})
				if tc.cancel {
					for i := range burst[1:] {
						burst[1+i].Cancel()
					}
				}
				time.Sleep(tc.after)
				start := time.Now()
				res, err := tr.Reserve(newReq(t, nil, u))
				if err != nil {
					t.Fatal(err)
				}
				if got := time.Since(start); got != tc.want {
					t.Errorf("waited %v, want %v", got, tc.want)
				}
				res.Settle(nil)
				for i := range burst[1:] {
					burst[1+i].Settle(nil)
				}
			})
		})
	}
}

// A spent quota of a second or two lets the requests it held go at its
// rate, the first an interval after its reset: a window that slides
// (go-chi/httprate) still counts the whole of the last one at its reset
// and refused all of a burst there. A lone request goes at the reset.
func TestTrackerShortWindowResetSpreads(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		name   string
		n      int
		answer http.Header // what the host said before they came
		late   int         // requests that come 10, 20, ... ms after the reset
		want   []time.Duration
	}{
		{"a burst, a window of a second", 4, quotaHeader(20, 0, time.Second), 0, []time.Duration{ms(1050), ms(1100), ms(1150), ms(1200)}},
		{"a lone request", 1, quotaHeader(20, 0, time.Second), 0, []time.Duration{time.Second}},
		{"a burst, a window of a minute", 3, quotaHeader(20, 0, time.Minute), 0, []time.Duration{time.Minute, time.Minute, time.Minute}},
		// More held than the window takes: one probe of whether the
		// quota refills (an interval after the answer, IETF w=1), then
		// the window's four places, the last just inside it, then the
		// one left, alone at the next reset.
		{"more than a window takes", 6, hdr("RateLimit-Policy", `"default";q=4;w=1`, "RateLimit", `"default";r=0;t=1`), 0,
			[]time.Duration{ms(250), ms(1250), ms(1500), ms(1750), ms(1999), ms(2000)}},
		// Two held, and two that come while the spread runs: they take
		// the next places, not a burst ahead of them.
		{"newcomers take places", 2, quotaHeader(10, 0, time.Second), 4,
			[]time.Duration{ms(1100), ms(1200), ms(1300), ms(1400), ms(1500), ms(1600)}},
		// A window of one: no spread, one a window, at its reset.
		{"a window of one", 2, hdr("RateLimit-Policy", `"default";q=1;w=2`, "RateLimit", `"default";r=0;t=2`), 0,
			[]time.Duration{2 * time.Second, 4 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := NewTracker(Options{})
				u := "https://api.example.com/v1/items"
				start := time.Now()
				tr.Observe(newReq(t, nil, u), tc.answer)
				delays := make([]time.Duration, tc.n+tc.late)
				for i := range tc.late {
					delays[tc.n+i] = time.Second + time.Duration(i+1)*10*time.Millisecond
				}
				out := reserveAll(t, tr, u, start, delays)
				// Within a millisecond: a window's places end inside it.
				near := func(a, b time.Duration) bool { return a-b <= time.Millisecond && b-a <= time.Millisecond }
				if !slices.EqualFunc(out, tc.want, near) {
					t.Errorf("let through at %v, want %v (to the millisecond)", out, tc.want)
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
		b.add(s - 1)
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

// A request with a place in a reset's spread that goes before its place
// (its deadline comes first, and it has waited already) gives the place
// back: a later spread is sized for the requests it holds, not one less
// for each such place.
func TestTrackerResetSpreadPlaceGivenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		u := "https://api.example.com/v1/items"
		tr.Observe(newReq(t, nil, u), quotaHeader(20, 0, time.Second))
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				ctx := context.Background()
				if i == 3 {
					// The last to come gets the last place, past its deadline.
					time.Sleep(time.Millisecond)
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, time.Second+60*time.Millisecond)
					defer cancel()
				}
				res, err := tr.Reserve(newReq(t, ctx, u))
				if err != nil {
					t.Errorf("Reserve = %v", err)
					return
				}
				res.Settle(nil)
			})
		}
		wg.Wait()
		time.Sleep(5 * time.Second)
		start := time.Now()
		tr.Pause(newReq(t, nil, u), start.Add(time.Second))
		out := reserveAll(t, tr, u, start, make([]time.Duration, 3))
		if want := []time.Duration{time.Second, 1050 * time.Millisecond, 1100 * time.Millisecond}; !slices.Equal(out, want) {
			t.Errorf("after the pause, let through at %v, want %v", out, want)
		}
	})
}

// reserveAll reserves a place for a request to u from one goroutine per
// delay, each after its delay, settles it as unanswered, and returns
// when each was let through after start, in order.
func reserveAll(t *testing.T, tr *Tracker, u string, start time.Time, delays []time.Duration) []time.Duration {
	t.Helper()
	var (
		mu  sync.Mutex
		out []time.Duration
		wg  sync.WaitGroup
	)
	for _, d := range delays {
		wg.Go(func() {
			time.Sleep(d)
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
	return out
}
