// Command outage shows, in one run, why sturdy exists: a server goes down
// for a few seconds and comes back, and a retry storm keeps it down. The
// same workload runs three ways, one after the other:
//
//   - naive loop: on failure, try again at once, up to 5 more times;
//   - fixed backoff: the typical hand-written retry, up to 5 retries with
//     exponential backoff and no jitter;
//   - sturdy: transport.New(transport.Options{Timeout: deadline}), every
//     other setting at its default.
//
// The API is an httptestutil.Outage emulator on a loopback port: healthy,
// then 503 (or connection resets, with -mode reset) for the outage, then
// healthy again. Its capacity is finite (-capacity, 1.5× the clients'
// load by default): beyond it, requests fail with 503, and each request
// it fails still costs it part of the work of one it serves
// (-overload-cost, half by default). It comes back cold, with a tenth of
// a second of work to do before it serves anything, so retries that fail
// make more retries, and a herd of them keeps it failing although it
// could serve every first attempt. Each client starts
// an operation on a schedule, whatever became of its last one (users keep
// asking), so every kind of client is asked for the same operations. The
// program prints a table (how many operations succeeded, when the server
// was back, the load it got while down and after, what the callers saw)
// and, when asked with -svg FILE, writes an SVG chart of the server's
// load. It writes no file unless asked.
//
// The clients and the server share this machine. A goroutine measures
// how late its own timers fire; where they fire late (the machine is
// busy, or has too few CPUs for -clients), the clients start fewer
// operations than asked, so the program warns and the chart draws that
// stretch dotted instead of showing a drop that is not the client's doing.
//
// A second part takes the outage away and asks more of a server than it
// can serve: 8 workers of 20 ms (400 requests a second) behind a queue
// that keeps working for callers who left, twice that demand (-overload),
// operations bounded at 250 ms. The naive and backoff clients send every
// request; the server's queue grows until it serves mostly callers who
// have given up. sturdy, with Options.Concurrency, learns how many
// requests the server takes at once, refuses the rest at once, and its
// callers get nearly all the server can serve.
//
//	go run ./examples/outage                  # about 40 s, with the build
//	go run ./examples/outage -svg outage.svg  # also writes the chart
//	go run ./examples/outage -clients 1000 -run 20s -outage-start 5s -outage 10s
//	go run ./examples/outage -capacity 0      # a server with no limit: nothing keeps it down
//	go run ./examples/outage -readme          # also writes docs/outage.svg, the README's chart
//
// Everything stays on this machine: the server listens on 127.0.0.1, and
// every loop stops by itself.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/transport"
)

