package httptestutil

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestRecorderRecords(t *testing.T) {
	var nextSaw []byte
	h := func() http.Handler {
		nextSaw = nil
		return NewRecorder(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			nextSaw, _ = io.ReadAll(r.Body)
			time.Sleep(10 * time.Millisecond)
			w.WriteHeader(201)
		}))
	}
	for _, b := range beds {
		t.Run(b.name, func(t *testing.T) {
			rec := h().(*Recorder)
			b.run(t, rec, func(t *testing.T, c *http.Client, url string) {
				start := time.Now()
				req, _ := http.NewRequest("PUT", url+"/items/7?x=1", strings.NewReader(`{"a":1}`))
				req.Header.Set("Idempotency-Key", "k1")
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				reqs := rec.Requests()
				if len(reqs) != 1 {
					t.Fatalf("recorded %d requests, want 1", len(reqs))
				}
				r := reqs[0]
				if r.Method != "PUT" || r.URL.Path != "/items/7" || r.URL.RawQuery != "x=1" {
					t.Errorf("recorded %s %s, want PUT /items/7?x=1", r.Method, r.URL)
				}
				if got, want := r.Header.Get("Idempotency-Key"), "k1"; got != want {
					t.Errorf("Idempotency-Key = %q, want %q", got, want)
				}
				if got, want := string(r.Body), `{"a":1}`; got != want {
					t.Errorf("recorded body = %q, want %q", got, want)
				}
				if got, want := string(nextSaw), `{"a":1}`; got != want {
					t.Errorf("next handler read %q, want %q", got, want)
				}
				if r.BodyTruncated || r.BodyErr != nil {
					t.Errorf("BodyTruncated, BodyErr = %v, %v; want false, nil", r.BodyTruncated, r.BodyErr)
				}
				if !r.Disconnected.IsZero() {
					t.Errorf("Disconnected = %v, want zero (the handler finished first)", r.Disconnected)
				}
				if r.Arrived.Before(start) {
					t.Errorf("Arrived = %v, before the request was sent at %v", r.Arrived, start)
				}
				if got := r.Finished.Sub(r.Arrived); b.virtual && got != 10*time.Millisecond {
					t.Errorf("Finished - Arrived = %v, want 10ms", got)
				}
			})
		})
	}
}

func TestRecorderDisconnect(t *testing.T) {
	for _, b := range beds {
		if !b.virtual {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			rec := NewRecorder(Hang())
			b.run(t, rec, func(t *testing.T, c *http.Client, url string) {
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
				if _, err := c.Do(req); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("err = %v, want DeadlineExceeded", err)
				}
				synctest.Wait()
				r := rec.Requests()[0]
				if got, want := r.Disconnected.Sub(start), 2*time.Second; got != want {
					t.Errorf("Disconnected after %v, want %v", got, want)
				}
				if r.Finished.IsZero() {
					t.Errorf("Finished is zero, want the time Hang returned")
				}
				if got := rec.InFlight(); got != 0 {
					t.Errorf("InFlight() = %d, want 0", got)
				}
			})
		})
	}
}

// TestRecorderDisconnectBeforeWatcher pins the window that made
// TestRecorderDisconnect flaky under -race: the request's context ends,
// the handler sees Done and returns, and only then would the context
// package start the Recorder's AfterFunc watcher. The recorder must still
// report the disconnect. lateCtx reproduces the window every time: it
// ends without ever running the functions registered on it.
func TestRecorderDisconnectBeforeWatcher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := &lateCtx{Context: context.Background(), done: make(chan struct{})}
		rec := NewRecorder(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(2 * time.Second)
			ctx.end()
			<-r.Context().Done()
		}))
		start := time.Now()
		req := httptest.NewRequestWithContext(ctx, "GET", "http://x.test/", nil)
		rec.ServeHTTP(httptest.NewRecorder(), req)
		r := rec.Requests()[0]
		if got, want := r.Disconnected.Sub(start), 2*time.Second; r.Disconnected.IsZero() || got != want {
			t.Errorf("Disconnected = %v (%v after start), want 2s after start", r.Disconnected, got)
		}
		if got := rec.InFlight(); got != 0 {
			t.Errorf("InFlight() = %d, want 0", got)
		}
	})
}

// lateCtx is a context that ends when end is called but never runs the
// functions given to its AfterFunc (context.AfterFunc uses that method
// when a parent has it): the watcher is always too late.
type lateCtx struct {
	context.Context
	mu   sync.Mutex
	done chan struct{}
	err  error
}

func (c *lateCtx) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = context.Canceled
	close(c.done)
}

func (c *lateCtx) Done() <-chan struct{} { return c.done }

func (c *lateCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *lateCtx) AfterFunc(func()) (stop func() bool) {
	return func() bool { return true }
}

