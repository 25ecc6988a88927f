package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
)

// streamStep answers with a stream of contentType: n events, one every
// every (the first with the headers), then stalls (until the client goes
// away) when stall is set, else ends. delay holds the headers back.
func streamStep(contentType string, n int, every time.Duration, stall bool, delay time.Duration) httptestutil.Step {
	return httptestutil.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !wait(r, delay) {
			return
		}
		w.Header().Set("Content-Type", contentType)
		rc := http.NewResponseController(w)
		w.WriteHeader(200)
		rc.Flush()
		for i := range n {
			if i > 0 && !wait(r, every) {
				return
			}
			fmt.Fprintf(w, "data: {\"n\":%d}\n\n", i)
			rc.Flush()
		}
		if stall {
			<-r.Context().Done()
		}
	}))
}

// wait waits d, or until r's client goes away; it reports whether the
// whole wait passed.
func wait(r *http.Request, d time.Duration) bool { return waitCtx(r.Context(), d) }

// waitCtx waits d, or until ctx ends; it reports whether the whole wait
// passed.
func waitCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// readEvents reads SSE events from resp's body until it ends, and
// returns how many it got and how the body ended (nil at EOF).
func readEvents(resp *http.Response) (int, error) {
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	n := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			n++
		}
	}
	return n, sc.Err()
}

// The shapes of New's bounds, on virtual time: each case is one
// operation through New with the defaults unless stated.
func TestNewBoundsFitStreams(t *testing.T) {
	tests := []struct {
		name       string
		o          Options
		steps      []httptestutil.Step
		wantEvents int
		wantErr    string        // the *DeadlineError's Bound; "" for a body read whole
		wantLimit  time.Duration // and its Limit
		wantAt     time.Duration // when the operation ends (the last event or the cut)
		wantSlack  time.Duration // how much later than wantAt it may end
		wantReqs   int
	}{
		{
			name:       "15-minute SSE stream, an event every 30s, read whole under the defaults",
			steps:      []httptestutil.Step{streamStep("text/event-stream", 31, 30*time.Second, false, 0)},
			wantEvents: 31, wantAt: 15 * time.Minute, wantReqs: 1,
		},
		{
			name:       "an hour-long NDJSON stream, an event every 9 minutes, read whole under the defaults",
			steps:      []httptestutil.Step{streamStep("application/x-ndjson", 8, 9*time.Minute, false, 0)},
			wantEvents: 8, wantAt: 63 * time.Minute, wantReqs: 1,
		},
		{
			name:       "a stream that sends one event and stalls is cut after IdleTimeout",
			steps:      []httptestutil.Step{streamStep("text/event-stream; charset=utf-8", 1, 0, true, 0)},
			wantEvents: 1, wantErr: boundIdle, wantLimit: DefaultIdleTimeout,
			wantAt: DefaultIdleTimeout, wantSlack: DefaultIdleTimeout / 8, wantReqs: 1,
		},
		{
			name:       "a stream that stalls under a 30s IdleTimeout",
			o:          Options{IdleTimeout: 30 * time.Second},
			steps:      []httptestutil.Step{streamStep("application/jsonl", 3, time.Second, true, 0)},
			wantEvents: 3, wantErr: boundIdle, wantLimit: 30 * time.Second,
			wantAt: 32 * time.Second, wantSlack: 30 * time.Second / 8, wantReqs: 1,
		},
		{
			name:       "a body that is not a stream, trickling past Timeout, is cut at Timeout",
			o:          Options{Timeout: 10500 * time.Millisecond},
			steps:      []httptestutil.Step{streamStep("application/json", 100, time.Second, false, 0)},
			wantEvents: 11, wantErr: boundTimeout, wantLimit: 10500 * time.Millisecond,
			wantAt: 10500 * time.Millisecond, wantReqs: 1,
		},
		{
			name:       "AttemptTimeout 1s with a 10s stream, an event every 200ms: read whole",
			o:          Options{AttemptTimeout: time.Second},
			steps:      []httptestutil.Step{streamStep("text/event-stream", 51, 200*time.Millisecond, false, 0)},
			wantEvents: 51, wantAt: 10 * time.Second, wantReqs: 1,
		},
		{
			name:       "AttemptTimeout 1s with a 10s JSON body: read whole inside Timeout",
			o:          Options{AttemptTimeout: time.Second},
			steps:      []httptestutil.Step{streamStep("application/json", 51, 200*time.Millisecond, false, 0)},
			wantEvents: 51, wantAt: 10 * time.Second, wantReqs: 1,
		},
		{
			name: "AttemptTimeout 1s, first headers delayed 5s: cut, retried, the second attempt succeeds",
			o:    Options{AttemptTimeout: time.Second},
			steps: []httptestutil.Step{
				streamStep("text/event-stream", 3, time.Second, false, 5*time.Second),
				streamStep("text/event-stream", 3, time.Second, false, 0),
			},
			// 1s cut, 1s backoff, then 2s of events
			wantEvents: 3, wantAt: 4 * time.Second, wantReqs: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := httptestutil.NewRecorder(httptestutil.Script(tt.steps...))
				env := newFakeEnv(t, rec)
				c := newStack(env, tt.o)
				start := time.Now()
				resp, err := c.Get(env.url)
				if err != nil {
					t.Fatalf("Get: %v", err)
				}
				n, err := readEvents(resp)
				took := time.Since(start)
				if n != tt.wantEvents {
					t.Errorf("read %d events, want %d", n, tt.wantEvents)
				}
				if took < tt.wantAt || took > tt.wantAt+tt.wantSlack {
					t.Errorf("ended after %v, want %v (up to %v later)", took, tt.wantAt, tt.wantSlack)
				}
				checkCut(t, err, tt.wantErr, tt.wantLimit)
				synctest.Wait()
				reqs := rec.Requests()
				if len(reqs) != tt.wantReqs {
					t.Fatalf("server got %d requests, want %d", len(reqs), tt.wantReqs)
				}
				if tt.wantErr != "" {
					last := reqs[len(reqs)-1]
					if last.Disconnected.IsZero() || last.Disconnected.Sub(start) != took {
						t.Errorf("server saw the disconnect at %v, want %v", last.Disconnected.Sub(start), took)
					}
				}
			})
		})
	}
}