func main() {
	if err := mainErr(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func mainErr(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("outage", flag.ContinueOnError)
	var c config
	d := defaults()
	fs.IntVar(&c.Clients, "clients", d.Clients, "client goroutines, each starting operations in a loop")
	fs.IntVar(&c.Instances, "instances", d.Instances, "client processes the goroutines are spread over; each has its own http.Client (and, for sturdy, its own breaker and retry budget)")
	fs.DurationVar(&c.Run, "run", d.Run, "how long each kind of client runs")
	fs.DurationVar(&c.OutageStart, "outage-start", d.OutageStart, "when the server goes down, from the start of a run")
	fs.DurationVar(&c.Outage, "outage", d.Outage, "how long the server stays down")
	mode := fs.String("mode", "503", `how the server fails while down: "503" (Service Unavailable) or "reset" (connections dropped)`)
	fs.DurationVar(&c.Deadline, "deadline", d.Deadline, "each operation's deadline, every attempt and wait included")
	fs.DurationVar(&c.Think, "think", d.Think, "time between the starts of a client's operations (±20%); with -closed, the pause after each one")
	fs.DurationVar(&c.Backoff, "backoff", d.Backoff, "first wait of the fixed-backoff client, doubled at each retry")
	fs.DurationVar(&c.Cooldown, "cooldown", 0, "sturdy's breaker cooldown; 0 keeps transport.DefaultBreakerCooldown")
	fs.Float64Var(&c.Capacity, "capacity", d.Capacity, "the server's capacity, as a multiple of the load the clients send when every operation succeeds at once; 0 means no limit")
	fs.Float64Var(&c.OverloadCost, "overload-cost", d.OverloadCost, "the share of a request's work the server still spends on one it fails for overload")
	fs.BoolVar(&c.Closed, "closed", false, "each client waits for its operation to end, then thinks, then starts the next (a client failing fast then starts more operations, so success rates do not compare)")
	cc := defaultCapacityConfig()
	fs.Float64Var(&cc.Load, "overload", cc.Load, "second part: demand as a multiple of what a server of 8 workers of 20 ms can serve; 0 skips the part")
	fs.DurationVar(&cc.Run, "overload-run", cc.Run, "second part: how long each kind of client is measured, after half a second of warm-up")
	fs.DurationVar(&cc.Deadline, "overload-deadline", cc.Deadline, "second part: each operation's deadline")
	svg := fs.String("svg", "", "write the chart of the server's load to this file; empty writes none")
	readme := fs.Bool("readme", false, "also write the chart to docs/outage.svg, the one the README shows (run from the repository root)")
	fs.SetOutput(out)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	var err error
	if c.Mode, err = parseMode(*mode); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	if err := cc.validate(); err != nil {
		return err
	}
	cc.Backoff = c.Backoff

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	fmt.Fprintf(out, "A local API (loopback) is healthy, goes down from %v to %v (%s), then comes back.\n",
		c.OutageStart, c.outageEnd(), modeName(c.Mode))
	if c.Capacity > 0 {
		fmt.Fprintf(out, "It can serve %s requests a second (%g× the clients' load); beyond that it fails requests with 503, and\n"+
			"each one it fails still costs it %g of the work of one it serves, so a retry storm can keep it down once it is back.\n",
			thousands(int64(c.Capacity*c.baseLoad())), c.Capacity, c.OverloadCost)
	}
	if c.Closed {
		fmt.Fprintf(out, "%d client goroutines in %d client processes call it for %v, each operation with a %v deadline\n",
			c.Clients, c.Instances, c.Run, c.Deadline)
		fmt.Fprintf(out, "and ~%v of think time after each operation has ended. The same workload runs three ways:\n", c.Think)
	} else {
		fmt.Fprintf(out, "%d callers in %d client processes each start an operation every ~%v for %v, on time whether or not\n",
			c.Clients, c.Instances, c.Think, c.Run)
		fmt.Fprintf(out, "their last one has ended (users keep asking), each with a %v deadline. The same workload runs three ways:\n", c.Deadline)
	}
	for _, k := range kinds {
		fmt.Fprintf(out, "  %-14s %s\n", k.String()+":", k.describe(c))
	}
	fmt.Fprintln(out)

	var runs []result
	var sums []summary
	for _, k := range kinds {
		fmt.Fprintf(out, "running %s... ", k)
		r, err := run(ctx, c, k, loopback)
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("outage: interrupted")
		}
		fmt.Fprintf(out, "%s operations in %.1fs; the load generator's timers fired %v late on average (worst %v)\n",
			thousands(int64(len(r.ops))), r.elapsed.Seconds(), r.lag.overall.Round(100*time.Microsecond), r.lag.worst.Round(time.Millisecond))
		runs = append(runs, r)
		sums = append(sums, summarize(c, r))
	}
	fmt.Fprintln(out)
	printTable(out, c, sums)
	if note := lagNote(c, runs); note != "" {
		fmt.Fprintln(out, note)
		fmt.Fprintln(out)
	}

	var paths []string
	if *svg != "" {
		paths = append(paths, *svg)
	}
	if *readme {
		paths = append(paths, filepath.Join("docs", "outage.svg"))
	}
	for _, p := range paths {
		if err := saveChart(p, c, sums, runs); err != nil {
			return err
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			abs = p
		}
		fmt.Fprintf(out, "chart: %s (server requests per 100 ms over time, one line per kind of client, the outage shaded)\n", abs)
	}
	if len(paths) == 0 {
		fmt.Fprintln(out, "chart: -svg outage.svg writes the server's load over time to outage.svg")
	}
	if cc.Load > 0 {
		return capacityPart(ctx, out, cc)
	}
	return nil
}

// capacityPart runs and prints the second part: no outage, but more
// demand than the server can serve.
func capacityPart(ctx context.Context, out io.Writer, cc capacityConfig) error {
	fmt.Fprintln(out)
	fmt.Fprintf(out, "Part two: more demand than the server can serve. A second local API has %d workers of %v each (%s requests\n"+
		"a second) behind a queue that keeps working for callers who left. Callers start %s operations a second (%g× that,\n"+
		"arriving at random, none waiting for another), each with a %v deadline, for %v after %v of warm-up:\n",
		cc.Workers, cc.Service, thousands(int64(cc.capacity())), thousands(int64(cc.Load*cc.capacity())), cc.Load, cc.Deadline, cc.Run, cc.WarmUp)
	for _, k := range kinds {
		fmt.Fprintf(out, "  %-14s %s\n", k.String()+":", describeCapacity(k, cc))
	}
	fmt.Fprintln(out)
	var rs []capacityResult
	for _, k := range kinds {
		fmt.Fprintf(out, "running %s... ", k)
		r, err := runCapacity(ctx, cc, k, loopback)
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("outage: interrupted")
		}
		fmt.Fprintf(out, "%s operations\n", thousands(int64(r.ops)))
		rs = append(rs, r)
	}
	fmt.Fprintln(out)
	printCapacity(out, cc, rs)
	return nil
}

