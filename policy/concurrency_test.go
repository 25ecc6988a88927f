package policy

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeHost is a host of finite capacity, as the limit sees it: workers
// serve one request each in service; more requests in flight queue, so
// a request's latency is service × in flight ÷ workers once they are
// all busy.
type fakeHost struct {
	mu       sync.Mutex
	workers  int
	service  time.Duration
	inFlight int
	loss     bool // every attempt fails (a 503)
}

func (h *fakeHost) set(workers int, service time.Duration, loss bool) {
	h.mu.Lock()
	h.workers, h.service, h.loss = workers, service, loss
	h.mu.Unlock()
}

// call is one attempt: it holds the host for its latency and reports it.
func (h *fakeHost) call() (time.Duration, bool) {
	h.mu.Lock()
	h.inFlight++
	d := h.service
	if h.inFlight > h.workers {
		d = h.service * time.Duration(h.inFlight) / time.Duration(h.workers)
	}
	loss := h.loss
	h.mu.Unlock()
	time.Sleep(d)
	h.mu.Lock()
	h.inFlight--
	h.mu.Unlock()
	return d, loss
}

// drive runs clients closed-loop callers against h through l for d: each
// takes a slot (or waits a millisecond when the limit is full), calls
// and releases.
func drive(l *ConcurrencyLimit, h *fakeHost, clients int, d time.Duration) {
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for time.Now().Before(stop) {
				if ok, _ := l.Acquire(); !ok {
					l.Full()
					time.Sleep(2 * time.Millisecond)
					continue
				}
				start := time.Now()
				_, loss := h.call()
				o := ConcurrencyServed
				if loss {
					o = ConcurrencyLoss
				}
				l.Release(time.Now(), time.Since(start), o)
			}
		})
	}
	wg.Wait()
}

func TestConcurrencyLimitFallsOnRisingLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := (&Concurrency{}).NewLimit(time.Now())
		h := &fakeHost{workers: 8, service: 20 * time.Millisecond}
		drive(l, h, 100, 5*time.Second)
		healthy := l.Limit()
		if healthy < 8 || healthy > 40 {
			t.Fatalf("healthy limit = %d, want between the 8 workers and 40 (2× latency)", healthy)
		}
		h.set(8, 100*time.Millisecond, false) // the host slows down fivefold
		drive(l, h, 100, 5*time.Second)
		if got, want := l.Limit(), healthy/2; got > want {
			t.Errorf("limit after latency rose 5× = %d, want at most %d (half of %d)", got, want, healthy)
		}
	})
}

func TestConcurrencyLimitFallsOnLosses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := (&Concurrency{Initial: 100}).NewLimit(time.Now())
		h := &fakeHost{workers: 1000, service: 20 * time.Millisecond, loss: true}
		drive(l, h, 50, 2*time.Second)
		if got, want := l.Limit(), DefaultConcurrencyMin; got != want {
			t.Errorf("limit after 2s of 503s = %d, want the minimum %d", got, want)
		}
	})
}

func TestConcurrencyLimitRisesWithHeadroomOnly(t *testing.T) {
	tests := []struct {
		name      string
		clients   int
		atLeast   int
		atMost    int
		pressedBy string
	}{
		{"demand beyond the limit", 200, 60, 1000, "the limit grows"},
		{"demand within the limit", 3, 10, 10, "an unused limit stays"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := (&Concurrency{Initial: 10}).NewLimit(time.Now())
				h := &fakeHost{workers: 100, service: 20 * time.Millisecond}
				drive(l, h, tt.clients, 10*time.Second)
				if got := l.Limit(); got < tt.atLeast || got > tt.atMost {
					t.Errorf("%s: limit after 10s = %d, want in [%d, %d]", tt.pressedBy, got, tt.atLeast, tt.atMost)
				}
			})
		})
	}
}

func TestConcurrencyLimitIgnoresCancellations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := (&Concurrency{}).NewLimit(time.Now())
		h := &fakeHost{workers: 8, service: 20 * time.Millisecond}
		drive(l, h, 100, 3*time.Second)
		limit, ref := l.Limit(), l.Reference()
		// Then only canceled attempts and hedges that lost, each held
		// long, many at once: nothing to learn from.
		for range 10000 {
			if ok, _ := l.Acquire(); !ok {
				t.Fatal("Acquire failed with nothing in flight")
			}
			time.Sleep(time.Millisecond)
			l.Release(time.Now(), 5*time.Second, ConcurrencyIgnored)
		}
		if got := l.Limit(); got != limit {
			t.Errorf("limit after 10,000 cancellations = %d, want %d as before", got, limit)
		}
		if got := l.Reference(); got != ref {
			t.Errorf("reference after 10,000 cancellations = %v, want %v as before", got, ref)
		}
		if got := l.InFlight(); got != 0 {
			t.Errorf("in flight = %d, want 0", got)
		}
	})
}

