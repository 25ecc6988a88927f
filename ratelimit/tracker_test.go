package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func newReq(t *testing.T, ctx context.Context, url string) *http.Request {
	t.Helper()
	if ctx == nil {
		ctx = context.Background()
	}
	r, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// quotaHeader is a response saying remaining units are left of limit and
// the window resets in reset (X-RateLimit-* family, delta seconds).
func quotaHeader(limit, remaining int, reset time.Duration) http.Header {
	return hdr(
		"X-RateLimit-Limit", strconv.Itoa(limit),
		"X-RateLimit-Remaining", strconv.Itoa(remaining),
		"X-RateLimit-Reset-After", strconv.FormatFloat(reset.Seconds(), 'f', -1, 64),
	)
}

// waitFor reserves r's place and settles it as sent with no news, as
// a request that went and got no quota headers back.
func waitFor(tr *Tracker, r *http.Request) error {
	res, err := tr.Reserve(r)
	res.Settle(nil)
	return err
}

// timedWait calls Wait and returns its error and how long it took.
func timedWait(tr *Tracker, r *http.Request) (time.Duration, error) {
	start := time.Now()
	err := waitFor(tr, r)
	return time.Since(start), err
}

func TestTrackerNothingKnown(t *testing.T) {
	tr := NewTracker(Options{})
	r := newReq(t, nil, "https://api.example.com/x")
	if err := waitFor(tr, r); err != nil {
		t.Fatalf("Wait = %v, want nil", err)
	}
	tr.Observe(r, hdr("Content-Type", "text/plain"))
	tr.Observe(r, nil)
	if got := tr.Len(); got != 0 {
		t.Errorf("Len after responses without quota = %d, want 0", got)
	}
	if _, ok := tr.Quota(r); ok {
		t.Errorf("Quota ok = true, want false")
	}
}

func TestTrackerWaitsForReset(t *testing.T) {
	cases := []struct {
		name      string
		opts      Options
		remaining int
		wantWait  time.Duration
	}{
		{"exhausted waits for reset", Options{}, 0, 2 * time.Second},
		{"room left goes", Options{}, 1, 0},
		{"at the reserve waits", Options{Reserve: 3}, 3, 2 * time.Second},
		{"above the reserve goes", Options{Reserve: 3}, 4, 0},
		{"negative reserve never waits on quota", Options{Reserve: -1}, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := NewTracker(tc.opts)
				r := newReq(t, nil, "https://api.example.com/x")
				tr.Observe(r, quotaHeader(100, tc.remaining, 2*time.Second))
				took, err := timedWait(tr, r)
				if err != nil {
					t.Fatalf("Wait = %v, want nil", err)
				}
				if took != tc.wantWait {
					t.Errorf("Wait took %v, want %v", took, tc.wantWait)
				}
			})
		})
	}
}

func TestTrackerFailsFast(t *testing.T) {
	cases := []struct {
		name    string
		opts    Options
		timeout time.Duration // 0: no deadline
		reset   time.Duration
		fail    bool
	}{
		{"deadline before reset", Options{}, time.Second, 2 * time.Second, true},
		{"deadline at reset", Options{}, 2 * time.Second, 2 * time.Second, true},
		{"deadline after reset", Options{}, 3 * time.Second, 2 * time.Second, false},
		{"MaxWait below reset", Options{MaxWait: time.Second}, 0, 2 * time.Second, true},
		{"MaxWait at reset", Options{MaxWait: 2 * time.Second}, 0, 2 * time.Second, false},
		{"default MaxWait 60s", Options{}, 0, 61 * time.Second, true},
		{"negative MaxWait never waits", Options{MaxWait: -1}, 0, time.Second, true},
		{"MaxServerWait below reset", Options{MaxServerWait: time.Second}, 0, 2 * time.Second, true},
		{"MaxServerWait at reset", Options{MaxServerWait: 2 * time.Second}, 0, 2 * time.Second, false},
		{"MaxServerWait over MaxWait", Options{MaxWait: time.Second, MaxServerWait: 5 * time.Second}, 0, 2 * time.Second, true},
		{"negative MaxServerWait never waits for a reset", Options{MaxServerWait: -1}, 0, time.Second, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var rejects []RejectEvent
				tc.opts.OnReject = func(e RejectEvent) { rejects = append(rejects, e) }
				tr := NewTracker(tc.opts)
				ctx := context.Background()
				if tc.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.timeout)
					defer cancel()
				}
				r := newReq(t, ctx, "https://api.example.com/x")
				start := time.Now()
				tr.Observe(r, quotaHeader(100, 0, tc.reset))
				took, err := timedWait(tr, r)
				if !tc.fail {
					if err != nil || took != tc.reset {
						t.Fatalf("Wait = %v after %v, want nil after %v", err, took, tc.reset)
					}
					return
				}
				if took != 0 {
					t.Errorf("failing Wait took %v, want 0", took)
				}
				if !errors.Is(err, ErrQuotaExhausted) {
					t.Fatalf("Wait = %v, want ErrQuotaExhausted", err)
				}
				var qe *QuotaError
				if !errors.As(err, &qe) {
					t.Fatalf("Wait = %T, want *QuotaError", err)
				}
				if got, want := qe.Reset, start.Add(tc.reset); !got.Equal(want) {
					t.Errorf("QuotaError.Reset = %v, want %v", got, want)
				}
				if qe.Wait != tc.reset || qe.Reason != ReasonQuota || qe.Key != "https://api.example.com" {
					t.Errorf("QuotaError = %+v, want Wait %v, Reason %q, Key https://api.example.com", qe, tc.reset, ReasonQuota)
				}
				if qe.Retriable() {
					t.Errorf("Retriable() = true, want false")
				}
				if len(rejects) != 1 || rejects[0].Err != qe || rejects[0].Key != qe.Key || rejects[0].Request != r {
					t.Errorf("OnReject calls = %+v, want one with the error", rejects)
				}
			})
		})
	}
}

