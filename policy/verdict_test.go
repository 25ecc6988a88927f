package policy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
)

type refusal string

func (r refusal) Error() string     { return "refused: " + string(r) }
func (r refusal) RefusedBy() string { return string(r) }

func TestJudge(t *testing.T) {
	good, _ := http.NewRequest("POST", "https://api.example.com/v1", nil)
	bad, _ := http.NewRequest("GET", "https://api.example.com/v1", nil)
	bad.Header.Set("X-Bad", "a\x00b")
	resp := func(code int) *http.Response { return &http.Response{StatusCode: code} }
	dial := &net.OpError{Op: "dial", Err: errors.New("connection refused")}
	reset := &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}
	tests := []struct {
		name string
		o    Outcome
		want Verdict
	}{
		{"200", Outcome{Request: good, Response: resp(200)}, Verdict{Sent: true, Host: HostHealthy, Accepted: true}},
		{"429", Outcome{Request: good, Response: resp(429)}, Verdict{Sent: true, Host: HostHealthy, Lost: true}},
		{"500", Outcome{Request: good, Response: resp(500)}, Verdict{Sent: true, Host: HostFailing, Lost: true}},
		{"503", Outcome{Request: good, Response: resp(503)}, Verdict{Sent: true, Host: HostFailing, Overloaded: true, Lost: true}},
		{"529", Outcome{Request: good, Response: resp(529)}, Verdict{Sent: true, Host: HostFailing, Overloaded: true, Lost: true}},
		{"a reset", Outcome{Request: good, Err: reset}, Verdict{Sent: true, Host: HostFailing, Lost: true}},
		{"a failed dial", Outcome{Request: good, Err: dial}, Verdict{Host: HostFailing, Lost: true}},
		{"no connection made", Outcome{Request: good, Err: context.DeadlineExceeded, NotConnected: true}, Verdict{Host: HostFailing, Lost: true}},
		{"the caller's deadline", Outcome{Request: good, Err: context.DeadlineExceeded, CallerEnded: true}, Verdict{Sent: true, Lost: true}},
		{"the caller's cancel", Outcome{Request: good, Err: context.Canceled}, Verdict{Sent: true}},
		{"the caller's cancel with a cause", Outcome{Request: good, Err: errors.New("user left"), CallerEnded: true, Canceled: true}, Verdict{Sent: true}},
		{"the caller's deadline with a cause", Outcome{Request: good, Err: errors.New("user left"), CallerEnded: true}, Verdict{Sent: true, Lost: true}},
		{"a cancel that beats a reset", Outcome{Request: good, Err: reset, CallerEnded: true, Canceled: true}, Verdict{Sent: true}},
		{"an invalid request", Outcome{Request: bad, Err: errors.New("net/http: invalid header field value")}, Verdict{}},
		{"a body that fails", Outcome{Request: good, Err: &BodyError{ContentLength: 5}}, Verdict{}},
		{"an open breaker", Outcome{Request: good, Err: refusal(ReasonCircuitOpen)}, Verdict{Refusal: ReasonCircuitOpen}},
		{"a quota, wrapped", Outcome{Request: good, Err: errors.Join(errors.New("x"), refusal(ReasonRateLimited))}, Verdict{Refusal: ReasonRateLimited}},
	}
	for _, tt := range tests {
		if got := Judge(tt.o); got != tt.want {
			t.Errorf("%s: Judge = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
