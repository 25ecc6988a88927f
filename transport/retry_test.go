package transport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
)

// onlyReader hides every method but Read, so net/http cannot learn the
// body's length or make a GetBody for it.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func TestRetryReplaysBodies(t *testing.T) {
	const payload = `{"amount":1200,"currency":"eur"}`
	big := strings.Repeat("x", 2048)
	tests := []struct {
		name      string
		body      func() io.Reader
		want      string
		limit     int64
		wantSends int
		wantCode  int
	}{
		{"strings.Reader", func() io.Reader { return strings.NewReader(payload) }, payload, 0, 3, 200},
		{"bytes.Reader", func() io.Reader { return bytes.NewReader([]byte(payload)) }, payload, 0, 3, 200},
		{"plain io.Reader", func() io.Reader { return onlyReader{strings.NewReader(payload)} }, payload, 0, 3, 200},
		{"http.NoBody", func() io.Reader { return http.NoBody }, "", 0, 3, 200},
		{"nil body", func() io.Reader { return nil }, "", 0, 3, 200},
		{"plain reader over the limit is sent once", func() io.Reader { return onlyReader{strings.NewReader(big)} }, big, 1024, 1, 503},
		{"plain reader at the limit is replayed", func() io.Reader { return onlyReader{strings.NewReader(big)} }, big, 2048, 3, 200},
		{"GetBody over the limit is replayed", func() io.Reader { return strings.NewReader(big) }, big, 1024, 3, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				script := httptestutil.Script(
					httptestutil.Status(503, "down").Times(2),
					httptestutil.Status(200, "ok"),
				)
				rec := httptestutil.NewRecorder(script)
				env := newFakeEnv(t, rec)
				c := &http.Client{Transport: Chain(env.base, Retry(policy.Retry{Backoff: constant(time.Second), MaxBufferedBody: tt.limit}))}
				req, err := http.NewRequest("PUT", env.url+"/things/1", tt.body())
				if err != nil {
					t.Fatal(err)
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				if got, want := resp.StatusCode, tt.wantCode; got != want {
					t.Errorf("status = %d, want %d", got, want)
				}
				reqs := rec.Requests()
				if got, want := len(reqs), tt.wantSends; got != want {
					t.Fatalf("server got %d requests, want %d", got, want)
				}
				for i, r := range reqs {
					if got := string(r.Body); got != tt.want {
						t.Errorf("attempt %d body = %q (%d bytes), want %q (%d bytes)", i+1, trunc(got), len(got), trunc(tt.want), len(tt.want))
					}
				}
			})
		})
	}
}

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

func TestIdempotencyKeySameOnEveryAttempt(t *testing.T) {
	tests := []struct {
		name    string
		header  string // key set by the caller in the header
		ctxKey  string // key set by the caller in the context
		wantKey string // "" means a generated UUID
	}{
		{"generated", "", "", ""},
		{"caller header kept", "order-42", "", "order-42"},
		{"caller context kept", "", "order-43", "order-43"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := httptestutil.NewRecorder(httptestutil.Script(
					httptestutil.Status(503, "").Times(2),
					httptestutil.Status(201, "created"),
				))
				env := newFakeEnv(t, rec)
				c := &http.Client{Transport: Chain(env.base,
					IdempotencyKey(idempotency.Options{Hosts: []string{"api.test"}}),
					Retry(policy.Retry{Backoff: constant(time.Second)}))}
				ctx := context.Background()
				if tt.ctxKey != "" {
					ctx = idempotency.WithKey(ctx, tt.ctxKey)
				}
				req, _ := http.NewRequestWithContext(ctx, "POST", env.url+"/charges", strings.NewReader("amount=1"))
				if tt.header != "" {
					req.Header.Set("Idempotency-Key", tt.header)
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				if got, want := resp.StatusCode, 201; got != want {
					t.Errorf("status = %d, want %d", got, want)
				}
				if got, want := req.Header.Get("Idempotency-Key"), tt.header; got != want {
					t.Errorf("caller's request header changed to %q, want %q", got, want)
				}
				reqs := rec.Requests()
				if got, want := len(reqs), 3; got != want {
					t.Fatalf("server got %d requests, want %d", got, want)
				}
				first := reqs[0].Header.Get("Idempotency-Key")
				if tt.wantKey != "" && first != tt.wantKey {
					t.Errorf("key = %q, want %q", first, tt.wantKey)
				}
				if tt.wantKey == "" && len(first) != 36 {
					t.Errorf("generated key = %q, want a UUID", first)
				}
				for i, r := range reqs {
					if got := r.Header.Get("Idempotency-Key"); got != first {
						t.Errorf("attempt %d key = %q, want %q", i+1, got, first)
					}
				}
			})
		})
	}
}