func TestQuotaErrorMessage(t *testing.T) {
	cases := []struct {
		wait time.Duration
		want string
	}{
		{4200 * time.Millisecond, "ratelimit: quota exhausted for https://api.example.com (resets in 4.2s)"},
		{4249 * time.Millisecond, "ratelimit: quota exhausted for https://api.example.com (resets in 4.2s)"},
		{1234567 * time.Microsecond, "ratelimit: quota exhausted for https://api.example.com (resets in 1.2s)"},
		{20*time.Millisecond + 400*time.Microsecond, "ratelimit: quota exhausted for https://api.example.com (resets in 20ms)"},
	}
	for _, tc := range cases {
		err := &QuotaError{Key: "https://api.example.com", Wait: tc.wait}
		if got := err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
	var err error = &QuotaError{}
	if !errors.Is(err, ErrQuotaExhausted) || errors.Unwrap(err) != ErrQuotaExhausted {
		t.Errorf("QuotaError does not match ErrQuotaExhausted")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("QuotaError matches DeadlineExceeded, want not")
	}
}

func TestTrackerCountsDown(t *testing.T) {
	// The server said 5 are left for 10 s. Five requests go at once, the
	// sixth waits for the reset without any 429 to learn from.
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		r := newReq(t, nil, "https://api.example.com/x")
		tr.Observe(r, quotaHeader(10, 5, 10*time.Second))
		for i := range 5 {
			if took, err := timedWait(tr, r); err != nil || took != 0 {
				t.Fatalf("request %d: Wait = %v after %v, want nil at once", i, err, took)
			}
		}
		q, _ := tr.Quota(r)
		if q.Remaining != 0 {
			t.Errorf("Remaining after 5 requests = %d, want 0", q.Remaining)
		}
		if took, err := timedWait(tr, r); err != nil || took != 10*time.Second {
			t.Errorf("sixth request: Wait = %v after %v, want nil after 10s", err, took)
		}
	})
}

func TestTrackerUpdate(t *testing.T) {
	// Responses arrive out of order: within one window the lowest
	// Remaining holds; a later window replaces it; a past window is stale.
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		r := newReq(t, nil, "https://api.example.com/x")
		steps := []struct {
			name string
			h    http.Header
			want int
		}{
			{"first", quotaHeader(10, 5, 10*time.Second), 5},
			{"stale higher in same window", quotaHeader(10, 8, 10*time.Second), 5},
			{"lower in same window, rounded reset", quotaHeader(10, 3, 9500*time.Millisecond), 3},
			{"new window", quotaHeader(10, 9, 70*time.Second), 9},
			{"reset in the past", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1"), 9},
		}
		for i, s := range steps {
			if s.name == "reset in the past" {
				// An absolute reset already passed by the Date. (The
				// bubble's clock starts in 2000, before epoch resets are
				// told from delta seconds, so use a date.)
				s.h = hdr("Date", time.Now().UTC().Format(http.TimeFormat),
					"X-RateLimit-Remaining", "0",
					"X-RateLimit-Reset", time.Now().Add(-time.Minute).UTC().Format(time.RFC3339))
			}
			tr.Observe(r, s.h)
			q, ok := tr.Quota(r)
			if !ok || q.Remaining != s.want {
				t.Errorf("step %d (%s): Remaining = %d (ok %v), want %d", i, s.name, q.Remaining, ok, s.want)
			}
		}
	})
}

func TestTrackerPauseSharedAndSpread(t *testing.T) {
	// A 429 with Retry-After: 5: a hundred goroutines send nothing for
	// 5 s, then are let go one by one, not in one burst, over at most a
	// second.
	synctest.Test(t, func(t *testing.T) {
		var waits sync.Map
		tr := NewTracker(Options{OnWait: func(e WaitEvent) { waits.Store(e.Reason, true) }})
		start := time.Now()
		tr.Pause(newReq(t, nil, "https://api.example.com/"), start.Add(5*time.Second))

		var (
			mu  sync.Mutex
			out []time.Duration
			wg  sync.WaitGroup
		)
		for range 100 {
			wg.Go(func() {
				r := newReq(t, nil, "https://api.example.com/x")
				if err := waitFor(tr, r); err != nil {
					t.Errorf("Wait = %v, want nil", err)
					return
				}
				mu.Lock()
				out = append(out, time.Since(start))
				mu.Unlock()
			})
		}
		wg.Wait()
		slices.Sort(out)
		if len(out) != 100 {
			t.Fatalf("%d requests let through, want 100", len(out))
		}
		if out[0] != 5*time.Second {
			t.Errorf("first request let through at %v, want 5s", out[0])
		}
		// At DefaultReleaseRate (20/s) a hundred would take 5 s: the
		// spread is cut to a second, one every 10 ms.
		if got, want := out[99]-out[0], 99*10*time.Millisecond; got != want {
			t.Errorf("spread = %v, want %v", got, want)
		}
		perInstant := map[time.Duration]int{}
		for _, d := range out {
			perInstant[d]++
		}
		for d, n := range perInstant {
			if n > 1 {
				t.Errorf("%d requests let through at the same instant %v, want 1", n, d)
			}
		}
		for _, reason := range []string{ReasonRetryAfter, ReasonReleaseRate} {
			if _, ok := waits.Load(reason); !ok {
				t.Errorf("no OnWait with reason %q", reason)
			}
		}
		// Another host is not paused.
		if took, err := timedWait(tr, newReq(t, nil, "https://other.example.com/")); err != nil || took != 0 {
			t.Errorf("other host: Wait = %v after %v, want nil at once", err, took)
		}
	})
}