// defaults is the workload the program runs without flags.
func defaults() config {
	return config{
		Clients:      100,
		Instances:    10,
		Run:          7 * time.Second,
		OutageStart:  time.Second,
		Outage:       2500 * time.Millisecond,
		Mode:         httptestutil.Outage503,
		Deadline:     2 * time.Second,
		Think:        100 * time.Millisecond,
		Backoff:      100 * time.Millisecond,
		Capacity:     1.5,
		OverloadCost: 0.5,
	}
}

func saveChart(path string, c config, sums []summary, runs []result) error {
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("outage: writing the chart: %w", err)
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("outage: writing the chart: %w", err)
	}
	if err := writeChart(f, c, sums, runs); err != nil {
		f.Close()
		return fmt.Errorf("outage: writing the chart: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("outage: writing the chart: %w", err)
	}
	return nil
}

// printTable writes one row per measure and one column per kind, then
// what the rows mean.
func printTable(out io.Writer, c config, sums []summary) {
	row := func(label string, cell func(s summary) string) {
		line := fmt.Sprintf("%-52s", label)
		for _, s := range sums {
			line += fmt.Sprintf("%16s", cell(s))
		}
		fmt.Fprintln(out, strings.TrimRight(line, " "))
	}
	num := func(f func(s summary) int64) func(summary) string {
		return func(s summary) string { return thousands(f(s)) }
	}
	row("", func(s summary) string { return s.kind.String() })
	row("AT A GLANCE", func(summary) string { return "" })
	row("  operations that succeeded", func(s summary) string { return pct(s.ok, s.ops) })
	row("  server back after its return [1]", func(s summary) string { return backAfter(c, s) })
	row(fmt.Sprintf("  requests it got while down (%v)", c.Outage), num(func(s summary) int64 { return s.during }))
	row("SERVER (requests that reached it)", func(summary) string { return "" })
	row("  before the outage, peak per 100 ms", num(func(s summary) int64 { return s.baseline }))
	row("  while down, peak per 100 ms", num(func(s summary) int64 { return s.duringPeak }))
	row("  in the first second after it came back", num(func(s summary) int64 { return s.recovery }))
	row("    peak per 100 ms", num(func(s summary) int64 { return s.recoveryPeak }))
	row("  failed once back, for lack of capacity [2]", num(func(s summary) int64 { return s.overloaded }))
	row("  after their caller had given up [3]", num(func(s summary) int64 { return s.late }))
	row("  in all", num(func(s summary) int64 { return s.total }))
	row("CALLERS (operations)", func(summary) string { return "" })
	row("  started", num(func(s summary) int64 { return int64(s.ops) }))
	row("  succeeded | failed fast (no request sent) [4]", func(s summary) string {
		return pct(s.ok, s.ops) + " | " + pct(s.open, s.ops)
	})
	row("  failed after waiting on the server", func(s summary) string { return pct(s.ops-s.ok-s.open, s.ops) })
	row("  latency p50", func(s summary) string { return ms(s.p50) })
	row("  latency p99", func(s summary) string { return ms(s.p99) })
	row("  time until 99% of new operations succeed [5]", func(s summary) string {
		if s.neverOK {
			return "not in this run"
		}
		return fmt.Sprintf("%.1fs", s.recovered.Seconds())
	})
	fmt.Fprintln(out)

	var naive, st summary
	for _, s := range sums {
		switch s.kind {
		case kindNaive:
			naive = s
		case kindSturdy:
			st = s
		}
	}
	if st.during > 0 {
		fmt.Fprintf(out, "During the outage the server got %.0f× fewer requests from sturdy than from the naive loop (%s vs %s).\n",
			float64(naive.during)/float64(st.during), thousands(st.during), thousands(naive.during))
	} else {
		fmt.Fprintf(out, "During the outage the server got no request from sturdy (%s from the naive loop).\n", thousands(naive.during))
	}
	if st.kind == kindSturdy {
		fmt.Fprintln(out, tradeNote(st, sums))
		fmt.Fprintln(out, breakerNote(c, st.breaker))
	}
	fmt.Fprintln(out, "[1] from the server's return, in 100 ms buckets: the first bucket from which, until the clients stopped starting")
	fmt.Fprintln(out, "    operations, the server failed at most 1% of the requests it got. \"not by\": it still failed more when the run ended.")
	if c.Capacity > 0 {
		fmt.Fprintf(out, "[2] the server serves up to %s requests a second (%g× the clients' load when every call succeeds at once); each\n",
			thousands(int64(c.Capacity*c.baseLoad())), c.Capacity)
		fmt.Fprintf(out, "    request beyond that fails with 503 and still costs it %g of the work of one it serves, so retries beyond\n", c.OverloadCost)
		fmt.Fprintf(out, "    %s a second keep it failing everything. It comes back from the outage cold, with a tenth of a second\n"+
			"    of work to do before it serves anything.\n",
			thousands(int64(c.Capacity*c.baseLoad()/max(c.OverloadCost, 0.01))))
	} else {
		fmt.Fprintln(out, "[2] none: the server has no capacity limit in this run (-capacity 0).")
	}
	fmt.Fprintln(out, "[3] requests whose operation's deadline (sent along in the "+deadlineHeader+" header) had passed when the server got them.")
	fmt.Fprintln(out, "[4] refused by an open circuit breaker (transport.ErrCircuitOpen) before any attempt was sent: the caller did not")
	fmt.Fprintln(out, "    wait on a server that was down, and the server got nothing. An operation whose retry met the breaker open after")
	fmt.Fprintln(out, "    an attempt had failed waited on the server: it counts as failed after waiting.")
	fmt.Fprintln(out, "[5] from the server's return: operations are grouped by start time in 100 ms buckets; the first bucket from which")
	fmt.Fprintln(out, "    every later one had at least 99% of its operations succeed. Latency counts every operation, failed ones too.")
	fmt.Fprintln(out)
}