func TestIdempotencyKeyNewKeyPerOperation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := httptestutil.NewRecorder(httptestutil.Status(200, "").Forever())
		env := newFakeEnv(t, rec)
		c := &http.Client{Transport: Chain(env.base, IdempotencyKey(idempotency.Options{Hosts: []string{"api.test"}}), Retry(policy.Retry{}))}
		for range 3 {
			resp, err := c.Post(env.url, "text/plain", strings.NewReader("x"))
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
		}
		resp, err := c.Get(env.url)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		keys := map[string]bool{}
		for _, r := range rec.Requests() {
			keys[r.Header.Get("Idempotency-Key")] = true
		}
		if got, want := len(keys), 4; got != want { // 3 distinct keys and "" for the GET
			t.Errorf("distinct keys = %d (%v), want %d", got, keys, want)
		}
		if !keys[""] {
			t.Error("GET got a key, want none")
		}
	})
}

func TestRetryNonIdempotentWithoutKeyNotRetried(t *testing.T) {
	tests := []struct {
		method string
		key    string
		want   int
	}{
		{"POST", "", 1},
		{"PATCH", "", 1},
		{"POST", "k", 2},
		{"GET", "", 2},
		{"DELETE", "", 2},
	}
	for _, tt := range tests {
		t.Run(tt.method+"/"+tt.key, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				script := httptestutil.Script(httptestutil.Status(503, "busy"), httptestutil.Status(200, "ok"))
				env := newFakeEnv(t, script)
				c := &http.Client{Transport: Chain(env.base, Retry(policy.Retry{Backoff: constant(time.Second)}))}
				req, _ := http.NewRequest(tt.method, env.url, strings.NewReader("x"))
				if tt.key != "" {
					req.Header.Set("Idempotency-Key", tt.key)
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				if got := script.Served(); got != tt.want {
					t.Errorf("server got %d requests, want %d", got, tt.want)
				}
			})
		})
	}
}

func TestRetryProblemIsRetriableBothWays(t *testing.T) {
	tests := []struct {
		name      string
		first     httptestutil.Step
		wantSends int
		wantCode  int
		wantBody  string
	}{
		{
			name:      "503 is_retriable false is final, body intact",
			first:     httptestutil.Problem(503, httptestutil.ProblemBody{Title: "Maintenance", Extensions: map[string]any{"is_retriable": false}}),
			wantSends: 1, wantCode: 503, wantBody: `"is_retriable":false`,
		},
		{
			name:      "400 is_retriable true is retried",
			first:     httptestutil.Problem(400, httptestutil.ProblemBody{Title: "Stale read", Extensions: map[string]any{"is_retriable": true}}),
			wantSends: 2, wantCode: 200, wantBody: "fine",
		},
		{
			name:      "503 problem without is_retriable falls back to the status",
			first:     httptestutil.Problem(503, httptestutil.ProblemBody{Title: "Down"}),
			wantSends: 2, wantCode: 200, wantBody: "fine",
		},
		{
			name:      "400 problem is final, body intact",
			first:     httptestutil.Problem(400, httptestutil.ProblemBody{Title: "Bad", Detail: strings.Repeat("d", 100<<10)}),
			wantSends: 1, wantCode: 400, wantBody: strings.Repeat("d", 100<<10),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				script := httptestutil.Script(tt.first, httptestutil.Status(200, "fine"))
				env := newFakeEnv(t, script)
				c := &http.Client{Transport: Chain(env.base, Retry(policy.Retry{Backoff: constant(time.Second)}))}
				resp, err := c.Get(env.url)
				if err != nil {
					t.Fatal(err)
				}
				body := readAll(t, resp)
				if got, want := resp.StatusCode, tt.wantCode; got != want {
					t.Errorf("status = %d, want %d", got, want)
				}
				if !strings.Contains(body, tt.wantBody) {
					t.Errorf("body = %q, want it to contain %q", trunc(body), trunc(tt.wantBody))
				}
				if tt.wantCode != 200 && resp.ContentLength >= 0 && int64(len(body)) != resp.ContentLength {
					t.Errorf("body is %d bytes, Content-Length says %d", len(body), resp.ContentLength)
				}
				if got := script.Served(); got != tt.wantSends {
					t.Errorf("server got %d requests, want %d", got, tt.wantSends)
				}
			})
		})
	}
}

