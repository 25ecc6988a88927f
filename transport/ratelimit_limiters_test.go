package transport

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
)

// The arithmetic of the rate limiters users run, in memory, each as
// its own code counts: nginx's limit_req with and without nodelay, with
// and without Retry-After; HAProxy's stick-table http_req_rate (a
// sliding window that counts refused requests too); go-chi/httprate (a
// sliding-window counter, X-RateLimit-* and Retry-After); a GCRA limiter
// answering with IETF RateLimit and RateLimit-Policy; a fixed window with
// GitHub-style X-RateLimit-Reset. The real ones run in the limiters
// module; these models let a synctest bubble assert the targets without
// wall-clock noise.

// simLimiter decides one request at now: how long it is held before its
// answer, and whether it is accepted; it sets its headers on h.
type simLimiter interface {
	serve(now time.Time, h http.Header) (delay time.Duration, ok bool)
}

// nginxSim is limit_req: leakyBucket, served at once with nodelay, and
// Retry-After: 1 on 429s when retryAfter is set (add_header ... always).
type nginxSim struct {
	b          leakyBucket
	nodelay    bool
	retryAfter bool
}

func (n *nginxSim) serve(now time.Time, h http.Header) (time.Duration, bool) {
	d, ok := n.b.admit(now)
	if !ok && n.retryAfter {
		h.Set("Retry-After", "1")
	}
	if n.nodelay {
		d = 0
	}
	return d, ok
}

// haproxySim is a stick table's http_req_rate(1s) as HAProxy's freq_ctr
// counts it: the requests of the current period plus those of the last
// one weighted by what is left of the period; every tracked request
// counts, refused ones too, and a request is refused (429) when the rate
// with it is over limit (sc_http_req_rate(0) gt limit).
type haproxySim struct {
	mu         sync.Mutex
	limit      int
	start      time.Time
	period     int64 // index of the current period
	curr, prev int
}

func (s *haproxySim) serve(now time.Time, h http.Header) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	el := now.Sub(s.start)
	p := int64(el / time.Second)
	switch {
	case p == s.period+1:
		s.prev, s.curr = s.curr, 0
	case p > s.period+1:
		s.prev, s.curr = 0, 0
	}
	s.period = p
	s.curr++
	frac := float64(el%time.Second) / float64(time.Second)
	rate := s.curr + int(float64(s.prev)*(1-frac))
	return 0, rate <= s.limit
}

// httprateSim is go-chi/httprate's sliding-window counter (limiter.go,
// v0.16): windows start at the server's start offset; the rate is the
// last window's count weighted by what is left of it plus the current
// count, rounded; a request is refused when rate+1 > limit, and then not
// counted. Headers: X-RateLimit-Limit, -Remaining, -Reset (the current
// window's end, Unix seconds, truncated), and Retry-After (the window in
// seconds) on a 429.
type httprateSim struct {
	mu         sync.Mutex
	limit      int
	window     time.Duration
	offset     time.Duration
	cur        time.Time
	curr, prev int
}

func (s *httprateSim) serve(now time.Time, h http.Header) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	win := now.Add(-s.offset).Truncate(s.window).Add(s.offset)
	switch {
	case win.Equal(s.cur):
	case win.Equal(s.cur.Add(s.window)):
		s.prev, s.curr = s.curr, 0
	default:
		s.prev, s.curr = 0, 0
	}
	s.cur = win
	diff := now.Sub(win)
	rate := int(math.Round(float64(s.prev)*float64(s.window-diff)/float64(s.window) + float64(s.curr)))
	h.Set("X-RateLimit-Limit", strconv.Itoa(s.limit))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(win.Add(s.window).Unix(), 10))
	if rate+1 > s.limit {
		h.Set("X-RateLimit-Remaining", strconv.Itoa(s.limit-rate))
		h.Set("Retry-After", strconv.Itoa(int(s.window.Seconds())))
		return 0, false
	}
	s.curr++
	h.Set("X-RateLimit-Remaining", strconv.Itoa(s.limit-rate-1))
	return 0, true
}

