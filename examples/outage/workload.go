package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-cleanhttp"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// deadlineHeader carries an operation's deadline (Unix nanoseconds) on
// every attempt, so the server can count the requests that arrive after
// their caller has given up.
const deadlineHeader = "X-Caller-Deadline"

// kind is one way of calling the API.
type kind int

const (
	kindNaive   kind = iota // 5 immediate retries, no backoff
	kindBackoff             // 5 retries, exponential backoff without jitter
	kindSturdy              // transport.New with Timeout set, defaults otherwise
)

var kinds = []kind{kindNaive, kindBackoff, kindSturdy}

func (k kind) String() string {
	switch k {
	case kindNaive:
		return "naive loop"
	case kindBackoff:
		return "fixed backoff"
	case kindSturdy:
		return "sturdy"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// describe says in one line what the client of kind k does.
func (k kind) describe(c config) string {
	switch k {
	case kindNaive:
		return "up to 5 retries at once, no wait"
	case kindBackoff:
		return fmt.Sprintf("up to 5 retries after %v, %v, %v, %v, %v (exponential, no jitter)",
			c.Backoff, 2*c.Backoff, 4*c.Backoff, 8*c.Backoff, 16*c.Backoff)
	case kindSturdy:
		s := fmt.Sprintf("transport.New(transport.Options{Timeout: %v})", c.Deadline)
		if c.Cooldown != 0 {
			s = fmt.Sprintf("transport.New(transport.Options{Timeout: %v, Breaker: transport.BreakerSettings{Cooldown: %v}})", c.Deadline, c.Cooldown)
		}
		return s
	}
	return ""
}

// config is the workload, the same for every kind of client.
type config struct {
	Clients     int                     // goroutines, each running operations in a loop
	Instances   int                     // client processes the goroutines are spread over, each with its own http.Client
	Run         time.Duration           // how long goroutines start new operations
	OutageStart time.Duration           // when the server goes down, from the start of the run
	Outage      time.Duration           // how long it stays down
	Mode        httptestutil.OutageMode // how it fails while down
	Deadline    time.Duration           // each operation's deadline, all attempts included
	Think       time.Duration           // between the starts of a caller's operations, ±20% (Closed: the pause after each)
	Backoff     time.Duration           // first wait of the fixed-backoff client
	Cooldown    time.Duration           // sturdy's breaker cooldown; 0 keeps the default

	// Capacity is what the server can serve, as a multiple of the load
	// the clients send when every operation succeeds at its first attempt
	// (Clients / Think a second); 0 means no limit.
	Capacity float64
	// OverloadCost is the share of a request's work the server still
	// spends on a request it fails for overload.
	OverloadCost float64
	// Closed makes each client wait for its operation to end before it
	// thinks and starts the next one.
	Closed bool
}

// baseLoad is the requests a second the clients send when every
// operation succeeds at its first attempt.
func (c config) baseLoad() float64 { return float64(c.Clients) / c.Think.Seconds() }

// network is where a run's server listens and how its clients reach it.
type network struct {
	listen func() (net.Listener, error)
	dial   func(ctx context.Context, network, addr string) (net.Conn, error) // nil: the system's dialer
}

// loopback is the real network of this machine: a port on 127.0.0.1.
var loopback = network{listen: func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }}

// outageEnd is when the server comes back, from the start of the run.
func (c config) outageEnd() time.Duration { return c.OutageStart + c.Outage }

func (c config) validate() error {
	switch {
	case c.Clients < 1:
		return errors.New("outage: -clients must be at least 1")
	case c.Instances < 1 || c.Instances > c.Clients:
		return errors.New("outage: -instances must be between 1 and -clients")
	case c.Run <= 0 || c.Deadline <= 0 || c.Think <= 0 || c.Backoff <= 0:
		return errors.New("outage: -run, -deadline, -think and -backoff must be positive")
	case c.OutageStart < 0 || c.Outage <= 0 || c.outageEnd() > c.Run:
		return errors.New("outage: the outage must fit inside the run (-outage-start + -outage <= -run)")
	case c.OutageStart%bucket != 0 || c.Outage%bucket != 0:
		// The server counts requests in buckets of this width: an edge
		// inside one would count the requests around it on the wrong side.
		return fmt.Errorf("outage: -outage-start and -outage must be whole multiples of %v", bucket)
	case c.Cooldown < 0:
		return errors.New("outage: -cooldown must not be negative")
	case c.Capacity < 0 || c.OverloadCost < 0 || c.OverloadCost > 1:
		return errors.New("outage: -capacity must not be negative, and -overload-cost must be between 0 and 1")
	}
	return nil
}

// op is one finished operation, as its caller saw it.
type op struct {
	start   time.Duration // from the start of the run
	latency time.Duration // until the caller had its answer or gave up
	ok      bool          // a 200 and its whole body, within the deadline
	open    bool          // refused by an open circuit before any attempt was sent (sturdy only)
}

// sentKey is the context key of an operation's count of the attempts it
// sent (not refused by the breaker).
type sentKey struct{}

// result is what one run measured.
type result struct {
	kind    kind
	buckets []httptestutil.OutageBucket // server side, 100 ms each
	ops     []op                        // client side, in no particular order
	late    int64                       // requests that reached the server after their deadline
	elapsed time.Duration               // wall time of the run, the last operations included
	breaker breakerStats                // sturdy only
	lag     lagStats                    // how far behind the load generator ran
}

// breakerStats is what sturdy's breakers did in a run, seen through
// transport.Hooks.OnBreakerStateChange.
type breakerStats struct {
	opens     int           // changes to open
	firstOpen time.Duration // from the start of the run; valid when opens > 0
	lastOpen  time.Duration // the latest change to open
	closes    int           // changes back to closed
	lastClose time.Duration // the latest change to closed; valid when closes > 0
	openAtEnd int           // client processes whose breaker was not closed when the run ended

	// Requests sturdy's clients sent while the server was down, split by
	// whether their client process's breaker had opened since the outage
	// began: before, the failures that are the breaker's evidence that
	// the host is down; after, its probes (an open breaker sends nothing
	// else).
	beforeOpen, probes int64
}

// breakerLog collects breakerStats from several client processes.
type breakerLog struct {
	start      time.Time
	outageFrom time.Duration // the outage, from start
	outageTo   time.Duration
	mu         sync.Mutex
	stats      breakerStats
	state      map[int]transport.BreakerState // by client process
	openedAt   map[int]time.Duration          // by client process: its breaker's first opening since the outage began
}

func newBreakerLog(start time.Time, c config) *breakerLog {
	return &breakerLog{start: start, outageFrom: c.OutageStart, outageTo: c.outageEnd(),
		state: make(map[int]transport.BreakerState), openedAt: make(map[int]time.Duration)}
}

// hook returns the OnBreakerStateChange hook of client process i.
func (l *breakerLog) hook(i int) func(string, transport.BreakerState, transport.BreakerState) {
	return func(_ string, _, to transport.BreakerState) {
		at := time.Since(l.start)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.state[i] = to
		if _, ok := l.openedAt[i]; !ok && to == transport.BreakerOpen && at >= l.outageFrom {
			l.openedAt[i] = at
		}
		switch to {
		case transport.BreakerOpen:
			if l.stats.opens == 0 {
				l.stats.firstOpen = at
			}
			l.stats.opens++
			l.stats.lastOpen = at
		case transport.BreakerClosed:
			l.stats.closes++
			l.stats.lastClose = at
		}
	}
}

// attempt returns the OnAttempt hook of client process i: it counts the
// requests sent while the server was down, before and after the
// process's breaker opened.
func (l *breakerLog) attempt(i int) func(policy.AttemptEvent) {
	return func(ev policy.AttemptEvent) {
		if errors.Is(ev.Err, transport.ErrCircuitOpen) {
			return // refused: nothing was sent
		}
		sent := time.Since(l.start) - ev.Duration
		if sent < l.outageFrom || sent >= l.outageTo {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if at, ok := l.openedAt[i]; ok && sent >= at {
			l.stats.probes++
		} else {
			l.stats.beforeOpen++
		}
	}
}

// result returns the stats so far.
func (l *breakerLog) result() breakerStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	for _, st := range l.state {
		if st != transport.BreakerClosed {
			s.openAtEnd++
		}
	}
	return s
}

// run runs the workload with clients of kind k against a fresh outage
// emulator listening on nw, and returns when every operation has
// ended and the server is closed.
func run(ctx context.Context, c config, k kind, nw network) (result, error) {
	ln, err := nw.listen()
	if err != nil {
		return result{}, fmt.Errorf("outage: listening: %w", err)
	}
	url := "http://" + ln.Addr().String() + "/v1/work"

	start := time.Now()
	emu := httptestutil.NewOutage(start, httptestutil.OutageConfig{
		Start:    c.OutageStart,
		Duration: c.Outage,
		Mode:     c.Mode,
		Horizon:  c.Run + c.Deadline + time.Second,

		Capacity:     c.Capacity * c.baseLoad(),
		OverloadCost: cmp.Or(c.OverloadCost, -1), // zero here means none, as the emulator's negative does
	})
	var late atomic.Int64
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if d, err := strconv.ParseInt(r.Header.Get(deadlineHeader), 10, 64); err == nil && time.Now().UnixNano() > d {
				late.Add(1)
			}
			emu.ServeHTTP(w, r)
		}),
		ErrorLog: log.New(io.Discard, "", 0), // the outage's dropped connections are expected
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()

	breakers := newBreakerLog(start, c)
	calls := make([]func(context.Context) op, c.Instances)
	var closers []func()
	for i := range calls {
		call, closeIdle := newClient(c, k, url, nw.dial, breakers.hook(i), breakers.attempt(i))
		calls[i] = call
		closers = append(closers, closeIdle)
	}

	lag := startLag(start, c.Run+c.Deadline+time.Second)
	perClient := make([][]op, c.Clients)
	var wg sync.WaitGroup
	for g := range c.Clients {
		wg.Go(func() {
			if c.Closed {
				perClient[g] = loop(ctx, c, start, calls[g%c.Instances])
			} else {
				perClient[g] = arrive(ctx, c, start, calls[g%c.Instances])
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	lagged := lag.stop()

	for _, f := range closers {
		f()
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	<-served

	res := result{kind: k, buckets: emu.Buckets(), late: late.Load(), elapsed: elapsed, breaker: breakers.result(), lag: lagged}
	for _, ops := range perClient {
		res.ops = append(res.ops, ops...)
	}
	return res, nil
}

// loop is one goroutine of the fleet: after a random pause (so the fleet
// does not start in step), it runs operations one after the other, with
// a think time between them, until c.Run has passed since start or ctx
// is done.
func loop(ctx context.Context, c config, start time.Time, call func(context.Context) op) []op {
	var ops []op
	if !pause(ctx, rand.N(c.Think)) {
		return ops
	}
	for time.Since(start) < c.Run {
		octx, cancel := context.WithTimeout(ctx, c.Deadline)
		t0 := time.Now()
		o := call(octx)
		o.start = t0.Sub(start)
		o.latency = time.Since(t0)
		cancel()
		ops = append(ops, o)
		if !pause(ctx, c.Think*4/5+rand.N(c.Think*2/5+1)) {
			break
		}
	}
	return ops
}

// arrive is one caller of the fleet: after a random pause (so the fleet
// does not start in step), it starts an operation every c.Think ±20%, on
// time whether or not its earlier operations have ended (users and
// upstream services keep asking), until c.Run has passed since start or
// ctx is done. It returns when its operations have ended.
func arrive(ctx context.Context, c config, start time.Time, call func(context.Context) op) []op {
	var (
		mu  sync.Mutex
		ops []op
		wg  sync.WaitGroup
	)
	next := start.Add(rand.N(c.Think))
	for {
		if !pause(ctx, time.Until(next)) {
			break
		}
		t0 := time.Now()
		if t0.Sub(start) >= c.Run {
			break
		}
		wg.Go(func() {
			octx, cancel := context.WithTimeout(ctx, c.Deadline)
			defer cancel()
			o := call(octx)
			o.start = t0.Sub(start)
			o.latency = time.Since(t0)
			mu.Lock()
			ops = append(ops, o)
			mu.Unlock()
		})
		next = next.Add(c.Think*4/5 + rand.N(c.Think*2/5+1))
		for time.Until(next) < -c.Think {
			// This machine fell behind: the operations it could not start on
			// time are skipped, not started in a burst that no user would
			// send, and the caller keeps its own phase, out of step with the
			// others (the lag meter reports the stretch).
			next = next.Add(c.Think)
		}
	}
	wg.Wait()
	return ops
}

// pause sleeps d, or less if ctx ends; it reports whether ctx is still
// live.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// newClient returns one client process of kind k: a function that runs
// one operation against url, and one that closes its idle connections.
// onBreaker and onAttempt observe sturdy's breaker and attempts; they
// change nothing.
// Every kind sends its attempts through its own pooled transport, made
// as transport.New makes its default base (cleanhttp's, keeping up to
// transport.DefaultMaxIdleConnsPerHost idle connections), so the kinds
// differ only in how they retry.
func newClient(c config, k kind, url string, dial func(context.Context, string, string) (net.Conn, error),
	onBreaker func(string, transport.BreakerState, transport.BreakerState), onAttempt func(policy.AttemptEvent)) (func(context.Context) op, func()) {
	pooled := func() *http.Transport {
		t := cleanhttp.DefaultPooledTransport()
		t.MaxIdleConnsPerHost = transport.DefaultMaxIdleConnsPerHost
		if dial != nil {
			t.DialContext = dial
		}
		return t
	}
	switch k {
	case kindSturdy:
		counted := func(ev policy.AttemptEvent) {
			if n, ok := ev.Request.Context().Value(sentKey{}).(*atomic.Int32); ok && !errors.Is(ev.Err, transport.ErrCircuitOpen) {
				n.Add(1)
			}
			if onAttempt != nil {
				onAttempt(ev)
			}
		}
		var base http.RoundTripper // nil: transport.New's own default
		if dial != nil {
			base = pooled()
		}
		rt := transport.New(transport.Options{
			Base:    base,
			Timeout: c.Deadline,
			Breaker: transport.BreakerSettings{Cooldown: c.Cooldown}, // zero: the default
			Hooks:   transport.Hooks{OnBreakerStateChange: onBreaker, OnAttempt: counted},
		})
		hc := &http.Client{Transport: rt}
		return func(ctx context.Context) op {
			// Failed fast: refused by the breaker with nothing sent. An
			// operation whose first attempt got a 503 and whose retry met
			// the breaker open waited on the server: it is not one.
			var sent atomic.Int32
			err := get(context.WithValue(ctx, sentKey{}, &sent), hc, url)
			return op{ok: err == nil, open: err != nil && sent.Load() == 0 && errors.Is(err, transport.ErrCircuitOpen)}
		}, hc.CloseIdleConnections
	case kindBackoff:
		hc := &http.Client{Transport: pooled()}
		return func(ctx context.Context) op {
			return op{ok: retryBackoff(ctx, hc, url, c.Backoff) == nil}
		}, hc.CloseIdleConnections
	default:
		hc := &http.Client{Transport: pooled()}
		return func(ctx context.Context) op {
			return op{ok: retryNaive(ctx, hc, url) == nil}
		}, hc.CloseIdleConnections
	}
}

// retryNaive is the loop found in many codebases: try, and on failure try
// again at once, up to 5 more times. It does respect the caller's
// context.
func retryNaive(ctx context.Context, hc *http.Client, url string) error {
	var err error
	for range 6 {
		if err = get(ctx, hc, url); err == nil || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// retryBackoff is the typical hand-written retry: up to 5 retries with an
// exponential backoff (base, 2×base, 4×base...) and no jitter. It, too,
// respects the caller's context, waits included.
func retryBackoff(ctx context.Context, hc *http.Client, url string, base time.Duration) error {
	var err error
	wait := base
	for attempt := range 6 {
		if attempt > 0 {
			if !pause(ctx, wait) {
				return err
			}
			wait *= 2
		}
		if err = get(ctx, hc, url); err == nil || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// statusError is a response other than 200.
type statusError int

func (e statusError) Error() string { return "outage: status " + strconv.Itoa(int(e)) }

// get sends one GET carrying the operation's deadline, reads the whole
// body, and reports a non-200 status as an error. Every client's
// operations are GETs: idempotent, so sturdy may send one more than once
// (a POST nobody vouched for would be sent once, unless the outcome
// proved the server did not act on it).
func get(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		req.Header.Set(deadlineHeader, strconv.FormatInt(dl.UnixNano(), 10))
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return statusError(resp.StatusCode)
	}
	return nil
}
