package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestParseDeadline(t *testing.T) {
	tests := []struct {
		values []string
		want   time.Duration
		ok     bool
	}{
		{[]string{"1500"}, 1500 * time.Millisecond, true},
		{[]string{"0"}, 0, true},
		{[]string{" 250\t"}, 250 * time.Millisecond, true},
		{[]string{"000042"}, 42 * time.Millisecond, true},
		{[]string{"999999999999"}, 999999999999 * time.Millisecond, true}, // 12 digits, about 31 years
		{nil, 0, false},
		{[]string{""}, 0, false},
		{[]string{" "}, 0, false},
		{[]string{"1000000000000"}, 0, false}, // 13 digits
		{[]string{"99999999999999999999999"}, 0, false},
		{[]string{"-5"}, 0, false},
		{[]string{"+5"}, 0, false},
		{[]string{"1.5"}, 0, false},
		{[]string{"1500ms"}, 0, false},
		{[]string{"2S"}, 0, false}, // grpc-timeout's form is not this header's
		{[]string{"1 500"}, 0, false},
		{[]string{"0x10"}, 0, false},
		{[]string{"１２"}, 0, false}, // full-width digits
		{[]string{"100", "200"}, 0, false},
		{[]string{"100", "100"}, 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseDeadline(tt.values)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseDeadline(%q) = %v, %v, want %v, %v", tt.values, got, ok, tt.want, tt.ok)
		}
	}
}

// TestDeadlineHandler checks what DeadlineHandler does with each kind of
// header value: a deadline, an expired one, and values it must ignore.
func TestDeadlineHandler(t *testing.T) {
	tests := []struct {
		name     string
		header   string   // DeadlineOptions.Header
		values   []string // of the header, under its name below
		sent     string   // header name the request uses
		parent   time.Duration
		transit  time.Duration // DeadlineOptions.Transit
		wantRun  bool
		wantLeft time.Duration // the handler context's time left; 0: no deadline
	}{
		{name: "deadline", values: []string{"1500"}, wantRun: true, wantLeft: 1500 * time.Millisecond},
		{name: "absent", wantRun: true},
		{name: "garbage", values: []string{"soon"}, wantRun: true},
		{name: "negative", values: []string{"-1"}, wantRun: true},
		{name: "with a unit", values: []string{"5s"}, wantRun: true},
		{name: "twice", values: []string{"10", "20"}, wantRun: true},
		{name: "too long", values: []string{"12345678901234567890"}, wantRun: true},
		{name: "earlier parent deadline kept", values: []string{"5000"}, parent: time.Second, wantRun: true, wantLeft: time.Second},
		{name: "later parent deadline", values: []string{"500"}, parent: time.Second, wantRun: true, wantLeft: 500 * time.Millisecond},
		{name: "other header", header: "Connect-Timeout-Ms", sent: "Connect-Timeout-Ms", values: []string{"700"}, wantRun: true, wantLeft: 700 * time.Millisecond},
		{name: "other header ignores Request-Timeout", header: "Connect-Timeout-Ms", values: []string{"0"}, wantRun: true},
		{name: "transit taken off", values: []string{"1500"}, transit: 500 * time.Millisecond, wantRun: true, wantLeft: time.Second},
		{name: "no more than the transit", values: []string{"300"}, transit: 300 * time.Millisecond},
		{name: "expired", values: []string{"0"}},
		{name: "expired with white space", values: []string{" 0 "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ran := false
				var left time.Duration
				h := DeadlineHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					ran = true
					if d, ok := r.Context().Deadline(); ok {
						left = time.Until(d)
					}
					w.WriteHeader(http.StatusNoContent)
				}), DeadlineOptions{Header: tt.header, Transit: tt.transit})
				ctx := t.Context()
				if tt.parent > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.parent)
					defer cancel()
				}
				r := httptest.NewRequestWithContext(ctx, "POST", "/charges", strings.NewReader("{}"))
				name := tt.sent
				if name == "" {
					name = DefaultDeadlineHeader
				}
				r.Header[name] = tt.values
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if ran != tt.wantRun {
					t.Fatalf("handler ran: %v, want %v", ran, tt.wantRun)
				}
				if left != tt.wantLeft {
					t.Errorf("handler's context has %v left, want %v", left, tt.wantLeft)
				}
				if tt.wantRun {
					if w.Code != http.StatusNoContent {
						t.Errorf("got status %d, want %d", w.Code, http.StatusNoContent)
					}
					return
				}
				if w.Code != http.StatusGatewayTimeout {
					t.Errorf("got status %d, want %d", w.Code, http.StatusGatewayTimeout)
				}
				if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
					t.Errorf("got Content-Type %q, want application/problem+json", ct)
				}
				checkDeadlineProblem(t, w)
			})
		})
	}
}

