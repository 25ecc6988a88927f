package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-cleanhttp"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/policy"
)

// sideEffects is a server-side action that counts how often it is
// performed and what each attempt carried: the side effect the tests of
// "sent more than once only when that is safe" count.
type sideEffects struct {
	mu     sync.Mutex
	acts   int
	keys   []string
	bodies [][]byte
	status int // answer after acting; 0 means 200
}

func (s *sideEffects) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client went away: nothing done
	}
	s.mu.Lock()
	s.acts++
	s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
	s.bodies = append(s.bodies, b)
	s.mu.Unlock()
	if s.status != 0 {
		w.WriteHeader(s.status)
	}
	io.WriteString(w, "done")
}

func (s *sideEffects) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acts
}

// loopbackStack is the default stack (New with its default base, a
// pooled transport) with fast backoff, for tests about sockets.
func loopbackStack(t *testing.T, o Options) *http.Client {
	t.Helper()
	if o.Retry.Backoff == nil {
		o.Retry.Backoff = policy.Exponential(time.Millisecond, 5*time.Millisecond)
	}
	c := &http.Client{Transport: New(o)}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// Promise: a request is sent more than once only when that is safe. A
// POST nobody vouched for whose server acted and then failed (a 500, a
// reset after reading the body, a hang past AttemptTimeout, a reset on a
// reused keep-alive connection, where net/http would replay a keyed
// request by itself) is performed exactly once, through the default stack
// on loopback.
func TestUnvouchedPostActedOnOnce(t *testing.T) {
	tests := []struct {
		name    string
		step    func(act *sideEffects) httptestutil.Step
		reuse   bool // send a GET first, so the POST goes on a reused connection
		wantErr bool
		status  int
	}{
		{"act then 500", func(act *sideEffects) httptestutil.Step {
			act.status = 500
			return httptestutil.Handler(act)
		}, false, false, 500},
		{"act then reset after reading the body", func(act *sideEffects) httptestutil.Step {
			return httptestutil.CutAfter(act)
		}, false, true, 0},
		{"act then hang past AttemptTimeout", func(act *sideEffects) httptestutil.Step {
			return httptestutil.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				act.ServeHTTP(httptest.NewRecorder(), r)
				<-r.Context().Done()
			}))
		}, false, true, 0},
		{"reset on a reused keep-alive connection after reading", func(act *sideEffects) httptestutil.Step {
			return httptestutil.CutAfter(act)
		}, true, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			act := &sideEffects{}
			var steps []httptestutil.Step
			if tt.reuse {
				steps = append(steps, httptestutil.Status(200, "warm"))
			}
			steps = append(steps, tt.step(act), httptestutil.Handler(act).Forever())
			var conns atomic.Int64
			srv := httptest.NewUnstartedServer(httptestutil.Script(steps...))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			defer srv.Close()
			var attempts atomic.Int64
			c := loopbackStack(t, Options{AttemptTimeout: 200 * time.Millisecond, Hooks: Hooks{OnAttempt: func(policy.AttemptEvent) { attempts.Add(1) }}})
			if tt.reuse {
				resp, err := c.Get(srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				attempts.Store(0)
			}
			var reused bool
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				GotConn: func(i httptrace.GotConnInfo) { reused = reused || i.Reused },
			})
			req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/orders", strings.NewReader(`{"sku":"a"}`))
			resp, err := c.Do(req)
			if tt.wantErr {
				if err == nil {
					readAll(t, resp)
					t.Fatalf("got a response (status %d), want an error", resp.StatusCode)
				}
				var re *RetryError
				if !errors.As(err, &re) || re.Reason != policy.ReasonNotSafe || re.Attempts != 1 {
					t.Errorf("err = %v, want a *RetryError after 1 attempt with reason %q", err, policy.ReasonNotSafe)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if got := readAll(t, resp); resp.StatusCode != tt.status || got != "done" {
					t.Errorf("got %d %q, want %d %q: the outcome handed back as it is", resp.StatusCode, got, tt.status, "done")
				}
			}
			if got := act.count(); got != 1 {
				t.Errorf("side effect performed %d times, want exactly 1", got)
			}
			if got := attempts.Load(); got != 1 {
				t.Errorf("attempts = %d, want 1", got)
			}
			if k := act.keys[0]; k != "" {
				t.Errorf("Idempotency-Key = %q, want none on a request nobody vouched for", k)
			}
			if tt.reuse && (!reused || conns.Load() != 1) {
				t.Errorf("reused = %v over %d connections, want the POST on the reused one", reused, conns.Load())
			}
		})
	}
}

