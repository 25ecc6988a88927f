// Command fleet shows what sharing state on Redis changes for a fleet of
// processes that call one API: 8 client processes, each with its own
// sturdy stack (transport.New, its own connections, breakers and quota
// tracker), call a provider emulator that allows the whole organisation a
// shared quota (200 requests a second by default) and goes down for 2
// seconds in the middle of the run. The same workload runs twice:
//
//   - per process: each stack knows only what it has seen itself;
//   - fleet: each stack also has a fleet.Fleet on a shared redis-server
//     (its own client, as a separate process would), which shares the
//     breakers' states and probes, the org's rate and the pauses the
//     server asks for.
//
// It prints, for each: the 429s the server sent, the requests that reached
// it during the outage, how long after the first process saw the outage
// every process was failing fast, and how long after the outage ended
// every process had succeeded again.
//
// Then it shows the retry budget: the same processes, each sending a few
// operations to a host that answers 503 to everything, with a retry budget
// per process and then with the fleet's one budget
// (policy.Budget{Store: f.Budgets()}). It prints the retries the host got
// each way, and what one budget's rule (10 + 20% of the operations) allows
// for the fleet's operations. The last line is a summary starting with
// "fleet:".
//
// It starts redis-server from the PATH, on a unix socket in a temporary
// directory, and stops it at the end; when there is none it says how to
// install it and exits with status 1. Everything else stays in this
// process, on 127.0.0.1.
//
//	cd fleet && go run ./examples/fleet            # about 20 s
//	go run ./examples/fleet                       # the same, from the repository root
//	cd fleet && go run ./examples/fleet -readme    # the table as Markdown
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sturdyhttp/sturdy/fleet"
	"github.com/sturdyhttp/sturdy/fleet/internal/redisproc"
	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
	"github.com/sturdyhttp/sturdy/transport"
)

