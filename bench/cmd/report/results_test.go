package main

import (
	"math"
	"strings"
	"testing"
)

func TestParseLine(t *testing.T) {
	tests := []struct {
		line   string
		ok     bool
		group  string
		client string
		procs  int
		values map[string]float64
	}{
		{
			line:  "BenchmarkSuccess/base=mem/op=GET/client=sturdy-2   	  183146	      11515 ns/op	    1970 B/op	      19 allocs/op",
			ok:    true,
			group: "BenchmarkSuccess/base=mem/op=GET", client: "sturdy", procs: 2,
			values: map[string]float64{"ns/op": 11515, "B/op": 1970, "allocs/op": 19},
		},
		{
			line:  "BenchmarkParallel/hosts=1/client=bare 	   65823	      1857 ns/op",
			ok:    true,
			group: "BenchmarkParallel/hosts=1", client: "bare", procs: 1,
			values: map[string]float64{"ns/op": 1857},
		},
		{
			line:  "BenchmarkCancel/client=retryablehttp-rt-2 1 2610757399 ns/op 6371 max-us 0 missed/1kop",
			ok:    true,
			group: "BenchmarkCancel", client: "retryablehttp-rt", procs: 2,
			values: map[string]float64{"ns/op": 2610757399, "max-us": 6371, "missed/1kop": 0},
		},
		{line: "goos: linux"},
		{line: "PASS"},
		{line: "BenchmarkNoClient-2 10 5 ns/op"},
		{line: "BenchmarkX/client=a-2 10 five ns/op"},
		{line: "BenchmarkX/client=a-2 ten 5 ns/op"},
		{line: "BenchmarkX/client=a-2 10 5"},
	}
	for _, tt := range tests {
		r, ok := parseLine(tt.line)
		if ok != tt.ok {
			t.Errorf("parseLine(%q): got ok %v, want %v", tt.line, ok, tt.ok)
			continue
		}
		if !ok {
			continue
		}
		if r.group != tt.group || r.client != tt.client || r.procs != tt.procs {
			t.Errorf("parseLine(%q): got %q %q %d, want %q %q %d", tt.line, r.group, r.client, r.procs, tt.group, tt.client, tt.procs)
		}
		if len(r.values) != len(tt.values) {
			t.Errorf("parseLine(%q): got values %v, want %v", tt.line, r.values, tt.values)
		}
		for u, v := range tt.values {
			if r.values[u] != v {
				t.Errorf("parseLine(%q): got %s = %v, want %v", tt.line, u, r.values[u], v)
			}
		}
	}
}

func TestMedianSpread(t *testing.T) {
	tests := []struct {
		vs             []float64
		median, spread float64
	}{
		{[]float64{3}, 3, 0},
		{[]float64{1, 3}, 2, 50},
		{[]float64{5, 1, 3}, 3, 200.0 / 3},
		{[]float64{10, 12, 11, 9}, 10.5, 300.0 / 21},
	}
	for _, tt := range tests {
		if got := median(tt.vs); got != tt.median {
			t.Errorf("median(%v) = %v, want %v", tt.vs, got, tt.median)
		}
		if got := spread(tt.vs); math.Abs(got-tt.spread) > 1e-9 {
			t.Errorf("spread(%v) = %v, want %v", tt.vs, got, tt.spread)
		}
	}
	if got := median(nil); !math.IsNaN(got) {
		t.Errorf("median(nil) = %v, want NaN", got)
	}
}

func TestCollectMarkdown(t *testing.T) {
	out := `goos: linux
BenchmarkSuccess/op=GET/client=bare-2  100  1000 ns/op  10 allocs/op
BenchmarkSuccess/op=GET/client=sturdy-2  100  1500 ns/op  12 allocs/op
BenchmarkSuccess/op=GET/client=bare-2  100  3000 ns/op  10 allocs/op
BenchmarkSuccess/op=GET/client=sturdy-2  100  2500 ns/op  12 allocs/op
BenchmarkSuccess/op=GET/client=bare-1  100  999 ns/op  10 allocs/op
PASS
`
	tables, err := collect(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 2 {
		t.Fatalf("got %d tables, want 2 (one per GOMAXPROCS)", len(tables))
	}
	if got, want := tables[0].group, "BenchmarkSuccess/op=GET (GOMAXPROCS=2)"; got != want {
		t.Errorf("got group %q, want %q", got, want)
	}
	var b strings.Builder
	tables[0].markdown(&b, []column{{"ns/op", true, true}, {"allocs/op", true, false}, {"missing", false, false}}, "bare")
	want := `| client | ns/op | ± | ×bare | allocs/op | ×bare | missing |
| --- | --- | --- | --- | --- | --- | --- |
| bare | 2000 | 50% | 1.00 | 10 | 1.00 | – |
| sturdy | 2000 | 25% | 1.00 | 12 | 1.20 | – |
`
	if got := b.String(); got != want {
		t.Errorf("markdown:\n%s\nwant:\n%s", got, want)
	}
}