func TestRetryHonoursRetryAfter(t *testing.T) {
	tests := []struct {
		name     string
		step     httptestutil.Step
		classify policy.Classifier
		wantWait time.Duration
	}{
		{"seconds", httptestutil.RetryAfterSeconds(503, 30), nil, 30 * time.Second},
		{"a custom classifier that says nothing of the wait", httptestutil.RetryAfterSeconds(503, 30),
			func(o policy.Outcome) policy.Decision { return policy.Decision{Retry: o.Response.StatusCode == 503} }, 30 * time.Second},
		{"date", httptestutil.RetryAfterDate(429, time.Date(2000, 1, 1, 0, 0, 45, 0, time.UTC)), nil, 45 * time.Second},
		{"retry-after-ms", httptestutil.RetryAfterMS(429, 2500), nil, 2500 * time.Millisecond},
		{"shorter than backoff", httptestutil.RetryAfterSeconds(503, 1), nil, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := httptestutil.NewRecorder(httptestutil.Script(tt.step, httptestutil.Status(200, "ok")))
				env := newFakeEnv(t, rec)
				c := &http.Client{Transport: Chain(env.base, Retry(policy.Retry{Backoff: constant(2 * time.Second), Classify: tt.classify}))}
				resp, err := c.Get(env.url)
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				reqs := rec.Requests()
				if len(reqs) != 2 {
					t.Fatalf("server got %d requests, want 2", len(reqs))
				}
				if got := reqs[1].Arrived.Sub(reqs[0].Arrived); got != tt.wantWait {
					t.Errorf("wait between attempts = %v, want %v", got, tt.wantWait)
				}
			})
		})
	}
}

func TestRetryNeverWaitsToFail(t *testing.T) {
	tests := []struct {
		name    string
		step    httptestutil.Step
		code    int
		backoff time.Duration
		policy  policy.Retry
	}{
		{"retry-after beyond the deadline", httptestutil.RetryAfterSeconds(503, 20), 503, time.Second, policy.Retry{}},
		{"backoff beyond the deadline", httptestutil.Status(503, ""), 503, 15 * time.Second, policy.Retry{}},
		{"retry-after beyond MaxRetryAfter", httptestutil.RetryAfterSeconds(429, 5), 429, time.Second, policy.Retry{MaxRetryAfter: 4 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				script := httptestutil.Script(tt.step, httptestutil.Status(200, "ok"))
				env := newFakeEnv(t, script)
				p := tt.policy
				p.Backoff = constant(tt.backoff)
				c := &http.Client{Transport: Chain(env.base, Retry(p))}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", env.url, nil)
				start := time.Now()
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				if got := time.Since(start); got != 0 {
					t.Errorf("returned after %v, want at once", got)
				}
				if got, want := resp.StatusCode, tt.code; got != want {
					t.Errorf("status = %d, want %d", got, want)
				}
				if got := script.Served(); got != 1 {
					t.Errorf("server got %d requests, want 1", got)
				}
			})
		})
	}
}

func TestRetryCancelDuringBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		script := httptestutil.Script(httptestutil.Status(503, "").Forever())
		env := newFakeEnv(t, script)
		c := &http.Client{Transport: Chain(env.base, Retry(policy.Retry{Backoff: constant(time.Hour)}))}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(3*time.Second, cancel)
		req, _ := http.NewRequestWithContext(ctx, "GET", env.url, nil)
		start := time.Now()
		_, err := c.Do(req)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if got, want := time.Since(start), 3*time.Second; got != want {
			t.Errorf("returned after %v, want %v", got, want)
		}
		if got := script.Served(); got != 1 {
			t.Errorf("server got %d requests, want 1", got)
		}
	})
}

func TestRetryErrorSaysAttemptsAndKeepsCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := httptestutil.NewNetwork() // nothing listens: every dial is refused
		base := n.Transport()
		defer base.CloseIdleConnections()
		c := &http.Client{Transport: Chain(base, Retry(policy.Retry{MaxAttempts: 3, Backoff: constant(time.Second)}))}
		start := time.Now()
		_, err := c.Post("http://down.test/charges", "text/plain", strings.NewReader("x"))
		var re *RetryError
		if !errors.As(err, &re) {
			t.Fatalf("err = %v, want a *RetryError", err)
		}
		if got, want := re.Attempts, 3; got != want {
			t.Errorf("Attempts = %d, want %d (a refused dial is safe to retry even for POST)", got, want)
		}
		if !strings.Contains(err.Error(), "giving up after 3 attempts") || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("err = %q, want attempts and cause in it", err)
		}
		if got, want := time.Since(start), 2*time.Second; got != want {
			t.Errorf("took %v, want %v", got, want)
		}
	})
}

func TestDeadlineTwiceRetriesTimedOutAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		script := httptestutil.Script(httptestutil.Hang().Times(2), httptestutil.Status(200, "ok"))
		env := newFakeEnv(t, script)
		c := &http.Client{Transport: Chain(env.base,
			Deadline(time.Minute),
			Retry(policy.Retry{Backoff: constant(time.Second)}),
			Deadline(5*time.Second))}
		start := time.Now()
		resp, err := c.Get(env.url)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := readAll(t, resp), "ok"; got != want {
			t.Errorf("body = %q, want %q", got, want)
		}
		if got, want := time.Since(start), 2*(5*time.Second+time.Second); got != want {
			t.Errorf("took %v, want %v", got, want)
		}
	})
}

func TestDeadlineBudgetEndsRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		script := httptestutil.Script(httptestutil.Hang().Forever())
		env := newFakeEnv(t, script)
		c := &http.Client{Transport: Chain(env.base,
			Deadline(12*time.Second),
			Retry(policy.Retry{MaxAttempts: 10, Backoff: constant(time.Second)}),
			Deadline(5*time.Second))}
		start := time.Now()
		_, err := c.Get(env.url)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want context.DeadlineExceeded", err)
		}
		var ne interface{ Timeout() bool }
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("err = %v, want Timeout() true through http.Client", err)
		}
		// Attempts at 0s and 6s run 5s each; a third would start at 12s.
		if got, want := time.Since(start), 11*time.Second; got != want {
			t.Errorf("took %v, want %v", got, want)
		}
		if got := script.Served(); got != 2 {
			t.Errorf("server got %d requests, want 2", got)
		}
	})
}

func TestDeadlineStreamedBodyReadableAfterRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		body := strings.Repeat("chunk", 10)
		env := newFakeEnv(t, httptestutil.SlowBody(200, body, 5, time.Second))
		var attemptCtx context.Context
		spy := Func(func(r *http.Request) (*http.Response, error) {
			attemptCtx = r.Context()
			return env.base.RoundTrip(r)
		})
		c := &http.Client{Transport: Chain(spy, Deadline(30*time.Second))}
		resp, err := c.Get(env.url)
		if err != nil {
			t.Fatal(err)
		}
		if err := attemptCtx.Err(); err != nil {
			t.Fatalf("deadline released when RoundTrip returned: %v", err)
		}
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("reading the streamed body: %v", err)
		}
		if string(got) != body {
			t.Errorf("body = %q, want %q", got, body)
		}
		if attemptCtx.Err() == nil {
			t.Error("deadline still held after the body was read to EOF")
		}
		resp.Body.Close()
	})
}

func TestDeadlineReleasedOnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := newFakeEnv(t, httptestutil.SlowBody(200, strings.Repeat("x", 100), 10, time.Second))
		var attemptCtx context.Context
		spy := Func(func(r *http.Request) (*http.Response, error) {
			attemptCtx = r.Context()
			return env.base.RoundTrip(r)
		})
		resp, err := (&http.Client{Transport: Chain(spy, Deadline(time.Minute))}).Get(env.url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if attemptCtx.Err() == nil {
			t.Error("deadline still held after Close")
		}
	})
}

func TestDeadlineParentTighterPassesThrough(t *testing.T) {
	var got *http.Request
	base := Func(func(r *http.Request) (*http.Response, error) {
		got = r
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://x.test/", nil)
	if _, err := Chain(base, Deadline(time.Hour)).RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if got != req {
		t.Error("request was copied, want it passed through when the parent's deadline is tighter")
	}
}

// TestDeadlineServerSeesDisconnect runs on loopback: it is about the
// socket being closed, which the server must see.
func TestDeadlineServerSeesDisconnect(t *testing.T) {
	gone := make(chan time.Time, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		gone <- time.Now()
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	c := &http.Client{Transport: Chain(base, Deadline(200*time.Millisecond), Retry(policy.Retry{MaxAttempts: 1}))}
	start := time.Now()
	_, err := c.Get(srv.URL)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	select {
	case at := <-gone:
		if at.Before(start.Add(200 * time.Millisecond)) {
			t.Errorf("server saw the disconnect after %v, before the deadline", at.Sub(start))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("server never saw the client go away")
	}
}

// TestRetryReusesConnections runs on loopback: it counts real TCP
// connections while 100 operations each see a 503 with a 3 KiB body
// before succeeding.
func TestRetryReusesConnections(t *testing.T) {
	var conns atomic.Int64
	var calls atomic.Int64
	errBody := strings.Repeat("e", 3<<10)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1)%2 == 1 {
			w.WriteHeader(503)
			io.WriteString(w, errBody)
			return
		}
		io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	// MaxConnsPerHost 1: http.Transport puts a connection back in its pool
	// from another goroutine once a body is read or drained, and a request
	// sent before that would dial a second one on a busy machine. A body
	// that was not drained still shows: its connection is closed, and the
	// next request dials again.
	base := &http.Transport{MaxIdleConnsPerHost: 4, MaxConnsPerHost: 1}
	defer base.CloseIdleConnections()
	c := &http.Client{Transport: Chain(base, Retry(policy.Retry{Backoff: constant(0)}))}
	for range 100 {
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp); got != "ok" {
			t.Fatalf("body = %q, want ok", got)
		}
	}
	if got, want := calls.Load(), int64(200); got != want {
		t.Errorf("server calls = %d, want %d", got, want)
	}
	if got := conns.Load(); got != 1 {
		t.Errorf("new connections = %d, want 1", got)
	}
}

func TestRetryConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Each operation fails as its own body says, not as the order in
		// which the goroutines' attempts happen to arrive: an n-byte body
		// is refused (503) on its first n%3 attempts, then echoed. A
		// count shared by all operations ("every third call fails") would
		// let one operation meet every failure, up to MaxAttempts, as
		// the scheduler orders the goroutines.
		var calls atomic.Int64
		var mu sync.Mutex
		attempts := map[string]int{} // by idempotency key: one per operation
		env := newFakeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				t.Errorf("server reading the body: %v", err)
			}
			calls.Add(1)
			key := r.Header.Get("Idempotency-Key")
			mu.Lock()
			attempts[key]++
			n := attempts[key]
			mu.Unlock()
			if key == "" || n <= len(body)%3 {
				w.WriteHeader(503)
				return
			}
			w.Write(body)
		}))
		c := &http.Client{Transport: Chain(env.base,
			IdempotencyKey(idempotency.Options{Hosts: []string{"api.test"}}),
			Deadline(time.Minute),
			Retry(policy.Retry{MaxAttempts: 10, Backoff: constant(100 * time.Millisecond)}),
			Deadline(10*time.Second))}
		var wg sync.WaitGroup
		for g := range 32 {
			wg.Go(func() {
				for i := range 20 {
					want := strings.Repeat(string(rune('a'+g%26)), i+1)
					resp, err := c.Post(env.url, "text/plain", onlyReader{strings.NewReader(want)})
					if err != nil {
						t.Error(err)
						return
					}
					b, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 || err != nil || string(b) != want {
						t.Errorf("status %d, body = %q (read error %v), want 200 %q", resp.StatusCode, b, err, want)
					}
				}
			})
		}
		wg.Wait()
		// Bodies of 1 to 20 bytes: 7 are refused once, 7 twice, 6 never,
		// so each goroutine's 20 operations take 20+7+14 attempts.
		if got, want := calls.Load(), int64(32*41); got != want {
			t.Errorf("server got %d attempts, want %d", got, want)
		}
	})
}

