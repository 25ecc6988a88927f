package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"
)

// A bound makes its timer only once something waits for its context to
// end; until then its deadline is read off the clock. Each case runs a
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
				return ctx.Err()
			},
			wantErr: context.DeadlineExceeded,
			wantAt:  2 * time.Second,
		},
		{
			name: "Err polled before the deadline",
			use: func(ctx context.Context) error {
				time.Sleep(500 * time.Millisecond)
				return ctx.Err()
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
				return ctx.Err()
			},
			wantErr: context.DeadlineExceeded,
			wantAt:  2 * time.Second,
		},
		{
			name: "Done asked after the deadline is closed",
			use: func(ctx context.Context) error {
				time.Sleep(2 * time.Second)
				<-ctx.Done()
				return ctx.Err()
			},
			wantErr: context.DeadlineExceeded,
			wantAt:  2 * time.Second,
		},
		{
			name: "Done asked before the deadline closes at it",
			use: func(ctx context.Context) error {
				time.Sleep(300 * time.Millisecond)
				<-ctx.Done()
				return ctx.Err()
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
				return ctx.Err()
			},
			wantErr: context.DeadlineExceeded,
			wantAt:  time.Second,
		},
		{
			name:    "attempt bound: the Timeout's deadline passed unseen",
			attempt: 5 * time.Second,
			use: func(ctx context.Context) error {
				time.Sleep(2 * time.Second)
				return ctx.Err()
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
				return ctx.Err()
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
				return ctx.Err()
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
// the bare transport does plus one object: the Timeout bound's context,
// request copy and body wrapper, made together. No timer is made.
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
	if want := bare + 1; got != want {
		t.Errorf("New GET: %v allocations, want %v (bare %v + 1)", got, want, bare)
	}
}

// The context and the body wrapper share their allocation with the
// request copy (304 bytes in Go 1.26): kept to 176 bytes, the whole stays
// in the 480-byte size class. Each byte more is paid for by every request
// (a 576-byte object cost about 20 ns more a GET than this one).
func TestBoundOpSize(t *testing.T) {
	got := unsafe.Sizeof(boundCtx{}) + unsafe.Sizeof(boundBody{})
	if want := uintptr(176); got > want {
		t.Errorf("boundCtx + boundBody = %d bytes; want at most %d", got, want)
	}
}

func TestIsStream(t *testing.T) {
	tests := []struct {
		contentType string
		want        bool
	}{
		{"", false},
		{"application/json", false},
		{"application/json; charset=utf-8", false},
		{"text/plain", false},
		{"text/event-stream", true},
		{"Text/Event-Stream; charset=utf-8", true},
		{"  text/event-stream  ", true},
		{"application/x-ndjson", true},
		{"application/jsonl", true},
		{"application/json-seq", true},
		{"application/grpc", true},
		{"application/grpc+proto", true},
		{"application/grpc-web-text", true},
		{"application/grpc-web", true},
		{"application/grpc-web; charset=utf-8", true},
		{"application/grpc-web+proto", true},
		{"application/connect+json", true},
		{"application/connect+", false},
		{"application/grpcx", false},
		{"application/vnd.amazon.eventstream", true},
		{"multipart/x-mixed-replace; boundary=x", true},
		{"multipart/form-data", false},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.contentType != "" {
			h.Set("Content-Type", tt.contentType)
		}
		if got := isStream(&http.Response{Header: h}); got != tt.want {
			t.Errorf("isStream(%q) = %v, want %v", tt.contentType, got, tt.want)
		}
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
			if dl, ok = r.Context().Deadline(); !ok {
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
			time.Sleep(90 * time.Minute) // the bubble's clock, far from clockBase's
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

// The ways a bound's context ends, raced: a bound under a cancelable
// parent and a bound under that one; the parent is canceled and the outer
// bound released (or cut by its microsecond deadline) while other
// goroutines ask Done, Err, Cause and AfterFunc. Every Done closes, every
// AfterFunc runs, Err is set once Done is closed, and Cause agrees with
// Err. Run it with -race.
func TestBoundCtxConcurrentEnds(t *testing.T) {
	for i := 0; i < 3000; i++ {
		pctx, pcancel := context.WithCancel(context.Background())
		b1 := newBound(nil, boundOperation, time.Duration(i%3)*time.Microsecond, 0, boundTimeout, 0)
		b2 := newBound(nil, boundHeaders, time.Duration(i%5)*time.Microsecond, 0, boundAttempt, 0)
		c1 := &boundCtx{}
		c1.start(pctx, b1, clockNow())
		c2 := &boundCtx{}
		c2.start(c1, b2, clockNow())
		var wg sync.WaitGroup
		ran := make(chan struct{}, 2)
		wg.Add(6)
		go func() { defer wg.Done(); pcancel() }()
		go func() { defer wg.Done(); c1.release() }()
		go func() { defer wg.Done(); c2.AfterFunc(func() { ran <- struct{}{} }) }()
		go func() { defer wg.Done(); context.AfterFunc(c2, func() { ran <- struct{}{} }) }()
		go func() { defer wg.Done(); c2.Err(); context.Cause(c2) }()
		go func() {
			defer wg.Done()
			select {
			case <-c2.Done():
			case <-time.After(5 * time.Second):
				t.Errorf("iteration %d: c2.Done never closed (Err %v)", i, c2.Err())
				return
			}
			if c2.Err() == nil {
				t.Errorf("iteration %d: Done closed, Err nil", i)
			}
		}()
		wg.Wait()
		for j := 0; j < 2; j++ {
			select {
			case <-ran:
			case <-time.After(5 * time.Second):
				t.Fatalf("iteration %d: an AfterFunc never ran", i)
			}
		}
		err, cause := c2.Err(), context.Cause(c2)
		if err == nil || cause == nil {
			t.Fatalf("iteration %d: Err %v Cause %v", i, err, cause)
		}
		var de *DeadlineError
		if errors.As(cause, &de) != (err == context.DeadlineExceeded) {
			t.Fatalf("iteration %d: Err %v but Cause %v", i, err, cause)
		}
		if t.Failed() {
			return
		}
	}
}
