package transport

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// provocation makes real net/http meet one outcome on loopback, on a
// POST nobody vouched for. run sends it through wrap(base), where base is
// net/http's transport for the server, and returns the outcome and how
// many times the server acted on the POST.
type provocation struct {
	proto string
	run   func(t *testing.T, wrap func(http.RoundTripper) http.RoundTripper, post newPost) (status int, err error, acted int64)
}

// newPost makes the POST of a provocation.
type newPost func(ctx context.Context, url string) *http.Request

// postNoGetBody is a POST without a key whose body has no GetBody, as
// Retry sends every attempt of such a request.
func postNoGetBody(ctx context.Context, url string) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/orders", io.MultiReader(strings.NewReader(`{"sku":"a"}`)))
	return req
}

// postGetBody is a POST without a key whose body has GetBody, as
// http.NewRequest makes it for a strings.Reader.
func postGetBody(ctx context.Context, url string) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/orders", strings.NewReader(`{"sku":"a"}`))
	return req
}

func sendOnce(rt http.RoundTripper, req *http.Request) (int, error) {
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// h2OnFirstStream: the first stream of the first connection meets act;
// every other request is answered.
func h2OnFirstStream(act h2Act, useTLS bool) func(*testing.T, func(http.RoundTripper) http.RoundTripper, newPost) (int, error, int64) {
	return func(t *testing.T, wrap func(http.RoundTripper) http.RoundTripper, post newPost) (int, error, int64) {
		s := newScriptedH2(t, useTLS, func(conn int, stream uint32) h2Act {
			if conn == 1 && stream == 1 {
				return act
			}
			return h2Answer
		})
		status, err := sendOnce(wrap(s.Base), post(context.Background(), s.URL))
		return status, err, s.acted.Load()
	}
}

// onReuse sends a GET to warm a connection up, then the POST, calling
// fault when the POST is given that connection again (once).
func onReuse(rt http.RoundTripper, url string, post newPost, fault func(httptrace.GotConnInfo)) (int, error) {
	if _, err := sendOnce(rt, must(http.NewRequest("GET", url+"/warm", nil))); err != nil {
		return 0, err
	}
	var once sync.Once
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if info.Reused {
			once.Do(func() { fault(info) })
		}
	}}
	return sendOnce(rt, post(httptrace.WithClientTrace(context.Background(), trace), url))
}

func must(req *http.Request, err error) *http.Request {
	if err != nil {
		panic(err)
	}
	return req
}

// h2GoAwayOnReuse: a graceful GOAWAY reaches the client between its
// taking a connection from the pool and opening a stream on it.
func h2GoAwayOnReuse(useTLS bool) func(*testing.T, func(http.RoundTripper) http.RoundTripper, newPost) (int, error, int64) {
	return func(t *testing.T, wrap func(http.RoundTripper) http.RoundTripper, post newPost) (int, error, int64) {
		s := newScriptedH2(t, useTLS, func(int, uint32) h2Act { return h2Answer })
		rt := wrap(s.Base)
		var before int64
		status, err := onReuse(rt, s.URL, post, func(httptrace.GotConnInfo) {
			before = s.acted.Load()
			s.goAwayAll(t)
		})
		return status, err, s.acted.Load() - before
	}
}

// h1ClosedOnReuse: the server closes an idle HTTP/1.1 connection (with
// reset, abortively: a TCP RST), and the client reads the close, between
// its taking the connection from the pool and sending the request on it.
func h1ClosedOnReuse(useTLS, reset bool) func(*testing.T, func(http.RoundTripper) http.RoundTripper, newPost) (int, error, int64) {
	return func(t *testing.T, wrap func(http.RoundTripper) http.RoundTripper, post newPost) (int, error, int64) {
		var acted atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			if r.Method == "POST" {
				acted.Add(1)
			}
		})
		srv := httptest.NewUnstartedServer(h)
		var (
			mu    sync.Mutex
			conns []net.Conn
		)
		srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
			if s == http.StateNew {
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}
		if useTLS {
			srv.StartTLS()
		} else {
			srv.Start()
		}
		t.Cleanup(srv.Close)
		base := srv.Client().Transport.(*http.Transport).Clone()
		base.Protocols = new(http.Protocols)
		base.Protocols.SetHTTP1(true)
		t.Cleanup(base.CloseIdleConnections)
		status, err := onReuse(wrap(base), srv.URL, post, func(info httptrace.GotConnInfo) {
			if reset {
				mu.Lock()
				for _, c := range conns {
					if tc, ok := c.(*tls.Conn); ok {
						c = tc.NetConn()
					}
					c.(*net.TCPConn).SetLinger(0)
					c.Close()
				}
				mu.Unlock()
			} else {
				srv.CloseClientConnections()
			}
			// Wait for the client to read the close: its read loop then
			// closes the connection, which a deadline can no longer be
			// set on.
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if info.Conn.SetWriteDeadline(time.Time{}) != nil {
					return
				}
			}
			t.Errorf("the client did not see the server's close within 5s")
		})
		return status, err, acted.Load()
	}
}

