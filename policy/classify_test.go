package policy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"testing"
	"time"
)

type permanent struct{ retriable bool }

func (e permanent) Error() string   { return "permanent" }
func (e permanent) Retriable() bool { return e.retriable }

func TestDefaultClassifier(t *testing.T) {
	yes, no := true, false
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	resp := func(code int, kv ...string) *http.Response {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return &http.Response{StatusCode: code, Header: h}
	}
	dialErr := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	readErr := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	inFlight := &Problem{Type: "https://developer.example.com/idempotency", Title: "A request is outstanding for this Idempotency-Key"}
	tests := []struct {
		name       string
		o          Outcome
		retry      bool
		didNotAct  bool
		reason     string
		retryAfter time.Duration
	}{
		{"200", Outcome{Response: resp(200)}, false, false, "status 200", 0},
		{"200 with x-should-retry is still final", Outcome{Response: resp(200, "X-Should-Retry", "true")}, false, false, "status 200", 0},
		{"404", Outcome{Response: resp(404)}, false, false, "status 404", 0},
		{"408 may have acted", Outcome{Response: resp(408)}, true, false, "status 408", 0},
		{"429 did not act", Outcome{Response: resp(429)}, true, true, "status 429", 0},
		{"429 retry-after", Outcome{Response: resp(429, "Retry-After", "7")}, true, true, "status 429", 7 * time.Second},
		{"500 may have acted", Outcome{Response: resp(500)}, true, false, "status 500", 0},
		{"501", Outcome{Response: resp(501)}, false, false, "status 501", 0},
		{"502", Outcome{Response: resp(502)}, true, false, "status 502", 0},
		{"503", Outcome{Response: resp(503)}, true, false, "status 503", 0},
		{"504", Outcome{Response: resp(504)}, true, false, "status 504", 0},
		{"529 overloaded", Outcome{Response: resp(529)}, true, false, "status 529", 0},
		{"retry-after date against the server's Date", Outcome{Response: resp(503, "Retry-After", "Sat, 21 Nov 2026 09:00:30 GMT", "Date", "Sat, 21 Nov 2026 09:00:00 GMT")}, true, false, "status 503", 30 * time.Second},
		{"retry-after date with a garbage Date", Outcome{Response: resp(503, "Retry-After", "Sat, 21 Nov 2026 12:00:30 GMT", "Date", "yesterday")}, true, false, "status 503", 30 * time.Second},
		{"409 without key", Outcome{Response: resp(409, "Retry-After", "1"), Attempt: 2}, false, false, "status 409", time.Second},
		{"409 with key on a first attempt is the server's answer", Outcome{Response: resp(409), Keyed: true, Attempt: 1}, false, false, "status 409", 0},
		{"409 with key after the key was sent", Outcome{Response: resp(409), Keyed: true, Attempt: 2}, true, false, "status 409, key in flight", 0},
		{"409 with key and Retry-After (in flight)", Outcome{Response: resp(409, "Retry-After", "1"), Keyed: true, Attempt: 1}, true, false, "status 409, key in flight", time.Second},
		{"409 with key and the draft's problem", Outcome{Response: resp(409), Problem: inFlight, Keyed: true, Attempt: 1}, true, false, "status 409, key in flight", 0},
		{"409 with key and another problem", Outcome{Response: resp(409), Problem: &Problem{Type: "https://api.test/already-exists"}, Keyed: true, Attempt: 1}, false, false, "status 409", 0},
		{"x-should-retry false beats 503", Outcome{Response: resp(503, "X-Should-Retry", "false")}, false, false, "x-should-retry=false", 0},
		{"x-should-retry true beats 400", Outcome{Response: resp(400, "X-Should-Retry", "true")}, true, true, "x-should-retry=true", 0},
		{"stripe-should-retry true", Outcome{Response: resp(500, "Stripe-Should-Retry", "true")}, true, true, "stripe-should-retry=true", 0},
		{"stripe-should-retry false beats 500", Outcome{Response: resp(500, "Stripe-Should-Retry", "false")}, false, false, "stripe-should-retry=false", 0},
		{"garbage directive ignored", Outcome{Response: resp(503, "X-Should-Retry", "maybe")}, true, false, "status 503", 0},
		{"is_retriable false beats 503", Outcome{Response: resp(503), Problem: &Problem{Retriable: &no}}, false, false, "problem is_retriable=false", 0},
		{"is_retriable true beats 400", Outcome{Response: resp(400), Problem: &Problem{Retriable: &yes}}, true, true, "problem is_retriable=true", 0},
		{"directive beats problem", Outcome{Response: resp(400, "X-Should-Retry", "false"), Problem: &Problem{Retriable: &yes}}, false, false, "x-should-retry=false", 0},
		{"problem without is_retriable falls back to status", Outcome{Response: resp(503), Problem: &Problem{}}, true, false, "status 503", 0},
		{"canceled", Outcome{Err: fmt.Errorf("x: %w", context.Canceled)}, false, false, "canceled", 0},
		{"canceled with a cause", Outcome{Err: errors.New("user left"), CallerEnded: true, Canceled: true}, false, false, "canceled", 0},
		{"canceled with a cause, as a reset", Outcome{Err: readErr, CallerEnded: true, Canceled: true}, false, false, "canceled", 0},
		{"attempt timeout may have acted", Outcome{Err: context.DeadlineExceeded}, true, false, "attempt timeout", 0},
		{"dial error did not act", Outcome{Err: dialErr}, true, true, "dial error", 0},
		{"handshake EOF before any connection", Outcome{Err: io.EOF, NotConnected: true}, true, true, "no connection", 0},
		{"reset may have acted", Outcome{Err: readErr}, true, false, "network error", 0},
		{"unexpected EOF", Outcome{Err: io.ErrUnexpectedEOF}, true, false, "network error", 0},
		{"error says no", Outcome{Err: fmt.Errorf("wrapped: %w", permanent{})}, false, false, "error not retriable", 0},
		{"error says yes", Outcome{Err: permanent{true}}, true, false, "error says retriable", 0},
		{"certificate error", Outcome{Err: &net.OpError{Op: "remote error", Err: x509.UnknownAuthorityError{}}}, false, false, "tls certificate error", 0},
		{"no response no error", Outcome{}, false, false, "no response", 0},
		{"invalid request", Outcome{Request: &http.Request{Method: "GET", URL: &url.URL{Scheme: "ftp", Host: "x"}}, Err: errors.New(`unsupported protocol scheme "ftp"`)}, false, false, "invalid request", 0},
		{"body error", Outcome{Err: &net.OpError{Op: "readfrom", Err: &BodyError{ContentLength: -1, Err: errors.New("disk gone")}}}, false, false, "invalid request", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.Now = now
			d := DefaultClassifier(tt.o)
			if d.Retry != tt.retry || d.DidNotAct != tt.didNotAct || d.Reason != tt.reason {
				t.Errorf("DefaultClassifier = (retry %v, did not act %v, %q), want (retry %v, did not act %v, %q)",
					d.Retry, d.DidNotAct, d.Reason, tt.retry, tt.didNotAct, tt.reason)
			}
			if d.RetryAfter != tt.retryAfter {
				t.Errorf("RetryAfter = %v, want %v", d.RetryAfter, tt.retryAfter)
			}
		})
	}
}

