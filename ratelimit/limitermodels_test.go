package ratelimit_test

import (
	"context"
	"fmt"
	"io"
	"maps"
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
	"github.com/sturdyhttp/sturdy/ratelimit"
	"github.com/sturdyhttp/sturdy/transport"
)

// limiterModel is a rate limiter as a server runs it: it answers one
// request that arrives at now with a status and headers.
type limiterModel interface {
	serve(now time.Time, h http.Header) int
}

// nodelayModel is nginx's limit_req with burst and nodelay, as
// ngx_http_limit_req_module counts: excess, in requests, drains at rate
// per whole millisecond since the last accepted request; a request adds
// one; when that would exceed burst it is refused and changes nothing,
// else it is served at once. retryAfter adds Retry-After: 1 to a 429.
type nodelayModel struct {
	rate, burst float64
	retryAfter  bool
	excess      float64
	last        int64 // ms; 0 before the first request
}

func (m *nodelayModel) serve(now time.Time, h http.Header) int {
	ms := now.UnixMilli()
	if m.last == 0 {
		m.last = ms
		return http.StatusOK
	}
	excess := max(0, m.excess-m.rate*float64(ms-m.last)/1000+1)
	if excess > m.burst {
		if m.retryAfter {
			h.Set("Retry-After", "1")
		}
		return http.StatusTooManyRequests
	}
	m.excess, m.last = excess, ms
	return http.StatusOK
}

// reqRateModel is HAProxy's sc_http_req_rate over a period of a second
// (freq_ctr): the requests of the current period plus those of the last
// one weighted by the part of it still in the sliding second. Every
// request is counted, refused or not (track-sc0 counts it before the
// deny rule reads it); one that takes the rate over limit is refused
// with a bare 429.
type reqRateModel struct {
	limit      float64
	period     int64 // the current period's start, ms
	curr, prev float64
}

func (m *reqRateModel) serve(now time.Time, h http.Header) int {
	ms := now.UnixMilli()
	p := ms - ms%1000
	switch {
	case p == m.period:
	case p == m.period+1000:
		m.prev, m.curr, m.period = m.curr, 0, p
	default:
		m.prev, m.curr, m.period = 0, 0, p
	}
	m.curr++
	rate := m.curr + m.prev*float64(1000-(ms-p))/1000
	if rate > m.limit {
		return http.StatusTooManyRequests
	}
	return http.StatusOK
}

// httprateModel is go-chi/httprate's LimitAll: a sliding window of a
// second over whole Unix seconds, counting accepted requests only, with
// X-RateLimit-Limit, -Remaining, -Reset (the window's end, Unix seconds)
// and Retry-After on a 429.
type httprateModel struct {
	limit      int
	window     int64 // Unix second of the current window
	curr, prev int
}

func (m *httprateModel) serve(now time.Time, h http.Header) int {
	sec := now.Unix()
	switch {
	case sec == m.window:
	case sec == m.window+1:
		m.prev, m.curr, m.window = m.curr, 0, sec
	default:
		m.prev, m.curr, m.window = 0, 0, sec
	}
	into := now.Sub(time.Unix(sec, 0))
	rate := float64(m.prev)*float64(time.Second-into)/float64(time.Second) + float64(m.curr)
	h.Set("Date", now.UTC().Format(http.TimeFormat))
	h.Set("X-RateLimit-Limit", strconv.Itoa(m.limit))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(sec+1, 10))
	if int(rate) >= m.limit {
		h.Set("X-RateLimit-Remaining", "0")
		h.Set("Retry-After", "1")
		return http.StatusTooManyRequests
	}
	m.curr++
	h.Set("X-RateLimit-Remaining", strconv.Itoa(max(0, m.limit-int(rate)-1)))
	return http.StatusOK
}

// gcraModel is the GCRA limiter of the limiters table (limiters/gcra.lua):
// one request an interval, burst more at once, answering with IETF
// RateLimit-Policy and RateLimit headers and Retry-After on a 429.
type gcraModel struct {
	rate, burst int
	tat         time.Time
}

func (m *gcraModel) serve(now time.Time, h http.Header) int {
	iv := time.Second / time.Duration(m.rate)
	tat := m.tat
	if tat.Before(now) {
		tat = now
	}
	tolerance := time.Duration(m.burst) * iv
	next := tat.Add(iv)
	allowAt := next.Add(-tolerance - iv)
	ceil := func(d time.Duration) string { return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10) }
	h.Set("RateLimit-Policy", fmt.Sprintf(`"default";q=%d;w=1`, m.rate))
	if now.Before(allowAt) {
		h.Set("RateLimit", fmt.Sprintf(`"default";r=0;t=%s`, ceil(tat.Sub(now))))
		h.Set("Retry-After", ceil(allowAt.Sub(now)))
		return http.StatusTooManyRequests
	}
	m.tat = next
	h.Set("RateLimit", fmt.Sprintf(`"default";r=%d;t=%s`, int((tolerance+iv-next.Sub(now))/iv), ceil(next.Sub(now))))
	return http.StatusOK
}