// unprocessedPins are the tests that pin policy.UnprocessedOutcomes, by
// row name: each provokes the row's error from real net/http.
var unprocessedPins = map[string][]provocation{
	"graceful GOAWAY": {
		{"h2c", h2OnFirstStream(h2GoAwayIt, false)},
		{"HTTP/2+TLS", h2OnFirstStream(h2GoAwayIt, true)},
	},
	"REFUSED_STREAM": {
		{"h2c", h2OnFirstStream(h2RefuseIt, false)},
		{"HTTP/2+TLS", h2OnFirstStream(h2RefuseIt, true)},
	},
	"cannot rewind body": {
		{"HTTP/2+TLS", h2GoAwayOnReuse(true)},
		{"h2c", h2GoAwayOnReuse(false)},
	},
	"server closed idle connection": {
		{"HTTP/1.1", h1ClosedOnReuse(false, false)},
		{"HTTP/1.1+TLS", h1ClosedOnReuse(true, false)},
	},
	"idle connection broken": {
		{"HTTP/1.1", h1ClosedOnReuse(false, true)},
		{"HTTP/1.1+TLS", h1ClosedOnReuse(true, true)},
	},
}

// notUnprocessed are outcomes net/http would replay too, but that prove
// nothing: they are not rows, and must not become rows by accident.
var notUnprocessed = []provocation{
	{"h2c PROTOCOL_ERROR reset", h2OnFirstStream(h2ActThenReset, false)},
	{"HTTP/2+TLS PROTOCOL_ERROR reset", h2OnFirstStream(h2ActThenReset, true)},
}

// Promise: sturdy reads net/http's error text from one table, each row
// pinned by a test that provokes it from real net/http. Each row's
// outcome is provoked on loopback with a bare net/http transport: the
// error is the row's text, and the server did not act on the request.
// A Go release that changes a text fails here.
func TestUnprocessedTablePinnedByNetHTTP(t *testing.T) {
	for _, row := range policy.UnprocessedOutcomes() {
		pins := unprocessedPins[row.Name]
		if len(pins) == 0 {
			t.Errorf("row %q has no test that provokes it from net/http", row.Name)
		}
		for _, p := range pins {
			t.Run(row.Name+"/"+p.proto, func(t *testing.T) {
				status, err, acted := p.run(t, func(rt http.RoundTripper) http.RoundTripper { return rt }, postNoGetBody)
				if err == nil {
					t.Fatalf("got status %d, want net/http's error %q", status, row.Text)
				}
				if got, ok := policy.NotProcessed(err); !ok || got.Name != row.Name {
					t.Errorf("net/http's error %q is row %q (%v), want row %q", err, got.Name, ok, row.Name)
				}
				if acted != 0 {
					t.Errorf("server acted %d times on a request net/http says it did not process", acted)
				}
			})
		}
	}
	for _, p := range notUnprocessed {
		t.Run("not a row/"+p.proto, func(t *testing.T) {
			_, err, acted := p.run(t, func(rt http.RoundTripper) http.RoundTripper { return rt }, postNoGetBody)
			if row, ok := policy.NotProcessed(err); ok {
				t.Errorf("error %q is row %q, want no row: the server acted %d times", err, row.Name, acted)
			}
			if acted != 1 {
				t.Errorf("server acted %d times, want 1", acted)
			}
		})
	}
}

// Promise: where net/http would replay a request because the server
// provably did not process it, the stack makes that replay itself, for a
// request nobody vouched for too, and with MaxAttempts 1: each row's
// outcome, provoked on the first try, ends in a success, and the server
// acted on the POST exactly once. A PROTOCOL_ERROR reset still sends it
// once and fails.
func TestStackResendsWhatNetHTTPProvesUnprocessed(t *testing.T) {
	// With one attempt no copy of the body is kept: it goes again when
	// the caller can make it again (GetBody), as it would through a bare
	// net/http client.
	stacks := []struct {
		name string
		o    Options
		post newPost
	}{
		{"default", Options{}, postNoGetBody},
		{"default, GetBody", Options{}, postGetBody},
		{"one attempt with hooks", Options{Retry: policy.Retry{MaxAttempts: 1}, Hooks: Hooks{OnAttempt: func(policy.AttemptEvent) {}}}, postGetBody},
		{"one attempt", Options{Retry: policy.Retry{MaxAttempts: 1}}, postGetBody},
	}
	for _, st := range stacks {
		wrap := func(base http.RoundTripper) http.RoundTripper {
			o := st.o
			o.Base, o.Timeout = base, 10*time.Second
			return New(o)
		}
		for _, row := range policy.UnprocessedOutcomes() {
			for _, p := range unprocessedPins[row.Name] {
				t.Run(st.name+"/"+row.Name+"/"+p.proto, func(t *testing.T) {
					status, err, acted := p.run(t, wrap, st.post)
					if err != nil || status != 200 {
						t.Errorf("got %d, %v; want 200", status, err)
					}
					if acted != 1 {
						t.Errorf("server acted %d times, want 1", acted)
					}
				})
			}
		}
		for _, p := range notUnprocessed {
			t.Run(st.name+"/not a row/"+p.proto, func(t *testing.T) {
				_, err, acted := p.run(t, wrap, st.post)
				if err == nil {
					t.Errorf("got a success, want the reset's error")
				}
				if acted != 1 {
					t.Errorf("server acted %d times, want 1", acted)
				}
			})
		}
	}
}