// backAfter says when the server was back after its return, for the
// table and the chart.
func backAfter(c config, s summary) string {
	if s.serverNever {
		return fmt.Sprintf("not by %gs", c.Run.Seconds())
	}
	return fmt.Sprintf("%.1fs", s.serverBack.Seconds())
}

// tradeNote says what sturdy's callers got, and what a kind that saved
// more operations paid for them.
func tradeNote(st summary, sums []summary) string {
	s := fmt.Sprintf("sturdy's callers: %s succeeded, %s failed fast without sending a request, %s failed after waiting.",
		pct(st.ok, st.ops), pct(st.open, st.ops), pct(st.ops-st.ok-st.open, st.ops))
	best := st
	for _, o := range sums {
		if o.ops > 0 && float64(o.ok)/float64(o.ops) > float64(best.ok)/float64(max(best.ops, 1)) {
			best = o
		}
	}
	if best.kind != st.kind {
		s += fmt.Sprintf("\nThe %s saved more operations (%s) by waiting on the server: p99 latency %s against sturdy's %s.",
			best.kind, pct(best.ok, best.ops), ms(best.p99), ms(st.p99))
	}
	return s
}

// breakerNote says what sturdy's breakers did.
func breakerNote(c config, b breakerStats) string {
	if b.opens == 0 {
		return "sturdy's breakers never opened."
	}
	cooldown, which := c.Cooldown, "-cooldown"
	if cooldown == 0 {
		cooldown, which = transport.DefaultBreakerCooldown, "the default"
	}
	s := fmt.Sprintf("sturdy's breakers (one per client process) opened %d times, first at %.2fs: open for up to %v (%s, jittered),\n"+
		"then one probe; each failed probe reopens a breaker for as long again.",
		b.opens, b.firstOpen.Seconds(), cooldown, which)
	if n := b.beforeOpen + b.probes; n > 0 {
		s += fmt.Sprintf("\nWhile the server was down, sturdy's %d client processes sent %s requests: %s before their breaker opened\n"+
			"(a busy client's breaker waits for 20 failures in a row, its evidence that the host is down and not just failing\n"+
			"some requests), and %s probes (one at a time per process, one per open period).",
			c.Instances, thousands(n), thousands(b.beforeOpen), thousands(b.probes))
	}
	if b.closes > 0 {
		s += fmt.Sprintf("\nThey closed again %d times, the last at %.2fs, %.2fs after the server came back.",
			b.closes, b.lastClose.Seconds(), (b.lastClose - c.outageEnd()).Seconds())
	}
	if b.openAtEnd > 0 {
		s += fmt.Sprintf("\n%d were still open when the run ended: their clients fail fast, sending nothing (raise -run to see them close).", b.openAtEnd)
	}
	return s
}

func parseMode(s string) (httptestutil.OutageMode, error) {
	switch strings.ToLower(s) {
	case "503":
		return httptestutil.Outage503, nil
	case "reset":
		return httptestutil.OutageReset, nil
	}
	return 0, fmt.Errorf(`outage: -mode %q: want "503" or "reset"`, s)
}

func modeName(m httptestutil.OutageMode) string {
	if m == httptestutil.OutageReset {
		return "connections reset"
	}
	return "503 Service Unavailable"
}

// thousands formats n with commas: 12,345.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func pct(n, of int) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(of))
}

func ms(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}