func TestTrackerPauseExtends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		r := newReq(t, nil, "https://api.example.com/x")
		start := time.Now()
		tr.Pause(r, start.Add(5*time.Second))
		tr.Pause(r, start.Add(2*time.Second)) // never shortens
		done := make(chan time.Duration)
		go func() {
			took, _ := timedWait(tr, r)
			done <- took
		}()
		time.Sleep(3 * time.Second)
		tr.Pause(r, start.Add(8*time.Second)) // a second 429 while waiting
		if got, want := <-done, 8*time.Second; got != want {
			t.Errorf("Wait took %v, want %v", got, want)
		}
		if _, paused := tr.Paused(r, time.Now()); paused {
			t.Errorf("still paused after the pause ended")
		}
	})
}

func TestTrackerCancelWakesAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		ctx, cancel := context.WithCancel(context.Background())
		tr.Pause(newReq(t, nil, "https://api.example.com/"), time.Now().Add(30*time.Second))
		start := time.Now()
		errs := make(chan error, 50)
		times := make(chan time.Duration, 50)
		for range 50 {
			go func() {
				took, err := timedWait(tr, newReq(t, ctx, "https://api.example.com/x"))
				errs <- err
				times <- took
			}()
		}
		time.Sleep(time.Second)
		synctest.Wait()
		cancel()
		for range 50 {
			if err := <-errs; !errors.Is(err, context.Canceled) {
				t.Errorf("Wait = %v, want context.Canceled", err)
			}
			if got := <-times; got != time.Second {
				t.Errorf("Wait returned after %v, want 1s", got)
			}
		}
		_ = start
	})
}

func TestTrackerRollsKnownWindow(t *testing.T) {
	// IETF policy: 2 per 10 s. Exhausted with 5 s to go: the next request
	// waits 5 s; in the new window two go, the third waits for the next
	// window 10 s later, with no response needed to know it.
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		r := newReq(t, nil, "https://api.example.com/x")
		start := time.Now()
		tr.Observe(r, hdr("RateLimit-Policy", `"p";q=2;w=10`, "RateLimit", `"p";r=0;t=5`))
		var at []time.Duration
		for range 3 {
			if err := waitFor(tr, r); err != nil {
				t.Fatalf("Wait = %v", err)
			}
			at = append(at, time.Since(start))
		}
		// The first waited for the reset; the second finds room in the
		// new window and goes; the third waits for the window after.
		want := []time.Duration{5 * time.Second, 5 * time.Second, 15 * time.Second}
		if !slices.Equal(at, want) {
			t.Errorf("requests let through at %v, want %v", at, want)
		}
	})
}

func TestTrackerAwaitsNewWindow(t *testing.T) {
	// GitHub-style quota, no window: after the reset, Limit requests go;
	// those beyond wait for a response of the new window to learn its
	// reset instead of running into 429s. (Its reset, 3 s ahead, is not
	// that of a window of a second or two, whose requests a spread
	// releases: see TestTrackerShortWindowResetSpreads.)
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		r := newReq(t, nil, "https://api.example.com/x")
		start := time.Now()
		tr.Observe(r, quotaHeader(3, 0, 3*time.Second))
		var (
			mu  sync.Mutex
			out []time.Duration
			wg  sync.WaitGroup
		)
		for range 5 {
			wg.Go(func() {
				if err := waitFor(tr, newReq(t, nil, "https://api.example.com/x")); err != nil {
					t.Errorf("Wait = %v", err)
					return
				}
				mu.Lock()
				out = append(out, time.Since(start))
				mu.Unlock()
			})
		}
		// The first three of the new window are let go at its start.
		time.Sleep(3500 * time.Millisecond)
		mu.Lock()
		if got := len(out); got != 3 {
			t.Errorf("%d requests let through before the new window's news, want 3", got)
		}
		mu.Unlock()
		// A response of the new window: exhausted, resets at +11.5s.
		tr.Observe(r, quotaHeader(3, 0, 8*time.Second))
		wg.Wait()
		slices.Sort(out)
		if got := out[3]; got != 11500*time.Millisecond {
			t.Errorf("fourth request let through at %v, want 11.5s", got)
		}
	})
}

