// Command report runs the benchmarks of the bench module and prints the
// tables of BENCHMARKS.md: medians over several runs, ratios to the bare
// transport, the spread of the runs, and whether the targets are met.
//
// From the bench directory:
//
//	go run ./cmd/report
//
// It builds the test binary once, then runs the benchmark families in
// rounds (each round runs every family once, so that a noisy minute on a
// shared machine hits every client alike), appending everything to
// results/raw.txt. It writes the tables to results/report.md and prints
// them, then runs benchstat (fetched from the Go module proxy) over the
// raw output into results/benchstat.txt for confidence intervals. A full
// run takes about five minutes; -quick takes well under one and is only
// a smoke test.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// benchstat is the benchstat the report runs, pinned so that two runs
// format alike.
const benchstat = "golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da"

// failureOps is how many operations each BenchmarkFailure run makes.
const failureOps = 2000

// family is one benchmark function and how to run and print it.
type family struct {
	title string   // section heading
	bench string   // -test.bench pattern
	args  []string // more test flags
	once  bool     // run in the first round only: one run is the whole sample
	cols  []column // the printed columns
	intro string   // what the table shows
}

func families(benchtime string) []family {
	timeCols := []column{{"ns/op", true, true}, {"cpu-ns/op", true, true}, {"B/op", true, false}, {"allocs/op", true, false}}
	fams := []family{
		{
			title: "1. Overhead on success",
			bench: "^BenchmarkSuccess$",
			args:  []string{"-test.benchtime=" + benchtime, "-test.benchmem"},
			cols:  timeCols,
			intro: "One operation that succeeds at once. base=mem: the in-memory base transport (no HTTP, no connection): the stack's own cost. base=loopback: a real server on 127.0.0.1 (server work is in the figures, the same for every client): what a user feels.",
		},
		{
			title: "2. Overhead under failure",
			bench: "^BenchmarkFailure$",
			args:  []string{fmt.Sprintf("-test.benchtime=%dx", failureOps), "-test.benchmem"},
			cols: []column{{"ns/op", true, true}, {"cpu-ns/op", true, true}, {"allocs/op", false, false},
				{"new-conns/1kop", false, false}, {"reqs/1kop", false, false},
				{"failed/1kop", false, false}, {"goroutines-left/1kop", false, false}},
			intro: fmt.Sprintf("Loopback; every 4th request answers 503 with a 3 KiB or a 64 KiB body; retries are immediate (every library's wait set to 0); %d operations one at a time. new-conns: connections the server accepted (perfect reuse is 1 in the run, 0.5 per 1,000). failed: operations that did not end in 200 (bare does not retry; sturdy's retry budget refuses retries beyond 20%% of traffic). goroutines-left: goroutines still alive after everything was closed (connections whose body was never closed).", failureOps),
		},
		{
			title: "3. Parallel throughput",
			bench: "^BenchmarkParallel$",
			args:  []string{"-test.benchtime=" + benchtime, "-test.benchmem", "-test.cpu=1,2"},
			cols:  timeCols,
			intro: "b.RunParallel, successful GETs over the in-memory base, to one host and spread over 1,000 hosts. ns/op is wall time per operation across all goroutines (lower is more throughput).",
		},
		{
			title: "6. Where sturdy's cost goes",
			bench: "^BenchmarkSturdyLayers$",
			args:  []string{"-test.benchtime=" + benchtime, "-test.benchmem"},
			cols:  timeCols,
			intro: "transport.New over the in-memory base with every layer (all), with one layer switched off in turn (no-X: X's cost is all minus no-X), and with none. ctx=background: a caller without a deadline, so New's default 10 min Timeout makes a context per operation (and no timer unless something waits on it); ctx=deadline: the caller's context has its own deadline, which Timeout leaves alone.",
		},
		{
			title: "4. Outage",
			bench: "^BenchmarkOutage$",
			args:  []string{"-test.benchtime=1x"},
			once:  true,
			cols: []column{{"outage-reqs", true, false}, {"recovery-peak/100ms", false, false},
				{"baseline/100ms", false, false}, {"ok-%", false, false}, {"ok-after-%", false, false}, {"p99-ms", false, false}},
			intro: "The outage workload (the default shape of examples/outage, rewritten in bench/outage_test.go): 300 client goroutines over 10 client processes (each its own stack, breaker, budget and pool), one GET each every 100 ms ±20% with a 2 s deadline; the API (httptestutil.Outage on the in-memory network) is healthy 1.5 s, answers 503 for 3 s, is healthy 1.5 s. Real time, one run. outage-reqs: requests the server received while down (×bare: per operation attempted). recovery-peak: its busiest 100 ms in the first second back. ok-after: operations started after recovery that succeeded.",
		},
		{
			title: "5. Cancellation",
			bench: "^BenchmarkCancel$",
			args:  []string{"-test.benchtime=1x"},
			once:  true,
			cols:  []column{{"p50-us", false, false}, {"p99-us", false, false}, {"max-us", false, false}, {"missed/1kop", false, false}},
			intro: "1,000 operations, 8 at a time, against a loopback server that never answers, each with a caller deadline 20 ms away: the lag from the deadline to the server seeing the connection close, in µs. missed: closes the server never saw.",
		},
	}
	slices.SortFunc(fams, func(a, b family) int { return strings.Compare(a.title, b.title) })
	return fams
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("report: ")
	var (
		count     = flag.Int("count", 6, "rounds of the timing benchmarks")
		benchtime = flag.String("benchtime", "200ms", "-benchtime of the timing benchmarks")
		quick     = flag.Bool("quick", false, "a smoke run: -count 1 -benchtime 20ms, no outage, no benchstat")
		out       = flag.String("out", "results", "directory for raw.txt, report.md and benchstat.txt")
		stat      = flag.Bool("benchstat", true, "run benchstat over the raw output")
		from      = flag.String("from", "", "print the tables of an earlier run's raw.txt instead of running")
	)
	flag.Parse()
	fams := families(*benchtime)
	if *quick {
		*count, *stat = 1, false
		fams = families("20ms")
		fams = slices.DeleteFunc(fams, func(f family) bool { return f.bench == "^BenchmarkOutage$" })
	}
	var raw, header bytes.Buffer
	rawPath := filepath.Join(*out, "raw.txt")
	headerPath := filepath.Join(*out, "header.md")
	if *from != "" {
		b, err := os.ReadFile(*from)
		if err != nil {
			log.Fatal(err)
		}
		raw.Write(b)
		if h, err := os.ReadFile(filepath.Join(filepath.Dir(*from), "header.md")); err == nil {
			header.Write(h)
		}
		fmt.Fprintf(&header, "Tables printed by `go run ./cmd/report -from %s` from that run's raw output.\n\n", *from)
	} else {
		runAll(&raw, &header, fams, *count, *benchtime, *out)
		if err := os.WriteFile(rawPath, raw.Bytes(), 0o644); err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(headerPath, header.Bytes(), 0o644); err != nil {
			log.Fatal(err)
		}
	}

	var rep bytes.Buffer
	rep.Write(header.Bytes())
	fmt.Fprintf(&rep, "Figures are medians over the rounds; ± is half the range of the rounds around the median; ×bare is the ratio of medians to the bare transport's in the same run.\n\n")
	tables, err := collect(&raw)
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range fams {
		fmt.Fprintf(&rep, "### %s\n\n%s\n\n", f.title, f.intro)
		prefix := strings.TrimSuffix(strings.TrimPrefix(f.bench, "^"), "$")
		for _, t := range tables {
			if t.group != prefix && !strings.HasPrefix(t.group, prefix+"/") && !strings.HasPrefix(t.group, prefix+" ") {
				continue
			}
			fmt.Fprintf(&rep, "`%s`\n\n", t.group)
			t.markdown(&rep, f.cols, "bare")
			fmt.Fprintln(&rep)
		}
	}
	targets(&rep, tables)
	if *from != "" {
		os.Stdout.Write(rep.Bytes())
		return
	}
	repPath := filepath.Join(*out, "report.md")
	if err := os.WriteFile(repPath, rep.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
	os.Stdout.Write(rep.Bytes())
	log.Printf("raw output: %s; tables: %s", rawPath, repPath)

	if *stat {
		statPath := filepath.Join(*out, "benchstat.txt")
		var buf bytes.Buffer
		if err := run(&buf, "go", "run", benchstat, "-col", "/client", rawPath); err != nil {
			log.Printf("benchstat: %v (the tables above do not need it)", err)
			return
		}
		if err := os.WriteFile(statPath, buf.Bytes(), 0o644); err != nil {
			log.Fatal(err)
		}
		log.Printf("benchstat -col /client: %s", statPath)
	}
}

// runAll builds the benchmarks and runs fams in count rounds, their
// output to raw and a description of the run to header.
func runAll(raw, header *bytes.Buffer, fams []family, count int, benchtime, out string) {
	if _, err := os.Stat("go.mod"); err != nil {
		log.Fatal("run me from the bench directory: cd bench && go run ./cmd/report")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		log.Fatal(err)
	}
	bin, err := filepath.Abs(filepath.Join(out, "bench.test"))
	if err != nil {
		log.Fatal(err)
	}
	defer os.Remove(bin)
	if err := run(os.Stderr, "go", "test", "-c", "-o", bin, "."); err != nil {
		log.Fatal("building the benchmarks: ", err)
	}
	loadBefore := loadavg()
	start := time.Now()
	for round := 1; round <= count; round++ {
		for _, f := range fams {
			if f.once && round > 1 {
				continue
			}
			t0 := time.Now()
			args := append([]string{"-test.run=^$", "-test.bench=" + f.bench}, f.args...)
			var buf bytes.Buffer
			if err := run(&buf, bin, args...); err != nil {
				os.Stderr.Write(buf.Bytes())
				log.Fatalf("%s: %v", f.bench, err)
			}
			raw.Write(buf.Bytes())
			log.Printf("round %d/%d %s: %v", round, count, f.bench, time.Since(t0).Round(time.Second))
		}
	}
	fmt.Fprintf(header, "Command: `cd bench && go run ./cmd/report%s`, %s, %d rounds, benchtime %s; took %v.\n\n",
		strings.Join(append([]string{""}, os.Args[1:]...), " "), time.Now().UTC().Format("2006-01-02 15:04 MST"), count, benchtime, time.Since(start).Round(time.Second))
	fmt.Fprintf(header, "Machine: %s, %d CPUs (%s/%s), %s; load average %s before, %s after.\n\n",
		cpuModel(), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, goVersion(), loadBefore, loadavg())
}

// targets prints the success path's targets and whether this run met them.
func targets(w io.Writer, tables []*table) {
	find := func(group string) *table {
		for _, t := range tables {
			if t.group == group {
				return t
			}
		}
		return nil
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	fmt.Fprintf(w, "### Targets\n\n")
	for _, op := range []string{"GET", "POST-GetBody"} {
		t := find(fmt.Sprintf("BenchmarkSuccess/base=mem/op=%s (GOMAXPROCS=%d)", op, runtime.GOMAXPROCS(0)))
		if t == nil {
			continue
		}
		for _, peer := range []string{"retryablehttp", "retryablehttp-rt"} {
			sn, _ := t.get("sturdy", "ns/op")
			pn, _ := t.get(peer, "ns/op")
			sc, _ := t.get("sturdy", "cpu-ns/op")
			pc, _ := t.get(peer, "cpu-ns/op")
			sa, _ := t.get("sturdy", "allocs/op")
			pa, _ := t.get(peer, "allocs/op")
			fmt.Fprintf(w, "- in-memory %s, sturdy (all layers) vs %s, less time and fewer allocations: wall %.2f×, CPU %.2f×, allocs %s vs %s: %s\n",
				op, peer, sn/pn, sc/pc, format(sa), format(pa), verdict(sc < pc && sa < pa))
		}
	}
	for _, op := range []string{"GET", "POST-GetBody", "POST-Reader"} {
		t := find(fmt.Sprintf("BenchmarkSuccess/base=loopback/op=%s (GOMAXPROCS=%d)", op, runtime.GOMAXPROCS(0)))
		if t == nil {
			continue
		}
		s, _ := t.get("sturdy", "ns/op")
		b, _ := t.get("bare", "ns/op")
		sc, _ := t.get("sturdy", "cpu-ns/op")
		bc, _ := t.get("bare", "cpu-ns/op")
		fmt.Fprintf(w, "- loopback %s, sturdy vs bare ≤ 1.05×: wall %.3f× (%s), CPU %.3f× (%s)\n",
			op, s/b, verdict(s/b <= 1.05), sc/bc, verdict(sc/bc <= 1.05))
	}
	for _, size := range []string{"3KiB", "64KiB"} {
		t := find(fmt.Sprintf("BenchmarkFailure/errbody=%s (GOMAXPROCS=%d)", size, runtime.GOMAXPROCS(0)))
		if t == nil {
			continue
		}
		c, _ := t.get("sturdy", "new-conns/1kop")
		conns := c * failureOps / 1000
		pool := runtime.GOMAXPROCS(0) + 1 // cleanhttp's MaxIdleConnsPerHost
		fmt.Fprintf(w, "- under failure, %s error bodies: sturdy made %s connections in %d operations (pool size %d): %s\n",
			size, format(conns), failureOps, pool, verdict(conns <= float64(pool)))
	}
	if t := find(fmt.Sprintf("BenchmarkCancel (GOMAXPROCS=%d)", runtime.GOMAXPROCS(0))); t != nil {
		p, _ := t.get("sturdy", "p99-us")
		fmt.Fprintf(w, "- cancellation: sturdy p99 %s µs ≤ 5,000 µs: %s\n", format(p), verdict(p <= 5000))
	}
	fmt.Fprintln(w)
}

// run runs name with args, its output to w and its errors to stderr.
func run(w io.Writer, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = w, os.Stderr
	return cmd.Run()
}

func goVersion() string {
	out, err := exec.Command("go", "version").Output()
	if err != nil {
		return runtime.Version()
	}
	return strings.TrimSpace(string(out))
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