func TestConcurrencyLimitDoesNotDriftInALongIncident(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := (&Concurrency{}).NewLimit(time.Now())
		h := &fakeHost{workers: 8, service: 20 * time.Millisecond}
		drive(l, h, 100, 5*time.Second)
		healthy, ref := l.Limit(), l.Reference()
		// Ten minutes (twenty times Healthy) of a host five times slower,
		// demand beyond it.
		h.set(8, 100*time.Millisecond, false)
		drive(l, h, 30, 10*time.Minute)
		if got := l.Reference(); got > 2*ref {
			t.Errorf("reference after a 10-minute incident = %v, want at most %v (healthy %v)", got, 2*ref, ref)
		}
		if got, want := l.Limit(), healthy/2; got > want {
			t.Errorf("limit after a 10-minute incident = %d, want at most %d", got, want)
		}
		// The host recovers: the limit comes back.
		h.set(8, 20*time.Millisecond, false)
		drive(l, h, 100, 10*time.Second)
		if got := l.Limit(); got < 8 {
			t.Errorf("limit 10s after recovery = %d, want at least the 8 workers", got)
		}
	})
}

func TestConcurrencyReferenceRisesAfterACalm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := (&Concurrency{Healthy: 30 * time.Second}).NewLimit(time.Now())
		h := &fakeHost{workers: 100, service: 20 * time.Millisecond}
		drive(l, h, 4, 5*time.Second)
		// The host's latency triples for good, under light load: a calm.
		h.set(100, 60*time.Millisecond, false)
		drive(l, h, 4, time.Minute)
		if got := l.Reference(); got < 50*time.Millisecond {
			t.Errorf("reference after a minute of calm at 60ms = %v, want about 60ms", got)
		}
	})
}