func TestTrackerAwaitsNewWindowAtMostASecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		r := newReq(t, nil, "https://api.example.com/x")
		tr.Observe(r, quotaHeader(1, 0, time.Second))
		start := time.Now()
		for i, want := range []time.Duration{time.Second, 2 * time.Second} {
			if err := waitFor(tr, r); err != nil {
				t.Fatalf("Wait = %v", err)
			}
			if got := time.Since(start); got != want {
				t.Errorf("request %d let through at %v, want %v", i, got, want)
			}
		}
	})
}

func TestTrackerClientRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var reasons []string
		tr := NewTracker(Options{Rate: 10, OnWait: func(e WaitEvent) { reasons = append(reasons, e.Reason) }})
		r := newReq(t, nil, "https://api.example.com/x")
		start := time.Now()
		for range 20 {
			if err := waitFor(tr, r); err != nil {
				t.Fatalf("Wait = %v", err)
			}
		}
		if got, want := time.Since(start), 1900*time.Millisecond; got != want {
			t.Errorf("20 requests at 10/s took %v, want %v", got, want)
		}
		if len(reasons) != 19 || reasons[0] != ReasonClientRate {
			t.Errorf("OnWait reasons = %v, want 19 × %q", reasons, ReasonClientRate)
		}
		// The server publishes its policy: 100 per second. The limiter
		// adopts it.
		tr.Observe(r, hdr("RateLimit-Policy", `"default";q=100;w=1`))
		start = time.Now()
		for range 20 {
			if err := waitFor(tr, r); err != nil {
				t.Fatalf("Wait = %v", err)
			}
		}
		if got, want := time.Since(start), 200*time.Millisecond; got != want {
			t.Errorf("20 requests after adapting took %v, want %v", got, want)
		}
	})
}

// A server that announces several policies (a per-second rate and a
// daily quota, say) gives the limiter the rate of its shortest window,
// whatever their order: the daily quota is counted as a quota, not
// turned into a pace of one request every 0.86 s.
func TestTrackerClientRateAdoptsShortestWindow(t *testing.T) {
	for _, policy := range []string{
		`"burst";q=100;w=1, "daily";q=100000;w=86400`,
		`"daily";q=100000;w=86400, "burst";q=100;w=1`,
	} {
		t.Run(policy, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := NewTracker(Options{Rate: 10})
				r := newReq(t, nil, "https://api.example.com/x")
				tr.Observe(r, hdr("RateLimit-Policy", policy))
				start := time.Now()
				for range 20 {
					if err := waitFor(tr, r); err != nil {
						t.Fatalf("Wait = %v", err)
					}
				}
				if got, want := time.Since(start), 190*time.Millisecond; got != want {
					t.Errorf("20 requests took %v, want %v (100 a second)", got, want)
				}
			})
		})
	}
}

func TestTrackerClientRateFailsFast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{Rate: 1, MaxWait: 500 * time.Millisecond})
		r := newReq(t, nil, "https://api.example.com/x")
		if err := waitFor(tr, r); err != nil {
			t.Fatalf("first Wait = %v", err)
		}
		err := waitFor(tr, r)
		var qe *QuotaError
		if !errors.As(err, &qe) || qe.Reason != ReasonClientRate || qe.Wait != time.Second {
			t.Fatalf("second Wait = %v, want a client-rate QuotaError of 1s", err)
		}
		// The refused wait gave its token back: after 1 s one goes.
		time.Sleep(time.Second)
		if took, err := timedWait(tr, r); err != nil || took != 0 {
			t.Errorf("Wait after 1s = %v after %v, want nil at once", err, took)
		}
	})
}

// MaxServerWait bounds only the waits a server asked for: the client-side
// limiter's wait is bounded by MaxWait alone, so a request at a rate of 1
// a second waits its second, whatever MaxServerWait says.
func TestTrackerClientRateIgnoresMaxServerWait(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want time.Duration // the second request's wait; -1: refused at once
	}{
		{"MaxServerWait unset", Options{Rate: 1}, time.Second},
		{"MaxServerWait 100ms", Options{Rate: 1, MaxServerWait: 100 * time.Millisecond}, time.Second},
		{"MaxServerWait negative", Options{Rate: 1, MaxServerWait: -1}, time.Second},
		{"MaxWait 500ms", Options{Rate: 1, MaxWait: 500 * time.Millisecond, MaxServerWait: time.Minute}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := NewTracker(tc.o)
				r := newReq(t, nil, "https://api.example.com/x")
				if took, err := timedWait(tr, r); err != nil || took != 0 {
					t.Fatalf("first Wait = %v after %v, want nil at once", err, took)
				}
				took, err := timedWait(tr, r)
				if tc.want < 0 {
					var qe *QuotaError
					if !errors.As(err, &qe) || qe.Reason != ReasonClientRate || took != 0 {
						t.Errorf("second Wait = %v after %v, want a client-rate QuotaError at once", err, took)
					}
					return
				}
				if err != nil || took != tc.want {
					t.Errorf("second Wait = %v after %v, want nil after %v", err, took, tc.want)
				}
			})
		})
	}
}

func TestTrackerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var keys []string
		tr := NewTracker(Options{
			Key:    func(r *http.Request) string { return r.Header.Get("X-Tenant") },
			OnWait: func(e WaitEvent) { keys = append(keys, e.Key) },
		})
		a := newReq(t, nil, "https://one.example.com/")
		a.Header.Set("X-Tenant", "alpha")
		b := newReq(t, nil, "https://one.example.com/")
		b.Header.Set("X-Tenant", "beta")
		c := newReq(t, nil, "https://two.example.com/")
		c.Header.Set("X-Tenant", "alpha")
		tr.Observe(a, quotaHeader(10, 0, time.Second))
		if took, _ := timedWait(tr, b); took != 0 {
			t.Errorf("other key waited %v, want 0", took)
		}
		if took, _ := timedWait(tr, c); took != time.Second {
			t.Errorf("same key on another host waited %v, want 1s", took)
		}
		if len(keys) == 0 || keys[0] != "alpha" {
			t.Errorf("OnWait keys = %v, want alpha first", keys)
		}
	})
}

func TestTrackerMaxHosts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{MaxHosts: 10, MaxPause: -1}) // the hour's pause is held whole
		busy := newReq(t, nil, "https://busy.example.com/")
		tr.Pause(busy, time.Now().Add(time.Hour))
		for i := range 50 {
			r := newReq(t, nil, fmt.Sprintf("https://h%d.example.com/", i))
			tr.Observe(r, quotaHeader(10, 5, time.Second))
			time.Sleep(2 * time.Second) // every earlier host is now idle
		}
		if got := tr.Len(); got > 10 {
			t.Errorf("Len = %d, want at most 10", got)
		}
		if _, paused := tr.Paused(busy, time.Now()); !paused {
			t.Errorf("paused host was dropped")
		}
		if _, ok := tr.Quota(newReq(t, nil, "https://h49.example.com/")); !ok {
			t.Errorf("latest host not tracked")
		}
	})
}

func TestTrackerConcurrent(t *testing.T) {
	// Many goroutines and hosts at once, for the race detector.
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{Rate: 1000, Burst: 10, MaxHosts: 4})
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				for i := range 50 {
					r := newReq(t, nil, fmt.Sprintf("https://h%d.example.com/", (g+i)%6))
					if err := waitFor(tr, r); err != nil && !errors.Is(err, ErrQuotaExhausted) {
						t.Errorf("Wait = %v", err)
					}
					switch i % 3 {
					case 0:
						tr.Observe(r, quotaHeader(20, 20-i%20, time.Second))
					case 1:
						tr.Observe(r, nil)
					case 2:
						if i%7 == 0 {
							tr.Pause(r, time.Now().Add(100*time.Millisecond))
						}
					}
					tr.Quota(r)
				}
			})
		}
		wg.Wait()
	})
}

// Hosts whose window still has quota are evicted at MaxHosts even with an
// hour to its reset (GitHub's windows are an hour long), so new hosts are
// tracked; a host with its window spent is kept.
func TestTrackerEvictsLongWindowsWithQuotaLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{MaxHosts: 10})
		spent := newReq(t, nil, "https://spent.example.com/")
		tr.Observe(spent, quotaHeader(5000, 0, time.Hour))
		for i := range 50 {
			r := newReq(t, nil, fmt.Sprintf("https://h%d.example.com/", i))
			tr.Observe(r, quotaHeader(5000, 4000, time.Hour))
			time.Sleep(2 * time.Second)
		}
		if got := tr.Len(); got > 10 {
			t.Errorf("Len = %d, want at most 10", got)
		}
		if _, ok := tr.Quota(newReq(t, nil, "https://h49.example.com/")); !ok {
			t.Error("latest host not tracked: hosts with quota left were never evicted")
		}
		if q, ok := tr.Quota(spent); !ok || q.Remaining != 0 {
			t.Errorf("spent host: Quota = %+v, %v; want kept with Remaining 0", q, ok)
		}
	})
}

// While every host is busy, a new host goes untracked at once; the
// tracker tries to make room again a second later.
func TestTrackerFullOfBusyHosts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{MaxHosts: 3})
		for i := range 3 {
			r := newReq(t, nil, fmt.Sprintf("https://busy%d.example.com/", i))
			tr.Pause(r, time.Now().Add(1500*time.Millisecond))
		}
		fresh := newReq(t, nil, "https://fresh.example.com/")
		tr.Observe(fresh, quotaHeader(10, 9, time.Minute))
		if _, ok := tr.Quota(fresh); ok {
			t.Fatal("fresh host tracked while every host is paused")
		}
		time.Sleep(2 * time.Second) // the pauses are over
		tr.Observe(fresh, quotaHeader(10, 9, time.Minute))
		if _, ok := tr.Quota(fresh); !ok {
			t.Error("fresh host still untracked once the pauses ended")
		}
		if got := tr.Len(); got > 3 {
			t.Errorf("Len = %d, want at most 3", got)
		}
	})
}

// A wait that cannot end before the request's deadline is not started,
// and that holds for a client-side Rate too: a request whose quota is
// spent past its deadline fails at once, not after first waiting for its
// place in the client's rate.
func TestClientRateThenQuotaPastDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{Rate: 1, Burst: 1})
		r := newReq(t, nil, "https://api.example.com/x")
		// The first request takes the client-rate token; its response
		// says the quota is spent for 10 s.
		res, err := tr.Reserve(r)
		if err != nil {
			t.Fatal(err)
		}
		res.Settle(&http.Response{StatusCode: 200, Header: quotaHeader(100, 0, 10*time.Second)})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		_, err = tr.Reserve(newReq(t, ctx, "https://api.example.com/x"))
		took := time.Since(start)
		var qe *QuotaError
		if !errors.As(err, &qe) {
			t.Fatalf("Reserve = %v, want a QuotaError (reset in 10s, deadline in 5s)", err)
		}
		if took != 0 {
			t.Errorf("Reserve failed after %v (reason %q), want at once: it waited only to fail", took, qe.Reason)
		}
	})
}