// The first attempt sends the caller's body itself, unread and not
// copied, with its GetBody; under a layer that carries the operation's
// stack (a Deadline, New's Timeout) it is the caller's request itself.
func TestRetryFirstAttemptPassesRequestThrough(t *testing.T) {
	var got *http.Request
	base := Func(func(r *http.Request) (*http.Response, error) {
		got = r
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	})
	for _, body := range []io.Reader{nil, strings.NewReader("with GetBody")} {
		req, _ := http.NewRequest("PUT", "http://x.test/", body)
		if _, err := Chain(base, Retry(policy.Retry{})).RoundTrip(req); err != nil {
			t.Fatal(err)
		}
		if got.Body != req.Body || (got.GetBody == nil) != (req.GetBody == nil) {
			t.Errorf("body %T: first attempt body %T (GetBody set %v), want the caller's %T (GetBody set %v)",
				body, got.Body, got.GetBody != nil, req.Body, req.GetBody != nil)
		}
		inner := Func(func(r *http.Request) (*http.Response, error) {
			resp, err := Chain(base, Retry(policy.Retry{})).RoundTrip(r)
			if got != r {
				t.Errorf("body %T under a Deadline: first attempt was a copy, want the request itself", body)
			}
			return resp, err
		})
		req, _ = http.NewRequest("PUT", "http://x.test/", body)
		if _, err := Chain(inner, Deadline(time.Minute)).RoundTrip(req); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAttemptFromContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := newFakeEnv(t, httptestutil.Script(httptestutil.Status(503, "").Times(2), httptestutil.Status(200, "")))
		var seen []int
		spy := Func(func(r *http.Request) (*http.Response, error) {
			seen = append(seen, AttemptFromContext(r.Context()))
			return env.base.RoundTrip(r)
		})
		resp, err := (&http.Client{Transport: Chain(spy, Retry(policy.Retry{Backoff: constant(time.Second)}))}).Get(env.url)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if got, want := seen, []int{1, 2, 3}; !equalInts(got, want) {
			t.Errorf("attempts seen = %v, want %v", got, want)
		}
	})
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

type idleCounter struct {
	http.RoundTripper
	n int
}

func (c *idleCounter) CloseIdleConnections() { c.n++ }

func TestCloseIdleConnectionsReachesBase(t *testing.T) {
	base := &idleCounter{}
	rt := Chain(base, IdempotencyKey(idempotency.Options{Hosts: []string{"api.test"}}), Deadline(time.Second), Retry(policy.Retry{}), Deadline(time.Second))
	(&http.Client{Transport: rt}).CloseIdleConnections()
	if base.n != 1 {
		t.Errorf("base CloseIdleConnections called %d times, want 1", base.n)
	}
}