// checkCut checks that err is nil when bound is empty, and otherwise a
// *DeadlineError of that bound and limit that matches
// context.DeadlineExceeded and names both.
func checkCut(t *testing.T, err error, bound string, limit time.Duration) {
	t.Helper()
	if bound == "" {
		if err != nil {
			t.Errorf("body ended with %v, want EOF", err)
		}
		return
	}
	var de *DeadlineError
	if !errors.As(err, &de) || de.Bound != bound || de.Limit != limit {
		t.Fatalf("err = %v, want a *DeadlineError of %s %v", err, bound, limit)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("errors.Is(%v, context.DeadlineExceeded) = false, want true", err)
	}
	if msg := err.Error(); !strings.Contains(msg, bound) || !strings.Contains(msg, limit.String()) {
		t.Errorf("err = %q, want it to name %s and %v", msg, bound, limit)
	}
}

// A hung attempt under Timeout alone is cut at Timeout with an error that
// names it; under AttemptTimeout it is cut, retried and named too.
func TestNewBoundErrorsNameTheBound(t *testing.T) {
	tests := []struct {
		name      string
		o         Options
		wantBound string
		wantLimit time.Duration
		wantAt    time.Duration
	}{
		{"Timeout", Options{Timeout: 7 * time.Second}, boundTimeout, 7 * time.Second, 7 * time.Second},
		{"AttemptTimeout, attempts exhausted", Options{AttemptTimeout: 2 * time.Second, Retry: policy.Retry{MaxAttempts: 2}}, boundAttempt, 2 * time.Second, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				env := newFakeEnv(t, httptestutil.Hang())
				start := time.Now()
				_, err := newStack(env, tt.o).Get(env.url)
				checkCut(t, err, tt.wantBound, tt.wantLimit)
				if got := time.Since(start); got != tt.wantAt {
					t.Errorf("ended after %v, want %v", got, tt.wantAt)
				}
			})
		})
	}
}

