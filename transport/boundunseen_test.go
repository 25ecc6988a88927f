package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"testing/synctest"
	"time"
)

// sockTimeout is what a transport that enforces ctx.Deadline() as a
// socket deadline (conn.SetDeadline(dl), no Done) returns once it passes.
func sockTimeout() error { return &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded} }

// A base that enforces the bound through Deadline() only: the error is
// the bound's when the base also happened to call Done, and not when it
// did not. Same base, same timing.
func TestBoundDeadlineUnseenRoundTripError(t *testing.T) {
	for _, watch := range []bool{true, false} {
		t.Run(map[bool]string{true: "Done called", false: "Deadline only"}[watch], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := Func(func(r *http.Request) (*http.Response, error) {
					if watch {
						r.Context().Done()
					}
					dl, ok := r.Context().Deadline()
					if !ok {
						t.Fatal("no deadline")
					}
					time.Sleep(time.Until(dl) + time.Millisecond) // the socket deadline passes
					return nil, sockTimeout()
				})
				c := &http.Client{Transport: Chain(base, Deadline(time.Second))}
				_, err := c.Get("http://api.test/")
				var de *DeadlineError
				if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &de) {
					t.Errorf("err = %v; want the Deadline's *DeadlineError (errors.Is DeadlineExceeded)", err)
				}
			})
		})
	}
}

// The same on a body that is not a stream, read under New's Timeout (the
// full default stack).
func TestBoundDeadlineUnseenBodyError(t *testing.T) {
	for _, watch := range []bool{true, false} {
		t.Run(map[bool]string{true: "Done called", false: "Deadline only"}[watch], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := Func(func(r *http.Request) (*http.Response, error) {
					ctx := r.Context()
					if watch {
						ctx.Done()
					}
					dl, _ := deadlineOf(ctx) // New's Timeout is the operation's: a base that enforces it as a socket deadline
					body := readerFunc(func(p []byte) (int, error) {
						time.Sleep(time.Until(dl) + time.Millisecond)
						return 0, sockTimeout()
					})
					return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(body), Request: r}, nil
				})
				c := &http.Client{Transport: New(Options{Base: base, Timeout: time.Second})}
				resp, err := c.Get("http://api.test/")
				if err != nil {
					t.Fatal(err)
				}
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				var de *DeadlineError
				if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &de) || de.Bound != boundTimeout {
					t.Errorf("read err = %v; want the Timeout's *DeadlineError", err)
				}
				if cause := context.Cause(resp.Request.Context()); !errors.Is(cause, context.DeadlineExceeded) {
					t.Errorf("context.Cause after the deadline passed and the body was closed = %v", cause)
				}
			})
		})
	}
}

// A base that does slow work without watching (a signer, a cache, a
// middleware), then checks its context the way net/http's roundTrip
// does before it sends: select on Done with a default, then Err. The
// bound's deadline passed a second ago; a context.WithTimeout reports it
// on both; the bound reports neither, and the request goes out.
func TestBoundDoneAfterUnseenDeadline(t *testing.T) {
	for _, name := range []string{"context.WithTimeout", "Deadline"} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sent := false
				base := Func(func(r *http.Request) (*http.Response, error) {
					ctx := r.Context()
					time.Sleep(2 * time.Second) // slow work that does not watch ctx
					select {
					case <-ctx.Done():
						return nil, context.Cause(ctx)
					default:
					}
					if err := ctx.Err(); err != nil {
						return nil, err
					}
					sent = true
					return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
				})
				var rt http.RoundTripper = Chain(base, Deadline(time.Second))
				if name == "context.WithTimeout" {
					rt = Func(func(r *http.Request) (*http.Response, error) {
						ctx, cancel := context.WithTimeout(r.Context(), time.Second)
						defer cancel()
						return base(r.WithContext(ctx))
					})
				}
				req, _ := http.NewRequest("GET", "http://api.test/", nil)
				resp, err := rt.RoundTrip(req)
				if err == nil {
					resp.Body.Close()
				}
				if sent {
					t.Errorf("the request was sent 1s after the deadline: Done open and Err nil after it passed (err=%v)", err)
				}
			})
		})
	}
}

// The caller's cancel reaches a bound through context.AfterFunc, on a
// goroutine of its own; until it runs, Err must still be the parent's,
// as a context.WithCancel's is from the moment its parent is canceled.
// In a bubble that goroutine cannot run before the base looks.
func TestBoundErrAtOnceAfterParentCancel(t *testing.T) {
	stacks := []struct {
		name  string
		stack func(http.RoundTripper) http.RoundTripper
	}{
		{"Deadline", func(b http.RoundTripper) http.RoundTripper { return Chain(b, Deadline(time.Minute)) }},
		{"New", func(b http.RoundTripper) http.RoundTripper {
			return New(Options{Base: b, AttemptTimeout: time.Minute})
		}},
	}
	for _, s := range stacks {
		for _, watch := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/watched=%t", s.name, watch), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ctx, cancel := context.WithCancel(context.Background())
					base := Func(func(r *http.Request) (*http.Response, error) {
						rctx := r.Context()
						if watch {
							rctx.Done()
						}
						cancel()
						if got := rctx.Err(); got != context.Canceled {
							t.Errorf("Err() right after the caller's cancel = %v; want %v", got, context.Canceled)
						}
						select {
						case <-rctx.Done():
						default:
							t.Error("Done() still open once Err() reported the cancel")
						}
						return nil, rctx.Err()
					})
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.test/", nil)
					_, err := (&http.Client{Transport: s.stack(base)}).Do(req)
					if !errors.Is(err, context.Canceled) {
						t.Errorf("err = %v; want context.Canceled", err)
					}
				})
			})
		}
	}
}