// A limit of math.MaxInt64 means "no limit" to a user: the body must still
// be replayed byte for byte (limit+1 must not wrap around and read
// nothing), and a problem body of unknown length must not make Retry
// allocate the limit up front (or panic on a negative size).
func TestRetryHugeLimits(t *testing.T) {
	const payload = `{"amount":1200}`
	problem := `{"type":"about:blank","is_retriable":true}`
	tests := []struct {
		name    string
		p       policy.Retry
		problem bool
	}{
		{"MaxBufferedBody MaxInt64", policy.Retry{MaxBufferedBody: math.MaxInt64}, false},
		{"MaxProblemBody MaxInt64", policy.Retry{MaxProblemBody: math.MaxInt64}, true},
		{"MaxProblemBody 1<<50", policy.Retry{MaxProblemBody: 1 << 50}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var bodies []string
			n := 0
			base := Func(func(r *http.Request) (*http.Response, error) {
				b, _ := io.ReadAll(r.Body)
				r.Body.Close()
				bodies = append(bodies, string(b))
				n++
				h := http.Header{}
				if n == 1 {
					h.Set("Content-Type", "application/problem+json")
					return &http.Response{StatusCode: 503, Header: h, ContentLength: -1, Body: io.NopCloser(strings.NewReader(problem)), Request: r}, nil
				}
				return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
			})
			tt.p.Backoff = constant(0)
			req, _ := http.NewRequest("PUT", "http://api.test/x", onlyReader{strings.NewReader(payload)})
			resp, err := Chain(base, Retry(tt.p)).RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := readAll(t, resp), "ok"; got != want {
				t.Errorf("body = %q, want %q", got, want)
			}
			if got, want := len(bodies), 2; got != want {
				t.Fatalf("attempts = %d, want %d", got, want)
			}
			for i, got := range bodies {
				if got != payload {
					t.Errorf("attempt %d sent %q, want %q", i+1, got, payload)
				}
			}
		})
	}
}

// A request without a URL is refused by net/http with an error; through
// Retry (with a budget, as New has) it must end the same way, not in a
// nil pointer panic.
func TestRetryNilURL(t *testing.T) {
	tests := []struct {
		name string
		rt   http.RoundTripper
	}{
		{"Retry with a budget", Chain(http.DefaultTransport, Retry(policy.Retry{Budget: &policy.Budget{}}))},
		{"New with SlogHooks", New(Options{Base: http.DefaultTransport, Hooks: SlogHooks(nil)})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := tt.rt.RoundTrip(&http.Request{Method: "GET", Header: http.Header{}})
			if resp != nil || err == nil {
				t.Errorf("RoundTrip = %v, %v; want nil, an error", resp, err)
			}
		})
	}
}

// A RoundTripper beneath Retry that breaks its contract with nil, nil
// gets an error back, as http.Client gives, not a nil pointer panic.
func TestRetryNilResponseNilError(t *testing.T) {
	base := Func(func(r *http.Request) (*http.Response, error) { return nil, nil })
	req, _ := http.NewRequest("GET", "http://api.test/", nil)
	resp, err := Chain(base, Retry(policy.Retry{Backoff: constant(0)})).RoundTrip(req)
	if resp != nil || err == nil {
		t.Errorf("RoundTrip = %v, %v; want nil, an error", resp, err)
	}
}

// Every middleware applied by hand to a nil RoundTripper uses
// http.DefaultTransport, as Chain does, instead of panicking.
func TestMiddlewaresNilNext(t *testing.T) {
	mws := map[string]Middleware{
		"Deadline":       Deadline(time.Second),
		"Retry":          Retry(policy.Retry{MaxAttempts: 1}),
		"IdempotencyKey": IdempotencyKey(idempotency.Options{Hosts: []string{"api.test"}}),
		"Breaker":        Breaker(BreakerSettings{}),
		"RateLimitAware": RateLimitAware(ratelimit.Options{}),
	}
	for name, mw := range mws {
		rt := mw(nil)
		// An unsupported scheme fails in http.DefaultTransport at once,
		// with no network.
		req, _ := http.NewRequest("POST", "gopher://x.test/", strings.NewReader("x"))
		if _, err := rt.RoundTrip(req); err == nil || !strings.Contains(err.Error(), "unsupported protocol scheme") {
			t.Errorf("%s(nil): err = %v, want http.DefaultTransport's", name, err)
		}
	}
}