// One exhausted quota never holds back requests counted against another,
// even when its 429 carries a Retry-After: a 429 that names its spent
// resource (search, 0 left, reset in 60 s, Retry-After 60) holds search
// requests until the reset, and lets core requests (4000 left) go. With
// Options.Reserve < 0 quotas hold nothing, so they explain no wait: the
// Retry-After pauses the whole host, core included. Each request has a
// 10 s deadline: held, it fails at once.
func TestResource429WithRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		reserve  int
		coreHeld bool
	}{
		{0, false},
		{-1, true},
	} {
		t.Run(fmt.Sprintf("Reserve=%d", tc.reserve), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := NewTracker(Options{Reserve: tc.reserve})
				start := time.Now()
				res, _ := tr.Reserve(newReq(t, nil, "https://api.github.com/repos/o/r"))
				res.Settle(&http.Response{StatusCode: 200, Header: hdr(
					"X-RateLimit-Limit", "5000",
					"X-RateLimit-Remaining", "4000",
					"X-RateLimit-Reset", strconv.FormatInt(start.Add(50*time.Minute).Unix(), 10),
					"X-RateLimit-Resource", "core",
				)})
				res, _ = tr.Reserve(newReq(t, nil, "https://api.github.com/search/code"))
				res.Settle(&http.Response{StatusCode: 429, Header: hdr(
					"X-RateLimit-Limit", "30",
					"X-RateLimit-Remaining", "0",
					"X-RateLimit-Reset", strconv.FormatInt(start.Add(60*time.Second).Unix(), 10),
					"X-RateLimit-Resource", "search",
					"Retry-After", "60",
				)})
				for _, r := range []struct {
					path string
					held bool
				}{
					{"/repos/o/r/issues", tc.coreHeld},
					{"/search/issues", true},
				} {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					t0 := time.Now()
					res, err := tr.Reserve(newReq(t, ctx, "https://api.github.com"+r.path))
					if held := errors.Is(err, ErrQuotaExhausted); held != r.held || time.Since(t0) != 0 {
						t.Errorf("%s after a search 429: %v after %v; want held: %t, at once", r.path, err, time.Since(t0), r.held)
					}
					res.Cancel()
					cancel()
				}
			})
		})
	}
}

// A server-asked pause lasts as long as the server asked: a 429 with
// Retry-After: 60 whose IETF policy resets a second sooner (t=59), which
// explains it, holds the policy's route until +60s.
func TestRetryAfterHonouredWhenPolicyResetsSooner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		start := time.Now()
		u := "https://api.example.com/v1/search"
		res, _ := tr.Reserve(newReq(t, nil, u))
		res.Settle(&http.Response{StatusCode: 429, Header: hdr(
			"RateLimit-Policy", `"search";q=30;w=60`,
			"RateLimit", `"search";r=0;t=59`,
			"Retry-After", "60",
		)})
		res, err := tr.Reserve(newReq(t, nil, u))
		if err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got < 60*time.Second {
			t.Errorf("request after a 429 with Retry-After: 60 let go at +%v; want at +60s or later", got)
		}
		res.Cancel()
	})
}

// RefusedAt foresees, without reserving anything, the refusal Reserve
// would make at the time at: the host's pause (60 s) or a spent quota
// that counts the request (search, reset in 60 s) past its deadline or
// MaxWait from then; nothing for a route its spent quota does not count,
// for a wait that fits, or for a host with nothing known.
func TestTrackerRefusedAt(t *testing.T) {
	for _, tc := range []struct {
		name     string
		o        Options
		settle   func() http.Header // what the host last answered (a 429), made in the bubble
		url      string
		deadline time.Duration // from now; 0: none
		want     bool
	}{
		{"nothing known", Options{}, nil, "https://api.github.com/search/code", 10 * time.Second, false},
		{"paused past the deadline", Options{}, retryAfter60, "https://api.github.com/repos/o/r", 10 * time.Second, true},
		{"paused, the wait fits", Options{}, retryAfter60, "https://api.github.com/repos/o/r", 2 * time.Minute, false},
		{"paused past MaxWait", Options{MaxWait: 30 * time.Second}, retryAfter60, "https://api.github.com/repos/o/r", 0, true},
		{"paused past MaxServerWait", Options{MaxServerWait: 30 * time.Second}, retryAfter60, "https://api.github.com/repos/o/r", 0, true},
		{"quota spent past MaxServerWait", Options{MaxServerWait: 30 * time.Second}, searchSpent, "https://api.github.com/search/issues", 0, true},
		{"its quota spent past the deadline", Options{}, searchSpent, "https://api.github.com/search/issues", 10 * time.Second, true},
		{"another route's quota spent", Options{}, searchSpent, "https://api.github.com/repos/o/r", 10 * time.Second, false},
		{"quotas never hold (Reserve < 0)", Options{Reserve: -1}, searchSpent, "https://api.github.com/search/issues", 10 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := NewTracker(tc.o)
				if tc.settle != nil {
					res, _ := tr.Reserve(newReq(t, nil, "https://api.github.com/repos/o/r"))
					res.Settle(&http.Response{StatusCode: 200, Header: hdr(
						"X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "4000",
						"X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10), "X-RateLimit-Resource", "core")})
					res, _ = tr.Reserve(newReq(t, nil, "https://api.github.com/search/code"))
					res.Settle(&http.Response{StatusCode: 429, Header: tc.settle()})
				}
				ctx := context.Background()
				if tc.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.deadline)
					defer cancel()
				}
				err := tr.RefusedAt(newReq(t, ctx, tc.url), time.Now().Add(time.Second))
				if got := err != nil; got != tc.want || (got && !errors.Is(err, ErrQuotaExhausted)) {
					t.Errorf("RefusedAt = %v; want refused: %t", err, tc.want)
				}
			})
		})
	}
}

