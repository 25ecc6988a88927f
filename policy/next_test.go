package policy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

var testNow = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)

// TestRequestSentTwiceOnlyWhenSafe decides every cell of method × how the
// request is vouched for × outcome, as DESIGN.md states the rule: a
// request is sent more than once only when its method is idempotent, or
// the caller vouched for it (a key), or the outcome proves that the
// server did not act on it.
func TestRequestSentTwiceOnlyWhenSafe(t *testing.T) {
	yes, no := true, false
	resp := func(code int, kv ...string) func() (*http.Response, *Problem, error) {
		return func() (*http.Response, *Problem, error) {
			h := http.Header{}
			for i := 0; i+1 < len(kv); i += 2 {
				h.Add(kv[i], kv[i+1])
			}
			return &http.Response{StatusCode: code, Header: h}, nil, nil
		}
	}
	problem := func(code int, retriable *bool) func() (*http.Response, *Problem, error) {
		return func() (*http.Response, *Problem, error) {
			r, _, _ := resp(code)()
			return r, &Problem{Status: code, Retriable: retriable}, nil
		}
	}
	fail := func(err error) func() (*http.Response, *Problem, error) {
		return func() (*http.Response, *Problem, error) { return nil, nil, err }
	}
	type verdict struct {
		unvouched, vouched Reason
	}
	// Each outcome says what becomes of a request nobody vouched for and
	// of one that is safe to send again, and why.
	outcomes := []struct {
		name         string
		attempt      int
		notConnected bool
		make         func() (*http.Response, *Problem, error)
		keyedOnly    bool // the verdict for vouched requests needs a key, not only an idempotent method
		want         verdict
		why          string
	}{
		{"200", 1, false, resp(200), false, verdict{ReasonFinal, ReasonFinal}, "a success is final"},
		{"404", 1, false, resp(404), false, verdict{ReasonFinal, ReasonFinal}, "a client error is the server's answer"},
		{"409 on a first attempt", 1, false, resp(409), false, verdict{ReasonFinal, ReasonFinal}, "a 409 on a first attempt is the server's business answer"},
		{"409 after the key was sent", 2, false, resp(409), true, verdict{ReasonFinal, ReasonRetry}, "a 409 to a key already sent means that key is still in flight"},
		{"409 with Retry-After", 1, false, resp(409, "Retry-After", "1"), true, verdict{ReasonFinal, ReasonRetry}, "the server says the key is in flight"},
		{"429", 1, false, resp(429), false, verdict{ReasonRetry, ReasonRetry}, "a 429 proves the server did not act"},
		{"500", 1, false, resp(500), false, verdict{ReasonNotSafe, ReasonRetry}, "the server may have acted before failing"},
		{"503", 1, false, resp(503), false, verdict{ReasonNotSafe, ReasonRetry}, "the server may have acted before failing"},
		{"503 x-should-retry: true", 1, false, resp(503, "X-Should-Retry", "true"), false, verdict{ReasonRetry, ReasonRetry}, "the server says another attempt is safe"},
		{"500 Stripe-Should-Retry: true", 1, false, resp(500, "Stripe-Should-Retry", "true"), false, verdict{ReasonRetry, ReasonRetry}, "the server says another attempt is safe"},
		{"503 x-should-retry: false", 1, false, resp(503, "X-Should-Retry", "false"), false, verdict{ReasonFinal, ReasonFinal}, "the server says not to retry"},
		{"400 is_retriable: true", 1, false, problem(400, &yes), false, verdict{ReasonRetry, ReasonRetry}, "the problem says another attempt is safe"},
		{"503 is_retriable: false", 1, false, problem(503, &no), false, verdict{ReasonFinal, ReasonFinal}, "the problem says not to retry"},
		{"dial refused", 1, false, fail(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), false, verdict{ReasonRetry, ReasonRetry}, "the connection was never made"},
		{"TLS handshake EOF", 1, true, fail(io.EOF), false, verdict{ReasonRetry, ReasonRetry}, "the connection was never made"},
		{"reset after sending", 1, false, fail(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), false, verdict{ReasonNotSafe, ReasonRetry}, "the server may have read and acted"},
		{"attempt timeout", 1, false, fail(fmt.Errorf("attempt: %w", context.DeadlineExceeded)), false, verdict{ReasonNotSafe, ReasonRetry}, "the server may be acting still"},
		{"body longer than ContentLength", 1, false, fail(&BodyError{ContentLength: 3, Read: 4}), false, verdict{ReasonCallerError, ReasonCallerError}, "the request cannot be sent as written"},
		{"body reader fails", 1, false, fail(&net.OpError{Op: "readfrom", Err: &BodyError{ContentLength: -1, Err: errors.New("disk gone")}}), false, verdict{ReasonCallerError, ReasonCallerError}, "the request cannot be sent as written"},
	}
	vouching := []struct {
		name   string
		header http.Header
		keyed  bool
	}{
		{"unvouched", nil, false},
		{"key set by the caller, its SDK, WithKey or Hosts", http.Header{"Idempotency-Key": {"k1"}}, true},
		{"X-Idempotency-Key, which net/http replays", http.Header{"X-Idempotency-Key": {"k1"}}, false},
	}
	p := Retry{Backoff: Exponential(time.Second, time.Second)}
	for _, method := range []string{"GET", "HEAD", "PUT", "DELETE", "POST", "PATCH"} {
		for _, v := range vouching {
			for _, oc := range outcomes {
				t.Run(method+"/"+v.name+"/"+oc.name, func(t *testing.T) {
					req, _ := http.NewRequest(method, "https://api.test/v1", nil)
					if v.header != nil {
						req.Header = v.header.Clone()
					}
					r, prob, err := oc.make()
					safe := SafeToResend(req, "")
					st := p.Next(State{
						Outcome:      Outcome{Request: req, Response: r, Err: err, Problem: prob, Attempt: oc.attempt, Keyed: HasKey(req, ""), NotConnected: oc.notConnected, Now: testNow},
						SafeToResend: safe,
						Replayable:   true,
					})
					want := oc.want.unvouched
					if safe && (!oc.keyedOnly || v.keyed) {
						want = oc.want.vouched
					}
					if st.Reason != want || st.Retry != (want == ReasonRetry) {
						t.Errorf("Next = (retry %v, %q, classifier %q), want %q because %s (safe to resend: %v)",
							st.Retry, st.Reason, st.Decision.Reason, want, oc.why, safe)
					}
				})
			}
		}
	}
}