// A 101 Switching Protocols body stays a read-write stream through
// Deadline, with CloseWrite, over loopback: it is about the socket.
func TestDeadlineUpgradedConnection(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		got, _ := io.ReadAll(brw) // until the client half-closes
		conn.Write(append([]byte("echo:"), got...))
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := Chain(base, Deadline(10*time.Second)).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status = %d, want 101", resp.StatusCode)
	}
	rw, ok := resp.Body.(interface {
		io.ReadWriteCloser
		CloseWrite() error
	})
	if !ok {
		t.Fatalf("body %T is not a read-write stream with CloseWrite", resp.Body)
	}
	if _, err := io.WriteString(rw, "hello"); err != nil {
		t.Fatal(err)
	}
	if err := rw.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
	got, _ := io.ReadAll(rw)
	if string(got) != "echo:hello" {
		t.Errorf("read %q, want %q", got, "echo:hello")
	}
}

// trickleBody is an error page that arrives after a delay.
type trickleBody struct {
	d    time.Duration
	done bool
}

func (b *trickleBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	time.Sleep(b.d)
	b.done = true
	return copy(p, "busy"), nil
}

func (b *trickleBody) Close() error { return nil }

// Promise: never wait only to fail. The wait is decided to end inside
// the deadline; draining the failed attempt's slow body happens during
// it, not before it: the second attempt goes when the decision said.
func TestRetryWaitRunsFromTheDecision(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sent []time.Duration
		start := time.Now()
		base := Func(func(r *http.Request) (*http.Response, error) {
			sent = append(sent, time.Since(start))
			if len(sent) == 1 {
				return &http.Response{StatusCode: 503, Header: http.Header{}, Body: &trickleBody{d: 2 * time.Second}, Request: r}, nil
			}
			return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
		})
		rt := Chain(base, Retry(policy.Retry{Backoff: constant(4 * time.Second)}))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test/x", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatalf("got %v after %v, want the second attempt's 200", err, time.Since(start))
		}
		resp.Body.Close()
		if want := []time.Duration{0, 4 * time.Second}; len(sent) != 2 || sent[1] != want[1] {
			t.Errorf("attempts sent at %v, want %v", sent, want)
		}
	})
}

// TestRetryEventRetryAfter: OnRetry says how long the server asked to
// wait, and zero when it asked for nothing; Wait is the longer of that
// and the backoff.
func TestRetryEventRetryAfter(t *testing.T) {
	tests := []struct {
		name             string
		first            httptestutil.Step
		wantWait, wantRA time.Duration
	}{
		{"backoff only", httptestutil.Status(503, "busy"), 100 * time.Millisecond, 0},
		{"Retry-After longer", httptestutil.RetryAfterSeconds(503, 2), 2 * time.Second, 2 * time.Second},
		{"retry-after-ms shorter", httptestutil.RetryAfterMS(429, 50), 100 * time.Millisecond, 50 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var got []policy.RetryEvent
				base := httptestutil.NewHandlerTransport(httptestutil.Script(tt.first, httptestutil.Status(200, "ok")))
				c := &http.Client{Transport: Chain(base, Retry(policy.Retry{
					Backoff: constant(100 * time.Millisecond),
					OnRetry: func(e policy.RetryEvent) { got = append(got, e) },
				}))}
				resp, err := c.Get("http://api.test/")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if len(got) != 1 {
					t.Fatalf("got %d retry events, want 1", len(got))
				}
				if got[0].Wait != tt.wantWait || got[0].RetryAfter != tt.wantRA {
					t.Errorf("Wait %v, RetryAfter %v; want %v, %v", got[0].Wait, got[0].RetryAfter, tt.wantWait, tt.wantRA)
				}
			})
		})
	}
}