func main() {
	if err := mainErr(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// config is one run's workload.
type config struct {
	Processes   int
	Workers     int           // goroutines of the busiest process, each in a loop
	Think       time.Duration // pause between a worker's operations
	Quota       int           // requests per second the org may send
	Run         time.Duration
	OutageStart time.Duration
	Outage      time.Duration
	Deadline    time.Duration // each operation's Timeout
	MaxWait     time.Duration // the longest an operation waits for quota
	BudgetOps   int           // operations per process against the failing host
}

func mainErr(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	var c config
	fs.IntVar(&c.Processes, "processes", 8, "client processes, each with its own sturdy stack")
	fs.IntVar(&c.Workers, "workers", 8, "goroutines of the busiest process, each running operations in a loop; process i of n runs workers×i/n (replicas seldom share load evenly)")
	fs.DurationVar(&c.Think, "think", 20*time.Millisecond, "pause between a worker's operations")
	fs.IntVar(&c.Quota, "quota", 200, "requests per second the server allows the whole organisation")
	fs.DurationVar(&c.Run, "run", 8*time.Second, "how long each way runs")
	fs.DurationVar(&c.OutageStart, "outage-start", 3*time.Second, "when the server goes down, from the start of a run")
	fs.DurationVar(&c.Outage, "outage", 2*time.Second, "how long the server stays down (503 without Retry-After)")
	fs.DurationVar(&c.Deadline, "deadline", 2*time.Second, "each operation's deadline (transport.Options.Timeout)")
	fs.DurationVar(&c.MaxWait, "max-wait", 200*time.Millisecond, "the longest an operation waits for quota (ratelimit.Options.MaxWait); longer, it fails fast")
	fs.IntVar(&c.BudgetOps, "budget-ops", 5, "operations each process sends to the host that fails everything, in the retry budget's run")
	readme := fs.Bool("readme", false, "print the table as Markdown, for the README")
	fs.SetOutput(out)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	srv, err := redisproc.Start()
	if errors.Is(err, redisproc.ErrNotInstalled) {
		return errors.New("this demo needs redis-server on the PATH; install it with: apt-get install redis-server")
	}
	if err != nil {
		return err
	}
	defer srv.Close()

	fmt.Fprintf(out, "%d processes of 1 to %d workers; the org may send %d requests/s; the server is down from %v to %v (503)\n",
		c.Processes, c.Workers, c.Quota, c.OutageStart, c.OutageStart+c.Outage)
	local, err := run(c, nil)
	if err != nil {
		return err
	}
	shared, err := run(c, srv)
	if err != nil {
		return err
	}
	printTable(out, c, local, shared, *readme)
	bl, err := runBudget(c, nil)
	if err != nil {
		return err
	}
	bs, err := runBudget(c, srv)
	if err != nil {
		return err
	}
	allows := (&policy.Budget{}).Rule().Allowance(int(bs.Ops))
	if *readme {
		fmt.Fprintf(out, "\n| retries a host failing everything got, %d operations from %d processes | per-process budgets | the fleet's budget |\n| --- | ---: | ---: |\n", bs.Ops, c.Processes)
		fmt.Fprintf(out, "| retries | %d | %d |\n| one budget's rule allows | | %.0f |\n| Redis round trips per operation | | %.3f |\n", bl.Retries, bs.Retries, allows, float64(bs.Trips)/float64(bs.Ops))
	} else {
		fmt.Fprintf(out, "\nretry budget: %d processes send %d operations each to a host that answers 503 to everything (4 attempts each):\n", c.Processes, c.BudgetOps)
		fmt.Fprintf(out, "  per-process budgets: %d retries reached it\n", bl.Retries)
		fmt.Fprintf(out, "  the fleet's budget:  %d retries reached it; one budget's rule (10 + 20%% of %d operations) allows %.0f; %.3f Redis round trips per operation\n",
			bs.Retries, bs.Ops, allows, float64(bs.Trips)/float64(bs.Ops))
	}
	fmt.Fprintf(out, "fleet: %d processes on Redis against per-process state: %d → %d 429s, %d → %d requests during the %v outage, "+
		"all failing fast %s → %s after the first did, all recovered %s → %s after it ended, %d → %d retries to a host failing everything\n",
		c.Processes, local.Rejected, shared.Rejected, local.DuringOutage, shared.DuringOutage, c.Outage,
		ms(local.AllFailFast), ms(shared.AllFailFast), ms(local.Recovered), ms(shared.Recovered), bl.Retries, bs.Retries)
	return nil
}

// budgetResult is what a run against a host failing everything measured.
type budgetResult struct {
	Ops, Retries int64
	Trips        int64 // writes to Redis connections
}

// runBudget sends c.BudgetOps operations from each of c.Processes
// processes, 100ms apart, to a host that answers 503 to everything: with
// a retry budget per process when srv is nil, else with the fleet's
// budget on srv.
func runBudget(c config, srv *redisproc.Server) (budgetResult, error) {
	var hits atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer api.Close()
	var res budgetResult
	var trips atomic.Int64
	var closers []func()
	defer func() {
		for _, f := range closers {
			f()
		}
	}()
	var wg sync.WaitGroup
	prefix := fmt.Sprintf("budget%d", time.Now().UnixNano()) // one fleet
	for range c.Processes {
		budget := &policy.Budget{Window: time.Minute} // the run fits in one window
		if srv != nil {
			opt, err := rueidis.ParseURL(srv.URL())
			if err != nil {
				return res, err
			}
			opt.DisableCache = true
			opt.DialCtxFn = func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
				conn, err := d.DialContext(ctx, "unix", addr)
				return countingConn{conn, &trips}, err
			}
			client, err := rueidis.NewClient(opt)
			if err != nil {
				return res, err
			}
			f, err := fleet.New(client, fleet.Options{Prefix: prefix})
			if err != nil {
				client.Close()
				return res, err
			}
			closers = append(closers, func() { f.Close(); client.Close() })
			budget.Store = f.Budgets()
		}
		base := http.DefaultTransport.(*http.Transport).Clone()
		closers = append(closers, base.CloseIdleConnections)
		rt := transport.New(transport.Options{
			Base:    base,
			Retry:   policy.Retry{MaxAttempts: 4, Backoff: policy.FullJitter(time.Millisecond, 10*time.Millisecond), Budget: budget},
			Disable: transport.LayerBreaker, // every operation reaches the host: only the budget holds retries back
		})
		wg.Go(func() {
			for i := range c.BudgetOps {
				if i > 0 {
					time.Sleep(100 * time.Millisecond)
				}
				call(&http.Client{Transport: rt}, api.URL+"/v1/models")
				atomic.AddInt64(&res.Ops, 1)
			}
		})
	}
	before := trips.Load()
	wg.Wait()
	res.Retries = hits.Load() - res.Ops
	res.Trips = trips.Load() - before
	return res, nil
}

// countingConn counts the writes to a connection to Redis: a command is
// one, and commands pipelined together share one.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(p)
}

