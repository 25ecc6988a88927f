package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"
)

// ctxErr is how the base sees ctx end: its cause, which for a bound's
// cut is the bound's *DeadlineError (errors.Is DeadlineExceeded). The
// bounds of New end their contexts with context.WithCancelCause, whose
// Err is context.Canceled: a standard library context that reports
// DeadlineExceeded ends at its deadline, and a stream must outlive
// Timeout. (Ported from ctx.Err(), which the private context runtime
// made DeadlineExceeded.)
func ctxErr(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	return context.Cause(ctx)
}

// A bound's deadline cuts the attempt at the deadline, whoever waits. Each case runs a
// base transport that uses the attempt's context in one way, on virtual
// time, through New with Timeout 1 s (and AttemptTimeout when set), and
// checks what the base saw and when.
func TestBoundDeadlineWithoutWatchers(t *testing.T) {
	tests := []struct {
		name    string
		attempt time.Duration // New's AttemptTimeout; 0: none
		use     func(ctx context.Context) error
		wantErr error         // what use returns
		wantAt  time.Duration // when use returns, from the start
	}{
		{
			name: "Err polled after the deadline",
			use: func(ctx context.Context) error {
				time.Sleep(2 * time.Second)
				return ctxErr(ctx)
			},
			wantErr: context.DeadlineExceeded,
			wantAt:  2 * time.Second,
		},
		{
			name: "Err polled before the deadline",
			use: func(ctx context.Context) error {
				time.Sleep(500 * time.Millisecond)
				return ctxErr(ctx)
			},
			wantErr: nil,
			wantAt:  500 * time.Millisecond,
		},
		{
			name: "Cause asked after the deadline",
			use: func(ctx context.Context) error {
				time.Sleep(2 * time.Second)
				var de *DeadlineError
				if !errors.As(context.Cause(ctx), &de) || de.Bound != boundTimeout {
					return errors.New("cause is not the Timeout's DeadlineError")
				}
				return ctxErr(ctx)
			},
			wantErr: context.DeadlineExceeded,
			wantAt:  2 * time.Second,
		},
		{
			name: "Done asked after the deadline is closed",
			use: func(ctx context.Context) error {
				time.Sleep(2 * time.Second)
				<-ctx.Done()
				return ctxErr(ctx)
			},
			wantErr: context.DeadlineExceeded,
			wantAt:  2 * time.Second,
		},
		{
			name: "Done asked before the deadline closes at it",
			use: func(ctx context.Context) error {
				time.Sleep(300 * time.Millisecond)
				<-ctx.Done()
				return ctxErr(ctx)
			},
			wantErr: context.DeadlineExceeded,
			wantAt:  time.Second,
		},
		{
			name: "AfterFunc runs at the deadline",
			use: func(ctx context.Context) error {
				ran := make(chan struct{})
				context.AfterFunc(ctx, func() { close(ran) })
				<-ran
				return ctxErr(ctx)
			},
			wantErr: context.DeadlineExceeded,
			wantAt:  time.Second,
		},
		{
			name:    "attempt bound: the Timeout's deadline passed unseen",
			attempt: 5 * time.Second,
			use: func(ctx context.Context) error {
				time.Sleep(2 * time.Second)
				return ctxErr(ctx)
			},
			wantErr: context.DeadlineExceeded,
			wantAt:  2 * time.Second,
		},
		{
			name:    "attempt bound: waiting on it watches the Timeout",
			attempt: 5 * time.Second,
			use: func(ctx context.Context) error {
				<-ctx.Done()
				var de *DeadlineError
				if !errors.As(context.Cause(ctx), &de) || de.Bound != boundTimeout {
					return errors.New("cause is not the Timeout's DeadlineError")
				}
				return ctxErr(ctx)
			},
			wantErr: context.DeadlineExceeded,
			wantAt:  time.Second,
		},
		{
			name:    "attempt bound: its own deadline, waited for",
			attempt: 300 * time.Millisecond,
			use: func(ctx context.Context) error {
				<-ctx.Done()
				var de *DeadlineError
				if !errors.As(context.Cause(ctx), &de) || de.Bound != boundAttempt {
					return errors.New("cause is not the AttemptTimeout's DeadlineError")
				}
				return ctxErr(ctx)
			},
			wantErr: context.DeadlineExceeded,
			wantAt:  300 * time.Millisecond,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var (
					gotErr error
					gotAt  time.Duration
				)
				start := time.Now()
				base := Func(func(r *http.Request) (*http.Response, error) {
					if gotAt == 0 { // the first attempt only
						gotErr = tt.use(r.Context())
						gotAt = time.Since(start)
					}
					if err := r.Context().Err(); err != nil {
						return nil, err
					}
					return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}, nil
				})
				rt := New(Options{Base: base, Timeout: time.Second, AttemptTimeout: tt.attempt, Disable: LayerRetry})
				req, _ := http.NewRequest("GET", "http://api.test/", nil)
				resp, err := rt.RoundTrip(req)
				if err == nil {
					resp.Body.Close()
				}
				if !errors.Is(gotErr, tt.wantErr) && gotErr != tt.wantErr {
					t.Errorf("the base saw %v, want %v", gotErr, tt.wantErr)
				}
				if gotAt != tt.wantAt {
					t.Errorf("the base returned after %v, want %v", gotAt, tt.wantAt)
				}
			})
		})
	}
}