// gcraSim is the generic cell rate algorithm (as redis-cell and the Lua
// scripts of go-redis/redis_rate count): one request every interval,
// burst more at once; it answers with IETF RateLimit-Policy (q per w)
// and RateLimit (r left, t seconds until the bucket is full, rounded
// up), and Retry-After (seconds until the next request fits, rounded
// up) on a 429.
type gcraSim struct {
	mu       sync.Mutex
	rate     float64
	burst    int
	tat      time.Time
	interval time.Duration
}

func (s *gcraSim) serve(now time.Time, h http.Header) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ok, remaining, resetAfter, retryAfter := gcra(now, &s.tat, s.rate, s.burst)
	h.Set("RateLimit-Policy", fmt.Sprintf(`"default";q=%d;w=1`, int(s.rate)))
	h.Set("RateLimit", fmt.Sprintf(`"default";r=%d;t=%d`, remaining, ceilSeconds(resetAfter)))
	if !ok {
		h.Set("Retry-After", strconv.Itoa(ceilSeconds(retryAfter)))
	}
	return 0, ok
}

// gcra is the arithmetic of the Lua script the real GCRA limiter runs in
// Redis (limiters module), on a theoretical arrival time tat.
func gcra(now time.Time, tat *time.Time, rate float64, burst int) (ok bool, remaining int, resetAfter, retryAfter time.Duration) {
	interval := time.Duration(float64(time.Second) / rate)
	tolerance := time.Duration(burst) * interval
	t := *tat
	if t.Before(now) {
		t = now
	}
	next := t.Add(interval)
	allowAt := next.Add(-tolerance - interval)
	if now.Before(allowAt) {
		return false, 0, t.Sub(now), allowAt.Sub(now)
	}
	*tat = next
	remaining = int((tolerance + interval - next.Sub(now)) / interval)
	return true, remaining, next.Sub(now), 0
}

func ceilSeconds(d time.Duration) int { return int((d + time.Second - 1) / time.Second) }

// fixedSim is a fixed window of limit requests a second, aligned to the
// Unix second, answering as GitHub does: X-RateLimit-Limit, -Remaining,
// -Used, -Reset (Unix seconds) and -Resource; a 429 beyond the limit
// with Remaining 0 and no Retry-After.
type fixedSim struct {
	mu    sync.Mutex
	limit int
	sec   int64
	used  int
}

func (s *fixedSim) serve(now time.Time, h http.Header) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sec := now.Unix(); sec != s.sec {
		s.sec, s.used = sec, 0
	}
	ok := s.used < s.limit
	if ok {
		s.used++
	}
	h.Set("X-RateLimit-Limit", strconv.Itoa(s.limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(s.limit-s.used))
	h.Set("X-RateLimit-Used", strconv.Itoa(s.used))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(s.sec+1, 10))
	h.Set("X-RateLimit-Resource", "core")
	return 0, ok
}

// simRow is one limiter at one rate.
type simRow struct {
	name string
	rate float64
	make func(start time.Time) simLimiter
	// wire is the shortest and the longest time each way of the
	// network takes; zero means 0.1 to 1 ms.
	wire [2]time.Duration
}

// loopbackWire is the time each way of the network takes on loopback, as in
// the limiters module's runs: a burst of 20 goroutines meets the limiter
// within a millisecond.
var loopbackWire = [2]time.Duration{20 * time.Microsecond, 70 * time.Microsecond}

// simMiss is a row that misses a target, why, and the bounds that catch
// a regression from what it reaches: at least minShare of the limit, at
// most maxPct% of attempts refused.
type simMiss struct {
	why              string
	minShare, maxPct float64
}