// Promise: a request is sent again when the outcome proves that the
// server did not act on it: the connection was never made, a 429, or the
// server says so (x-should-retry: true, a problem with is_retriable:
// true). A POST nobody vouched for, on loopback.
func TestRetriedWhenServerDidNotAct(t *testing.T) {
	tests := []struct {
		name  string
		first httptestutil.Step
		dial  bool // the first dial is refused instead
	}{
		{"dial refused then success", httptestutil.Step{}, true},
		{"429 then 200", httptestutil.Status(429, "slow down"), false},
		{"x-should-retry: true then 200", httptestutil.Status(503, "busy", "X-Should-Retry", "true"), false},
		{"Stripe-Should-Retry: true then 200", httptestutil.Status(500, "busy", "Stripe-Should-Retry", "true"), false},
		{"problem is_retriable: true then 200", httptestutil.Problem(503, httptestutil.ProblemBody{Title: "busy", Extensions: map[string]any{"is_retriable": true}}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			act := &sideEffects{}
			var steps []httptestutil.Step
			if !tt.dial {
				steps = append(steps, tt.first)
			}
			rec := httptestutil.NewRecorder(httptestutil.Script(append(steps, httptestutil.Handler(act).Forever())...))
			srv := httptest.NewServer(rec)
			defer srv.Close()

			base := cleanhttp.DefaultPooledTransport()
			if tt.dial {
				// A port nothing listens on: the kernel refuses the first dial.
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				closed := ln.Addr().String()
				ln.Close()
				var dials atomic.Int64
				d := &net.Dialer{}
				base.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
					if dials.Add(1) == 1 {
						return d.DialContext(ctx, network, closed)
					}
					return d.DialContext(ctx, network, addr)
				}
			}
			c := loopbackStack(t, Options{Base: base})
			resp, err := c.Post(srv.URL+"/orders", "application/json", strings.NewReader(`{"sku":"a"}`))
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, resp); resp.StatusCode != 200 || got != "done" {
				t.Errorf("got %d %q, want 200 %q", resp.StatusCode, got, "done")
			}
			if got := act.count(); got != 1 {
				t.Errorf("side effect performed %d times, want 1", got)
			}
			want := 2
			if tt.dial {
				want = 1 // the refused attempt never reached the server
			}
			rec.WantCount(t, want)
		})
	}
}

