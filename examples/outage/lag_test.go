package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLagStretches(t *testing.T) {
	c := config{Run: time.Second, Think: 100 * time.Millisecond} // behind from 20ms
	tests := []struct {
		name string
		mean map[int]time.Duration // bucket: mean lateness; others 0
		want []string
	}{
		{"kept up", map[int]time.Duration{3: 19 * time.Millisecond}, nil},
		{"one bucket", map[int]time.Duration{3: 20 * time.Millisecond}, []string{"0.3–0.4s"}},
		{"two stretches", map[int]time.Duration{0: time.Second, 1: 30 * time.Millisecond, 5: 40 * time.Millisecond},
			[]string{"0.0–0.2s", "0.5–0.6s"}},
		{"past the run is not shown", map[int]time.Duration{9: time.Second, 10: time.Second, 14: time.Second}, []string{"0.9–1.0s"}},
	}
	for _, tt := range tests {
		s := lagStats{mean: make([]time.Duration, 20)}
		for i, d := range tt.mean {
			s.mean[i] = d
		}
		var got []string
		for _, st := range s.stretches(c) {
			got = append(got, st.String())
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: stretches = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestLagNote(t *testing.T) {
	c := config{Run: time.Second, Think: 100 * time.Millisecond}
	kept := result{kind: kindNaive, lag: lagStats{mean: make([]time.Duration, 12), worst: 5 * time.Millisecond}}
	if got := lagNote(c, []result{kept, kept}); got != "" {
		t.Errorf("lagNote with every run keeping up = %q, want none", got)
	}
	fell := result{kind: kindSturdy, lag: lagStats{mean: make([]time.Duration, 12), worst: 480 * time.Millisecond}}
	for _, i := range []int{0, 2, 4, 5, 7, 8, 9} {
		fell.lag.mean[i] = 300 * time.Millisecond
	}
	got := lagNote(c, []result{kept, fell})
	for _, want := range []string{"WARNING: the load generator fell behind",
		"sturdy: for 0.7s of the 1s run, as in 0.0–0.1s, 0.4–0.6s, 0.7–1.0s, ... (worst 480ms)", "dotted"} {
		if !strings.Contains(got, want) {
			t.Errorf("lagNote = %q, want it to contain %q", got, want)
		}
	}
	if strings.Contains(got, "naive loop") {
		t.Errorf("lagNote = %q, names a run that kept up", got)
	}
}

// TestLagMeter runs the meter on this machine for a moment: whatever
// the machine's speed, it wakes up, and its figures agree with each
// other.
func TestLagMeter(t *testing.T) {
	start := time.Now()
	m := startLag(start, time.Second)
	time.Sleep(10 * lagTick)
	s := m.stop()
	var wakes int
	for _, n := range m.n {
		wakes += n
	}
	if wakes == 0 {
		t.Fatal("the meter never woke up")
	}
	for i, d := range s.mean {
		if d < 0 || d > s.worst {
			t.Errorf("bucket %d: mean lateness %v, want between 0 and the worst %v", i, d, s.worst)
		}
	}
	if s.overall < 0 || s.overall > s.worst {
		t.Errorf("overall lateness %v, want between 0 and the worst %v", s.overall, s.worst)
	}
}