func TestRetryWithDefaults(t *testing.T) {
	p := Retry{}.WithDefaults()
	if got, want := p.MaxAttempts, 4; got != want {
		t.Errorf("MaxAttempts = %d, want %d", got, want)
	}
	if got, want := p.MaxRetryAfter, time.Minute; got != want {
		t.Errorf("MaxRetryAfter = %v, want %v", got, want)
	}
	if got, want := p.MaxBufferedBody, int64(1<<20); got != want {
		t.Errorf("MaxBufferedBody = %d, want %d", got, want)
	}
	if got, want := p.MaxProblemBody, int64(64<<10); got != want {
		t.Errorf("MaxProblemBody = %d, want %d", got, want)
	}
	if got, want := p.IdempotencyHeader, "Idempotency-Key"; got != want {
		t.Errorf("IdempotencyHeader = %q, want %q", got, want)
	}
	if p.Backoff == nil || p.Classify == nil {
		t.Error("default Backoff or Classify is nil")
	}
	neg := Retry{MaxRetryAfter: -1, MaxBufferedBody: -1, MaxProblemBody: -1, MaxAttempts: 1}.WithDefaults()
	if neg.MaxRetryAfter != -1 || neg.MaxBufferedBody != -1 || neg.MaxProblemBody != -1 || neg.MaxAttempts != 1 {
		t.Errorf("WithDefaults changed set fields: %+v", neg)
	}
}
