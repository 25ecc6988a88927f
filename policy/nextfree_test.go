package policy

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

// The free resend is a branch of Next: an outcome that proves the server
// did not process the request goes again at once, as the same attempt,
// whoever vouched for it, while its body can be had again and fewer than
// MaxFreeResends were made; otherwise the usual rules decide.
func TestNextFreeResend(t *testing.T) {
	closed := errors.New("http: server closed idle connection")
	post, _ := http.NewRequest("POST", "http://api.test/", nil)
	tests := []struct {
		name     string
		err      error
		safe     bool
		replay   bool
		free     int
		attempt  int
		done     error
		wantFree bool
		wantStep Reason
	}{
		{"not processed, unvouched", closed, false, true, 0, 1, nil, true, ReasonRetry},
		{"not processed, at the last attempt", closed, true, true, 0, 3, nil, true, ReasonRetry},
		{"not processed, body not replayable", closed, false, false, 0, 1, nil, false, ReasonBodyNotReplayable},
		{"not processed, free resends used", closed, false, true, MaxFreeResends, 1, nil, false, ReasonRetry},
		{"not processed, operation canceled", closed, true, true, 0, 1, context.Canceled, false, ReasonCanceled},
		{"a reset proves nothing", errors.New("connection reset by peer"), false, true, 0, 1, nil, false, ReasonNotSafe},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := State{
				Outcome:      Outcome{Request: post, Err: tt.err, Attempt: tt.attempt, Now: time.Unix(0, 0)},
				SafeToResend: tt.safe,
				Replayable:   tt.replay,
				FreeResends:  tt.free,
				Done:         tt.done,
			}
			step := Retry{MaxAttempts: 3, Backoff: Exponential(time.Millisecond, time.Millisecond)}.Next(s)
			if step.Free != tt.wantFree {
				t.Errorf("Free = %v, want %v (step %+v)", step.Free, tt.wantFree, step)
			}
			if step.Free && (!step.Retry || step.Wait != 0) {
				t.Errorf("a free resend: Retry %v Wait %v, want true, 0", step.Retry, step.Wait)
			}
			if step.Reason != tt.wantStep {
				t.Errorf("Reason = %q, want %q", step.Reason, tt.wantStep)
			}
		})
	}
}
