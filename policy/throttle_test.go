package policy

import (
	"math"
	"sync"
	"testing"
	"time"
)

func TestThrottleProbability(t *testing.T) {
	tests := []struct {
		name              string
		th                *Throttle
		requests, accepts int
		want              float64
	}{
		{"all accepted", &Throttle{}, 100, 100, 0},
		{"half accepted: K=2 tolerates it", &Throttle{}, 100, 50, 0},
		{"a third accepted", &Throttle{}, 99, 33, (99 - 66) / 100.0},
		{"none accepted", &Throttle{}, 100, 0, 100 / 101.0},
		{"under MinRequests", &Throttle{}, 19, 0, 0},
		{"MinRequests negative: the book's formula at once", &Throttle{MinRequests: -1}, 1, 0, 0.5},
		{"K=1.5", &Throttle{K: 1.5}, 100, 50, (100 - 75) / 101.0},
		{"bad K means 2", &Throttle{K: math.NaN()}, 100, 50, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for i := range tt.requests {
				tt.th.Record("h", now, i < tt.accepts)
			}
			if got := tt.th.Probability("h", now); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("Probability = %v, want %v", got, tt.want)
			}
			if got := tt.th.Probability("other", now); got != 0 {
				t.Errorf("Probability of another host = %v, want 0", got)
			}
		})
	}
}

func TestThrottleAllow(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	th := &Throttle{}
	for range 100 {
		th.Record("h", now, false)
	}
	tests := []struct {
		name     string
		draw     float64 // relative to the current probability
		want     bool
		requests int // requests counted after the step
	}{
		{"draw under p: rejected, and counted", -1e-9, false, 101},
		{"draw at p: allowed, counted when recorded", 0, true, 101},
		{"draw far under p", -0.5, false, 102},
	}
	for i, tt := range tests {
		p := th.Probability("h", now)
		got, gotP := th.allow("h", now, p+tt.draw)
		if got != tt.want || gotP != p {
			t.Errorf("step %d (%s): allow = %v, %v; want %v, %v", i, tt.name, got, gotP, tt.want, p)
		}
		if got, want := th.Probability("h", now), float64(tt.requests)/float64(tt.requests+1); math.Abs(got-want) > 1e-9 {
			t.Errorf("step %d (%s): Probability = %v, want %v", i, tt.name, got, want)
		}
	}
}

// TestThrottleWindow: a host that failed recovers as the failures leave
// the window.
func TestThrottleWindow(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	th := &Throttle{Window: 10 * time.Second}
	for range 100 {
		th.Record("h", start, false)
	}
	tests := []struct {
		at   time.Duration
		want bool // some rejection
	}{
		{0, true},
		{9 * time.Second, true},
		{10 * time.Second, false},
		{time.Hour, false},
		{-time.Hour, false}, // a clock step back: a separate window, empty
	}
	for _, tt := range tests {
		if got := th.Probability("h", start.Add(tt.at)) > 0; got != tt.want {
			t.Errorf("at %v: rejecting = %v, want %v", tt.at, got, tt.want)
		}
	}
}

// TestThrottleConverges: offered 5 times what a server can take, the
// throttle sends about K times what it accepts, and the server still
// serves its full capacity.
func TestThrottleConverges(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	th := &Throttle{}
	const capacity = 20 // accepted per 100ms; 100 are offered
	sent, accepted, served := 0, 0, 0
	for i := range 60000 { // one request per ms for a minute
		at := start.Add(time.Duration(i) * time.Millisecond)
		if i%100 == 0 {
			served = 0
		}
		ok, _ := th.Allow("h", at)
		if !ok {
			continue
		}
		sent++
		acc := served < capacity
		if acc {
			served++
			accepted++
		}
		th.Record("h", at, acc)
	}
	if want := 60000 * capacity / 100; accepted < want*95/100 {
		t.Errorf("accepted %d, want about %d (the server's capacity)", accepted, want)
	}
	if lo, hi := 2*accepted*85/100, 2*accepted*115/100; sent < lo || sent > hi {
		t.Errorf("sent %d requests for %d accepted, want about K×accepted = %d", sent, accepted, 2*accepted)
	}
}

func TestThrottleConcurrent(t *testing.T) {
	th := &Throttle{}
	now := time.Now()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				th.Allow("h", now)
				th.Record("h", now, (i+g)%4 != 0)
			}
		})
	}
	wg.Wait()
	if got := th.Probability("h", now); got != 0 {
		t.Errorf("Probability = %v, want 0 (three in four accepted)", got)
	}
}
