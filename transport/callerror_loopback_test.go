package transport

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sturdyhttp/sturdy/policy"
)

// A request whose body turns out longer than its ContentLength as it is
// sent is the caller's error on HTTP/2 as on HTTP/1: net/http's HTTP/2
// transport reports it as "http2: request body larger than specified
// content length", an error of no type, in place of the body's own
// *policy.BodyError; the stack still returns an error that matches
// policy.ErrInvalidRequest, makes one attempt, and counts nothing against
// the host (a breaker that opens after 2 failures stays closed). Over
// HTTP/1.1 the server may answer the declared bytes before net/http finds
// the extra one; that answer is then the outcome, once.
func TestBodyLongerThanContentLengthIsCallerErrorOverLoopback(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			u, base := loopback(t, p.major, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				io.WriteString(w, "ok")
			}))
			var attempts atomic.Int64
			c := &http.Client{Transport: New(Options{
				Base:    base,
				Retry:   policy.Retry{Backoff: constant(0)},
				Breaker: BreakerSettings{ConsecutiveFailures: 2},
				Hooks:   Hooks{OnAttempt: func(policy.AttemptEvent) { attempts.Add(1) }},
			})}
			for _, tc := range []struct {
				name string
				make func() *http.Request
			}{
				{"bare reader (kept as sent)", func() *http.Request {
					r, _ := http.NewRequest("PUT", u+"/a", onlyReader{strings.NewReader("abcdef")})
					r.ContentLength = 5
					return r
				}},
				{"bare reader with GetBody", func() *http.Request {
					r, _ := http.NewRequest("PUT", u+"/a", onlyReader{strings.NewReader("abcdef")})
					r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(onlyReader{strings.NewReader("abcdef")}), nil }
					r.ContentLength = 5
					return r
				}},
			} {
				for range 3 {
					before := attempts.Load()
					resp, err := c.Do(tc.make())
					switch {
					case err == nil && p.major == 1:
						// The server read the declared 5 bytes, a whole
						// request, and may answer before net/http finds
						// the sixth: its answer is then the outcome, as it
						// is without the stack.
						readAll(t, resp)
					case err == nil:
						readAll(t, resp)
						t.Fatalf("%s: got status %d, want an error", tc.name, resp.StatusCode)
					case !errors.Is(err, policy.ErrInvalidRequest):
						t.Errorf("%s: err = %v, want one that matches policy.ErrInvalidRequest", tc.name, err)
					}
					if got, want := attempts.Load()-before, int64(1); got != want {
						t.Errorf("%s: attempts = %d, want %d", tc.name, got, want)
					}
				}
			}
			resp, err := c.Get(u + "/health")
			if err != nil {
				t.Fatalf("healthy GET after the caller's bad requests: %v, want success", err)
			}
			if got, want := readAll(t, resp), "ok"; got != want {
				t.Errorf("body = %q, want %q", got, want)
			}
		})
	}
}