func retryAfter60() http.Header { return hdr("Retry-After", "60") }

// searchSpent is GitHub's answer when its search quota is spent for 60 s.
func searchSpent() http.Header {
	return hdr("X-RateLimit-Limit", "30", "X-RateLimit-Remaining", "0",
		"X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10), "X-RateLimit-Resource", "search")
}

func TestTrackerNewsAfterResetStartsNewWindow(t *testing.T) {
	// Discord-style quota, 5 a second: exhausted until +1s. No request
	// comes until +1.5s, when a response of the next window (from another
	// client, or one in flight) says 4 are left until +1.9s. The spent
	// count of the window that is over must not hold the host: the next
	// request goes at once.
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		r := newReq(t, nil, "https://api.example.com/x")
		tr.Observe(r, quotaHeader(5, 0, time.Second))
		time.Sleep(1500 * time.Millisecond)
		tr.Observe(r, quotaHeader(5, 4, 400*time.Millisecond))
		if q, _ := tr.Quota(r); q.Remaining != 4 {
			t.Errorf("Remaining = %d, want 4", q.Remaining)
		}
		if took, err := timedWait(tr, r); err != nil || took != 0 {
			t.Errorf("Wait = %v after %v, want nil at once", err, took)
		}
	})
}

func TestTrackerNoNewsWaitBeforeRefusal(t *testing.T) {
	// OpenAI's requests quota has rolled over and the one request of the
	// new window has gone, so the next would wait (up to a second) for
	// news of the new window. But a Retry-After pause already holds the
	// host past the request's deadline: it must fail at once, not after a
	// second spent waiting only to fail.
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		r := newReq(t, nil, "https://api.example.com/v1/x")
		tr.Observe(r, hdr(
			"X-Ratelimit-Limit-Requests", "1", "X-Ratelimit-Remaining-Requests", "0", "X-Ratelimit-Reset-Requests", "1s",
			"X-Ratelimit-Limit-Tokens", "1000", "X-Ratelimit-Remaining-Tokens", "1000", "X-Ratelimit-Reset-Tokens", "1s"))
		time.Sleep(time.Second)
		if err := waitFor(tr, r); err != nil { // the one request of the new window
			t.Fatalf("first request of the new window: %v", err)
		}
		tr.Pause(r, time.Now().Add(30*time.Second))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		took, err := timedWait(tr, newReq(t, ctx, "https://api.example.com/v1/x"))
		if !errors.Is(err, ErrQuotaExhausted) || took != 0 {
			t.Errorf("Wait = %v after %v, want ErrQuotaExhausted at once", err, took)
		}
	})
}

func TestTrackerNewsAfterResetKeepsServersReset(t *testing.T) {
	// A quota of 100 a minute (its window announced), spent until +1s. No
	// request comes until +2s, when a response says the quota is spent
	// again, until +7s (a server whose windows do not line up with the
	// first reset plus a minute, such as one whose reset is when room
	// frees up). The server's reset is the one to wait for: the next
	// request goes at +7s, not a minute after the first reset.
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		r := newReq(t, nil, "https://api.example.com/x")
		policy := `"default";q=100;w=60`
		tr.Observe(r, hdr("RateLimit-Policy", policy, "RateLimit", `"default";r=0;t=1`))
		time.Sleep(2 * time.Second)
		tr.Observe(r, hdr("RateLimit-Policy", policy, "RateLimit", `"default";r=0;t=5`))
		took, err := timedWait(tr, r)
		if got, want := took, 5*time.Second; err != nil || got != want {
			t.Errorf("Wait = %v after %v, want nil after %v (the server's reset)", err, got, want)
		}
	})
}

func TestTrackerEarlierResponseKeepsLaterReset(t *testing.T) {
	// Two responses of one window, the one that left the server first
	// read last (concurrent requests): it says the quota is spent until
	// +5s, where the newer said +10s. The newer word stands: a sooner
	// reset replaces only one the state guessed by rolling a window
	// forward, else the quota refills early and a burst meets 429s.
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		r := newReq(t, nil, "https://api.example.com/x")
		policy := `"default";q=100;w=60`
		tr.Observe(r, hdr("RateLimit-Policy", policy, "RateLimit", `"default";r=0;t=10`))
		tr.Observe(r, hdr("RateLimit-Policy", policy, "RateLimit", `"default";r=0;t=5`))
		took, err := timedWait(tr, r)
		if got, want := took, 10*time.Second; err != nil || got != want {
			t.Errorf("Wait = %v after %v, want nil after %v (the later reset)", err, got, want)
		}
	})
}

