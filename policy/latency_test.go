package policy

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestLatencyBuckets(t *testing.T) {
	tests := []struct {
		d     time.Duration
		upper time.Duration // the upper edge of d's bucket
	}{
		{-time.Second, time.Microsecond},
		{0, time.Microsecond},
		{999 * time.Nanosecond, time.Microsecond},
		{3 * time.Microsecond, 4 * time.Microsecond},
		{4 * time.Microsecond, 5 * time.Microsecond},
		{7 * time.Microsecond, 8 * time.Microsecond},
		{8 * time.Microsecond, 10 * time.Microsecond},
		{5 * time.Millisecond, 5120 * time.Microsecond},
		{6 * time.Millisecond, 6144 * time.Microsecond},
		{20 * time.Millisecond, 20480 * time.Microsecond},
		{time.Second, 1048576 * time.Microsecond},
		{60 * time.Second, 67108864 * time.Microsecond},
		{time.Hour, 1 << 27 * time.Microsecond},
	}
	for _, tt := range tests {
		b := bucketOf(tt.d)
		if got := bucketUpper(b); got != tt.upper {
			t.Errorf("bucketUpper(bucketOf(%v)) = %v, want %v", tt.d, got, tt.upper)
		}
		if b < latencyBucket-1 && bucketUpper(b) <= tt.d.Truncate(time.Microsecond) {
			t.Errorf("bucket of %v ends at %v, before it", tt.d, bucketUpper(b))
		}
	}
	// Buckets are contiguous and no wider than 25% of their lower edge.
	for b := subBuckets + 1; b < latencyBucket-1; b++ {
		lo, hi := bucketUpper(b-1), bucketUpper(b)
		if got := bucketOf(lo); got != b {
			t.Fatalf("bucketOf(%v) = %d, want %d", lo, got, b)
		}
		if w := hi - lo; w*4 > lo {
			t.Fatalf("bucket %d [%v, %v) is wider than 25%%", b, lo, hi)
		}
	}
}

func TestLatenciesQuantile(t *testing.T) {
	tests := []struct {
		name    string
		l       *Latencies
		samples []time.Duration // repeated in order
		n       int
		want    time.Duration
		wantOK  bool
	}{
		{"too few samples", &Latencies{}, []time.Duration{5 * time.Millisecond}, 19, 0, false},
		{"p95 of 98% fast, 2% slow is fast", &Latencies{}, fastSlow(98, 2), 1000, 5120 * time.Microsecond, true},
		{"p95 of 90% fast, 10% slow is slow", &Latencies{}, fastSlow(90, 10), 1000, 1048576 * time.Microsecond, true},
		{"p50", &Latencies{Quantile: 0.5}, fastSlow(60, 40), 1000, 5120 * time.Microsecond, true},
		{"bad quantile means p95", &Latencies{Quantile: 7}, fastSlow(98, 2), 1000, 5120 * time.Microsecond, true},
		{"MinSamples 5", &Latencies{MinSamples: 5}, []time.Duration{time.Millisecond}, 5, 1024 * time.Microsecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range tt.n {
				tt.l.Observe("h", tt.samples[i%len(tt.samples)])
			}
			got, ok := tt.l.Delay("h")
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Delay = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// fastSlow is fast 5ms samples then slow 1s samples, in that proportion.
func fastSlow(fast, slow int) []time.Duration {
	var s []time.Duration
	for range fast {
		s = append(s, 5*time.Millisecond)
	}
	for range slow {
		s = append(s, time.Second)
	}
	return s
}

// TestLatenciesForget: the sketch covers the last Window to 2×Window
// samples, so a host that got faster is hedged on its new latencies.
func TestLatenciesForget(t *testing.T) {
	l := &Latencies{Window: 100}
	for range 300 {
		l.Observe("h", time.Second)
	}
	for range 99 {
		l.Observe("h", 5*time.Millisecond)
	}
	if got := mustDelay(t, l, "h"); got < time.Second {
		t.Fatalf("Delay = %v after 99 fast samples, want the older 1s samples still counted", got)
	}
	l.Observe("h", 5*time.Millisecond) // the current half is full: the slow half is dropped
	if got, want := mustDelay(t, l, "h"), 5120*time.Microsecond; got != want {
		t.Errorf("Delay = %v, want %v", got, want)
	}
}

func mustDelay(t *testing.T, l *Latencies, key string) time.Duration {
	t.Helper()
	d, ok := l.Delay(key)
	if !ok {
		t.Fatalf("Delay(%q) not known", key)
	}
	return d
}

func TestLatenciesPerHost(t *testing.T) {
	l := &Latencies{MinSamples: 1, MaxHosts: 3}
	l.Observe("fast", time.Millisecond)
	l.Observe("slow", time.Second)
	if got, want := mustDelay(t, l, "fast"), 1024*time.Microsecond; got != want {
		t.Errorf("fast host: Delay = %v, want %v", got, want)
	}
	if got, want := mustDelay(t, l, "slow"), 1048576*time.Microsecond; got != want {
		t.Errorf("slow host: Delay = %v, want %v", got, want)
	}
	for i := range 10 {
		l.Observe(fmt.Sprint("h", i), time.Millisecond)
	}
	if got := l.Hosts(); got > 3 {
		t.Errorf("Hosts = %d, want at most 3", got)
	}
}

func TestLatenciesConcurrent(t *testing.T) {
	l := &Latencies{Window: 50}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				l.Observe(fmt.Sprint("h", g%2), time.Duration(i%10)*time.Millisecond)
				l.Delay("h0")
			}
		})
	}
	wg.Wait()
	if d := mustDelay(t, l, "h0"); d <= 0 || d > 11*time.Millisecond {
		t.Errorf("Delay = %v, want in (0, 11ms]", d)
	}
}

