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

// tiny is a workload small enough for CI: 20 callers, a 0.5 s outage, a
// server of the program's default capacity.
func tiny(mode httptestutil.OutageMode) config {
	return config{
		Clients:     20,
		Instances:   2,
		Run:         time.Second,
		OutageStart: 250 * time.Millisecond,
		Outage:      500 * time.Millisecond,
		Mode:        mode,
		Deadline:    time.Second,
		Think:       50 * time.Millisecond,
		Backoff:     20 * time.Millisecond,

		Capacity:     1.5,
		OverloadCost: 0.5,
	}
}

// TestRunInvariants runs the tiny workload with each kind of client over
// real loopback and checks what must hold whatever the machine's speed.
func TestRunInvariants(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real loopback traffic for about 4 s")
	}
	c := tiny(httptestutil.Outage503)
	sums := make(map[kind]summary)
	var runs []result
	var ordered []summary
	for _, k := range kinds {
		r, err := run(context.Background(), c, k, loopback)
		if err != nil {
			t.Fatalf("run(%v): %v", k, err)
		}
		s := summarize(c, r)
		sums[k] = s
		runs = append(runs, r)
		ordered = append(ordered, s)

		var requests, failed int64
		for _, b := range r.buckets {
			requests += b.Requests
			failed += b.Failed
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
		if s.ops == 0 {
			t.Fatalf("%v: no operation ran", k)
		}
		if s.ok+s.open > s.ops {
			t.Errorf("%v: succeeded %d + failed fast %d > started %d", k, s.ok, s.open, s.ops)
		}
		// Each success took a 200 from the server, and the server gave
		// 200s only to the requests the outage did not fail.
		if int64(s.ok) > requests-failed {
			t.Errorf("%v: %d operations succeeded, but the server answered only %d requests with 200", k, s.ok, requests-failed)
		}
		if failed == 0 {
			t.Errorf("%v: the server failed no request, want some during the outage", k)
		}
		var overloaded int64
		for _, b := range r.buckets {
			overloaded += b.Overloaded
			if b.Overloaded > b.Failed || (b.Start >= c.OutageStart && b.Start+bucket <= c.outageEnd() && b.Overloaded != 0) {
				t.Errorf("%v: bucket %+v: overloaded above failed, or overloaded while down", k, b)
			}
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
