package limiters

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-cleanhttp"

	"github.com/sturdyhttp/sturdy/ratelimit"
	"github.com/sturdyhttp/sturdy/transport"
)

// Knobs: STURDY_LIMITERS_FULL=1 runs the whole table (.ci/run sets it);
// STURDY_LIMITERS_ONLY runs the rows whose limiter and client contain it;
// STURDY_LIMITERS_TABLE names a file to write the table to;
// STURDY_LIMITERS_TRACE=1 logs what sturdy's client sees in each row.
const (
	fullEnv  = "STURDY_LIMITERS_FULL"
	onlyEnv  = "STURDY_LIMITERS_ONLY"
	tableEnv = "STURDY_LIMITERS_TABLE"
	traceEnv = "STURDY_LIMITERS_TRACE"
	workers  = 20
	// shortRun is how long sturdy runs in the short version.
	shortRun = 8 * time.Second
)

// row is one limiter at one rate.
type row struct {
	limiter string
	rate    int
	start   func(t *testing.T, up string) string // returns the base URL
	// note says why the row misses a target, when it does by design.
	note string
	// minShare is the least share of the limit that fails the test; zero
	// means 0.5.
	minShare float64
}

func rows() []row {
	var rs []row
	for _, r := range []int{20, 100} {
		rs = append(rs,
			row{limiter: "HAProxy http_req_rate(1s), deny 429", rate: r,
				note:  "HAProxy counts refused requests, so the first burst keeps its window full for a second; the host is then held just under that burst's successes",
				start: func(t *testing.T, up string) string { return startHAProxy(t, strings.TrimPrefix(up, "http://"), r) }},
			row{limiter: "go-chi/httprate LimitAll (sliding window)", rate: r,
				note: "the first burst's 429s, before anything is known",
				// 88-96% in runs of the whole table: below three
				// quarters is the regression (36% before its window was
				// guessed from its resets).
				minShare: 0.75,
				start:    func(t *testing.T, up string) string { return startHTTPRate(t, r) }},
			row{limiter: "GCRA in Redis, burst 5, IETF RateLimit", rate: r,
				start: func(t *testing.T, up string) string { return startGCRA(t, r, 5) }},
			row{limiter: "fixed window, X-RateLimit-Reset (GitHub)", rate: r,
				start: func(t *testing.T, up string) string { return startFixedWindow(t, r) }},
		)
	}
	return rs
}

// client sends one operation and reports whether it succeeded.
type client struct {
	name string
	make func(base http.RoundTripper) http.RoundTripper
	run  time.Duration // how long it runs in the full table
}

var clients = []client{
	{"sturdy", func(base http.RoundTripper) http.RoundTripper {
		o := transport.Options{Base: base}
		if c, ok := base.(*counted); ok && c.trace != nil {
			o.Hooks.OnRateLimitWait = c.trace.wait
		}
		return transport.New(o)
	}, 20 * time.Second},
	{"bare client", func(base http.RoundTripper) http.RoundTripper { return base }, 5 * time.Second},
}

// counted counts the attempts a client sends and the 429s it gets.
type counted struct {
	next              http.RoundTripper
	attempts, tooMany atomic.Int64
	trace             *tracer // nil unless STURDY_LIMITERS_TRACE is set
}

func (c *counted) RoundTrip(r *http.Request) (*http.Response, error) {
	c.attempts.Add(1)
	sent := time.Now()
	resp, err := c.next.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		c.tooMany.Add(1)
	}
	if c.trace != nil && err == nil {
		c.trace.response(sent, resp)
	}
	return resp, err
}

// tracer logs what the client sees: each second's accepted and refused
// attempts and waits by reason, and each 429's headers and the responses
// around it (STURDY_LIMITERS_TRACE=1).
type tracer struct {
	mu     sync.Mutex
	start  time.Time
	lines  []string
	ok, no [64]int
	waits  map[string]time.Duration
}

func (tr *tracer) at(t time.Time) string { return fmt.Sprintf("%7.3f", t.Sub(tr.start).Seconds()) }

func (tr *tracer) response(sent time.Time, resp *http.Response) {
	now := time.Now()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	sec := min(int(now.Sub(tr.start)/time.Second), 63)
	if resp.StatusCode == http.StatusTooManyRequests {
		tr.no[sec]++
	} else {
		tr.ok[sec]++
	}
	var hs []string
	for _, k := range []string{"Retry-After", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Ratelimit", "Date"} {
		if v := resp.Header.Get(k); v != "" {
			hs = append(hs, k+"="+v)
		}
	}
	tr.lines = append(tr.lines, fmt.Sprintf("%s sent %s %d %s", tr.at(now), tr.at(sent), resp.StatusCode, strings.Join(hs, " ")))
}

func (tr *tracer) wait(e ratelimit.WaitEvent) {
	now := time.Now()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.waits[fmt.Sprintf("%02d %s", int(now.Sub(tr.start)/time.Second), e.Reason)] += e.Wait
	if e.Wait >= 100*time.Millisecond {
		tr.lines = append(tr.lines, fmt.Sprintf("%s wait %s %v", tr.at(now), e.Reason, e.Wait.Round(time.Millisecond)))
	}
}

