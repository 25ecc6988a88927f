package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// charges is a handler with a side effect: every run makes a new charge,
// and its response says which.
type charges struct {
	runs   atomic.Int64
	status int // 0 means 201
}

func (c *charges) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.runs.Add(1)
	body, _ := io.ReadAll(r.Body)
	status := c.status
	if status == 0 {
		status = http.StatusCreated
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Charge", strconv.FormatInt(n, 10))
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"charge":%d,"request":%q}`, n, body)
}

type req struct {
	method, path, body string
	header             http.Header // includes the key, if any
}

func keyed(key, body string) req {
	return req{method: "POST", path: "/charges", body: body, header: http.Header{"Idempotency-Key": {key}}}
}

func serve(h http.Handler, q req) *httptest.ResponseRecorder {
	if q.method == "" {
		q.method = "POST"
	}
	if q.path == "" {
		q.path = "/charges"
	}
	var body io.Reader
	if q.body != "" {
		body = strings.NewReader(q.body)
	}
	r := httptest.NewRequest(q.method, q.path, body)
	for k, vs := range q.header {
		r.Header[k] = vs
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// wantProblem checks that w is an RFC 9457 problem with status.
func wantProblem(t *testing.T, w *httptest.ResponseRecorder, status int) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status = %d, want %d (body %s)", w.Code, status, w.Body)
	}
	if got, want := w.Header().Get("Content-Type"), "application/problem+json"; got != want {
		t.Errorf("Content-Type = %q, want %q", got, want)
	}
	var p struct {
		Type, Title, Detail string
		Status              int
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", w.Body, err)
	}
	if p.Status != status || p.Type != "about:blank" || p.Title != http.StatusText(status) || !strings.HasPrefix(p.Detail, "idempotency: ") {
		t.Errorf("problem = %+v, want status %d, type about:blank, title %q, detail starting with idempotency:", p, status, http.StatusText(status))
	}
}

func TestHandlerKeyHeader(t *testing.T) {
	long := strings.Repeat("k", 255)
	tests := []struct {
		name   string
		o      HandlerOptions
		method string
		header http.Header
		want   int // status; 0 means the inner handler answered
	}{
		{"missing", HandlerOptions{}, "POST", nil, 400},
		{"missing PATCH", HandlerOptions{}, "PATCH", nil, 400},
		{"missing optional", HandlerOptions{Optional: true}, "POST", nil, 0},
		{"GET needs none", HandlerOptions{}, "GET", nil, 0},
		{"PUT needs none", HandlerOptions{}, "PUT", nil, 0},
		{"plain", HandlerOptions{}, "POST", http.Header{"Idempotency-Key": {"k1"}}, 0},
		{"quoted", HandlerOptions{}, "POST", http.Header{"Idempotency-Key": {`"k1"`}}, 0},
		{"255 bytes", HandlerOptions{}, "POST", http.Header{"Idempotency-Key": {long}}, 0},
		{"256 bytes", HandlerOptions{}, "POST", http.Header{"Idempotency-Key": {long + "k"}}, 400},
		{"MaxKeyLength", HandlerOptions{MaxKeyLength: 3}, "POST", http.Header{"Idempotency-Key": {"abcd"}}, 400},
		{"control", HandlerOptions{}, "POST", http.Header{"Idempotency-Key": {"a\x01b"}}, 400},
		{"empty", HandlerOptions{}, "POST", http.Header{"Idempotency-Key": {""}}, 400},
		{"empty optional", HandlerOptions{Optional: true}, "POST", http.Header{"Idempotency-Key": {""}}, 400},
		{"twice", HandlerOptions{}, "POST", http.Header{"Idempotency-Key": {"a", "b"}}, 400},
		{"custom header", HandlerOptions{Header: "x-request-id"}, "POST", http.Header{"X-Request-Id": {"k1"}}, 0},
		{"custom header missing", HandlerOptions{Header: "X-Request-Id"}, "POST", http.Header{"Idempotency-Key": {"k1"}}, 400},
		{"custom methods", HandlerOptions{Methods: []string{"PUT"}}, "PUT", nil, 400},
		{"custom methods POST", HandlerOptions{Methods: []string{"PUT"}}, "POST", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &charges{}
			w := serve(Handler(c, tt.o), req{method: tt.method, header: tt.header})
			if tt.want != 0 {
				wantProblem(t, w, tt.want)
				if got := c.runs.Load(); got != 0 {
					t.Errorf("handler runs = %d, want 0", got)
				}
				return
			}
			if got, want := w.Code, 201; got != want {
				t.Errorf("status = %d, want %d (body %s)", got, want, w.Body)
			}
			if got := c.runs.Load(); got != 1 {
				t.Errorf("handler runs = %d, want 1", got)
			}
		})
	}
}

func TestHandlerReplay(t *testing.T) {
	c := &charges{}
	h := Handler(c, HandlerOptions{})
	first := serve(h, keyed("k1", `{"amount":1000}`))
	if first.Code != 201 || first.Header().Get(ReplayedHeader) != "" {
		t.Fatalf("first: status %d, %s %q; want 201 and no %s", first.Code, ReplayedHeader, first.Header().Get(ReplayedHeader), ReplayedHeader)
	}
	// The same key, plain or quoted, gets the same response.
	for _, key := range []string{"k1", `"k1"`, ` k1 `} {
		again := serve(h, keyed(key, `{"amount":1000}`))
		if again.Code != first.Code {
			t.Errorf("replay status = %d, want %d", again.Code, first.Code)
		}
		if !bytes.Equal(again.Body.Bytes(), first.Body.Bytes()) {
			t.Errorf("replay body = %q, want %q", again.Body, first.Body)
		}
		if got, want := again.Header().Get(ReplayedHeader), "true"; got != want {
			t.Errorf("%s = %q, want %q", ReplayedHeader, got, want)
		}
		for _, k := range []string{"Content-Type", "X-Charge"} {
			if got, want := again.Header().Get(k), first.Header().Get(k); got != want {
				t.Errorf("replay %s = %q, want %q", k, got, want)
			}
		}
		if got, want := again.Header().Get("Content-Length"), strconv.Itoa(first.Body.Len()); got != want {
			t.Errorf("replay Content-Length = %q, want %q", got, want)
		}
	}
	if got := c.runs.Load(); got != 1 {
		t.Errorf("handler runs = %d, want 1", got)
	}
	// Another key is another operation.
	if w := serve(h, keyed("k2", `{"amount":1000}`)); w.Header().Get("X-Charge") != "2" {
		t.Errorf("new key: X-Charge = %q, want 2", w.Header().Get("X-Charge"))
	}
}

func TestHandlerFingerprintMismatch(t *testing.T) {
	base := req{method: "POST", path: "/charges?v=1", body: `{"amount":1000}`,
		header: http.Header{"Idempotency-Key": {"k"}, "X-Account": {"acct_1"}}}
	tests := []struct {
		name   string
		change func(q *req)
		want   int
	}{
		{"same", func(q *req) {}, 201},
		{"unlisted header", func(q *req) { q.header["User-Agent"] = []string{"other"} }, 201},
		{"body", func(q *req) { q.body = `{"amount":2000}` }, 422},
		{"no body", func(q *req) { q.body = "" }, 422},
		{"path", func(q *req) { q.path = "/refunds?v=1" }, 422},
		{"query", func(q *req) { q.path = "/charges?v=2" }, 422},
		{"method", func(q *req) { q.method = "PATCH" }, 422},
		{"fingerprint header", func(q *req) { q.header["X-Account"] = []string{"acct_2"} }, 422},
		{"fingerprint header gone", func(q *req) { delete(q.header, "X-Account") }, 422},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &charges{}
			h := Handler(c, HandlerOptions{FingerprintHeaders: []string{"x-account"}})
			first := serve(h, base)
			q := base
			q.header = base.header.Clone()
			tt.change(&q)
			w := serve(h, q)
			if tt.want == 422 {
				wantProblem(t, w, 422)
			} else if w.Code != tt.want || !bytes.Equal(w.Body.Bytes(), first.Body.Bytes()) {
				t.Errorf("status %d body %q, want %d body %q", w.Code, w.Body, tt.want, first.Body)
			}
			if got := c.runs.Load(); got != 1 {
				t.Errorf("handler runs = %d, want 1", got)
			}
		})
	}
}

// blocking is a handler that signals when it starts and finishes only
// when released.
type blocking struct {
	charges
	started, release chan struct{}
}

func newBlocking() *blocking {
	return &blocking{started: make(chan struct{}, 100), release: make(chan struct{})}
}

func (b *blocking) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.started <- struct{}{}
	<-b.release
	b.charges.ServeHTTP(w, r)
}

func TestHandlerInFlight(t *testing.T) {
	b := newBlocking()
	h := Handler(b, HandlerOptions{RetryAfter: 1500 * time.Millisecond})
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- serve(h, keyed("k", "a")) }()
	<-b.started

	w := serve(h, keyed("k", "a"))
	wantProblem(t, w, 409)
	if got, want := w.Header().Get("Retry-After"), "2"; got != want {
		t.Errorf("Retry-After = %q, want %q (1.5s rounded up)", got, want)
	}
	wantProblem(t, serve(h, keyed("k", "b")), 422)

	close(b.release)
	first := <-done
	if first.Code != 201 {
		t.Fatalf("first status = %d, want 201", first.Code)
	}
	if w := serve(h, keyed("k", "a")); w.Header().Get(ReplayedHeader) != "true" || w.Body.String() != first.Body.String() {
		t.Errorf("after completion: %s=%q body %q, want a replay of %q", ReplayedHeader, w.Header().Get(ReplayedHeader), w.Body, first.Body)
	}
	if got := b.runs.Load(); got != 1 {
		t.Errorf("handler runs = %d, want 1", got)
	}
}

// Every outcome of a run is kept and replayed, 5xx included, but a 429;
// a kept error response says, live and replayed, that a retry cannot help.
func TestHandlerCacheable(t *testing.T) {
	only2xx := func(s int) bool { return s >= 200 && s < 300 }
	tests := []struct {
		status    int
		header    []string // set by the handler, as key, value pairs
		cacheable func(int) bool
		wantRuns  int64
		wantRetry string // Stripe-Should-Retry on both answers
	}{
		{200, nil, nil, 1, ""},
		{201, nil, nil, 1, ""},
		{204, nil, nil, 1, ""},
		{302, nil, nil, 1, ""},
		{303, nil, nil, 1, ""},
		{400, nil, nil, 1, "false"},
		{401, nil, nil, 1, "false"},
		{403, nil, nil, 1, "false"},
		{404, nil, nil, 1, "false"},
		{408, nil, nil, 1, "false"},
		{409, nil, nil, 1, "false"},
		{422, nil, nil, 1, "false"},
		{425, nil, nil, 1, "false"},
		{500, nil, nil, 1, "false"},
		{502, nil, nil, 1, "false"},
		{503, nil, nil, 1, "false"},
		{503, []string{"Retry-After", "5"}, nil, 1, "false"},
		{504, nil, nil, 1, "false"},
		{500, []string{"Stripe-Should-Retry", "false"}, nil, 1, "false"},
		{500, []string{"X-Should-Retry", "false"}, nil, 1, ""},
		{429, nil, nil, 2, ""},
		{429, []string{"Retry-After", "1"}, nil, 2, ""},
		{400, nil, only2xx, 2, ""},
		{500, nil, only2xx, 2, ""},
		{201, nil, only2xx, 1, ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status, tt.header), func(t *testing.T) {
			c := &charges{status: tt.status}
			var next http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for i := 0; i < len(tt.header); i += 2 {
					w.Header().Set(tt.header[i], tt.header[i+1])
				}
				c.ServeHTTP(w, r)
			})
			h := Handler(next, HandlerOptions{Cacheable: tt.cacheable})
			first := serve(h, keyed("k", "x"))
			second := serve(h, keyed("k", "x"))
			if first.Code != tt.status || second.Code != tt.status {
				t.Errorf("statuses = %d, %d; want %d twice", first.Code, second.Code, tt.status)
			}
			if got := c.runs.Load(); got != tt.wantRuns {
				t.Errorf("handler runs = %d, want %d", got, tt.wantRuns)
			}
			if replayed := second.Header().Get(ReplayedHeader) == "true"; replayed != (tt.wantRuns == 1) {
				t.Errorf("second replayed = %v, want %v", replayed, tt.wantRuns == 1)
			}
			for i, w := range []*httptest.ResponseRecorder{first, second} {
				if got := w.Header().Get("Stripe-Should-Retry"); got != tt.wantRetry {
					t.Errorf("answer %d: Stripe-Should-Retry = %q, want %q", i+1, got, tt.wantRetry)
				}
			}
		})
	}
}

// wantNotKept checks that w is the 422 answered to a retry of a key spent
// without a stored response.
func wantNotKept(t *testing.T, w *httptest.ResponseRecorder) {
	t.Helper()
	if w.Code != http.StatusUnprocessableEntity {
		t.Fatalf("status = %d, want 422 (body %s)", w.Code, w.Body)
	}
	var p struct {
		Type, Title, Detail string
		Status              int
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", w.Body, err)
	}
	if got, want := w.Header().Get("Content-Type"), "application/problem+json"; got != want {
		t.Errorf("Content-Type = %q, want %q", got, want)
	}
	if p.Type != TypeNotKept || p.Status != 422 || !strings.Contains(p.Detail, "not kept") {
		t.Errorf("problem = %+v, want type %s, status 422, a detail that says the response was not kept", p, TypeNotKept)
	}
	if got := w.Header().Get("Stripe-Should-Retry"); got != "false" {
		t.Errorf("Stripe-Should-Retry = %q, want false", got)
	}
	if got := w.Header().Get(ReplayedHeader); got != "" {
		t.Errorf("%s = %q, want none: nothing is replayed", ReplayedHeader, got)
	}
}

// A run that panics may have acted: its key is spent, unless it said
// first that it did nothing.
func TestHandlerPanicSpendsKey(t *testing.T) {
	for _, p := range []any{"boom", http.ErrAbortHandler} {
		for _, nothingDone := range []bool{false, true} {
			var runs atomic.Int64
			h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) == 1 {
					if nothingDone {
						NothingDone(r.Context())
					}
					w.WriteHeader(200)
					io.WriteString(w, "partial")
					panic(p)
				}
				w.WriteHeader(201)
			}), HandlerOptions{})
			func() {
				defer func() {
					if got := recover(); got != p {
						t.Errorf("recovered %v, want %v: the panic must reach net/http", got, p)
					}
				}()
				serve(h, keyed("k", "x"))
			}()
			w := serve(h, keyed("k", "x"))
			wantRuns := int64(1)
			if nothingDone {
				wantRuns = 2
				if w.Code != 201 {
					t.Errorf("after a panic (%v) with NothingDone: status %d, want 201 from a second run", p, w.Code)
				}
			} else {
				wantNotKept(t, w)
			}
			if got := runs.Load(); got != wantRuns {
				t.Errorf("panic %v, NothingDone %v: handler runs = %d, want %d", p, nothingDone, got, wantRuns)
			}
		}
	}
}

// A response over MaxResponseBytes is sent, not stored, and not run again.
func TestHandlerResponseLimit(t *testing.T) {
	tests := []struct{ size int }{{10}, {11}}
	for _, tt := range tests {
		var runs atomic.Int64
		body := strings.Repeat("x", tt.size)
		h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			io.WriteString(w, body[:3]) // in pieces
			io.WriteString(w, body[3:])
		}), HandlerOptions{MaxResponseBytes: 10})
		if w := serve(h, keyed("k", "x")); w.Body.String() != body {
			t.Errorf("size %d: body %q, want %q", tt.size, w.Body, body)
		}
		w := serve(h, keyed("k", "x"))
		if tt.size <= 10 {
			if w.Body.String() != body || w.Header().Get(ReplayedHeader) != "true" {
				t.Errorf("size %d, retry: body %q replayed=%q, want %q replayed", tt.size, w.Body, w.Header().Get(ReplayedHeader), body)
			}
		} else {
			wantNotKept(t, w)
		}
		if got := runs.Load(); got != 1 {
			t.Errorf("size %d: handler runs = %d, want 1", tt.size, got)
		}
	}
}

// A response the store will not keep (over its own limit) spends the key
// as one over MaxResponseBytes does.
func TestHandlerStoreLimitSpendsKey(t *testing.T) {
	var errs []error
	c := &charges{}
	h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("x", 8<<10))
		c.runs.Add(1)
	}), HandlerOptions{Store: NewMemoryStore(MemoryStoreOptions{MaxBytes: 4 << 10}),
		OnStoreError: func(r *http.Request, err error) { errs = append(errs, err) }})
	if w := serve(h, keyed("k", "x")); w.Code != 200 || w.Body.Len() != 8<<10 {
		t.Errorf("first: %d with %d bytes, want 200 with 8192", w.Code, w.Body.Len())
	}
	wantNotKept(t, serve(h, keyed("k", "x")))
	if got := c.runs.Load(); got != 1 {
		t.Errorf("handler runs = %d, want 1", got)
	}
	if len(errs) != 1 || !errors.Is(errs[0], ErrTooLarge) {
		t.Errorf("store errors = %v, want one ErrTooLarge", errs)
	}
}

// unwrapper is a ResponseWriter of a middleware, which
// http.ResponseController sees through.
type unwrapper struct{ http.ResponseWriter }

func (u *unwrapper) Unwrap() http.ResponseWriter { return u.ResponseWriter }

// A handler says that it did nothing with NothingDone, or with a retry
// directive of true on an error; only then is its key released.
func TestHandlerNothingDone(t *testing.T) {
	tests := []struct {
		name      string
		next      http.HandlerFunc
		wantRuns  int64
		wantRetry string // Stripe-Should-Retry of the first answer
	}{
		{"400 after NothingDone", func(w http.ResponseWriter, r *http.Request) {
			NothingDone(r.Context())
			http.Error(w, "amount missing", 400)
		}, 2, ""},
		{"503 after NothingDone", func(w http.ResponseWriter, r *http.Request) {
			NothingDone(r.Context())
			w.Header().Set("Retry-After", "1")
			http.Error(w, "ledger refused", 503)
		}, 2, ""},
		{"201 after NothingDone", func(w http.ResponseWriter, r *http.Request) {
			NothingDone(r.Context())
			w.WriteHeader(201)
		}, 2, ""},
		{"NothingDone after a 500", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "ledger refused", 500)
			NothingDone(r.Context())
		}, 2, "false"},
		{"NothingDone from another goroutine", func(w http.ResponseWriter, r *http.Request) {
			done := make(chan struct{})
			go func() { NothingDone(r.Context()); close(done) }()
			<-done
			w.WriteHeader(400)
		}, 2, ""},
		{"WriteDeadlineProblem", func(w http.ResponseWriter, r *http.Request) {
			WriteDeadlineProblem(w, "the caller left")
		}, 2, ""},
		{"WriteDeadlineProblem through a wrapper", func(w http.ResponseWriter, r *http.Request) {
			WriteDeadlineProblem(&unwrapper{w}, "the caller left")
		}, 2, ""},
		{"Stripe-Should-Retry: true", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Stripe-Should-Retry", "true")
			w.WriteHeader(500)
		}, 2, "true"},
		{"X-Should-Retry: true", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Should-Retry", "True ")
			w.WriteHeader(503)
		}, 2, ""},
		{"X-Should-Retry: true on a 2xx", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Should-Retry", "true")
			w.WriteHeader(201)
		}, 1, ""},
		{"500 without a word", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(500)
		}, 1, "false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var runs atomic.Int64
			h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				tt.next(w, r)
			}), HandlerOptions{})
			first := serve(h, keyed("k", "x"))
			serve(h, keyed("k", "x"))
			if got := runs.Load(); got != tt.wantRuns {
				t.Errorf("handler runs = %d, want %d", got, tt.wantRuns)
			}
			if got := first.Header().Get("Stripe-Should-Retry"); got != tt.wantRetry {
				t.Errorf("first answer: Stripe-Should-Retry = %q, want %q", got, tt.wantRetry)
			}
		})
	}
	if NothingDone(httptest.NewRequest("POST", "/", nil).Context()) {
		t.Errorf("NothingDone outside a Handler = true, want false")
	}
	var got bool
	h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = NothingDone(r.Context()) }), HandlerOptions{Optional: true})
	serve(h, req{})
	if got {
		t.Errorf("NothingDone for a request without a key = true, want false")
	}
}

// chunks hides the size of a body, as a chunked request does.
type chunks struct{ io.Reader }

func TestHandlerRequestBody(t *testing.T) {
	tests := []struct {
		name   string
		body   io.Reader
		length int64
		want   int
	}{
		{"at limit", strings.NewReader("0123456789"), 10, 201},
		{"at limit, unknown length", chunks{strings.NewReader("0123456789")}, -1, 201},
		{"over limit", strings.NewReader("0123456789a"), 11, 413},
		{"over limit, unknown length", chunks{strings.NewReader("0123456789a")}, -1, 413},
		{"empty", http.NoBody, 0, 201},
		{"nil", nil, 0, 201},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var seen []byte
			h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen, _ = io.ReadAll(r.Body)
				r.Body.Close()
				w.WriteHeader(201)
			}), HandlerOptions{MaxRequestBody: 10})
			r := httptest.NewRequest("POST", "/", nil)
			r.Body, r.ContentLength = nil, tt.length
			if tt.body != nil {
				r.Body = io.NopCloser(tt.body)
			}
			r.Header.Set("Idempotency-Key", "k")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if tt.want != 201 {
				wantProblem(t, w, tt.want)
				return
			}
			if w.Code != 201 {
				t.Fatalf("status = %d, want 201 (body %s)", w.Code, w.Body)
			}
			if tt.length > 0 && string(seen) != "0123456789" {
				t.Errorf("handler read %q, want %q", seen, "0123456789")
			}
		})
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

func TestHandlerRequestBodyError(t *testing.T) {
	c := &charges{}
	r := httptest.NewRequest("POST", "/", io.NopCloser(errReader{}))
	r.Header.Set("Idempotency-Key", "k")
	w := httptest.NewRecorder()
	Handler(c, HandlerOptions{}).ServeHTTP(w, r)
	wantProblem(t, w, 400)
	if c.runs.Load() != 0 {
		t.Errorf("handler ran on an unreadable body")
	}
}

func TestHandlerScope(t *testing.T) {
	c := &charges{}
	h := Handler(c, HandlerOptions{Scope: func(r *http.Request) string { return r.Header.Get("X-Account") }})
	as := func(acct string) req {
		q := keyed("same-key", "x")
		if acct != "" {
			q.header.Set("X-Account", acct)
		}
		return q
	}
	a := serve(h, as("acct_a"))
	b := serve(h, as("acct_b"))
	g := serve(h, as(""))
	if a.Body.String() == b.Body.String() || a.Body.String() == g.Body.String() {
		t.Errorf("scopes share a response: a %q, b %q, global %q", a.Body, b.Body, g.Body)
	}
	for _, tt := range []struct {
		acct string
		want *httptest.ResponseRecorder
	}{{"acct_a", a}, {"acct_b", b}, {"", g}} {
		if w := serve(h, as(tt.acct)); w.Body.String() != tt.want.Body.String() {
			t.Errorf("scope %q replay = %q, want %q", tt.acct, w.Body, tt.want.Body)
		}
	}
	if got := c.runs.Load(); got != 3 {
		t.Errorf("handler runs = %d, want 3", got)
	}
}

// failingStore fails the calls named in fail.
type failingStore struct {
	Store
	fail  string
	calls []string
}

func (s *failingStore) Begin(ctx context.Context, key, fp string, ttl time.Duration) (BeginResult, error) {
	s.calls = append(s.calls, "Begin")
	if s.fail == "Begin" {
		return BeginResult{}, errors.New("redis: connection refused")
	}
	return s.Store.Begin(ctx, key, fp, ttl)
}

func (s *failingStore) Complete(ctx context.Context, key, token string, resp *StoredResponse, ttl time.Duration) error {
	s.calls = append(s.calls, "Complete")
	if s.fail == "Complete" {
		return errors.New("redis: i/o timeout")
	}
	return s.Store.Complete(ctx, key, token, resp, ttl)
}

func (s *failingStore) Release(ctx context.Context, key, token string) error {
	s.calls = append(s.calls, "Release")
	return s.Store.Release(ctx, key, token)
}

func TestHandlerStoreErrors(t *testing.T) {
	tests := []struct {
		fail      string
		want      int
		wantRuns  int64
		wantCalls string
		wantErrs  int
	}{
		{"", 201, 1, "Begin Complete Begin", 0},
		{"Begin", 503, 0, "Begin Begin", 2},
		// The response was sent; the key is marked spent without it, and
		// when that fails too, the lock stays until LockTTL: the retry
		// is told the key is in flight, and does not run.
		{"Complete", 201, 1, "Begin Complete Complete Begin", 2},
	}
	for _, tt := range tests {
		t.Run(tt.fail, func(t *testing.T) {
			s := &failingStore{Store: NewMemoryStore(MemoryStoreOptions{}), fail: tt.fail}
			var errs []error
			c := &charges{}
			h := Handler(c, HandlerOptions{Store: s, OnStoreError: func(r *http.Request, err error) { errs = append(errs, err) }})
			w := serve(h, keyed("k", "x"))
			if tt.want == 503 {
				wantProblem(t, w, 503)
				if got, want := w.Header().Get("Retry-After"), "1"; got != want {
					t.Errorf("Retry-After = %q, want %q", got, want)
				}
			} else if w.Code != tt.want {
				t.Errorf("status = %d, want %d", w.Code, tt.want)
			}
			serve(h, keyed("k", "x"))
			if got := c.runs.Load(); got != tt.wantRuns {
				t.Errorf("handler runs = %d, want %d", got, tt.wantRuns)
			}
			if got := strings.Join(s.calls, " "); got != tt.wantCalls {
				t.Errorf("store calls = %q, want %q", got, tt.wantCalls)
			}
			if len(errs) != tt.wantErrs {
				t.Errorf("OnStoreError calls = %v, want %d", errs, tt.wantErrs)
			}
		})
	}
}

// Store errors go to the Logger given, and to no logger otherwise.
func TestHandlerStoreErrorsLogged(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	s := &failingStore{Store: NewMemoryStore(MemoryStoreOptions{}), fail: "Begin"}
	h := Handler(&charges{}, HandlerOptions{Store: s, Logger: logger})
	wantProblem(t, serve(h, keyed("k", "x")), 503)
	got := buf.String()
	for _, want := range []string{"level=ERROR", `msg="idempotency: store error"`, "http.request.method=POST", "error=\"redis: connection refused\""} {
		if !strings.Contains(got, want) {
			t.Errorf("log = %q, want it to contain %q", got, want)
		}
	}
	// No Logger, no OnStoreError: nothing is written anywhere, and the
	// request is still answered.
	h = Handler(&charges{}, HandlerOptions{Store: &failingStore{Store: NewMemoryStore(MemoryStoreOptions{}), fail: "Begin"}})
	wantProblem(t, serve(h, keyed("k", "x")), 503)
}

func TestHandlerStoredHeaders(t *testing.T) {
	n := httptestutil.NewNetwork()
	var runs atomic.Int64
	h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		hd := w.Header()
		hd.Set("Connection", "X-Hop")
		hd.Set("X-Hop", "1")
		hd.Set("Keep-Alive", "timeout=5")
		hd.Set("Date", "Mon, 02 Jan 2006 15:04:05 GMT")
		hd.Set("Trailer", "X-Sum")
		hd.Set("X-Kept", "yes")
		hd.Add("Set-Cookie", "a=1")
		hd.Add("Set-Cookie", "b=2")
		w.WriteHeader(201)
		io.WriteString(w, "<html><body>charged</body></html>") // sniffed as text/html
		hd.Set("X-Sum", "42")                                  // a trailer
		hd.Set("X-Late", "ignored")                            // after the header was written
	}), HandlerOptions{})
	srv := n.Serve("api.test", h)
	defer srv.Close()
	tr := n.Transport()
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	post := func() (*http.Response, string) {
		t.Helper()
		r, _ := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader("x"))
		r.Header.Set("Idempotency-Key", "k")
		resp, err := c.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	first, firstBody := post()
	replay, replayBody := post()
	if runs.Load() != 1 || replay.Header.Get(ReplayedHeader) != "true" {
		t.Fatalf("runs %d, %s %q; want 1 run and a replay", runs.Load(), ReplayedHeader, replay.Header.Get(ReplayedHeader))
	}
	if replay.StatusCode != first.StatusCode || replayBody != firstBody {
		t.Errorf("replay = %d %q, want %d %q", replay.StatusCode, replayBody, first.StatusCode, firstBody)
	}
	for _, tt := range []struct{ name, want string }{
		{"Content-Type", first.Header.Get("Content-Type")}, // sniffed by net/http, stored the same
		{"X-Kept", "yes"},
		{"Set-Cookie", "a=1,b=2"},
		{"X-Hop", ""},
		{"Keep-Alive", ""},
		{"X-Late", ""},
		{"Trailer", ""},
		{"Content-Length", strconv.Itoa(len(firstBody))},
	} {
		if got := strings.Join(replay.Header.Values(tt.name), ","); got != tt.want {
			t.Errorf("replay %s = %q, want %q", tt.name, got, tt.want)
		}
	}
	if got, want := first.Header.Get("Content-Type"), "text/html; charset=utf-8"; got != want {
		t.Errorf("original Content-Type = %q, want %q", got, want)
	}
	if replay.Header.Get("Date") == "Mon, 02 Jan 2006 15:04:05 GMT" {
		t.Errorf("replay Date is the stored one; want a fresh Date")
	}
}

// TestHandlerStreams checks that the response goes to the client as the
// handler writes and flushes it, not when the handler returns, and that a
// streamed response is stored whole.
func TestHandlerStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := httptestutil.NewNetwork()
		next := make(chan struct{})
		var runs atomic.Int64
		h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.Header().Set("Content-Type", "text/event-stream")
			for _, ev := range []string{"data: 1\n\n", "data: 2\n\n"} {
				io.WriteString(w, ev)
				w.(http.Flusher).Flush()
				<-next
			}
		}), HandlerOptions{})
		srv := n.Serve("api.test", h)
		defer srv.Close()
		tr := n.Transport()
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr}
		post := func() *http.Response {
			r, _ := http.NewRequest("POST", srv.URL+"/stream", nil)
			r.Header.Set("Idempotency-Key", "k")
			resp, err := c.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			return resp
		}
		resp := post()
		buf := make([]byte, 64)
		for _, want := range []string{"data: 1\n\n", "data: 2\n\n"} {
			n, err := resp.Body.Read(buf)
			if got := string(buf[:n]); got != want || err != nil {
				t.Fatalf("read %q, %v; want %q before the handler returns", got, err, want)
			}
			next <- struct{}{}
		}
		rest, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if len(rest) != 0 {
			t.Errorf("trailing body %q, want none", rest)
		}
		replay := post()
		b, _ := io.ReadAll(replay.Body)
		replay.Body.Close()
		if got, want := string(b), "data: 1\n\ndata: 2\n\n"; got != want {
			t.Errorf("replay body = %q, want %q", got, want)
		}
		if runs.Load() != 1 {
			t.Errorf("handler runs = %d, want 1", runs.Load())
		}
	})
}

// TestHandlerExpiry checks, on virtual time over the in-memory network,
// that a response is replayed until its TTL and the handler runs again
// after it.
func TestHandlerExpiry(t *testing.T) {
	for _, ttl := range []time.Duration{0, time.Hour} {
		t.Run(fmt.Sprint(ttl), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				want := ttl
				if want == 0 {
					want = 24 * time.Hour
				}
				n := httptestutil.NewNetwork()
				c := &charges{}
				srv := n.Serve("api.test", Handler(c, HandlerOptions{TTL: ttl}))
				defer srv.Close()
				tr := n.Transport()
				defer tr.CloseIdleConnections()
				client := &http.Client{Transport: tr}
				post := func() string {
					r, _ := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader("x"))
					r.Header.Set("Idempotency-Key", "k")
					resp, err := client.Do(r)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					return resp.Header.Get("X-Charge")
				}
				start := time.Now()
				steps := []struct {
					at   time.Duration
					want string
				}{{0, "1"}, {time.Minute, "1"}, {want - time.Nanosecond, "1"}, {want, "2"}, {want + time.Minute, "2"}}
				for i, s := range steps {
					time.Sleep(time.Until(start.Add(s.at)))
					if got := post(); got != s.want {
						t.Errorf("step %d at %v: charge %s, want %s", i, s.at, got, s.want)
					}
				}
			})
		})
	}
}

// TestHandlerConcurrentClients sends 50 identical POSTs with one key at
// once from 50 real clients over loopback. The first to arrive runs the
// handler, which holds until the other 49 have their answer: all of them
// 409. Then 50 more get the replay, byte for byte, and a different
// payload with the same key gets 422.
func TestHandlerConcurrentClients(t *testing.T) {
	const clients = 50
	b := newBlocking()
	srv := httptest.NewServer(Handler(b, HandlerOptions{}))
	defer srv.Close()

	var transports []*http.Transport
	defer func() {
		for _, tr := range transports {
			tr.CloseIdleConnections()
		}
	}()
	for range clients {
		transports = append(transports, &http.Transport{})
	}
	type result struct {
		status int
		header http.Header
		body   []byte
		err    error
	}
	post := func(tr *http.Transport, body string) result {
		r, _ := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader(body))
		r.Header.Set("Idempotency-Key", "order-1")
		resp, err := (&http.Client{Transport: tr}).Do(r)
		if err != nil {
			return result{err: err}
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		return result{resp.StatusCode, resp.Header, raw, err}
	}
	round := func() chan result {
		out := make(chan result, clients)
		var wg sync.WaitGroup
		for _, tr := range transports {
			wg.Go(func() { out <- post(tr, `{"amount":1000}`) })
		}
		go func() { wg.Wait(); close(out) }()
		return out
	}

	results := round()
	for i := range clients - 1 {
		res := <-results
		if res.err != nil {
			t.Fatal(res.err)
		}
		if res.status != http.StatusConflict || res.header.Get("Retry-After") == "" {
			t.Fatalf("answer %d while the first runs: %d, Retry-After %q; want 409 with Retry-After", i, res.status, res.header.Get("Retry-After"))
		}
	}
	close(b.release)
	first := <-results
	if first.err != nil || first.status != http.StatusCreated {
		t.Fatalf("first: %d, %v; want 201", first.status, first.err)
	}
	if _, ok := <-results; ok {
		t.Fatal("more results than clients")
	}

	for res := range round() {
		if res.err != nil {
			t.Fatal(res.err)
		}
		if res.status != first.status || !bytes.Equal(res.body, first.body) || res.header.Get(ReplayedHeader) != "true" {
			t.Errorf("replay: %d %q %s=%q; want %d %q, replayed", res.status, res.body, ReplayedHeader, res.header.Get(ReplayedHeader), first.status, first.body)
		}
		for _, k := range []string{"Content-Type", "Content-Length", "X-Charge"} {
			if got, want := res.header.Get(k), first.header.Get(k); got != want {
				t.Errorf("replay %s = %q, want %q", k, got, want)
			}
		}
	}
	if res := post(transports[0], `{"amount":9999}`); res.status != http.StatusUnprocessableEntity {
		t.Errorf("different payload: %d, want 422", res.status)
	}
	if got := b.runs.Load(); got != 1 {
		t.Errorf("handler runs = %d, want 1", got)
	}
}

func TestHandlerNoWrite(t *testing.T) {
	var runs atomic.Int64
	h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1) }), HandlerOptions{})
	first := serve(h, keyed("k", "x"))
	second := serve(h, keyed("k", "x"))
	if first.Code != 200 || second.Code != 200 || second.Body.Len() != 0 || second.Header().Get(ReplayedHeader) != "true" {
		t.Errorf("got %d then %d %q replayed=%q; want 200 twice, the second an empty replay", first.Code, second.Code, second.Body, second.Header().Get(ReplayedHeader))
	}
	if runs.Load() != 1 {
		t.Errorf("handler runs = %d, want 1", runs.Load())
	}
}

// A hijacked connection may have carried anything: its key is spent.
func TestHandlerHijackNotStored(t *testing.T) {
	n := httptestutil.NewNetwork()
	var runs atomic.Int64
	// The client sees the hijacked connection close before the Handler
	// completes the key: the retry waits for that, or it could find the
	// key still in flight (409) instead of spent.
	store := &completeSignal{Store: NewMemoryStore(MemoryStoreOptions{}), done: make(chan struct{}, 1)}
	h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Errorf("Hijack: %v", err)
				return
			}
			conn.Close()
			return
		}
		w.WriteHeader(201)
	}), HandlerOptions{Store: store})
	srv := n.Serve("api.test", h)
	defer srv.Close()
	tr := n.Transport()
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	var statuses []string
	for i := range 2 {
		r, _ := http.NewRequest("POST", srv.URL, strings.NewReader("x"))
		r.Header.Set("Idempotency-Key", "k")
		resp, err := c.Do(r)
		if i == 0 {
			<-store.done
		}
		if err != nil {
			statuses = append(statuses, "error")
			continue
		}
		resp.Body.Close()
		statuses = append(statuses, strconv.Itoa(resp.StatusCode))
	}
	if got, want := strings.Join(statuses, " "), "error 422"; got != want {
		t.Errorf("answers = %q, want %q", got, want)
	}
}

// completeSignal is a Store that says on done when a Complete returned.
type completeSignal struct {
	Store
	done chan struct{}
}

func (s *completeSignal) Complete(ctx context.Context, key, token string, resp *StoredResponse, ttl time.Duration) error {
	err := s.Store.Complete(ctx, key, token, resp, ttl)
	select {
	case s.done <- struct{}{}:
	default:
	}
	return err
}

// TestHandlerLockExpires shows what LockTTL means: a handler slower than
// it loses its lock, a retry runs the handler again, and the slow one's
// response is not stored.
func TestHandlerLockExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var errs []error
		var mu sync.Mutex
		c := &charges{}
		var calls atomic.Int64
		slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) == 1 {
				time.Sleep(2 * time.Second) // the first run is slow
			}
			c.ServeHTTP(w, r)
		})
		h := Handler(slow, HandlerOptions{LockTTL: time.Second, OnStoreError: func(r *http.Request, err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}})
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- serve(h, keyed("k", "x")) }()
		time.Sleep(999 * time.Millisecond)
		wantProblem(t, serve(h, keyed("k", "x")), 409)
		time.Sleep(time.Millisecond)
		second := serve(h, keyed("k", "x")) // the lock has expired: runs
		first := <-done
		third := serve(h, keyed("k", "x"))
		if got, want := c.runs.Load(), int64(2); got != want {
			t.Errorf("handler runs = %d, want %d", got, want)
		}
		if third.Body.String() != second.Body.String() || first.Body.String() == second.Body.String() {
			t.Errorf("stored %q; want the second run's %q, not the first's %q", third.Body, second.Body, first.Body)
		}
		if len(errs) != 1 || !errors.Is(errs[0], ErrLockLost) {
			t.Errorf("store errors = %v, want one ErrLockLost", errs)
		}
	})
}

// TestHandlerMemoryBounds sends 100 000 requests with distinct keys
// through a Handler whose store is bounded, and checks the bounds after
// each.
func TestHandlerMemoryBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const keys = 100_000
		o := MemoryStoreOptions{MaxEntries: 2_000, MaxBytes: 512 << 10}
		s := NewMemoryStore(o)
		h := Handler(&charges{}, HandlerOptions{Store: s, TTL: time.Minute})
		w := &discard{h: make(http.Header)}
		body := strings.NewReader("")
		r := httptest.NewRequest("POST", "/charges", body)
		for i := range keys {
			time.Sleep(40 * time.Millisecond) // 1,500 keys within the TTL
			payload := fmt.Sprintf(`{"amount":%d}`, i)
			body.Reset(payload)
			r.ContentLength = int64(len(payload))
			r.Header.Set("Idempotency-Key", "key-"+strconv.Itoa(i))
			clear(w.h)
			h.ServeHTTP(w, r)
			if w.status != 201 {
				t.Fatalf("request %d: status %d, want 201", i, w.status)
			}
			if st := s.Stats(); st.Entries > o.MaxEntries || st.Bytes > o.MaxBytes || st.InFlight != 0 {
				t.Fatalf("after %d keys: %+v; limits %d entries, %d bytes, and no lock left", i+1, st, o.MaxEntries, o.MaxBytes)
			}
		}
		check(t, s)
		t.Logf("after %d keys: %+v", keys, s.Stats())
	})
}

type discard struct {
	h      http.Header
	status int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) WriteHeader(code int)        { d.status = code }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }

// TestHandlerReplayContentTypeAsSent checks that a replay carries the
// Content-Type the first response carried on the wire, also where net/http
// sniffs none: a Content-Encoding is set, or the header was flushed before
// any body was written.
func TestHandlerReplayContentTypeAsSent(t *testing.T) {
	for _, tt := range []struct {
		name string
		h    http.HandlerFunc
	}{
		{"content-encoding", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			w.Write([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff})
		}},
		{"flush-first", func(w http.ResponseWriter, r *http.Request) {
			w.(http.Flusher).Flush()
			io.WriteString(w, "<html><body>charged</body></html>")
		}},
		{"flush-after-short-write", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "abc") // text, but the whole body is binary
			w.(http.Flusher).Flush()
			io.WriteString(w, "\x00\x01\x02")
		}},
		{"sniffed", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "<html><body>charged</body></html>")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := httptestutil.NewNetwork()
			srv := n.Serve("api.test", Handler(tt.h, HandlerOptions{}))
			defer srv.Close()
			tr := n.Transport()
			tr.DisableCompression = true
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			post := func() *http.Response {
				t.Helper()
				r, _ := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader("x"))
				r.Header.Set("Idempotency-Key", "k")
				resp, err := c.Do(r)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp
			}
			first, replay := post(), post()
			if replay.Header.Get(ReplayedHeader) != "true" {
				t.Fatalf("second response not a replay")
			}
			if got, want := replay.Header.Values("Content-Type"), first.Header.Values("Content-Type"); !slices.Equal(got, want) {
				t.Errorf("replay Content-Type = %q, want %q as first sent", got, want)
			}
		})
	}
}

// TestHandlerFailedHijackStored checks that a handler whose Hijack fails
// (HTTP/2, or a ResponseWriter without it) and that then answers normally
// has its response stored and replayed.
func TestHandlerFailedHijackStored(t *testing.T) {
	var runs atomic.Int64
	h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		if _, _, err := w.(http.Hijacker).Hijack(); err == nil {
			t.Errorf("Hijack on a ResponseRecorder succeeded")
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "created")
	}), HandlerOptions{})
	first := serve(h, keyed("k", "x"))
	second := serve(h, keyed("k", "x"))
	if got, want := fmt.Sprintf("%d %q, %d %q", first.Code, first.Body, second.Code, second.Body),
		`201 "created", 201 "created"`; got != want {
		t.Errorf("answers = %s, want %s", got, want)
	}
	if got, want := runs.Load(), int64(1); got != want {
		t.Errorf("handler runs = %d, want %d", got, want)
	}
}

// A MaxRequestBody of math.MaxInt64 ("no practical limit") must still
// read and hand on a body of unknown length: limit+1 must not wrap to a
// negative count that reads nothing, which would pass the handler an
// empty body and fingerprint every body alike.
func TestHandlerHugeMaxRequestBody(t *testing.T) {
	tests := []struct {
		name   string
		length int64 // ContentLength; -1: chunked
	}{
		{"unknown length", -1},
		{"declared length", 14},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var seen []string
			h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				seen = append(seen, string(b))
				w.WriteHeader(http.StatusCreated)
			}), HandlerOptions{MaxRequestBody: math.MaxInt64})
			send := func(body string) int {
				r := httptest.NewRequest("POST", "/charges", nil)
				r.Body, r.ContentLength = io.NopCloser(chunks{strings.NewReader(body)}), tt.length
				r.Header.Set("Idempotency-Key", "k")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w.Code
			}
			if got, want := send(`{"amount":100}`), http.StatusCreated; got != want {
				t.Fatalf("first request: status = %d, want %d", got, want)
			}
			if len(seen) != 1 || seen[0] != `{"amount":100}` {
				t.Errorf("handler read %q, want [%q]", seen, `{"amount":100}`)
			}
			// The same key with another body is another request.
			if got, want := send(`{"amount":999}`), http.StatusUnprocessableEntity; got != want {
				t.Errorf("same key, other body: status = %d, want %d", got, want)
			}
		})
	}
}

// A declared Content-Length is the client's word: under a large
// MaxRequestBody, a request that declares 256 MiB and sends 2 bytes must
// not make the server reserve 256 MiB (a few such requests, or one that
// declares more, exhaust its memory).
func TestHandlerDeclaredLengthNotReservedAhead(t *testing.T) {
	h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}), HandlerOptions{MaxRequestBody: 1 << 30})
	r := httptest.NewRequest("POST", "/charges", nil)
	r.Body, r.ContentLength = io.NopCloser(strings.NewReader("{}")), 256<<20
	r.Header.Set("Idempotency-Key", "k")
	w := httptest.NewRecorder()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	h.ServeHTTP(w, r)
	runtime.ReadMemStats(&after)
	if got, want := w.Code, http.StatusBadRequest; got != want {
		t.Errorf("status = %d, want %d (body shorter than its Content-Length)", got, want)
	}
	if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(64<<20); got > limit {
		t.Errorf("allocated %d bytes for a 2-byte body, want at most %d", got, limit)
	}
}

// HandlerOptions.RetryAfter is sent in whole seconds, rounded up; a huge
// one must stay a huge wait, never wrap around into a negative (invalid)
// Retry-After that clients ignore.
func TestHandlerRetryAfterOption(t *testing.T) {
	tests := []struct {
		retryAfter time.Duration
		want       string
	}{
		{0, "1"},
		{time.Nanosecond, "1"},
		{1500 * time.Millisecond, "2"},
		{math.MaxInt64, strconv.FormatInt(int64(math.MaxInt64/time.Second)+1, 10)},
		{math.MaxInt64 - time.Second + 2, strconv.FormatInt(int64(math.MaxInt64/time.Second), 10)},
	}
	for _, tt := range tests {
		t.Run(tt.retryAfter.String(), func(t *testing.T) {
			s := &failingStore{Store: NewMemoryStore(MemoryStoreOptions{}), fail: "Begin"}
			h := Handler(&charges{}, HandlerOptions{Store: s, RetryAfter: tt.retryAfter})
			w := serve(h, keyed("k", "x"))
			if got, want := w.Code, http.StatusServiceUnavailable; got != want {
				t.Fatalf("status = %d, want %d", got, want)
			}
			if got := w.Header().Get("Retry-After"); got != tt.want {
				t.Errorf("Retry-After = %q, want %q", got, tt.want)
			}
		})
	}
}

// A full store never makes the Handler run a key twice within its TTL:
// a key that finds no room is refused 503 with Retry-After, unrun, and
// the keys the store holds are replayed; once they expire, new keys run.
// A key whose response was dropped for bytes is answered 422 not-kept.
func TestHandlerFullStoreRunsNoKeyTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		runs := map[string]int{}
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs[r.Header.Get("Idempotency-Key")]++
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"id":"`+r.Header.Get("Idempotency-Key")+`","padding":"`+strings.Repeat("x", 1000)+`"}`)
		})
		send := func(h http.Handler, key string) *httptest.ResponseRecorder {
			r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{}`))
			r.Header.Set("Idempotency-Key", key)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w
		}

		h := Handler(next, HandlerOptions{Store: NewMemoryStore(MemoryStoreOptions{MaxEntries: 2}), TTL: time.Hour})
		for _, tt := range []struct {
			key    string
			status int
			replay bool
		}{
			{"order-1", 201, false},
			{"order-2", 201, false},
			{"order-3", 503, false}, // no room: refused, not run
			{"order-1", 201, true},  // replayed, not run again
			{"order-2", 201, true},
		} {
			w := send(h, tt.key)
			if w.Code != tt.status || (w.Header().Get(ReplayedHeader) == "true") != tt.replay {
				t.Errorf("%s: got %d, replayed %q; want %d, replayed %v", tt.key, w.Code, w.Header().Get(ReplayedHeader), tt.status, tt.replay)
			}
			if w.Code == 503 && w.Header().Get("Retry-After") == "" {
				t.Errorf("%s: 503 without Retry-After", tt.key)
			}
		}
		time.Sleep(time.Hour)
		if w := send(h, "order-3"); w.Code != 201 {
			t.Errorf("order-3 after the TTL: got %d, want 201", w.Code)
		}
		for k, n := range runs {
			if n != 1 {
				t.Errorf("%s ran %d times, want once", k, n)
			}
		}

		// Bounded by bytes: the oldest response is dropped, its key kept.
		clear(runs)
		h = Handler(next, HandlerOptions{Store: NewMemoryStore(MemoryStoreOptions{MaxBytes: 4000})})
		for _, k := range []string{"a", "b", "c", "a"} {
			send(h, k)
		}
		if w := send(h, "a"); w.Code != http.StatusUnprocessableEntity || !strings.Contains(w.Body.String(), TypeNotKept) {
			t.Errorf("a key whose response was dropped: got %d %s, want 422 of type %s", w.Code, w.Body, TypeNotKept)
		}
		if runs["a"] != 1 {
			t.Errorf("a ran %d times, want once", runs["a"])
		}
	})
}
