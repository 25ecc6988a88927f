package policy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"
)

func TestOutlierMaxEjected(t *testing.T) {
	tests := []struct {
		o     Outlier
		total int
		want  int
	}{
		{Outlier{}, 0, 0},
		{Outlier{}, 1, 0}, // never a host's only address
		{Outlier{}, 2, 1},
		{Outlier{}, 3, 1},
		{Outlier{}, 4, 2},
		{Outlier{}, 10, 5},
		{Outlier{MaxEjectedPercent: 100}, 10, 5}, // never more than half
		{Outlier{MaxEjectedPercent: -3}, 10, 5},
		{Outlier{MaxEjectedPercent: 20}, 10, 2},
		{Outlier{MaxEjectedPercent: 20}, 4, 0},
	}
	for i, tt := range tests {
		if got := tt.o.MaxEjected(tt.total); got != tt.want {
			t.Errorf("step %d: %+v.MaxEjected(%d) = %d, want %d", i, tt.o, tt.total, got, tt.want)
		}
	}
}

func TestOutlierEjectionTime(t *testing.T) {
	tests := []struct {
		o    Outlier
		n    int
		want time.Duration
	}{
		{Outlier{}, 0, 30 * time.Second},
		{Outlier{}, 1, 30 * time.Second},
		{Outlier{}, 2, 60 * time.Second},
		{Outlier{}, 10, 300 * time.Second},
		{Outlier{}, 11, 300 * time.Second},
		{Outlier{}, 1 << 62, 300 * time.Second}, // no overflow
		{Outlier{BaseEjectionTime: time.Second, MaxEjectionTime: 3 * time.Second}, 2, 2 * time.Second},
		{Outlier{BaseEjectionTime: time.Second, MaxEjectionTime: 3 * time.Second}, 4, 3 * time.Second},
		{Outlier{BaseEjectionTime: time.Minute, MaxEjectionTime: time.Second}, 3, time.Minute}, // max below base: base
	}
	for i, tt := range tests {
		if got := tt.o.EjectionTime(tt.n); got != tt.want {
			t.Errorf("step %d: %+v.EjectionTime(%d) = %v, want %v", i, tt.o, tt.n, got, tt.want)
		}
	}
}

// TestOutlierRecord runs one address through a sequence of outcomes and
// checks after each whether it was ejected and until when.
func TestOutlierRecord(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type step struct {
		at      time.Duration // after t0
		failed  bool
		ejected int // others of the host's 3 addresses ejected
		eject   bool
		until   time.Duration // EjectedUntil after t0, when eject
	}
	tests := []struct {
		name  string
		o     Outlier
		steps []step
	}{
		{"five failures in a row eject for 30s", Outlier{}, []step{
			{0, true, 0, false, 0}, {1, true, 0, false, 0}, {2, true, 0, false, 0}, {3, true, 0, false, 0},
			{4, true, 0, true, 30*time.Second + 4},
		}},
		{"a success in between starts the count again", Outlier{}, []step{
			{0, true, 0, false, 0}, {1, true, 0, false, 0}, {2, true, 0, false, 0}, {3, true, 0, false, 0},
			{4, false, 0, false, 0},
			{5, true, 0, false, 0}, {6, true, 0, false, 0}, {7, true, 0, false, 0}, {8, true, 0, false, 0},
			{9, true, 0, true, 30*time.Second + 9},
		}},
		{"not while half the host is out", Outlier{ConsecutiveFailures: 2}, []step{
			{0, true, 1, false, 0}, {1, true, 1, false, 0}, {2, true, 1, false, 0},
			{3, true, 0, true, 30*time.Second + 3},
		}},
		{"outcomes while ejected change nothing; back, one failure ejects for twice as long", Outlier{ConsecutiveFailures: 2}, []step{
			{0, true, 0, false, 0}, {1, true, 0, true, 30*time.Second + 1},
			{2, true, 0, false, 0}, {3, false, 0, false, 0}, // still ejected: ignored
			{31 * time.Second, true, 0, true, 91 * time.Second},
			{92 * time.Second, true, 0, true, 92*time.Second + 90*time.Second},
		}},
		{"a success back from ejection takes one off, and the count starts again", Outlier{ConsecutiveFailures: 2}, []step{
			{0, true, 0, false, 0}, {1, true, 0, true, 30*time.Second + 1},
			{31 * time.Second, false, 0, false, 0},
			{32 * time.Second, true, 0, false, 0},
			{33 * time.Second, true, 0, true, 63 * time.Second},
		}},
		{"negative ConsecutiveFailures: never", Outlier{ConsecutiveFailures: -1}, []step{
			{0, true, 0, false, 0}, {1, true, 0, false, 0}, {2, true, 0, false, 0}, {3, true, 0, false, 0},
			{4, true, 0, false, 0}, {5, true, 0, false, 0}, {6, true, 0, false, 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a Address
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				var eject bool
				a, eject = tt.o.Record(a, s.failed, now, s.ejected, 3)
				if eject != s.eject {
					t.Fatalf("step %d: Record(failed=%v) eject = %v, want %v (%+v)", i, s.failed, eject, s.eject, a)
				}
				if eject {
					if got, want := a.EjectedUntil, t0.Add(s.until); !got.Equal(want) {
						t.Fatalf("step %d: EjectedUntil = %v, want %v", i, got.Sub(t0), want.Sub(t0))
					}
					if !a.Ejected(now) || a.Ejected(a.EjectedUntil) {
						t.Fatalf("step %d: Ejected(now) = %v, Ejected(until) = %v, want true, false", i, a.Ejected(now), a.Ejected(a.EjectedUntil))
					}
				}
			}
		})
	}
}