// result is what one way of running measured.
type result struct {
	Rejected     int64         // 429s the server sent
	Accepted     int64         // requests the server answered 200
	DuringOutage int64         // requests that reached the server while it was down
	FirstFast    time.Duration // from the outage's start to the first process failing fast; -1: none did
	AllFailFast  time.Duration // from the first process failing fast to the last one; -1: some never did
	Recovered    time.Duration // from the outage's end to the last process's first success; -1: some never did
	Succeeded    int64         // operations that succeeded
	FailedFast   int64         // operations refused without a request (open circuit, quota)
	Failed       int64         // other failed operations
}

// process is what one client process saw, in offsets from the run's start.
type process struct {
	mu           sync.Mutex
	firstFast    time.Duration // first attempt refused by an open circuit during the outage
	firstSuccess time.Duration // first success after the outage ended
}

func (p *process) mark(field *time.Duration, at time.Duration) {
	p.mu.Lock()
	if *field < 0 {
		*field = at
	}
	p.mu.Unlock()
}

// run runs the workload once: per process when srv is nil, else with a
// fleet on srv.
func run(c config, srv *redisproc.Server) (result, error) {
	start := time.Now()
	quota := httptestutil.NewRateLimitedAPI(httptestutil.RateLimitConfig{
		Limit:   c.Quota,
		Window:  time.Second,
		Family:  httptestutil.FamilyOpenAI,
		KeyFunc: func(*http.Request) string { return "org" }, // one quota for everyone
	})
	outage := httptestutil.NewOutage(start, httptestutil.OutageConfig{
		Start: c.OutageStart, Duration: c.Outage, Handler: quota,
	})
	api := httptest.NewServer(outage)
	defer api.Close()
	key := api.URL // "http://127.0.0.1:port": the stack's key for the host

	outageFrom, outageTo := c.OutageStart, c.OutageStart+c.Outage
	var res result
	procs := make([]*process, c.Processes)
	var wg sync.WaitGroup
	var closers []func()
	defer func() {
		for _, f := range closers {
			f()
		}
	}()
	for i := range procs {
		p := &process{firstFast: -1, firstSuccess: -1}
		procs[i] = p
		base := http.DefaultTransport.(*http.Transport).Clone()
		closers = append(closers, base.CloseIdleConnections)
		// A process fails fast once its stack refuses an attempt (an
		// open circuit, its own or the fleet's), or gives up an operation
		// because its next attempt would be refused.
		fast := func() {
			if at := time.Since(start); at >= outageFrom && at < outageTo {
				p.mark(&p.firstFast, at)
			}
		}
		o := transport.Options{Base: base, Timeout: c.Deadline, RateLimit: ratelimit.Options{MaxWait: c.MaxWait}, Hooks: transport.Hooks{
			OnAttempt: func(ev policy.AttemptEvent) {
				if errors.Is(ev.Err, transport.ErrCircuitOpen) {
					fast()
				}
			},
			OnGiveUp: func(ev policy.GiveUpEvent) {
				if ev.Reason == policy.ReasonRefused {
					fast()
				}
			},
		}}
		if srv != nil {
			opt, err := rueidis.ParseURL(srv.URL())
			if err != nil {
				return res, err
			}
			opt.DisableCache = true
			client, err := rueidis.NewClient(opt)
			if err != nil {
				return res, err
			}
			f, err := fleet.New(client, fleet.Options{
				Prefix: fmt.Sprintf("demo%d", start.UnixNano()),
				Limits: []fleet.Limit{{Host: key, Requests: c.Quota, Per: time.Second, Processes: c.Processes}},
			})
			if err != nil {
				client.Close()
				return res, err
			}
			closers = append(closers, func() { f.Close(); client.Close() })
			o.Breaker.Store = f.Breakers()
			o.RateLimit.Store = f.Quotas()
		}
		stack := &http.Client{Transport: transport.New(o)}
		for range max(1, c.Workers*(i+1)/c.Processes) {
			wg.Go(func() {
				for time.Since(start) < c.Run {
					err := call(stack, api.URL+"/v1/chat/completions")
					at := time.Since(start)
					switch {
					case err == nil:
						atomic.AddInt64(&res.Succeeded, 1)
						if at >= outageTo {
							p.mark(&p.firstSuccess, at)
						}
					case errors.Is(err, transport.ErrCircuitOpen):
						atomic.AddInt64(&res.FailedFast, 1)
					case errors.Is(err, ratelimit.ErrQuotaExhausted):
						atomic.AddInt64(&res.FailedFast, 1)
					default:
						atomic.AddInt64(&res.Failed, 1)
					}
					time.Sleep(c.Think)
				}
			})
		}
	}
	wg.Wait()

	res.Rejected, res.Accepted = quota.Rejected(), quota.Accepted()
	res.DuringOutage = outage.Between(outageFrom, outageTo).Requests
	res.FirstFast, res.AllFailFast, res.Recovered = -1, -1, -1
	firstFast, lastFast, lastBack := time.Duration(-1), time.Duration(0), time.Duration(0)
	for _, p := range procs {
		if p.firstFast >= 0 && (firstFast < 0 || p.firstFast < firstFast) {
			firstFast = p.firstFast
		}
		if p.firstFast < 0 || lastFast < 0 {
			lastFast = -1
		} else {
			lastFast = max(lastFast, p.firstFast)
		}
	}
	if firstFast >= 0 {
		res.FirstFast = firstFast - outageFrom
		if lastFast >= 0 {
			res.AllFailFast = lastFast - firstFast
		}
	}
	for _, p := range procs {
		if p.firstSuccess < 0 {
			lastBack = -1
			break
		}
		lastBack = max(lastBack, p.firstSuccess)
	}
	if lastBack >= 0 {
		res.Recovered = lastBack - outageTo
	}
	return res, nil
}