// Deadline is a hard limit: it bounds a stream's body too.
func TestDeadlineBoundsStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := newFakeEnv(t, streamStep("text/event-stream", 100, time.Second, false, 0))
		c := &http.Client{Transport: Chain(env.base, Deadline(5500*time.Millisecond))}
		resp, err := c.Get(env.url)
		if err != nil {
			t.Fatal(err)
		}
		n, err := readEvents(resp)
		if n != 6 {
			t.Errorf("read %d events, want 6", n)
		}
		var de *DeadlineError
		if !errors.As(err, &de) || de.Bound != "" || de.Limit != 5500*time.Millisecond || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want the Deadline's *DeadlineError of 5.5s", err)
		}
	})
}

// A 101 Switching Protocols connection outlives every bound of New, and
// Deadline, which bounds the body "whatever it is", closes it when it
// runs out.
func TestUpgradeBounds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stack  func(env *fakeEnv) *http.Client
		usable bool // after a quiet minute
	}{
		{"New", func(env *fakeEnv) *http.Client {
			return newStack(env, Options{Timeout: time.Second, IdleTimeout: time.Second})
		}, true},
		{"Deadline", func(env *fakeEnv) *http.Client {
			return &http.Client{Transport: Chain(env.base, Deadline(time.Second))}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				env := newFakeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					conn, brw, err := http.NewResponseController(w).Hijack()
					if err != nil {
						t.Errorf("hijack: %v", err)
						return
					}
					defer conn.Close()
					brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
					brw.Flush()
					io.Copy(conn, brw)
				}))
				req, _ := http.NewRequest("GET", env.url, nil)
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", "echo")
				resp, err := tc.stack(env).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				rw, ok := resp.Body.(io.ReadWriteCloser)
				if !ok {
					t.Fatalf("101 body is a %T, want an io.ReadWriteCloser", resp.Body)
				}
				defer rw.Close()
				time.Sleep(time.Minute) // past every bound, quiet
				buf := make([]byte, 4)
				_, werr := io.WriteString(rw, "ping")
				_, rerr := io.ReadFull(rw, buf)
				if usable := werr == nil && rerr == nil && string(buf) == "ping"; usable != tc.usable {
					t.Errorf("echo after a quiet minute: write %v, read %q, %v; want usable %t", werr, buf, rerr, tc.usable)
				}
			})
		})
	}
}

// A bound judges the response it is handed: a response swapped on the
// way up (by a foreign wrapper, or a Retry handing back another
// attempt's) is judged by its own header. (Ported: the bound no longer
// reads a verdict recorded by the layer beneath; it reads the header of
// the response it holds, and this runs that through a stack.)
func TestBoundStreamOfJudgedResponse(t *testing.T) {
	sse := http.Header{"Content-Type": {"text/event-stream"}}
	plain := http.Header{"Content-Type": {"text/plain; charset=utf-8"}}
	tests := []struct {
		name          string
		judged, asked http.Header
		want          bool
	}{
		{"the judged plain response", plain, plain, false},
		{"the judged stream", sse, sse, true},
		{"a stream swapped in after a plain response was judged", plain, sse, true},
		{"a plain response swapped in after a stream was judged", sse, plain, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := Func(func(r *http.Request) (*http.Response, error) {
					ctx := r.Context()
					body := readerFunc(func(p []byte) (int, error) {
						if ctx.Err() != nil { // as net/http's bodies end with their context
							return 0, context.Cause(ctx)
						}
						return 0, io.EOF
					})
					return &http.Response{StatusCode: 200, Header: tt.judged, Body: io.NopCloser(body), Request: r}, nil
				})
				swap := func(next http.RoundTripper) http.RoundTripper {
					return Func(func(r *http.Request) (*http.Response, error) {
						resp, err := next.RoundTrip(r)
						if err == nil {
							resp.Header = tt.asked
						}
						return resp, err
					})
				}
				rt := New(Options{Base: Chain(base, swap), Timeout: time.Second, Disable: LayerRetry | LayerFirstEvent})
				req, _ := http.NewRequest("GET", "http://api.test/", nil)
				resp, err := rt.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				time.Sleep(2 * time.Second) // past Timeout: a stream's body is not bound by it
				_, rerr := io.ReadAll(resp.Body)
				if got := rerr == nil; got != tt.want {
					t.Errorf("body readable past Timeout = %v (err %v), want %v (judged as a stream)", got, rerr, tt.want)
				}
			})
		})
	}
}
