package policy

import (
	"errors"
	"testing"
	"time"
)

// Promise: no attempt is started with less time left before the deadline
// than the operation's fastest answer took (State.Fastest).
func TestNextTooLittleTime(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := Retry{Backoff: func(int, time.Duration) time.Duration { return 100 * time.Millisecond }}
	tests := []struct {
		name    string
		left    time.Duration // from now to the deadline; 0: none
		fastest time.Duration
		want    Reason
	}{
		{"no deadline", 0, time.Second, ReasonRetry},
		{"fastest unknown", 150 * time.Millisecond, 0, ReasonRetry},
		{"room for the fastest", 500 * time.Millisecond, 400 * time.Millisecond, ReasonRetry},
		{"exactly the fastest", 500 * time.Millisecond, 400*time.Millisecond + 0, ReasonRetry},
		{"less than the fastest", 450 * time.Millisecond, 400 * time.Millisecond, ReasonTooLittleTime},
		{"wait past the deadline", 50 * time.Millisecond, 10 * time.Millisecond, ReasonWaitPastDeadline},
	}
	for _, tt := range tests {
		s := State{
			Outcome:      Outcome{Err: errors.New("read: connection reset by peer"), Attempt: 1, Now: now},
			SafeToResend: true,
			Replayable:   true,
			Fastest:      tt.fastest,
		}
		if tt.left > 0 {
			s.Deadline = now.Add(tt.left)
		}
		if got := p.Next(s).Reason; got != tt.want {
			t.Errorf("%s: Next().Reason = %q, want %q", tt.name, got, tt.want)
		}
	}
}
