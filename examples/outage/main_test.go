package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sturdyhttp/sturdy/httptestutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tiny is a workload small enough for CI: 20 callers, a 0.5 s outage on
// the server's 100 ms bucket grid (as the program requires), a server of
// the program's default capacity.
func tiny(mode httptestutil.OutageMode) config {
	return config{
		Clients:     20,
		Instances:   2,
		Run:         time.Second,
		OutageStart: 200 * time.Millisecond,
		Outage:      500 * time.Millisecond,
		Mode:        mode,
		Deadline:    time.Second,
		Think:       50 * time.Millisecond,
		Backoff:     20 * time.Millisecond,

		Capacity:     1.5,
		OverloadCost: 0.5,
	}
}

// TestRunInvariants runs the tiny workload with each kind of client, on
// a virtual clock over an in-memory network and then over real loopback,
// and checks what must hold of every run (checkRun). Over loopback the
// clients share a real machine: under load, or -race, their timers fire
// late and they send fewer requests than the workload asks, maybe none
// while the server is down, so the claims that need the asked-for load to
// arrive on time are checked on the virtual clock, where it does.
func TestRunInvariants(t *testing.T) {
	c := tiny(httptestutil.Outage503)
	if err := c.validate(); err != nil {
		t.Fatalf("the tiny workload: %v", err)
	}
	t.Run("virtual", func(t *testing.T) {
		sums := make(map[kind]summary)
		var runs []result
		var ordered []summary
		for _, k := range kinds {
			r := runVirtualResult(t, c, k)
			s := checkRun(t, c, r)
			if s.ops == 0 {
				t.Fatalf("%v: no operation ran", k)
			}
			sums[k] = s
			runs = append(runs, r)
			ordered = append(ordered, s)
			// 20 callers, one operation each every 50 ms, meet a
			// 0.5 s outage: about 200 operations start while it lasts.
			if s.during == 0 {
				t.Errorf("%v: the server got no request while down, want the operations that started then", k)
			}
			if r.lag.worst != 0 {
				t.Errorf("%v: the lag meter saw a timer %v late on the virtual clock, want none", k, r.lag.worst)
			}
		}
		if n, st := sums[kindNaive].during, sums[kindSturdy].during; n < st {
			t.Errorf("server requests during the outage: naive %d < sturdy %d, want naive >= sturdy", n, st)
		}

		var table bytes.Buffer
		printTable(&table, c, ordered)
		for _, want := range []string{"naive loop", "fixed backoff", "sturdy", "operations that succeeded", "server back after its return",
			"requests it got while down (500ms)", "latency p99", "time until 99% of new operations succeed",
			"succeeded | failed fast (no request sent)", "failed after waiting on the server"} {
			if !strings.Contains(table.String(), want) {
				t.Errorf("the table lacks %q:\n%s", want, table.String())
			}
		}
		var svg bytes.Buffer
		if err := writeChart(&svg, c, ordered, runs); err != nil {
			t.Fatal(err)
		}
		if got := countElements(t, svg.Bytes(), "path"); got < len(kinds) {
			t.Errorf("the chart has %d paths, want at least %d (a line per kind)", got, len(kinds))
		}
	})
	t.Run("loopback", func(t *testing.T) {
		if testing.Short() {
			t.Skip("runs real loopback traffic for about 4 s")
		}
		for _, k := range kinds {
			r, err := run(context.Background(), c, k, loopback)
			if err != nil {
				t.Fatalf("run(%v): %v", k, err)
			}
			s := checkRun(t, c, r)
			t.Logf("%v: %d operations started, %d requests while down, timers up to %v late", k, s.ops, s.during, r.lag.worst)
		}
	})
}