func (tr *tracer) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var b strings.Builder
	b.WriteString("accepted/refused each second:")
	for i := range 64 {
		if tr.ok[i]+tr.no[i] > 0 {
			fmt.Fprintf(&b, " %d/%d", tr.ok[i], tr.no[i])
		}
	}
	b.WriteString("\nwaits:")
	for _, k := range slices.Sorted(maps.Keys(tr.waits)) {
		fmt.Fprintf(&b, "\n  %s %v", k, tr.waits[k].Round(time.Millisecond))
	}
	b.WriteString("\nevents:\n")
	b.WriteString(strings.Join(tr.lines, "\n"))
	return b.String()
}

// result is one client's run against one limiter.
type result struct {
	attempts, tooMany, ok int64
	okPerS, pct           float64
	trace                 string // what the client saw (STURDY_LIMITERS_TRACE)
}

// run sends GETs from workers goroutines through c for d.
func run(c client, url string, d time.Duration) result {
	pooled := cleanhttp.DefaultPooledTransport()
	pooled.MaxIdleConnsPerHost = 64
	base := &counted{next: pooled}
	if os.Getenv(traceEnv) != "" {
		base.trace = &tracer{start: time.Now(), waits: map[string]time.Duration{}}
	}
	rt := c.make(base)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var ok atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
				resp, err := rt.RoundTrip(req)
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
	secs := time.Since(start).Seconds()
	pooled.CloseIdleConnections()
	r := result{attempts: base.attempts.Load(), tooMany: base.tooMany.Load(), ok: ok.Load()}
	if base.trace != nil {
		r.trace = base.trace.String()
	}
	r.okPerS = float64(r.ok) / secs
	if r.attempts > 0 {
		r.pct = 100 * float64(r.tooMany) / float64(r.attempts)
	}
	return r
}

// TestRateLimitAwareAgainstLimiters runs transport.New against each
// limiter at 20 and 100 requests a second, 20 goroutines of GETs, beside
// a bare net/http client, and prints the table BENCHMARKS.md quotes:
// successful operations a second as a share of the limit, and 429s as a
// share of attempts. Targets: within 10% of the limit, under 5% of
// attempts refused; a miss is reported in the table. The test fails on
// a regression: sturdy's 429s at a tenth of attempts, or fewer than
// half the limit's operations, or more than the limit allows.
//
// The short version (every go test) runs sturdy for 8 s against httprate
// and the GCRA limiter at 20 r/s, and allows 30% of attempts refused (the
// first burst's share); STURDY_LIMITERS_FULL=1 runs every row, sturdy for
// 20 s and the bare client for 5 s each.
func TestRateLimitAwareAgainstLimiters(t *testing.T) {
	up := upstream(t)
	full := os.Getenv(fullEnv) == "1"
	var table strings.Builder
	table.WriteString("| limiter | limit | client | ok/s | of the limit | 429s of attempts | target |\n")
	table.WriteString("| --- | ---: | --- | ---: | ---: | ---: | --- |\n")
	for _, rw := range rows() {
		if !full && (rw.rate != 20 || !strings.Contains(rw.limiter, "httprate") && !strings.Contains(rw.limiter, "GCRA")) {
			continue
		}
		for i, c := range clients {
			name := rw.limiter + " " + c.name
			if only := os.Getenv(onlyEnv); only != "" && !strings.Contains(name, only) {
				continue
			}
			if !full && i != 0 {
				continue
			}
			d := c.run
			if !full {
				d = shortRun
			}
			url := rw.start(t, up.URL) + "/v1/items"
			r := run(c, url, d)
			if r.trace != "" {
				t.Logf("%s at %d r/s, %s: %s", rw.limiter, rw.rate, c.name, r.trace)
			}
			lim := float64(rw.rate)
			share := r.okPerS / lim
			verdict := "—"
			if i == 0 {
				var miss []string
				if share < 0.9 || share > 1.1 {
					miss = append(miss, "ok/s")
				}
				if r.pct >= 5 {
					miss = append(miss, "429s")
				}
				verdict = "met"
				if len(miss) > 0 {
					verdict = "missed (" + strings.Join(miss, ", ") + ")"
					if rw.note != "" {
						verdict += ": " + rw.note
					}
					t.Logf("%s at %d r/s: target missed: %.1f ok/s (%.0f%% of the limit), 429s %.1f%% of attempts", rw.limiter, rw.rate, r.okPerS, 100*share, r.pct)
				}
				maxPct := 10.0
				if !full {
					// The first burst of 20 goroutines meets a dozen 429s
					// before anything is known: a large share of 8 s.
					maxPct = 30
				}
				if r.pct >= maxPct {
					t.Errorf("%s at %d r/s: sturdy's 429s = %.1f%% of attempts, want under %v%%", rw.limiter, rw.rate, r.pct, maxPct)
				}
				floor := rw.minShare
				if floor == 0 {
					floor = 0.5
				}
				if share < floor || share > 1.1 {
					t.Errorf("%s at %d r/s: sturdy's successful ops = %.1f/s, want between %.1f and %.1f", rw.limiter, rw.rate, r.okPerS, floor*lim, 1.1*lim)
				}
			}
			fmt.Fprintf(&table, "| %s | %d r/s | %s (%v) | %.1f | %.0f%% | %.1f%% | %s |\n",
				rw.limiter, rw.rate, c.name, d, r.okPerS, 100*share, r.pct, verdict)
		}
	}
	t.Logf("%d goroutines of GETs:\n%s", workers, table.String())
	if p := os.Getenv(tableEnv); p != "" {
		if err := os.WriteFile(p, []byte(table.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}