// checkDeadlineProblem checks a WriteDeadlineProblem answer: 504, and a
// problem that names the deadline and says the request may be sent
// again.
func checkDeadlineProblem(t *testing.T, w *httptest.ResponseRecorder) {
	t.Helper()
	if w.Code != http.StatusGatewayTimeout {
		t.Errorf("got status %d, want %d", w.Code, http.StatusGatewayTimeout)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("got Content-Type %q, want application/problem+json", ct)
	}
	var p struct {
		problem
		Retriable *bool `json:"is_retriable"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != 504 || !strings.Contains(p.Detail, "deadline") ||
		p.Retriable == nil || !*p.Retriable {
		t.Errorf("got problem %s (%v), want status 504, a detail that names the deadline, is_retriable true", w.Body, err)
	}
}

// TestHandlerBodyPastDeadline checks that Handler, behind
// DeadlineHandler, answers a body whose read failed at the caller's
// deadline with WriteDeadlineProblem, without running next.
func TestHandlerBodyPastDeadline(t *testing.T) {
	h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("handler ran, want it refused")
	}), HandlerOptions{})
	r := httptest.NewRequest("POST", "/charges", io.MultiReader(strings.NewReader("{"),
		failingReader{fmt.Errorf("%w: read tcp: i/o timeout", ErrCallerDeadline)}))
	r.Header.Set(DefaultHeader, "k1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	checkDeadlineProblem(t, w)
}

// failingReader fails every read with err.
type failingReader struct{ err error }

func (f failingReader) Read([]byte) (int, error) { return 0, f.err }

// countingReader counts the reads of a request body.
type countingReader struct {
	r     io.Reader
	reads atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads.Add(1)
	return c.r.Read(p)
}

// TestDeadlineHandlerExpiredBodyUnread checks that a request whose
// deadline has passed is refused without reading its body.
func TestDeadlineHandlerExpiredBodyUnread(t *testing.T) {
	body := &countingReader{r: strings.NewReader(strings.Repeat("x", 1<<16))}
	h := DeadlineHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("handler ran, want it refused")
	}), DeadlineOptions{})
	r := httptest.NewRequest("POST", "/charges", body)
	r.Header.Set(DefaultDeadlineHeader, "0")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusGatewayTimeout {
		t.Errorf("got status %d, want %d", w.Code, http.StatusGatewayTimeout)
	}
	if n := body.reads.Load(); n != 0 {
		t.Errorf("body read %d times, want 0", n)
	}
}

// TestDeadlineHandlerContextCause checks that the handler's context ends
// at the caller's deadline with ErrCallerDeadline as its cause.
func TestDeadlineHandlerContextCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cause, err error
		var waited time.Duration
		h := DeadlineHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			<-r.Context().Done()
			waited = time.Since(start)
			cause, err = context.Cause(r.Context()), r.Context().Err()
		}), DeadlineOptions{})
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set(DefaultDeadlineHeader, "2500")
		h.ServeHTTP(httptest.NewRecorder(), r)
		if waited != 2500*time.Millisecond {
			t.Errorf("context ended after %v, want 2.5s", waited)
		}
		if cause != ErrCallerDeadline || err != context.DeadlineExceeded {
			t.Errorf("context ended with %v (cause %v), want %v (cause %v)", err, cause, context.DeadlineExceeded, ErrCallerDeadline)
		}
	})
}

// TestDeadlineHandlerSlowBody sends, over loopback, a request whose body
// is still arriving when its caller's 150 ms run out: the handler's read
// fails at the deadline with ErrCallerDeadline, and a timeout, instead of
// waiting for a body nobody waits on.
func TestDeadlineHandlerSlowBody(t *testing.T) {
	readErr := make(chan error, 1)
	srv := httptest.NewServer(DeadlineHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
		}
	}), DeadlineOptions{}))
	defer srv.Close()
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", srv.URL, pr)
	req.ContentLength = 1 << 10
	req.Header.Set(DefaultDeadlineHeader, "150")
	c := srv.Client()
	defer c.CloseIdleConnections()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	pw.Write([]byte("the first bytes"))
	var err error
	select {
	case err = <-readErr:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's read did not end in 10s, want it cut at 150ms")
	}
	pw.CloseWithError(errors.New("caller gone"))
	<-done
	var ne net.Error
	if !errors.Is(err, ErrCallerDeadline) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("body read ended with %v, want a timeout that wraps ErrCallerDeadline", err)
	}
}

// TestDeadlineHandlerKeepsConnection checks over loopback that the read
// deadline does not outlive the body: a handler that answers after the
// caller's deadline (its body read in time) sees ErrCallerDeadline as its
// context's cause, its answer is delivered, and the next request reuses
// the connection.
func TestDeadlineHandlerKeepsConnection(t *testing.T) {
	var conns atomic.Int64
	causes := make(chan error, 3)
	srv := httptest.NewUnstartedServer(DeadlineHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			t.Errorf("reading body: %v", err)
		}
		<-r.Context().Done()
		causes <- context.Cause(r.Context())
		time.Sleep(20 * time.Millisecond) // answers after the deadline
		io.WriteString(w, "late but kept")
	}), DeadlineOptions{}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c := srv.Client()
	defer c.CloseIdleConnections()
	for i := range 3 {
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("a body read in time"))
		req.Header.Set(DefaultDeadlineHeader, "50")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != "late but kept" {
			t.Errorf("request %d: got %q, %v, want %q", i, b, err, "late but kept")
		}
		if cause := <-causes; cause != ErrCallerDeadline {
			t.Errorf("request %d: handler's context cause = %v, want %v", i, cause, ErrCallerDeadline)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("opened %d connections, want 1", n)
	}
}

// A negative Transit is a configuration slip, not a licence: a value of 0
// is an expired deadline whatever Transit is, and no Transit may wrap a
// live deadline around into an expired one (or stretch the caller's
// deadline past what it said).
func TestDeadlineHandlerNegativeTransit(t *testing.T) {
	tests := []struct {
		name     string
		value    string
		transit  time.Duration
		wantRun  bool
		wantLeft time.Duration
	}{
		{name: "expired, Transit -1s", value: "0", transit: -time.Second},
		{name: "1500ms, Transit -1s", value: "1500", transit: -time.Second, wantRun: true, wantLeft: 1500 * time.Millisecond},
		{name: "1500ms, Transit MinInt64", value: "1500", transit: math.MinInt64, wantRun: true, wantLeft: 1500 * time.Millisecond},
		{name: "1500ms, Transit -MaxInt64", value: "1500", transit: -math.MaxInt64, wantRun: true, wantLeft: 1500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ran := false
				var left time.Duration
				h := DeadlineHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					ran = true
					if d, ok := r.Context().Deadline(); ok {
						left = time.Until(d)
					}
					w.WriteHeader(http.StatusNoContent)
				}), DeadlineOptions{Transit: tt.transit})
				r := httptest.NewRequestWithContext(t.Context(), "POST", "/charges", strings.NewReader("{}"))
				r.Header[DefaultDeadlineHeader] = []string{tt.value}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if ran != tt.wantRun {
					t.Fatalf("handler ran: %v, want %v (status %d)", ran, tt.wantRun, w.Code)
				}
				if left != tt.wantLeft {
					t.Errorf("handler's context has %v left, want %v", left, tt.wantLeft)
				}
				want := http.StatusGatewayTimeout
				if tt.wantRun {
					want = http.StatusNoContent
				}
				if w.Code != want {
					t.Errorf("got status %d, want %d", w.Code, want)
				}
			})
		})
	}
}
