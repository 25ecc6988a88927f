package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

const ms100 = 100 * time.Millisecond

func TestPercentile(t *testing.T) {
	d := func(n ...int) []time.Duration {
		out := make([]time.Duration, len(n))
		for i, v := range n {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{nil, 0.5, 0},
		{d(7), 0.5, 7 * time.Millisecond},
		{d(7), 0.99, 7 * time.Millisecond},
		{d(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		{d(1, 2, 3, 4), 0.99, 4 * time.Millisecond},
		{d(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.5, 5 * time.Millisecond},
		{d(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.9, 9 * time.Millisecond},
		{d(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.99, 10 * time.Millisecond},
		{d(1, 2, 3), 0, time.Millisecond},
	}
	for _, tt := range tests {
		if got := percentile(tt.sorted, tt.q); got != tt.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", tt.sorted, tt.q, got, tt.want)
		}
	}
}

// ops makes n operations starting at start, the first ok of them
// succeeding.
func ops(start time.Duration, n, ok int) []op {
	out := make([]op, n)
	for i := range out {
		out[i] = op{start: start, latency: time.Millisecond, ok: i < ok}
	}
	return out
}

func cat(parts ...[]op) []op {
	var out []op
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestRecoveryTime(t *testing.T) {
	end := 3 * time.Second
	tests := []struct {
		name      string
		ops       []op
		want      time.Duration
		wantNever bool
	}{
		{"no operation after the outage", ops(time.Second, 5, 0), 0, true},
		{"all good at once", cat(ops(end, 10, 10), ops(end+ms100, 10, 10)), 0, false},
		{"operations before the end do not count", cat(ops(end-ms100, 10, 0), ops(end+50*time.Millisecond, 10, 10)), 0, false},
		{"bad first bucket", cat(ops(end, 10, 5), ops(end+ms100, 100, 100)), ms100, false},
		{"99% is enough", cat(ops(end, 100, 99), ops(end+ms100, 10, 10)), 0, false},
		{"98% is not", cat(ops(end, 100, 98), ops(end+ms100, 10, 10)), ms100, false},
		{"a relapse moves it", cat(ops(end, 10, 10), ops(end+ms100, 10, 0), ops(end+2*ms100, 10, 10), ops(end+5*ms100, 10, 10)), 2 * ms100, false},
		{"empty buckets are skipped", cat(ops(end, 10, 0), ops(end+7*ms100, 10, 10)), 7 * ms100, false},
		{"never recovered", cat(ops(end, 10, 10), ops(end+ms100, 10, 0)), 0, true},
	}
	for _, tt := range tests {
		got, never := recoveryTime(tt.ops, end)
		if got != tt.want || never != tt.wantNever {
			t.Errorf("%s: recoveryTime = %v, %v; want %v, %v", tt.name, got, never, tt.want, tt.wantNever)
		}
	}
}

func TestSummarize(t *testing.T) {
	c := config{OutageStart: 200 * time.Millisecond, Outage: 300 * time.Millisecond, Run: 3 * time.Second}
	r := result{
		kind: kindSturdy,
		late: 4,
		buckets: []httptestutil.OutageBucket{
			{Start: 0, Requests: 10},
			{Start: ms100, Requests: 12},
			{Start: 2 * ms100, Requests: 30, Failed: 30}, // down
			{Start: 3 * ms100, Requests: 50, Failed: 50},
			{Start: 4 * ms100, Requests: 20, Failed: 20},
			{Start: 5 * ms100, Requests: 40}, // back
			{Start: 9 * ms100, Requests: 15},
			{Start: 15 * ms100, Requests: 99}, // past the first second after
		},
		ops: []op{
			{start: 0, latency: 10 * time.Millisecond, ok: true},
			{start: 3 * ms100, latency: 30 * time.Millisecond},
			{start: 3 * ms100, latency: 0, open: true},
			{start: 6 * ms100, latency: 20 * time.Millisecond, ok: true},
		},
	}
	got := summarize(c, r)
	want := summary{
		kind: kindSturdy, total: 276, baseline: 12, during: 100, duringPeak: 50,
		recovery: 55, recoveryPeak: 40, late: 4,
		ops: 4, ok: 2, open: 1, p50: 10 * time.Millisecond, p99: 30 * time.Millisecond,
		recovered: ms100, serverBack: 0,
	}
	if got != want {
		t.Errorf("summarize =\n%+v\nwant\n%+v", got, want)
	}
}

func TestThousands(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0"}, {7, "7"}, {999, "999"}, {1000, "1,000"}, {12345, "12,345"},
		{1234567, "1,234,567"}, {-1234, "-1,234"}, {-12, "-12"},
	}
	for _, tt := range tests {
		if got := thousands(tt.n); got != tt.want {
			t.Errorf("thousands(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

func TestBreakerLog(t *testing.T) {
	l := newBreakerLog(time.Now(), config{})
	steps := []struct {
		process  int
		from, to transport.BreakerState
	}{
		{0, transport.BreakerClosed, transport.BreakerOpen},
		{1, transport.BreakerClosed, transport.BreakerOpen},
		{0, transport.BreakerOpen, transport.BreakerHalfOpen},
		{0, transport.BreakerHalfOpen, transport.BreakerClosed},
		{2, transport.BreakerClosed, transport.BreakerOpen},
		{2, transport.BreakerOpen, transport.BreakerHalfOpen},
	}
	for _, s := range steps {
		l.hook(s.process)("http://127.0.0.1:1", s.from, s.to)
	}
	got := l.result()
	if got.opens != 3 || got.closes != 1 || got.openAtEnd != 2 {
		t.Errorf("opens, closes, open at end = %d, %d, %d; want 3, 1, 2", got.opens, got.closes, got.openAtEnd)
	}
	if !(got.firstOpen <= got.lastOpen && got.lastOpen <= time.Since(l.start)) {
		t.Errorf("first open %v, last open %v: want first <= last <= now", got.firstOpen, got.lastOpen)
	}
}

// The requests sent while the server was down are split by whether
// their process's breaker had opened: before, and probes after.
func TestBreakerLogAttempts(t *testing.T) {
	// Now is 2s into the run, inside an outage from 1s to 3s.
	l := newBreakerLog(time.Now().Add(-2*time.Second), config{OutageStart: time.Second, Outage: 2 * time.Second})
	refused := &transport.CircuitOpenError{Key: "http://127.0.0.1:1", State: transport.BreakerOpen}
	l.attempt(0)(policy.AttemptEvent{})                                  // sent now, before process 0's breaker opened
	l.attempt(0)(policy.AttemptEvent{Duration: 1500 * time.Millisecond}) // sent at 0.5s, before the outage
	l.hook(0)("http://127.0.0.1:1", transport.BreakerClosed, transport.BreakerOpen)
	l.attempt(0)(policy.AttemptEvent{})             // a probe
	l.attempt(1)(policy.AttemptEvent{Err: refused}) // refused: not sent
	l.attempt(1)(policy.AttemptEvent{Status: 503})  // process 1's breaker never opened
	got := l.result()
	if got.beforeOpen != 2 || got.probes != 1 {
		t.Errorf("before open, probes = %d, %d; want 2, 1", got.beforeOpen, got.probes)
	}
}

func TestBreakerNote(t *testing.T) {
	c := config{OutageStart: time.Second, Outage: 3 * time.Second}
	tests := []struct {
		name     string
		cooldown time.Duration
		b        breakerStats
		want     []string
	}{
		{"never opened", 0, breakerStats{}, []string{"never opened"}},
		{"still open, default cooldown", 0,
			breakerStats{opens: 10, firstOpen: 1100 * time.Millisecond, lastOpen: 1200 * time.Millisecond, openAtEnd: 10},
			[]string{"opened 10 times, first at 1.10s", "open for up to 200ms (the default, jittered)", "for as long again", "10 were still open"}},
		{"closed again", 2 * time.Second,
			breakerStats{opens: 4, firstOpen: time.Second, lastOpen: 3 * time.Second, closes: 4, lastClose: 5500 * time.Millisecond},
			[]string{"opened 4 times", "open for up to 2s (-cooldown, jittered)", "closed again 4 times, the last at 5.50s, 1.50s after the server came back"}},
	}
	for _, tt := range tests {
		c.Cooldown = tt.cooldown
		got := breakerNote(c, tt.b)
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: breakerNote = %q, want it to contain %q", tt.name, got, w)
			}
		}
		if tt.b.openAtEnd == 0 && strings.Contains(got, "still open") {
			t.Errorf("%s: breakerNote = %q, want no \"still open\"", tt.name, got)
		}
	}
}

func TestServerBack(t *testing.T) {
	end, run := time.Second, 2*time.Second
	b := func(at time.Duration, requests, failed int64) httptestutil.OutageBucket {
		return httptestutil.OutageBucket{Start: at, Requests: requests, Failed: failed}
	}
	tests := []struct {
		name      string
		buckets   []httptestutil.OutageBucket
		want      time.Duration
		wantNever bool
	}{
		{"nothing after the return", []httptestutil.OutageBucket{b(0, 10, 0), b(5*ms100, 10, 10)}, 0, true},
		{"back at once", []httptestutil.OutageBucket{b(9*ms100, 10, 10), b(end, 10, 0), b(end+ms100, 10, 0)}, 0, false},
		{"an empty bucket fails nothing", []httptestutil.OutageBucket{b(end, 0, 0), b(end+ms100, 10, 0)}, 0, false},
		{"1% is back", []httptestutil.OutageBucket{b(end, 100, 1), b(end+ms100, 10, 0)}, 0, false},
		{"2% is not", []httptestutil.OutageBucket{b(end, 100, 2), b(end+ms100, 10, 0)}, ms100, false},
		{"a relapse moves it", []httptestutil.OutageBucket{b(end, 10, 0), b(end+ms100, 10, 5), b(end+2*ms100, 10, 0)}, 2 * ms100, false},
		{"still failing at the end of the run", []httptestutil.OutageBucket{b(end, 10, 0), b(run-ms100, 10, 10)}, 0, true},
		{"buckets after the run do not count", []httptestutil.OutageBucket{b(end, 10, 0), b(run, 10, 10)}, 0, false},
	}
	for _, tt := range tests {
		got, never := serverBack(tt.buckets, end, run)
		if got != tt.want || never != tt.wantNever {
			t.Errorf("%s: serverBack = %v, %v; want %v, %v", tt.name, got, never, tt.want, tt.wantNever)
		}
	}
}