// simMisses are the rows of simRows that miss a target, by name.
var simMisses = map[string]simMiss{
	"nginx limit_req burst=5 nodelay at 20 r/s": {
		"the first burst's 429s (about 19, nothing known yet) are 4.6% of attempts; the guess after them and the measure take one to three more", 0.95, 6},
	"nginx limit_req burst=5 nodelay, Retry-After: 1 at 20 r/s": {
		"the first burst's 429s (about 19, nothing known yet), then the guess's probes until two 429s measure the rate", 0.9, 6.5},
}

func simRows() []simRow {
	var rows []simRow
	for _, r := range []float64{20, 100} {
		for _, nd := range []bool{false, true} {
			for _, ra := range []bool{false, true} {
				name := "nginx limit_req burst=5"
				if nd {
					name += " nodelay"
				}
				if ra {
					name += ", Retry-After: 1"
				}
				rows = append(rows, simRow{name: name, rate: r, make: func(time.Time) simLimiter {
					return &nginxSim{b: leakyBucket{rate: r, burst: 5}, nodelay: nd, retryAfter: ra}
				}})
			}
		}
		rows = append(rows,
			simRow{name: "HAProxy http_req_rate(1s)", rate: r, make: func(start time.Time) simLimiter {
				return &haproxySim{limit: int(r), start: start}
			}},
			simRow{name: "go-chi/httprate", rate: r, make: func(start time.Time) simLimiter {
				return &httprateSim{limit: int(r), window: time.Second, offset: 317 * time.Millisecond}
			}},
			// Over loopback, with windows on the Unix second: the Date
			// and the reset, both whole seconds, put the reset a second
			// ahead whenever the client looks, and the first burst fills
			// the window within a millisecond.
			simRow{name: "go-chi/httprate, loopback", rate: r, wire: loopbackWire, make: func(start time.Time) simLimiter {
				return &httprateSim{limit: int(r), window: time.Second}
			}},
			simRow{name: "GCRA burst=5, IETF RateLimit", rate: r, make: func(time.Time) simLimiter {
				return &gcraSim{rate: r, burst: 5}
			}},
			simRow{name: "fixed window, X-RateLimit-Reset", rate: r, make: func(time.Time) simLimiter {
				return &fixedSim{limit: int(r)}
			}},
		)
	}
	return rows
}

var simBucket = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("STURDY_SIM_BUCKET")); err == nil {
		return d
	}
	return time.Second
}()

// simResult is sturdy's run against one row.
type simResult struct {
	attempts, tooMany, ok int64
	okPerS, pct           float64
	trace                 string // accepted/refused each second (STURDY_SIM_TRACE)
	// accepted is what the limiter accepted each simBucket.
	accepted [64]int
}