func BenchmarkLatenciesObserve(b *testing.B) {
	l := &Latencies{}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Observe("api.example.com", 5*time.Millisecond)
			l.Delay("api.example.com")
		}
	})
}

func TestHedgeDefaults(t *testing.T) {
	tests := []struct {
		h          Hedge
		hedges     int
		adaptive   bool
		floor      time.Duration
		bufLimit   int64
		keyHeader  string
		defaultCls bool
	}{
		{Hedge{}, 1, true, time.Millisecond, DefaultMaxBufferedBody, "Idempotency-Key", true},
		{Hedge{MaxHedges: -1, Delay: time.Second, MinDelay: 5 * time.Millisecond, MaxBufferedBody: -1, IdempotencyHeader: "X-Key"}, 0, false, 5 * time.Millisecond, -1, "X-Key", true},
		{Hedge{MaxHedges: 3, Classify: func(Outcome) Decision { return Decision{} }}, 3, true, time.Millisecond, DefaultMaxBufferedBody, "Idempotency-Key", false},
	}
	for i, tt := range tests {
		h := tt.h
		if got := h.Hedges(); got != tt.hedges {
			t.Errorf("%d: Hedges() = %d, want %d", i, got, tt.hedges)
		}
		if got := h.Adaptive(); got != tt.adaptive {
			t.Errorf("%d: Adaptive() = %v, want %v", i, got, tt.adaptive)
		}
		if got := h.DelayFloor(); got != tt.floor {
			t.Errorf("%d: DelayFloor() = %v, want %v", i, got, tt.floor)
		}
		if got := h.BufferLimit(); got != tt.bufLimit {
			t.Errorf("%d: BufferLimit() = %d, want %d", i, got, tt.bufLimit)
		}
		if got := h.KeyHeader(); got != tt.keyHeader {
			t.Errorf("%d: KeyHeader() = %q, want %q", i, got, tt.keyHeader)
		}
		if got := h.Classify == nil; got != tt.defaultCls {
			t.Errorf("%d: default classifier = %v, want %v", i, got, tt.defaultCls)
		}
		if h.Classifier() == nil {
			t.Errorf("%d: Classifier() = nil", i)
		}
	}
}

// A quantile is the upper edge of its bucket, never under the true one,
// up to the sketch's range (about 134 s); above it, in the last bucket,
// which has no edge, no delay is reported, and the request is sent once:
// a host whose completions take minutes is not hedged at 134 s.
func TestLatenciesLongQuantiles(t *testing.T) {
	for _, lat := range []time.Duration{
		30 * time.Second, 100 * time.Second, 134 * time.Second, 140 * time.Second, 3 * time.Minute, 20 * time.Minute,
	} {
		var l Latencies
		for range 100 {
			l.Observe("h", lat)
		}
		d, ok := l.Delay("h")
		switch {
		case lat >= 1<<27*time.Microsecond:
			if ok {
				t.Errorf("every sample %v: delay %v; want none (past the sketch's range)", lat, d)
			}
		case !ok || d < lat || d > lat+lat/4:
			t.Errorf("every sample %v: delay %v, %t; want in [%v, %v]", lat, d, ok, lat, lat+lat/4)
		}
	}
}