// checkRun checks what holds of any run r of workload c, whatever the
// speed of the machine and however many of the asked-for operations its
// load generator managed to start, and returns r's summary.
func checkRun(t *testing.T, c config, r result) summary {
	t.Helper()
	k := r.kind
	s := summarize(c, r)
	var requests, failed, down, downFailed, overloaded int64
	for _, b := range r.buckets {
		requests += b.Requests
		failed += b.Failed
		overloaded += b.Overloaded
		if b.Start >= c.OutageStart && b.Start+bucket <= c.outageEnd() {
			down += b.Requests
			downFailed += b.Failed
			if b.Overloaded != 0 {
				t.Errorf("%v: bucket %+v: overloaded while down", k, b)
			}
		}
		if b.Overloaded > b.Failed {
			t.Errorf("%v: bucket %+v: overloaded above failed", k, b)
		}
	}
	if s.total != requests {
		t.Errorf("%v: total = %d, want the buckets' sum %d", k, s.total, requests)
	}
	if s.during+s.recovery > s.total {
		t.Errorf("%v: during %d + after %d > total %d", k, s.during, s.recovery, s.total)
	}
	if s.duringPeak > s.during || s.recoveryPeak > s.recovery {
		t.Errorf("%v: a peak is above its sum: %+v", k, s)
	}
	if s.ok+s.open > s.ops {
		t.Errorf("%v: succeeded %d + failed fast %d > started %d", k, s.ok, s.open, s.ops)
	}
	// Each success took a 200 from the server, and the server gave
	// 200s only to the requests the outage did not fail.
	if int64(s.ok) > requests-failed {
		t.Errorf("%v: %d operations succeeded, but the server answered only %d requests with 200", k, s.ok, requests-failed)
	}
	// Whatever reached the server while it was down, and only that, is
	// the table's "requests it got while down", and it all failed.
	if s.during != down {
		t.Errorf("%v: during = %d, want the %d requests of the outage's buckets", k, s.during, down)
	}
	if downFailed != down {
		t.Errorf("%v: the server failed %d of the %d requests it got while down, want all", k, downFailed, down)
	}
	if s.overloaded != overloaded {
		t.Errorf("%v: overloaded = %d, want the buckets' sum %d", k, s.overloaded, overloaded)
	}
	// An operation that began and ended while the server was down
	// cannot have succeeded.
	for _, o := range r.ops {
		if o.ok && o.start >= c.OutageStart && o.start+o.latency < c.outageEnd() {
			t.Errorf("%v: an operation from %v to %v succeeded while the server was down", k, o.start, o.start+o.latency)
			break
		}
	}
	if k != kindSturdy && (s.open != 0 || s.breaker != breakerStats{}) {
		t.Errorf("%v: %d operations failed on an open circuit, breakers %+v; want none (no breaker)", k, s.open, s.breaker)
	}
	if s.late > s.total {
		t.Errorf("%v: late %d > total %d", k, s.late, s.total)
	}
	return s
}

func TestMainErrFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-mode", "teapot"}, `-mode "teapot"`},
		{[]string{"-clients", "0"}, "-clients"},
		{[]string{"-instances", "500"}, "-instances"},
		{[]string{"-outage", "10s"}, "must fit inside the run"},
		{[]string{"-deadline", "0s"}, "must be positive"},
		{[]string{"-cooldown", "-1s"}, "-cooldown"},
		{[]string{"-capacity", "-1"}, "-capacity"},
		{[]string{"-overload-cost", "1.5"}, "-overload-cost"},
		{[]string{"-no-such-flag"}, "no-such-flag"},
		{[]string{"-overload", "-2"}, "-overload"},
		{[]string{"-overload-run", "0s"}, "-overload-run"},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		err := mainErr(tt.args, &out)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("mainErr(%q) = %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
}

// countElements parses doc as XML, failing the test if it is not, and
// counts the elements named name.
func countElements(t *testing.T, doc []byte, name string) int {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	n := 0
	for {
		tok, err := d.Token()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return n
			}
			t.Fatalf("the chart is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == name {
			n++
		}
	}
}

// Promise: the demo writes no file unless asked; -svg FILE writes the
// chart there.
func TestMainWritesNoFileUnasked(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	short := []string{"-clients", "4", "-instances", "2", "-run", "600ms", "-outage-start", "200ms", "-outage", "200ms", "-deadline", "200ms", "-think", "50ms"}
	var out bytes.Buffer
	if err := mainErr(short, &out); err != nil {
		t.Fatal(err)
	}
	if files, _ := os.ReadDir(dir); len(files) != 0 {
		t.Errorf("the demo wrote %d files unasked (%s...), want none", len(files), files[0].Name())
	}
	if err := mainErr(append(short, "-svg", "chart.svg"), &out); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "chart.svg")); err != nil {
		t.Errorf("-svg chart.svg: %v", err)
	}
}