// runSim runs 20 goroutines through New against lim for run, each way of
// the network taking between wire[0] and wire[1] (0.1 to 1 ms when
// zero), in the caller's synctest bubble.
func runSim(lim simLimiter, run time.Duration, span [2]time.Duration) simResult {
	if span[1] == 0 {
		span = [2]time.Duration{100 * time.Microsecond, time.Millisecond}
	}
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 34))
	wire := func() {
		mu.Lock()
		d := span[0] + time.Duration(rng.Int64N(int64(span[1]-span[0])+1))
		mu.Unlock()
		time.Sleep(d)
	}
	var attempts, tooMany, ok atomic.Int64
	start := time.Now()
	var perSec [2][64]atomic.Int32 // accepted and refused, per second
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wire()
		attempts.Add(1)
		sec := min(int(time.Since(start)/simBucket), 63)
		w.Header().Set("Date", time.Now().UTC().Format(http.TimeFormat))
		delay, fits := lim.serve(time.Now(), w.Header())
		perSec[0][sec].Add(1)
		if !fits {
			perSec[0][sec].Add(-1)
			perSec[1][sec].Add(1)
			tooMany.Add(1)
			wire()
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		time.Sleep(delay)
		wire()
	})
	o := Options{Base: httptestutil.NewHandlerTransport(h)}
	var waitMu sync.Mutex
	waits := map[string]time.Duration{}
	if os.Getenv("STURDY_SIM_TRACE") != "" {
		o.Hooks.OnRateLimitWait = func(e ratelimit.WaitEvent) {
			waitMu.Lock()
			waits[fmt.Sprintf("%02d %s", int(time.Since(start)/time.Second), e.Reason)] += e.Wait
			waitMu.Unlock()
		}
		o.Hooks.OnRetry = func(e policy.RetryEvent) {
			waitMu.Lock()
			waits[fmt.Sprintf("%02d retry", int(time.Since(start)/time.Second))] += e.Wait
			waitMu.Unlock()
		}
	}
	c := &http.Client{Transport: New(o)}
	rlLoad(c, run, &ok)
	r := simResult{attempts: attempts.Load(), tooMany: tooMany.Load(), ok: ok.Load()}
	for i := range r.accepted {
		r.accepted[i] = int(perSec[0][i].Load())
	}
	if os.Getenv("STURDY_SIM_TRACE") != "" {
		for i := range min(int(run/simBucket), 64) {
			r.trace += fmt.Sprintf(" %d/%d", perSec[0][i].Load(), perSec[1][i].Load())
		}
		keys := slices.Sorted(maps.Keys(waits))
		for _, k := range keys {
			r.trace += fmt.Sprintf("\n  %s %v", k, waits[k].Round(time.Millisecond))
		}
	}
	r.okPerS = float64(r.ok) / run.Seconds()
	if r.attempts > 0 {
		r.pct = 100 * float64(r.tooMany) / float64(r.attempts)
	}
	return r
}

// TestRateLimitAwareAgainstLimiterModels runs 20 goroutines through New
// for 20 s against each limiter model at 20 and 100 r/s, and asserts
// the targets: successful operations within 10% of the limit, 429s
// under 5% of attempts; a row in simMisses, which misses one, is held
// to its regression bounds instead. STURDY_SIM_ONLY runs the rows whose
// name contains it; STURDY_SIM_TRACE prints each second's (or each
// STURDY_SIM_BUCKET's, a duration) accepted and refused requests and the
// stack's waits.
func TestRateLimitAwareAgainstLimiterModels(t *testing.T) {
	for _, row := range simRows() {
		name := fmt.Sprintf("%s at %v r/s", row.name, row.rate)
		if only := os.Getenv("STURDY_SIM_ONLY"); only != "" && !strings.Contains(name, only) {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				run := 20 * time.Second
				if d := os.Getenv("STURDY_SIM_RUN"); d != "" {
					run, _ = time.ParseDuration(d)
				}
				r := runSim(row.make(time.Now()), run, row.wire)
				t.Logf("%s: %d attempts, %d 429s (%.1f%%), %.1f ok/s (%.0f%% of the limit)", name, r.attempts, r.tooMany, r.pct, r.okPerS, 100*r.okPerS/row.rate)
				if r.trace != "" {
					t.Logf("%s: accepted/refused each second:%s", name, r.trace)
				}
				if m, ok := simMisses[name]; ok {
					// A known miss (see the table in BENCHMARKS.md): fail
					// on a regression from what it reaches.
					t.Logf("%s: target missed: %s", name, m.why)
					if r.pct > m.maxPct {
						t.Errorf("429s = %.1f%% of attempts, want at most %v%%", r.pct, m.maxPct)
					}
					if r.okPerS < m.minShare*row.rate || r.okPerS > 1.1*row.rate {
						t.Errorf("successful operations = %.1f/s, want %.0f%% to 110%% of %v", r.okPerS, 100*m.minShare, row.rate)
					}
					return
				}
				if r.pct >= 5 {
					t.Errorf("429s = %.1f%% of attempts, want under 5%%", r.pct)
				}
				if r.okPerS < 0.9*row.rate || r.okPerS > 1.1*row.rate {
					t.Errorf("successful operations = %.1f/s, want within 10%% of %v", r.okPerS, row.rate)
				}
			})
		})
	}
}