func TestConcurrencyOutcomeOf(t *testing.T) {
	tests := []struct {
		name     string
		v        Verdict
		status   int
		canceled bool
		want     ConcurrencyOutcome
	}{
		{"200", JudgeStatus(200), 200, false, ConcurrencyServed},
		{"404", JudgeStatus(404), 404, false, ConcurrencyServed},
		{"429", JudgeStatus(429), 429, false, ConcurrencyLoss},
		{"503", JudgeStatus(503), 503, false, ConcurrencyLoss},
		{"timeout", Verdict{Sent: true, Host: HostFailing}, 0, false, ConcurrencyLoss},
		{"canceled", Verdict{Sent: true}, 0, true, ConcurrencyIgnored},
		{"hedge lost with a 200", JudgeStatus(200), 200, true, ConcurrencyIgnored},
		{"refused", Verdict{Refusal: ReasonCircuitOpen}, 0, false, ConcurrencyIgnored},
		{"not processed", Verdict{Sent: true}, 0, false, ConcurrencyIgnored},
		// Judge's one verdict, with every fact: the caller's deadline is a
		// loss for the limit though it says nothing of the host.
		{"the caller's deadline, judged", Judge(Outcome{Err: context.DeadlineExceeded, CallerEnded: true}), 0, false, ConcurrencyLoss},
		{"the caller's cancel, judged", Judge(Outcome{Err: context.Canceled, CallerEnded: true}), 0, true, ConcurrencyIgnored},
		{"a refused dial, judged", Judge(Outcome{Err: &net.OpError{Op: "dial", Err: errors.New("refused")}}), 0, false, ConcurrencyLoss},
	}
	for _, tt := range tests {
		if got := ConcurrencyOutcomeOf(tt.v, tt.status, tt.canceled); got != tt.want {
			t.Errorf("%s: ConcurrencyOutcomeOf = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestConcurrencyBadSettings(t *testing.T) {
	tests := []Concurrency{
		{Initial: -1, Min: -5, Max: -3, Tolerance: -1, Backoff: 7, Healthy: -time.Second},
		{Min: 50, Max: 10, Initial: 100},
		{Max: 1 << 30},
	}
	for _, c := range tests {
		l := c.NewLimit(time.Now())
		n := c.normal()
		if n.Min < 1 || n.Min > n.Max || n.Initial < n.Min || n.Initial > n.Max || n.Max > MaxConcurrencyLimit {
			t.Errorf("%+v normalized to %+v, want 1 <= Min <= Initial <= Max <= %d", c, n, MaxConcurrencyLimit)
		}
		if got := l.Limit(); got != n.Initial {
			t.Errorf("%+v: limit = %d, want %d", c, got, n.Initial)
		}
	}
	var nilC *Concurrency
	if got := nilC.NewLimit(time.Now()).Limit(); got != DefaultConcurrencyInitial {
		t.Errorf("nil Concurrency: limit = %d, want %d", got, DefaultConcurrencyInitial)
	}
}

func TestConcurrencyLimitTimesFewAttemptsOfABusyHost(t *testing.T) {
	now := time.Now()
	l := (&Concurrency{}).NewLimit(now)
	timed := 0
	const n = 200000
	for range n {
		ok, tm := l.Acquire()
		if !ok {
			t.Fatal("Acquire failed with nothing in flight")
		}
		now = now.Add(100 * time.Nanosecond) // 10 million requests a second, as in a benchmark
		if tm {
			timed++
			l.Release(now, 100*time.Nanosecond, ConcurrencyServed)
		} else {
			l.Release(time.Time{}, 0, ConcurrencyUntimed)
		}
	}
	if got := float64(timed) / n; got > 1.0/32 || got < 1.0/128 {
		t.Errorf("timed %d of %d attempts (%.4f), want about 1 in 64", timed, n, got)
	}
	if got := l.InFlight(); got != 0 {
		t.Errorf("in flight = %d, want 0", got)
	}
}

func TestConcurrencyLimitKeepsLongSamples(t *testing.T) {
	tests := []time.Duration{time.Microsecond, 3 * time.Millisecond, 200 * time.Second}
	for _, rtt := range tests {
		now := time.Now()
		l := (&Concurrency{}).NewLimit(now)
		for range 10 { // ten windows of one sample each
			l.Acquire()
			now = now.Add(max(rtt, time.Second))
			l.Release(now, rtt, ConcurrencyServed)
		}
		got, want := l.Reference(), max(rtt, 4*time.Microsecond)
		if got < want-4*time.Microsecond || got > want {
			t.Errorf("reference after samples of %v = %v, want %v (to 4µs)", rtt, got, want)
		}
	}
}

// TestConcurrencyLimitNeverAdmitsPastIt: callers racing for the last
// slots of a limit never hold more than it, and every slot comes back.
func TestConcurrencyLimitNeverAdmitsPastIt(t *testing.T) {
	const limit, callers, rounds = 3, 8, 20000
	l := (&Concurrency{Initial: limit, Min: limit, Max: limit}).NewLimit(time.Now())
	var mu sync.Mutex
	held, most, admitted := 0, 0, 0
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range rounds {
				ok, _ := l.Acquire()
				if !ok {
					continue
				}
				mu.Lock()
				held++
				most, admitted = max(most, held), admitted+1
				mu.Unlock()
				mu.Lock()
				held--
				mu.Unlock()
				l.Release(time.Time{}, 0, ConcurrencyUntimed)
			}
		})
	}
	wg.Wait()
	if most > limit || admitted == 0 {
		t.Errorf("at most %d held at once of a limit of %d (%d admitted), want between 1 and %d", most, limit, admitted, limit)
	}
	if got := l.InFlight(); got != 0 {
		t.Errorf("in flight after every release = %d, want 0", got)
	}
}

// TestConcurrencyLimitWindowCountsNoMoreThanItHolds: samples that arrive
// while a window cannot end (another request holds its lock) are not
// counted past the window's size, so the window's mean stays right.
func TestConcurrencyLimitWindowCountsNoMoreThanItHolds(t *testing.T) {
	now := time.Now()
	l := (&Concurrency{}).NewLimit(now)
	const rtt = 3 * time.Millisecond
	l.mu.Lock() // a window ending elsewhere, or a refusal reading the reference
	for range 1200 {
		l.Acquire()
		now = now.Add(time.Millisecond)
		l.Release(now, rtt, ConcurrencyServed)
	}
	l.mu.Unlock()
	if n := (l.word.Load() >> countShift) & countMask; n > maxSamples {
		t.Errorf("%d samples counted in the window, want at most %d", n, maxSamples)
	}
	l.Acquire()
	l.Release(now.Add(time.Millisecond), rtt, ConcurrencyServed)
	if got := l.Reference(); got != rtt {
		t.Errorf("reference after the window = %v, want %v", got, rtt)
	}
}