// Promise: the caller vouches for a request with its own key (in the
// header, or with idempotency.WithKey) or by listing its host in
// Idempotency.Hosts: then it is retried after any transient failure,
// every attempt with the same key and a byte-identical body.
func TestVouchedRetriedWithSameKeyAndBody(t *testing.T) {
	payload := bytes.Repeat([]byte("order\x00\xff"), 700)
	tests := []struct {
		name    string
		o       Options
		prepare func(*http.Request) *http.Request
		wantKey string // "" means a generated one
	}{
		{"caller's header", Options{}, func(r *http.Request) *http.Request {
			r.Header.Set("Idempotency-Key", "caller-1")
			return r
		}, "caller-1"},
		{"idempotency.WithKey", Options{}, func(r *http.Request) *http.Request {
			return r.WithContext(idempotency.WithKey(r.Context(), "ctx-1"))
		}, "ctx-1"},
		{"host in Idempotency.Hosts", Options{Idempotency: idempotency.Options{Hosts: []string{"127.0.0.1"}}}, func(r *http.Request) *http.Request { return r }, ""},
	}
	bodies := []struct {
		name string
		make func() io.Reader
	}{
		{"bytes.Reader (GetBody)", func() io.Reader { return bytes.NewReader(payload) }},
		{"bare reader (buffered)", func() io.Reader { return onlyReader{bytes.NewReader(payload)} }},
	}
	for _, tt := range tests {
		for _, b := range bodies {
			t.Run(tt.name+"/"+b.name, func(t *testing.T) {
				act := &sideEffects{}
				failing := &sideEffects{status: 503}
				srv := httptest.NewServer(httptestutil.Script(
					httptestutil.Handler(failing),  // acted, then failed
					httptestutil.CutAfter(failing), // acted, then the connection dropped
					httptestutil.Handler(act).Forever(),
				))
				defer srv.Close()
				c := loopbackStack(t, tt.o)
				req, _ := http.NewRequest("POST", srv.URL+"/orders", b.make())
				resp, err := c.Do(tt.prepare(req))
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				keys := append(append([]string{}, failing.keys...), act.keys...)
				all := append(append([][]byte{}, failing.bodies...), act.bodies...)
				if len(keys) != 3 {
					t.Fatalf("attempts = %d, want 3", len(keys))
				}
				for i := range keys {
					if keys[i] == "" || keys[i] != keys[0] {
						t.Errorf("attempt %d key = %q, want the same non-empty key as attempt 1 (%q)", i+1, keys[i], keys[0])
					}
					if !bytes.Equal(all[i], payload) {
						t.Errorf("attempt %d body differs from the caller's (%d bytes, want %d)", i+1, len(all[i]), len(payload))
					}
				}
				if tt.wantKey != "" && keys[0] != tt.wantKey {
					t.Errorf("key = %q, want the caller's %q", keys[0], tt.wantKey)
				}
			})
		}
	}
}

// failingReader gives some bytes, then fails, as a body read from a file
// on a failing disk or a broken pipe does.
type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errors.New("disk gone")
	}
	n := min(len(p), r.n)
	for i := range n {
		p[i] = 'x'
	}
	r.n -= n
	return n, nil
}