// TestRateLimitAwareNodelayRetryAfterRampsInASecond: nginx's limit_req at
// 100 r/s, burst 5 nodelay, answering Retry-After: 1, over loopback. The
// first burst says nothing of the rate (nodelay accepts its burst of 5
// and refuses the rest at once); the host is held the second its
// Retry-After asks, and the requests it held are released, each counted
// once (the retries of its 429s, back before the last one's pause ended,
// are both waiting and held). Once the host shows that it refuses only
// the excess, the requests past the release spread's places go at a
// guess that grows while they queue for it, and the host is at its rate
// within the second after the pause: the run reaches 90% of the limit
// (149 accepted in seconds 1 and 2, 90.8 ok/s). Before, the spread was
// sized for twice the requests it held, the requests past it came on
// top of it only as it ended, and the guess after that took two
// seconds: 129 accepted in seconds 1 and 2, 89.8 ok/s.
func TestRateLimitAwareNodelayRetryAfterRampsInASecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 100
		lim := &nginxSim{b: leakyBucket{rate: limit, burst: 5}, nodelay: true, retryAfter: true}
		r := runSim(lim, 20*time.Second, loopbackWire)
		t.Logf("%d attempts, %d 429s (%.1f%%), %.1f ok/s; accepted each second: %v", r.attempts, r.tooMany, r.pct, r.okPerS, r.accepted[:20])
		if got, want := r.accepted[1]+r.accepted[2], 145; got < want {
			t.Errorf("accepted in the two seconds after the first pause = %d, want at least %d", got, want)
		}
		if got, want := r.okPerS, 0.9*limit; got < want {
			t.Errorf("successful operations = %.1f/s, want at least %v", got, want)
		}
		if r.pct >= 5 {
			t.Errorf("429s = %.1f%% of attempts, want under 5%%", r.pct)
		}
	})
}

// TestRateLimitAwareFixedWindowAtAnyPhase: a fixed window of 20 a second
// on the Unix second, as GitHub counts, with the load starting anywhere
// in a second, over loopback. Against the real one (limiters module) the
// row fell to 85% of the limit with 6.1% of attempts refused. Here, once
// resets are read to the millisecond, the pace its guessed window sets
// began on top of the window its first burst spent at its start, and
// every paced request of the next second was refused (33 429s of 416
// attempts, 7.9%); and the goroutines whose first answer came back sent
// again against a count that left out the rest of the burst, still out
// (11 to 13 429s, as before that too). Each phase now meets the targets with
// at most two 429s.
func TestRateLimitAwareFixedWindowAtAnyPhase(t *testing.T) {
	testFirstSecondAtAnyPhase(t, func() simLimiter { return &fixedSim{limit: 20} }, 2)
}

// testFirstSecondAtAnyPhase runs 20 goroutines for 20 s against a limiter
// of 20 a second that reports its quota, from six phases of the second,
// over loopback: at most max429 429s and within 10% of the limit each.
func testFirstSecondAtAnyPhase(t *testing.T, newLim func() simLimiter, max429 int64) {
	for _, phase := range []time.Duration{0, 5 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond, 995 * time.Millisecond} {
		t.Run(phase.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const limit = 20
				time.Sleep(phase)
				r := runSim(newLim(), 20*time.Second, loopbackWire)
				t.Logf("%d attempts, %d 429s (%.1f%%), %.1f ok/s; accepted each second: %v", r.attempts, r.tooMany, r.pct, r.okPerS, r.accepted[:20])
				if r.trace != "" {
					t.Logf("accepted/refused each second:%s", r.trace)
				}
				if r.tooMany > max429 {
					t.Errorf("429s = %d (%.1f%% of attempts), want at most %d", r.tooMany, r.pct, max429)
				}
				if got, want := r.okPerS, 0.9*limit; got < want || got > 1.1*limit {
					t.Errorf("successful operations = %.1f/s, want within 10%% of %v", got, limit)
				}
			})
		})
	}
}