// A body read under an unwatched bound is still cut at the deadline
// once something waits: here, a Read that blocks on the context, as
// net/http's bodies do.
func TestBoundBodyUnwatchedUntilRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := Func(func(r *http.Request) (*http.Response, error) {
			ctx := r.Context()
			body := readerFunc(func(p []byte) (int, error) {
				<-ctx.Done()
				return 0, context.Cause(ctx)
			})
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(body)}, nil
		})
		rt := New(Options{Base: base, Timeout: time.Second})
		req, _ := http.NewRequest("GET", "http://api.test/", nil)
		start := time.Now()
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		var de *DeadlineError
		if !errors.As(err, &de) || de.Bound != boundTimeout {
			t.Errorf("read error: got %v, want the Timeout's *DeadlineError", err)
		}
		if got, want := time.Since(start), time.Second; got != want {
			t.Errorf("body cut after %v, want %v", got, want)
		}
	})
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// On a request that an in-memory transport answers, New allocates what
// the bare transport does plus six objects: the Timeout bound's watch,
// scope, operation, request copy and body wrapper, made together; the
// standard library's cancelable context and its cancel function; the
// value context that carries the scope; and the timer that enforces the
// deadline, with its function. (It was one object with the private
// context runtime, which made its timer only once something waited on
// the context: the standard library's contexts cannot tell.)
func TestNewSuccessAllocations(t *testing.T) {
	rt := New(Options{Base: memBase})
	req, _ := http.NewRequest("GET", "http://api.test/v1/things", nil)
	do := func(rt http.RoundTripper) func() {
		return func() {
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	do(rt)() // the host's state is made on first use
	bare := testing.AllocsPerRun(200, do(memBase))
	got := testing.AllocsPerRun(200, do(rt))
	if want := bare + 6; got != want {
		t.Errorf("New GET: %v allocations, want %v (bare %v + 6)", got, want, bare)
	}
}

// The bound's clock (clockNow, one monotonic read) gives the deadline a
// caller would compute with time.Now, inside a synctest bubble, whose
// times have no monotonic reading, exactly, and outside one within the
// time the call took.
func TestBoundDeadlineIsStartPlusTimeout(t *testing.T) {
	const timeout = 7 * time.Second
	deadlineOf := func(t *testing.T) (before, after, dl time.Time) {
		base := Func(func(r *http.Request) (*http.Response, error) {
			var ok bool
			if dl, ok = deadlineOf(r.Context()); !ok {
				t.Error("the attempt's context has no deadline")
			}
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}, nil
		})
		rt := New(Options{Base: base, Timeout: timeout})
		req, _ := http.NewRequest("GET", "http://api.test/", nil)
		before = time.Now()
		resp, err := rt.RoundTrip(req)
		after = time.Now()
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return before, after, dl
	}
	t.Run("bubble", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			time.Sleep(90 * time.Minute) // the bubble's clock, far from timecut.Base's
			before, _, dl := deadlineOf(t)
			if want := before.Add(timeout); !dl.Equal(want) {
				t.Errorf("deadline %v, want %v", dl, want)
			}
			if got := time.Until(dl); got != timeout {
				t.Errorf("time.Until(deadline) = %v, want %v", got, timeout)
			}
		})
	})
	t.Run("real clock", func(t *testing.T) {
		before, after, dl := deadlineOf(t)
		if dl.Before(before.Add(timeout)) || dl.After(after.Add(timeout)) {
			t.Errorf("deadline %v, want between %v and %v", dl, before.Add(timeout), after.Add(timeout))
		}
		if left := time.Until(dl); left <= 0 || left > timeout {
			t.Errorf("time.Until(deadline) = %v, want in (0, %v]", left, timeout)
		}
	})
}