// The message says what holds a request: a quota, a server's pause (with
// the status and what its Retry-After asked, and the hold when MaxPause
// cut it), or one of the Tracker's own paces.
func TestQuotaErrorMessageSaysWhatHolds(t *testing.T) {
	const k = "https://api.example.com"
	cases := []struct {
		err  QuotaError
		want string
	}{
		{QuotaError{Key: k, Reason: ReasonRetryAfter, Status: 503, RetryAfter: 8760 * time.Hour, Hold: time.Minute, Wait: time.Minute},
			"ratelimit: https://api.example.com paused by the server's Retry-After on a 503 for 8760h0m0s; holding 1m0s (resumes in 1m0s)"},
		{QuotaError{Key: k, Reason: ReasonRetryAfter, Status: 429, RetryAfter: 30 * time.Second, Wait: 29 * time.Second},
			"ratelimit: https://api.example.com paused by the server's Retry-After on a 429 for 30s (resumes in 29s)"},
		{QuotaError{Key: k, Reason: ReasonRetryAfter, Status: 429, Wait: 250 * time.Millisecond},
			"ratelimit: https://api.example.com paused after a 429 that named no wait (resumes in 250ms)"},
		{QuotaError{Key: k, Reason: ReasonQuota, Hold: time.Minute, Wait: 24 * time.Hour},
			"ratelimit: quota exhausted for https://api.example.com (resets in 24h0m0s; holding 1m0s)"},
		{QuotaError{Key: k, Reason: ReasonClientRate, Wait: 2 * time.Second},
			"ratelimit: https://api.example.com held by the client-side rate for 2s"},
	}
	for _, tc := range cases {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

// A server that asks for a year's pause holds its host for MaxPause: the
// error of a request refused meanwhile names the real resume time (the
// hold's end, in Reset and Wait and its message), beside what the server
// asked; a request after the hold goes.
func TestQuotaErrorNamesTheHoldsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{MaxPause: time.Minute})
		r := newReq(t, nil, "https://api.example.com/")
		res, err := tr.Reserve(r)
		if err != nil {
			t.Fatal(err)
		}
		resp := &http.Response{StatusCode: 503, Header: hdr("Retry-After", "31536000"), Request: r}
		res.Settle(resp)
		start := time.Now()
		time.Sleep(10 * time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = tr.Reserve(newReq(t, ctx, "https://api.example.com/"))
		var qe *QuotaError
		if !errors.As(err, &qe) {
			t.Fatalf("Reserve during the hold = %v, want a *QuotaError", err)
		}
		if want := start.Add(time.Minute); !qe.Reset.Equal(want) || qe.Wait != 50*time.Second || qe.Hold != time.Minute {
			t.Errorf("QuotaError Reset %v, Wait %v, Hold %v; want Reset %v (the hold's end), Wait 50s, Hold 1m", qe.Reset.Sub(start), qe.Wait, qe.Hold, want.Sub(start))
		}
		if want := "for 8760h0m0s; holding 1m0s (resumes in 50s)"; !strings.Contains(err.Error(), want) {
			t.Errorf("err = %q, want it to say %q", err, want)
		}
		time.Sleep(50 * time.Second)
		res, err = tr.Reserve(newReq(t, nil, "https://api.example.com/"))
		if err != nil {
			t.Errorf("Reserve after the hold = %v, want nil", err)
		}
		res.Cancel()
	})
}

// TestTrackerSpreadCountsEarlyRetriesOnce: 25 requests in flight get 429
// Retry-After: 1, the answers 0.2 ms apart, and each is sent again its
// own second later, as Retry sends it: all but the last come back before
// the last answer's pause ends and wait for it. They are the requests
// the pause held, counted once: the spread releases 25, not 49, over its
// second, 40 ms apart (at DefaultReleaseRate, 25 would take 1.25 s).
func TestTrackerSpreadCountsEarlyRetriesOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		const n = 25
		start := time.Now()
		res := make([]Reservation, n)
		for i := range res {
			var err error
			if res[i], err = tr.Reserve(newReq(t, nil, "https://api.example.com/x")); err != nil {
				t.Fatal(err)
			}
		}
		var (
			mu  sync.Mutex
			out []time.Duration
			wg  sync.WaitGroup
		)
		for i := range res {
			time.Sleep(200 * time.Microsecond)
			res[i].Settle(&http.Response{StatusCode: http.StatusTooManyRequests, Header: hdr("Retry-After", "1")})
			wg.Go(func() {
				time.Sleep(time.Second) // the retry's own wait
				if err := waitFor(tr, newReq(t, nil, "https://api.example.com/x")); err != nil {
					t.Errorf("Wait = %v, want nil", err)
					return
				}
				mu.Lock()
				out = append(out, time.Since(start))
				mu.Unlock()
			})
		}
		wg.Wait()
		slices.Sort(out)
		end := time.Second + n*200*time.Microsecond // the last answer's pause
		if out[0] != end {
			t.Errorf("first retry let through at %v, want %v", out[0], end)
		}
		gap := out[n-1]
		for i := 1; i < n; i++ {
			gap = min(gap, out[i]-out[i-1])
		}
		if want := time.Second / n; gap < want {
			t.Errorf("retries let through %v apart at the closest, want at least %v (the spread sized for %d): %v", gap, want, n, out)
		}
	})
}