// TestNextStops checks each reason Next gives for stopping, in order.
func TestNextStops(t *testing.T) {
	get, _ := http.NewRequest("GET", "https://api.test/", nil)
	r503 := &http.Response{StatusCode: 503, Header: http.Header{}}
	r429 := func(ra string) *http.Response {
		return &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {ra}}}
	}
	refused := errors.New("transport: circuit open for https://api.test")
	base := func() State {
		return State{
			Outcome:      Outcome{Request: get, Response: r503, Attempt: 1, Now: testNow},
			SafeToResend: true,
			Replayable:   true,
		}
	}
	budgetCalls := 0
	tests := []struct {
		name       string
		p          Retry
		edit       func(*State)
		want       Reason
		wantWait   time.Duration
		wantBudget int // calls to Budget
	}{
		{"retry after the backoff", Retry{}, func(*State) {}, ReasonRetry, time.Second, 0},
		{"canceled", Retry{}, func(s *State) { s.Done = context.Canceled }, ReasonCanceled, 0, 0},
		{"deadline passed", Retry{}, func(s *State) { s.Done = context.DeadlineExceeded }, ReasonDeadline, 0, 0},
		{"canceled with a cause", Retry{}, func(s *State) {
			s.Done, s.Outcome.Response, s.Outcome.Err = errUserLeft, nil, errUserLeft
			s.Outcome.CallerEnded, s.Outcome.Canceled = true, true
		}, ReasonCanceled, 0, 0},
		{"canceled with a cause as a 503 came", Retry{}, func(s *State) { s.Done, s.Outcome.Canceled = errUserLeft, true }, ReasonCanceled, 0, 0},
		{"deadline with a cause", Retry{}, func(s *State) {
			s.Done, s.Outcome.Response, s.Outcome.Err, s.Outcome.CallerEnded = errUserLeft, nil, errUserLeft, true
		}, ReasonDeadline, 0, 0},
		{"caller error beats a custom classifier", Retry{Classify: func(Outcome) Decision { return Decision{Retry: true, DidNotAct: true} }},
			func(s *State) { s.Outcome.Response, s.Outcome.Err = nil, &BodyError{ContentLength: 5, Read: 2} }, ReasonCallerError, 0, 0},
		{"a custom classifier cannot make a POST safe", Retry{Classify: func(Outcome) Decision { return Decision{Retry: true} }},
			func(s *State) { s.SafeToResend = false }, ReasonNotSafe, 0, 0},
		{"attempts used", Retry{MaxAttempts: 2}, func(s *State) { s.Outcome.Attempt = 2 }, ReasonAttemptsUsed, 0, 0},
		{"body not replayable", Retry{}, func(s *State) { s.Replayable = false }, ReasonBodyNotReplayable, 0, 0},
		{"retry-after over the limit", Retry{MaxRetryAfter: 10 * time.Second}, func(s *State) { s.Outcome.Response = r429("11") }, ReasonRetryAfterTooLong, 0, 0},
		{"retry-after never honoured", Retry{MaxRetryAfter: -1}, func(s *State) { s.Outcome.Response = r429("1") }, ReasonRetryAfterTooLong, 0, 0},
		{"retry-after longer than the backoff", Retry{}, func(s *State) { s.Outcome.Response = r429("5") }, ReasonRetry, 5 * time.Second, 0},
		{"a custom classifier's retry honours the response's Retry-After", Retry{Classify: retryAll},
			func(s *State) { s.Outcome.Response = r429("5") }, ReasonRetry, 5 * time.Second, 0},
		{"a custom classifier's retry honours MaxRetryAfter", Retry{Classify: retryAll, MaxRetryAfter: 10 * time.Second},
			func(s *State) { s.Outcome.Response = r429("11") }, ReasonRetryAfterTooLong, 0, 0},
		{"a custom classifier may say the wait itself", Retry{Classify: func(Outcome) Decision { return Decision{Retry: true, HasRetryAfter: true} }},
			func(s *State) { s.Outcome.Response = r429("5") }, ReasonRetry, time.Second, 0},
		{"wait would pass the deadline", Retry{}, func(s *State) { s.Deadline = testNow.Add(time.Second) }, ReasonWaitPastDeadline, time.Second, 0},
		{"wait ends before the deadline", Retry{}, func(s *State) { s.Deadline = testNow.Add(time.Second + 1) }, ReasonRetry, time.Second, 0},
		{"refused when the wait ends", Retry{}, func(s *State) {
			s.Refused = func(at time.Time) error {
				if at.Equal(testNow.Add(time.Second)) {
					return refused
				}
				return nil
			}
		}, ReasonRefused, time.Second, 0},
		{"budget spent", Retry{}, func(s *State) { s.Budget = func() bool { budgetCalls++; return false } }, ReasonBudgetSpent, time.Second, 1},
		{"budget not asked when the deadline stops it", Retry{}, func(s *State) {
			s.Deadline = testNow
			s.Budget = func() bool { budgetCalls++; return true }
		}, ReasonWaitPastDeadline, time.Second, 0},
		{"budget allows", Retry{}, func(s *State) { s.Budget = func() bool { budgetCalls++; return true } }, ReasonRetry, time.Second, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			budgetCalls = 0
			s := base()
			tt.edit(&s)
			tt.p.Backoff = Exponential(time.Second, time.Second)
			st := tt.p.Next(s)
			if st.Reason != tt.want || st.Retry != (tt.want == ReasonRetry) {
				t.Errorf("Next = (retry %v, %q), want %q", st.Retry, st.Reason, tt.want)
			}
			if st.Retry && st.Wait != tt.wantWait || tt.want == ReasonWaitPastDeadline && st.Wait != tt.wantWait {
				t.Errorf("Wait = %v, want %v", st.Wait, tt.wantWait)
			}
			if budgetCalls != tt.wantBudget {
				t.Errorf("Budget called %d times, want %d", budgetCalls, tt.wantBudget)
			}
			if tt.want == ReasonRefused && st.Refusal != refused {
				t.Errorf("Refusal = %v, want %v", st.Refusal, refused)
			}
		})
	}
}

// errUserLeft is the cause a caller cancels its operation with, or its
// deadline ends it with (context.WithTimeoutCause).
var errUserLeft = errors.New("user left")

// retryAll is a custom classifier that retries every outcome and says
// nothing of Retry-After.
func retryAll(Outcome) Decision { return Decision{Retry: true, Reason: "custom"} }

func TestReasonsAreDistinct(t *testing.T) {
	all := []Reason{ReasonRetry, ReasonCanceled, ReasonDeadline, ReasonCallerError, ReasonFinal, ReasonNotSafe,
		ReasonAttemptsUsed, ReasonBodyNotReplayable, ReasonRetryAfterTooLong, ReasonWaitPastDeadline, ReasonRefused, ReasonBudgetSpent}
	seen := map[Reason]bool{}
	for _, r := range all {
		if seen[r] || r == "" || strings.TrimSpace(string(r)) != string(r) {
			t.Errorf("reason %q is empty, padded or repeated", r)
		}
		seen[r] = true
	}
}