// modelRun is what a client got from a limiter model.
type modelRun struct {
	attempts, tooMany, ok int64
	run                   time.Duration
}

func (r modelRun) okPerS() float64 { return float64(r.ok) / r.run.Seconds() }
func (r modelRun) pct() float64    { return 100 * float64(r.tooMany) / float64(r.attempts) }

// runModel runs 20 goroutines of GETs through transport.New against lim
// for run, in a synctest bubble, each way of the network taking 0.1 to
// 1 ms, as the limiter tables run against the real limiters.
func runModel(t *testing.T, lim limiterModel, run time.Duration) modelRun {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 17))
	wire := func() {
		mu.Lock()
		d := time.Duration(100+rng.IntN(900)) * time.Microsecond
		mu.Unlock()
		time.Sleep(d)
	}
	start := time.Now()
	var trace [64]map[string]time.Duration
	note := func(what string, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		i := min(int(time.Since(start)/time.Second), 63)
		if trace[i] == nil {
			trace[i] = map[string]time.Duration{}
		}
		trace[i][what] += max(d, 1)
	}
	tracing := os.Getenv("STURDY_SIM_TRACE") != ""
	var attempts, tooMany, ok atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wire()
		attempts.Add(1)
		mu.Lock()
		code := lim.serve(time.Now(), w.Header())
		mu.Unlock()
		if code == http.StatusTooManyRequests {
			tooMany.Add(1)
		}
		if tracing {
			note(strconv.Itoa(code), 0)
		}
		wire()
		w.WriteHeader(code)
	})
	o := transport.Options{Base: httptestutil.NewHandlerTransport(h)}
	if tracing {
		o.Hooks.OnRateLimitWait = func(e ratelimit.WaitEvent) { note(e.Reason, e.Wait) }
	}
	c := &http.Client{Transport: transport.New(o)}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(run, cancel)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test/v1/items", nil)
				resp, err := c.Do(req)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK && ctx.Err() == nil {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	time.Sleep(time.Second) // the handlers of cancelled requests finish
	if tracing {
		var b strings.Builder
		for i, m := range trace {
			if m == nil {
				continue
			}
			fmt.Fprintf(&b, "\n  %02d: 200×%d 429×%d", i, m["200"], m["429"])
			for _, k := range slices.Sorted(maps.Keys(m)) {
				if k != "200" && k != "429" {
					fmt.Fprintf(&b, " %s %v", k, m[k].Round(time.Millisecond))
				}
			}
		}
		t.Logf("each second:%s", b.String())
	}
	return modelRun{attempts: attempts.Load(), tooMany: tooMany.Load(), ok: ok.Load(), run: run}
}

// TestAgainstLimiterModels runs the rows of the nginx and limiters
// tables against models of the limiters, in memory: nginx's limit_req
// with nodelay (the burst served at once), with and without Retry-After;
// HAProxy's http_req_rate(1s), which counts the requests it refuses;
// go-chi/httprate's sliding window; a GCRA limiter. 20 goroutines for
// 20 s each, at 20 and 100 r/s. The targets are the tables': successful
// operations within 10% of the limit, 429s under 5% of attempts.
// STURDY_SIM_RUN (a duration) runs longer.
func TestAgainstLimiterModels(t *testing.T) {
	for _, rate := range []int{20, 100} {
		for _, tc := range []struct {
			name string
			lim  func() limiterModel
		}{
			{"nginx burst 5 nodelay", func() limiterModel { return &nodelayModel{rate: float64(rate), burst: 5} }},
			{"nginx burst 5 nodelay, Retry-After: 1", func() limiterModel {
				return &nodelayModel{rate: float64(rate), burst: 5, retryAfter: true}
			}},
			{"HAProxy http_req_rate(1s)", func() limiterModel { return &reqRateModel{limit: float64(rate)} }},
			{"httprate LimitAll", func() limiterModel { return &httprateModel{limit: rate} }},
			{"GCRA burst 5", func() limiterModel { return &gcraModel{rate: rate, burst: 5} }},
		} {
			t.Run(fmt.Sprintf("%s at %d r/s", tc.name, rate), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					run := 20 * time.Second
					if d := os.Getenv("STURDY_SIM_RUN"); d != "" {
						run, _ = time.ParseDuration(d)
					}
					r := runModel(t, tc.lim(), run)
					t.Logf("%d attempts, %d 429s (%.1f%%), %.1f ok/s (%.0f%% of the limit)", r.attempts, r.tooMany, r.pct(), r.okPerS(), 100*r.okPerS()/float64(rate))
					if r.pct() >= 5 {
						t.Errorf("429s = %.1f%% of attempts, want under 5%%", r.pct())
					}
					if lim := float64(rate); r.okPerS() < 0.9*lim || r.okPerS() > 1.1*lim {
						t.Errorf("successful operations = %.1f/s, want within 10%% of %v", r.okPerS(), lim)
					}
				})
			})
		}
	}
}
