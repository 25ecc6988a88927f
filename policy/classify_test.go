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
	tests := []struct {
		name       string
		o          Outcome
		retry      bool
		reason     string
		retryAfter time.Duration
	}{
		{"200", Outcome{Response: resp(200), Idempotent: true}, false, "status 200", 0},
		{"200 with x-should-retry is still final", Outcome{Response: resp(200, "X-Should-Retry", "true"), Idempotent: true}, false, "status 200", 0},
		{"404", Outcome{Response: resp(404), Idempotent: true}, false, "status 404", 0},
		{"408", Outcome{Response: resp(408), Idempotent: true}, true, "status 408", 0},
		{"429", Outcome{Response: resp(429), Idempotent: true}, true, "status 429", 0},
		{"429 retry-after", Outcome{Response: resp(429, "Retry-After", "7"), Idempotent: true}, true, "status 429", 7 * time.Second},
		{"500", Outcome{Response: resp(500), Idempotent: true}, true, "status 500", 0},
		{"501", Outcome{Response: resp(501), Idempotent: true}, false, "status 501", 0},
		{"502", Outcome{Response: resp(502), Idempotent: true}, true, "status 502", 0},
		{"503", Outcome{Response: resp(503), Idempotent: true}, true, "status 503", 0},
		{"504", Outcome{Response: resp(504), Idempotent: true}, true, "status 504", 0},
		{"529 overloaded", Outcome{Response: resp(529), Idempotent: true}, true, "status 529", 0},
		{"retry-after date against the server's Date", Outcome{Response: resp(503, "Retry-After", "Sat, 21 Nov 2026 09:00:30 GMT", "Date", "Sat, 21 Nov 2026 09:00:00 GMT"), Idempotent: true}, true, "status 503", 30 * time.Second},
		{"retry-after date with a garbage Date", Outcome{Response: resp(503, "Retry-After", "Sat, 21 Nov 2026 12:00:30 GMT", "Date", "yesterday"), Idempotent: true}, true, "status 503", 30 * time.Second},
		{"409 without key", Outcome{Response: resp(409), Idempotent: true}, false, "status 409", 0},
		{"409 with key (in flight)", Outcome{Response: resp(409, "Retry-After", "1"), Idempotent: true, Keyed: true}, true, "status 409", time.Second},
		{"503 POST without key", Outcome{Response: resp(503)}, false, "status 503, not idempotent", 0},
		{"x-should-retry false beats 503", Outcome{Response: resp(503, "X-Should-Retry", "false"), Idempotent: true}, false, "x-should-retry=false", 0},
		{"x-should-retry true beats 400", Outcome{Response: resp(400, "X-Should-Retry", "true"), Idempotent: true}, true, "x-should-retry=true", 0},
		{"stripe-should-retry false beats 500", Outcome{Response: resp(500, "Stripe-Should-Retry", "false"), Idempotent: true}, false, "stripe-should-retry=false", 0},
		{"garbage directive ignored", Outcome{Response: resp(503, "X-Should-Retry", "maybe"), Idempotent: true}, true, "status 503", 0},
		{"is_retriable false beats 503", Outcome{Response: resp(503), Problem: &Problem{Retriable: &no}, Idempotent: true}, false, "problem is_retriable=false", 0},
		{"is_retriable true beats 400", Outcome{Response: resp(400), Problem: &Problem{Retriable: &yes}, Idempotent: true}, true, "problem is_retriable=true", 0},
		{"directive beats problem", Outcome{Response: resp(400, "X-Should-Retry", "false"), Problem: &Problem{Retriable: &yes}, Idempotent: true}, false, "x-should-retry=false", 0},
		{"is_retriable true but not idempotent", Outcome{Response: resp(400), Problem: &Problem{Retriable: &yes}}, false, "problem is_retriable=true, not idempotent", 0},
		{"problem without is_retriable falls back to status", Outcome{Response: resp(503), Problem: &Problem{}, Idempotent: true}, true, "status 503", 0},
		{"canceled", Outcome{Err: fmt.Errorf("x: %w", context.Canceled), Idempotent: true}, false, "canceled", 0},
		{"attempt timeout", Outcome{Err: context.DeadlineExceeded, Idempotent: true}, true, "attempt timeout", 0},
		{"attempt timeout POST", Outcome{Err: context.DeadlineExceeded}, false, "attempt timeout, not idempotent", 0},
		{"dial error POST", Outcome{Err: dialErr}, true, "dial error", 0},
		{"reset GET", Outcome{Err: readErr, Idempotent: true}, true, "network error", 0},
		{"reset POST", Outcome{Err: readErr}, false, "network error, not idempotent", 0},
		{"unexpected EOF GET", Outcome{Err: io.ErrUnexpectedEOF, Idempotent: true}, true, "network error", 0},
		{"error says no", Outcome{Err: fmt.Errorf("wrapped: %w", permanent{}), Idempotent: true}, false, "error not retriable", 0},
		{"error says yes", Outcome{Err: permanent{true}}, true, "error says retriable", 0},
		{"certificate error", Outcome{Err: &net.OpError{Op: "remote error", Err: x509.UnknownAuthorityError{}}, Idempotent: true}, false, "tls certificate error", 0},
		{"no response no error", Outcome{}, false, "no response", 0},
		{"invalid request", Outcome{Request: &http.Request{Method: "GET", URL: &url.URL{Scheme: "ftp", Host: "x"}}, Err: errors.New(`unsupported protocol scheme "ftp"`), Idempotent: true}, false, "invalid request", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.Now = now
			d := DefaultClassifier(tt.o)
			if d.Retry != tt.retry || d.Reason != tt.reason {
				t.Errorf("DefaultClassifier = (retry %v, %q), want (retry %v, %q)", d.Retry, d.Reason, tt.retry, tt.reason)
			}
			if d.RetryAfter != tt.retryAfter {
				t.Errorf("RetryAfter = %v, want %v", d.RetryAfter, tt.retryAfter)
			}
		})
	}
}