func TestFailsOver(t *testing.T) {
	req, _ := http.NewRequest(http.MethodPost, "https://api.example.com/v1", nil)
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	tests := []struct {
		name string
		o    Outcome
		want bool
	}{
		{"200", Outcome{Request: req, Response: &http.Response{StatusCode: 200}}, false},
		{"404", Outcome{Request: req, Response: &http.Response{StatusCode: 404}}, false},
		{"429", Outcome{Request: req, Response: &http.Response{StatusCode: 429}}, true},
		{"503", Outcome{Request: req, Response: &http.Response{StatusCode: 503}}, true},
		{"connection refused", Outcome{Request: req, Err: refused}, true},
		{"timeout", Outcome{Request: req, Err: context.DeadlineExceeded}, true},
		{"caller's deadline", Outcome{Request: req, Err: context.DeadlineExceeded, CallerEnded: true}, false},
		{"canceled", Outcome{Request: req, Err: context.Canceled}, false},
		{"canceled with a cause", Outcome{Request: req, Err: errors.New("user left"), Canceled: true}, false},
		{"caller's error", Outcome{Request: req, Err: ErrInvalidRequest}, false},
		{"nothing at all", Outcome{Request: req}, true},
		{"another error", Outcome{Request: req, Err: errors.New("reset")}, true},
	}
	for _, tt := range tests {
		if got := FailsOver(tt.o); got != tt.want {
			t.Errorf("%s: FailsOver = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestAddressFailed(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "https://api.example.com/", nil)
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	tests := []struct {
		name    string
		resp    *http.Response
		err     error
		ended   bool
		failed  bool
		counted bool
	}{
		{"200", &http.Response{StatusCode: 200}, nil, false, false, true},
		{"429", &http.Response{StatusCode: 429}, nil, false, false, true},
		{"503", &http.Response{StatusCode: 503}, nil, false, true, true},
		{"refused", nil, refused, false, true, true},
		{"canceled", nil, context.Canceled, true, false, false},
	}
	for _, tt := range tests {
		v := JudgeHost(req, tt.resp, tt.err, tt.ended)
		if got := AddressFailed(v); got != tt.failed {
			t.Errorf("%s: AddressFailed = %v, want %v", tt.name, got, tt.failed)
		}
		if got := AddressCounted(v); got != tt.counted {
			t.Errorf("%s: AddressCounted = %v, want %v", tt.name, got, tt.counted)
		}
	}
}
