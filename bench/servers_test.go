package bench

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// memTransport is the in-memory base transport: a RoundTripper that
// answers every request from memory, without HTTP, without a connection.
// It reads and closes the request body, as a transport must, and answers
// 200 with "ok\n". Over it, a benchmark measures only what the stack on
// top costs.
type memTransport struct{}

func (memTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{
		Status:        "200 OK",
		StatusCode:    http.StatusOK,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
		Body:          io.NopCloser(strings.NewReader("ok\n")),
		ContentLength: 3,
		Request:       r,
	}, nil
}

// okHandler reads the request body and answers 200 "ok\n".
func okHandler(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", "3")
	w.Write([]byte("ok\n"))
}

// flaky answers every nth request (n, 2n, ...) 503 with an error body of
// a given size, and the others 200 "ok\n".
type flaky struct {
	every   int64
	errBody []byte
	n       atomic.Int64
}

func newFlaky(every int, errSize int) *flaky {
	return &flaky{every: int64(every), errBody: []byte(strings.Repeat("e", errSize))}
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.n.Add(1)%f.every != 0 {
		okHandler(w, r)
		return
	}
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(f.errBody)))
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write(f.errBody)
}

// loopback is a real server on 127.0.0.1 that counts the connections
// made to it.
type loopback struct {
	*httptest.Server
	conns atomic.Int64
}

func newLoopback(tb testing.TB, h http.Handler) *loopback {
	tb.Helper()
	s := &loopback{Server: httptest.NewUnstartedServer(h)}
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	tb.Cleanup(s.Close)
	return s
}