// Promise: a request that cannot be sent as written (bad ContentLength, a
// body that fails to read) is the caller's error: it is not retried and
// does not count against the host. Ten requests with a bad ContentLength
// fail at once and none reaches the server; then bodies whose reader
// fails or whose length turns out wrong as it is sent (net/http sends the
// headers of a body it cannot tell is in memory before reading it, and
// Retry never reads a body ahead of the wire; a body longer than declared
// may be answered before the surplus is found, for a bare client too:
// about one in fifteen on loopback); then a healthy GET to the same host
// succeeds, through the default stack on loopback, whose breaker would
// open after 5 failures in a row.
func TestBadRequestsDoNotCountAgainstTheHost(t *testing.T) {
	rec := httptestutil.NewRecorder(httptestutil.Script(httptestutil.Status(200, "ok").Forever()))
	srv := httptest.NewServer(rec)
	defer srv.Close()
	var attempts, retries atomic.Int64
	c := loopbackStack(t, Options{Hooks: Hooks{
		OnAttempt: func(policy.AttemptEvent) { attempts.Add(1) },
		OnRetry:   func(policy.RetryEvent) { retries.Add(1) },
	}})
	type badRequest struct {
		name string
		make func() *http.Request
		// served: the server may get the whole declared body before the
		// surplus is found, and answer, as it does for a bare client.
		served bool
	}
	bad := []badRequest{
		{"ContentLength longer than the body", func() *http.Request {
			r, _ := http.NewRequest("PUT", srv.URL+"/a", strings.NewReader("abc"))
			r.ContentLength = 10
			return r
		}, false},
		{"ContentLength shorter than the body", func() *http.Request {
			r, _ := http.NewRequest("PUT", srv.URL+"/a", strings.NewReader("abcdef"))
			r.ContentLength = 2
			return r
		}, false},
		{"ContentLength with no body", func() *http.Request {
			r, _ := http.NewRequest("PUT", srv.URL+"/a", nil)
			r.ContentLength = 5
			return r
		}, false},
	}
	failing := []badRequest{
		{"body reader fails (GetBody)", func() *http.Request {
			r, _ := http.NewRequest("PUT", srv.URL+"/a", nil)
			r.Body = io.NopCloser(&failingReader{n: 10})
			r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(&failingReader{n: 10}), nil }
			r.ContentLength = 100
			return r
		}, false},
		{"body reader fails (buffered)", func() *http.Request {
			r, _ := http.NewRequest("PUT", srv.URL+"/a", onlyReader{&failingReader{n: 10}})
			return r
		}, false},
		// A bare reader's length is learned as it is sent (its bytes are
		// never read ahead), so these reach the server too.
		{"ContentLength longer than a bare reader's body", func() *http.Request {
			r, _ := http.NewRequest("PUT", srv.URL+"/a", onlyReader{strings.NewReader("abc")})
			r.ContentLength = 4
			return r
		}, false},
		{"ContentLength shorter than a bare reader's body", func() *http.Request {
			r, _ := http.NewRequest("PUT", srv.URL+"/a", onlyReader{strings.NewReader("abcdef")})
			r.ContentLength = 5
			return r
		}, true},
	}
	try := func(tt badRequest) {
		t.Helper()
		before := attempts.Load()
		resp, err := c.Do(tt.make())
		if err == nil && tt.served {
			readAll(t, resp)
		} else if err == nil {
			readAll(t, resp)
			t.Fatalf("%s: got status %d, want an error", tt.name, resp.StatusCode)
		} else if !errors.Is(err, policy.ErrInvalidRequest) {
			t.Errorf("%s: err = %v, want one that matches policy.ErrInvalidRequest", tt.name, err)
		}
		if n := attempts.Load() - before; n > 1 {
			t.Errorf("%s: attempts = %d, want at most 1", tt.name, n)
		}
	}
	for i := range 10 {
		try(bad[i%len(bad)])
	}
	rec.WantCount(t, 0)
	for i := range 10 {
		try(failing[i%len(failing)])
	}
	if got := retries.Load(); got != 0 {
		t.Errorf("retries = %d, want 0", got)
	}
	resp, err := c.Get(srv.URL + "/health")
	if err != nil {
		t.Fatalf("healthy GET after the bad requests: %v, want success", err)
	}
	if got := readAll(t, resp); got != "ok" {
		t.Errorf("body = %q, want ok", got)
	}
	gets := 0
	for _, r := range rec.Requests() {
		if r.Method == "GET" {
			gets++
		}
	}
	if gets != 1 {
		t.Errorf("GETs at the server = %d, want 1", gets)
	}
}