// TestConcurrencyLimitDoublesWhileTheHostKeepsUp: requests that find the
// limit full of a host whose latency does not rise double it each
// window, so a burst far above the initial limit is let through within a
// few latencies; on a host that cannot keep up, the doubling is undone
// by the next window and not tried again while it strains.
func TestConcurrencyLimitDoublesWhileTheHostKeepsUp(t *testing.T) {
	tests := []struct {
		name            string
		workers         int
		after           time.Duration
		atLeast, atMost int
		eager           bool
	}{
		{"a host that keeps up", 1000, 400 * time.Millisecond, 150, 1000, true},
		{"a host of 8 workers", 8, 3 * time.Second, 2, 20, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := (&Concurrency{Initial: 8}).NewLimit(time.Now())
				h := &fakeHost{workers: tt.workers, service: 20 * time.Millisecond}
				most := 0
				done := make(chan struct{})
				go func() {
					defer close(done)
					for stop := time.Now().Add(tt.after); time.Now().Before(stop); time.Sleep(time.Millisecond) {
						most = max(most, l.Limit())
					}
				}()
				drive(l, h, 200, tt.after)
				<-done
				if got := l.Limit(); got < tt.atLeast || got > tt.atMost {
					t.Errorf("limit after %v = %d, want in [%d, %d]", tt.after, got, tt.atLeast, tt.atMost)
				}
				if most > tt.atMost {
					t.Errorf("limit reached %d, want at most %d", most, tt.atMost)
				}
				if got := l.eager.Load(); got != tt.eager {
					t.Errorf("eager = %v, want %v", got, tt.eager)
				}
			})
		})
	}
}

// waitCase is a call of [ConcurrencyLimit.Wait] and what it returns.
type waitCase struct {
	name        string
	waiting     int
	left        time.Duration
	hasDeadline bool
	want        time.Duration
	wantOK      bool
}

// TestConcurrencyLimitWaitsWhileTheHostKeepsUp: a request that finds the
// limit full waits as long as its operation's time allows while the host
// has shown no strain (the limit is what is short), and for one healthy
// latency at most, behind no more waiters than the limit, once it has.
func TestConcurrencyLimitWaitsWhileTheHostKeepsUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := (&Concurrency{Initial: 4}).NewLimit(time.Now())
		tests := []waitCase{
			{"no strain, a deadline", 100, 2 * time.Second, true, 2 * time.Second, true},
			{"no strain, no deadline", 100, 0, false, 10 * time.Second, true},
			{"no strain, waiters past Max", DefaultConcurrencyMax, time.Second, true, 0, false},
		}
		check := func(tests []waitCase) {
			t.Helper()
			for _, tt := range tests {
				d, ok := l.Wait(tt.waiting, tt.left, tt.hasDeadline)
				if d != tt.want && tt.wantOK || ok != tt.wantOK {
					t.Errorf("%s: Wait = %v, %v; want %v, %v", tt.name, d, ok, tt.want, tt.wantOK)
				}
			}
		}
		check(tests)
		for range 4 { // a window of losses: the host strains
			l.Acquire()
		}
		for range 4 {
			time.Sleep(5 * time.Millisecond)
			l.Release(time.Now(), 5*time.Millisecond, ConcurrencyLoss)
		}
		for range 20 {
			l.Acquire()
			time.Sleep(5 * time.Millisecond)
			l.Release(time.Now(), 5*time.Millisecond, ConcurrencyServed)
		}
		if l.eager.Load() {
			t.Fatal("eager after a window of losses, want not")
		}
		ref := l.Reference()
		check([]waitCase{
			{"strained, a deadline", 0, 2 * time.Second, true, ref, true},
			{"strained, waiters as many as the limit", l.Limit(), 2 * time.Second, true, 0, false},
		})
	})
}

// TestConcurrencyLimitDoublesOnlyOnLatencyThatKeptUp: pressed windows
// whose latency rose past half the tolerance do not double the limit,
// whether or not a stream (an outcome with no latency) ended in them;
// two in a row that kept to the reference do.
func TestConcurrencyLimitDoublesOnlyOnLatencyThatKeptUp(t *testing.T) {
	tests := []struct {
		name   string
		rtt    time.Duration // of the pressed windows' samples; the reference is 10ms
		stream bool          // a stream ends in each pressed window
		want   int
	}{
		{"1.4× the reference", 14 * time.Millisecond, false, 22},
		{"1.4× the reference, and a stream", 14 * time.Millisecond, true, 22},
		{"the reference", 10 * time.Millisecond, false, 42},
		{"the reference, and a stream", 10 * time.Millisecond, true, 42},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t0 := time.Unix(0, 0)
			l := (&Concurrency{}).NewLimit(t0)
			now := t0
			window := func(rtt time.Duration, press bool) {
				now = now.Add(25 * time.Millisecond)
				if press {
					l.Full()
					if tt.stream {
						l.Acquire()
						l.Release(now, 0, ConcurrencyUntimed)
					}
				}
				for range 16 {
					l.Acquire()
					l.Release(now, rtt, ConcurrencyServed)
				}
			}
			for range 5 {
				window(10*time.Millisecond, false)
			}
			window(tt.rtt, true)
			window(tt.rtt, true)
			if got := l.Limit(); got != tt.want {
				t.Errorf("limit after two pressed windows = %d, want %d", got, tt.want)
			}
		})
	}
}