func TestIsIdempotent(t *testing.T) {
	tests := []struct {
		method, key, header string
		want                bool
	}{
		{"GET", "", "", true},
		{"HEAD", "", "", true},
		{"OPTIONS", "", "", true},
		{"TRACE", "", "", true},
		{"PUT", "", "", true},
		{"DELETE", "", "", true},
		{"POST", "", "", false},
		{"PATCH", "", "", false},
		{"POST", "k1", "", true},
		{"PATCH", "k1", "", true},
		{"POST", "k1", "X-Request-Key", false}, // the key is in another header
		{"CONNECT", "", "", false},
	}
	for _, tt := range tests {
		r, _ := http.NewRequest(tt.method, "http://x.test/", nil)
		if tt.key != "" {
			r.Header.Set("Idempotency-Key", tt.key)
		}
		if got := IsIdempotent(r, tt.header); got != tt.want {
			t.Errorf("IsIdempotent(%s, key %q, header %q) = %v, want %v", tt.method, tt.key, tt.header, got, tt.want)
		}
	}
}

func TestRetryDefaults(t *testing.T) {
	var p Retry
	if got, want := p.Attempts(), 4; got != want {
		t.Errorf("Attempts() = %d, want %d", got, want)
	}
	if got, want := p.RetryAfterLimit(), time.Minute; got != want {
		t.Errorf("RetryAfterLimit() = %v, want %v", got, want)
	}
	if got, want := p.BufferLimit(), int64(1<<20); got != want {
		t.Errorf("BufferLimit() = %d, want %d", got, want)
	}
	if got, want := p.ProblemLimit(), int64(64<<10); got != want {
		t.Errorf("ProblemLimit() = %d, want %d", got, want)
	}
	if got, want := p.KeyHeader(), "Idempotency-Key"; got != want {
		t.Errorf("KeyHeader() = %q, want %q", got, want)
	}
	if p.BackoffFunc() == nil || p.Classifier() == nil {
		t.Error("default Backoff or Classifier is nil")
	}
}