// The same promise without a Retry above the breaker (Breaker in a
// Chain, or New with LayerRetry off): the layers that count against a
// host check the body themselves, or net/http would report the failure
// with an error of no type, and the breaker would count the caller's bad
// requests against a healthy host until it opened for every caller.
func TestBadRequestsWithoutRetryDoNotCountAgainstTheHost(t *testing.T) {
	for _, tc := range []struct {
		name string
		rt   func(base http.RoundTripper) http.RoundTripper
	}{
		{"Chain(Breaker)", func(base http.RoundTripper) http.RoundTripper {
			return Chain(base, Breaker(BreakerSettings{ConsecutiveFailures: 2}))
		}},
		{"New without Retry", func(base http.RoundTripper) http.RoundTripper {
			return New(Options{Base: base, Disable: LayerRetry, Breaker: BreakerSettings{ConsecutiveFailures: 2}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				env := newFakeEnv(t, httptestutil.Status(200, "ok").Forever())
				c := &http.Client{Transport: tc.rt(env.base)}
				for i := range 4 {
					req, _ := http.NewRequest("PUT", env.url+"/a", onlyReader{&failingReader{n: 10}})
					if i%2 == 1 { // a ContentLength longer than the body
						req, _ = http.NewRequest("PUT", env.url+"/a", strings.NewReader("abc"))
						req.ContentLength = 10
					}
					resp, err := c.Do(req)
					if err == nil {
						resp.Body.Close()
						t.Fatalf("bad request %d: got status %d, want an error", i+1, resp.StatusCode)
					}
					if !errors.Is(err, policy.ErrInvalidRequest) {
						t.Errorf("bad request %d: err = %v, want one that matches policy.ErrInvalidRequest", i+1, err)
					}
				}
				resp, err := c.Get(env.url + "/health")
				if err != nil {
					t.Fatalf("healthy GET after the caller's bad requests: %v (ErrCircuitOpen: %v)", err, errors.Is(err, ErrCircuitOpen))
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			})
		})
	}
}

// Promise: a connection that was never made proves the server did not
// act. A TLS handshake that the peer cuts short fails with a bare io.EOF,
// which on its own could as well come after the request was sent; Retry
// tells the two apart with httptrace (no connection was got), so a POST
// nobody vouched for is retried after it, on loopback.
func TestRetriedAfterFailedTLSHandshake(t *testing.T) {
	for _, callerTrace := range []bool{false, true} {
		t.Run(fmt.Sprintf("caller's own trace=%v", callerTrace), func(t *testing.T) {
			retriedAfterFailedTLSHandshake(t, callerTrace)
		})
	}
}

// retriedAfterFailedTLSHandshake runs TestRetriedAfterFailedTLSHandshake;
// with callerTrace, the caller traces its request too, and its hooks
// (connection and network ones) must see both attempts beside Retry's.
func retriedAfterFailedTLSHandshake(t *testing.T, callerTrace bool) {
	act := &sideEffects{}
	srv := httptest.NewTLSServer(act)
	defer srv.Close()
	// The first dial reaches a listener that closes the connection at
	// once, in the middle of the TLS handshake.
	cutter, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer func() { cutter.Close(); wg.Wait() }()
	wg.Go(func() {
		for {
			c, err := cutter.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	})
	var dials atomic.Int64
	d := &net.Dialer{}
	base := srv.Client().Transport.(*http.Transport).Clone()
	base.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials.Add(1) == 1 {
			return d.DialContext(ctx, network, cutter.Addr().String())
		}
		return d.DialContext(ctx, network, addr)
	}
	var errs []error
	c := loopbackStack(t, Options{Base: base, Hooks: Hooks{OnAttempt: func(e policy.AttemptEvent) {
		if e.Err != nil {
			errs = append(errs, e.Err)
		}
	}}})
	ctx := context.Background()
	var gets, gots, handshakes atomic.Int64
	if callerTrace {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			GetConn:           func(string) { gets.Add(1) },
			GotConn:           func(httptrace.GotConnInfo) { gots.Add(1) },
			TLSHandshakeStart: func() { handshakes.Add(1) },
		})
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/orders", strings.NewReader(`{"sku":"a"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if len(errs) != 1 {
		t.Fatalf("failed attempts = %v, want 1 (the handshake)", errs)
	}
	if got := act.count(); got != 1 {
		t.Errorf("side effect performed %d times, want 1", got)
	}
	if callerTrace {
		if g, h, k := gets.Load(), gots.Load(), handshakes.Load(); g != 2 || h != 1 || k != 2 {
			t.Errorf("caller's trace saw GetConn %d, GotConn %d, TLSHandshakeStart %d; want 2, 1, 2", g, h, k)
		}
	}
}