// TestRecorderLoopbackDisconnect runs on loopback: it is about the server
// seeing a client close its connection. The client goes away only once
// the request has arrived, and the test waits for the handler to end
// rather than for a time, so a busy machine cannot make it fail.
func TestRecorderLoopbackDisconnect(t *testing.T) {
	arrived := make(chan struct{})
	rec := NewRecorder(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
	}))
	served := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(served)
		rec.ServeHTTP(w, r)
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cancelled time.Time
	go func() {
		<-arrived
		cancelled = time.Now()
		cancel()
	}()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	if resp, err := srv.Client().Do(req); !errors.Is(err, context.Canceled) {
		if err == nil {
			resp.Body.Close()
		}
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	<-served // the handler returns once the server sees the connection close
	reqs := rec.Requests()
	if len(reqs) != 1 {
		t.Fatalf("recorded %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Disconnected.IsZero() || r.Disconnected.Before(cancelled) || r.Disconnected.After(r.Finished) {
		t.Errorf("Disconnected = %v, want a time between the cancel at %v and the handler's end at %v", r.Disconnected, cancelled, r.Finished)
	}
	if got := rec.InFlight(); got != 0 {
		t.Errorf("InFlight() = %d, want 0", got)
	}
}

func TestRecorderCounters(t *testing.T) {
	tests := []struct {
		name         string
		concurrent   int
		keepAlive    bool
		wantInFlight int
		wantConns    int
	}{
		{"sequential keep-alive", 1, true, 1, 1},
		{"sequential no keep-alive", 1, false, 1, 6},
		{"parallel", 6, true, 6, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := NewRecorder(Delay(time.Second, Status(200, "ok")))
				n := NewNetwork()
				srv := n.Start("api.test", &http.Server{Handler: rec, ConnState: rec.ConnState})
				defer srv.Close()
				tr := n.Transport()
				tr.DisableKeepAlives = !tt.keepAlive
				defer tr.CloseIdleConnections()
				c := &http.Client{Transport: tr}
				send := func() {
					resp, err := c.Get(srv.URL)
					if err != nil {
						t.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				for range 6 / tt.concurrent {
					var wg sync.WaitGroup
					for range tt.concurrent {
						wg.Go(send)
					}
					wg.Wait()
				}
				rec.WantCount(t, 6)
				if got := rec.MaxInFlight(); got != tt.wantInFlight {
					t.Errorf("MaxInFlight() = %d, want %d", got, tt.wantInFlight)
				}
				if got := rec.NewConns(); got != tt.wantConns {
					t.Errorf("NewConns() = %d, want %d", got, tt.wantConns)
				}
			})
		})
	}
}

func TestRecorderLoopbackConns(t *testing.T) {
	rec := NewRecorder(nil)
	srv := httptest.NewUnstartedServer(rec)
	srv.Config.ConnState = rec.ConnState
	srv.Start()
	defer srv.Close()
	// One connection at most: http.Transport puts a connection back in
	// its pool from another goroutine after the body is read, and a
	// request sent before that would dial a second one on a busy machine.
	// A connection that could not be reused still shows: the transport
	// closes it and dials again.
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.MaxConnsPerHost = 1
	c := &http.Client{Transport: tr}
	defer c.CloseIdleConnections()
	for range 3 {
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	rec.WantCount(t, 3)
	rec.WantNewConns(t, 1)
}

func TestRecorderLargeBody(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789"), MaxRecordedBody/10+100)
	var nextGot int
	rec := NewRecorder(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		nextGot = len(b)
	}))
	rr := httptest.NewRecorder()
	rec.ServeHTTP(rr, httptest.NewRequest("POST", "/", bytes.NewReader(big)))
	r := rec.Requests()[0]
	if got, want := len(r.Body), MaxRecordedBody; got != want {
		t.Errorf("recorded %d bytes, want %d", got, want)
	}
	if !r.BodyTruncated {
		t.Errorf("BodyTruncated = false, want true")
	}
	if got, want := nextGot, len(big); got != want {
		t.Errorf("next handler read %d bytes, want %d", got, want)
	}
}

func TestRecorderBodyError(t *testing.T) {
	boom := errors.New("boom")
	var nextErr error
	rec := NewRecorder(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, nextErr = io.ReadAll(r.Body)
	}))
	req := httptest.NewRequest("POST", "/", io.MultiReader(strings.NewReader("abc"), errReader{boom}))
	rec.ServeHTTP(httptest.NewRecorder(), req)
	r := rec.Requests()[0]
	if string(r.Body) != "abc" || !errors.Is(r.BodyErr, boom) {
		t.Errorf("Body, BodyErr = %q, %v; want %q, %v", r.Body, r.BodyErr, "abc", boom)
	}
	if !errors.Is(nextErr, boom) {
		t.Errorf("next handler's read error = %v, want %v", nextErr, boom)
	}
}

func TestRecorderWantHelpers(t *testing.T) {
	rec := NewRecorder(nil)
	for _, key := range []string{"a", "a", "b"} {
		req := httptest.NewRequest("POST", "/", nil)
		req.Header.Set("Idempotency-Key", key)
		rec.ServeHTTP(httptest.NewRecorder(), req)
	}
	tests := []struct {
		name string
		call func(tb testing.TB)
		want string // "" for no failure
	}{
		{"count ok", func(tb testing.TB) { rec.WantCount(tb, 3) }, ""},
		{"count bad", func(tb testing.TB) { rec.WantCount(tb, 2) }, "server got 3 request(s), want 2:\n\tPOST / at"},
		{"in flight ok", func(tb testing.TB) { rec.WantMaxInFlight(tb, 1) }, ""},
		{"in flight bad", func(tb testing.TB) { rec.WantMaxInFlight(tb, 0) }, "served 1 request(s) at once, want at most 0"},
		{"conns bad", func(tb testing.TB) { rec.WantNewConns(tb, 1) }, "accepted 0 connection(s), want 1"},
		{"same header bad", func(tb testing.TB) { rec.WantSameHeader(tb, "Idempotency-Key") }, `request 3 has Idempotency-Key "b", want "a"`},
		{"same header missing", func(tb testing.TB) { rec.WantSameHeader(tb, "X-None") }, "request 1 has no X-None header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := &fakeTB{}
			tt.call(tb)
			switch {
			case tt.want == "" && len(tb.errors) != 0:
				t.Errorf("failures = %q, want none", tb.errors)
			case tt.want != "" && (len(tb.errors) != 1 || !strings.Contains(tb.errors[0], tt.want)):
				t.Errorf("failures = %q, want one containing %q", tb.errors, tt.want)
			}
		})
	}
}