// call runs one operation and reads its body.
func call(c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(context.Background(), "GET", url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

func ms(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return d.Round(10 * time.Millisecond).String()
}

func printTable(out io.Writer, c config, local, shared result, markdown bool) {
	rows := [][3]string{
		{"429s the server sent", fmt.Sprint(local.Rejected), fmt.Sprint(shared.Rejected)},
		{"requests that reached the server", fmt.Sprint(local.Accepted + local.Rejected + local.DuringOutage), fmt.Sprint(shared.Accepted + shared.Rejected + shared.DuringOutage)},
		{fmt.Sprintf("requests during the %v outage", c.Outage), fmt.Sprint(local.DuringOutage), fmt.Sprint(shared.DuringOutage)},
		{"first process failing fast, after the outage began", ms(local.FirstFast), ms(shared.FirstFast)},
		{"all processes failing fast, after the first did", ms(local.AllFailFast), ms(shared.AllFailFast)},
		{"all processes succeeding again, after the outage ended", ms(local.Recovered), ms(shared.Recovered)},
		{"operations: succeeded / failed fast / failed", fmt.Sprintf("%d / %d / %d", local.Succeeded, local.FailedFast, local.Failed), fmt.Sprintf("%d / %d / %d", shared.Succeeded, shared.FailedFast, shared.Failed)},
	}
	if markdown {
		fmt.Fprintln(out, "| | per process | fleet on Redis |")
		fmt.Fprintln(out, "| --- | ---: | ---: |")
		for _, r := range rows {
			fmt.Fprintf(out, "| %s | %s | %s |\n", r[0], r[1], r[2])
		}
		return
	}
	w := 0
	for _, r := range rows {
		w = max(w, len(r[0]))
	}
	fmt.Fprintf(out, "\n%-*s  %12s  %14s\n", w, "", "per process", "fleet on Redis")
	for _, r := range rows {
		fmt.Fprintf(out, "%-*s  %12s  %14s\n", w, r[0], r[1], r[2])
	}
	fmt.Fprintln(out, strings.Repeat("-", w+30))
}
