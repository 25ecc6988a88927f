package transport_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// hedgeServer is an HTTP/2 loopback server where the first copy of each
// operation (its ?op=) hangs until its stream is reset, and the second
// answers with a 64 KiB body. It counts the connections it accepted, the
// ones that carried a request, and the hung copies that saw their stream
// end.
type hedgeServer struct {
	srv              *httptest.Server
	conns, closed    atomic.Int64
	mu               sync.Mutex
	seen             map[string]int
	served           map[string]bool // the connections (client addresses) that carried a request
	bodies           map[string][]string
	released, hung   atomic.Int64
	firstStatus      int
	maxStreams       uint32
	payload          []byte
	start            time.Time
	events           []string                 // what the server saw, for a failure's message
	hedgedCh         map[string]chan struct{} // closed when an op's second copy arrives
	failedCh         map[string]chan struct{} // closed when an op's first copy has sent its failure
	handlerCompleted atomic.Int64
}

func (hs *hedgeServer) logf(format string, a ...any) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.events = append(hs.events, fmt.Sprintf("%v ", time.Since(hs.start).Round(100*time.Microsecond))+fmt.Sprintf(format, a...))
}

// steps returns op's channels: closed when its second copy arrives, and
// when its first copy has sent its failure.
func (hs *hedgeServer) steps(op string) (hedged, failed chan struct{}) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.hedgedCh[op] == nil {
		hs.hedgedCh[op], hs.failedCh[op] = make(chan struct{}), make(chan struct{})
	}
	return hs.hedgedCh[op], hs.failedCh[op]
}

func newHedgeServer(t *testing.T, h2 bool, maxStreams uint32, firstStatus int) *hedgeServer {
	hs := &hedgeServer{seen: map[string]int{}, bodies: map[string][]string{}, served: map[string]bool{}, firstStatus: firstStatus,
		hedgedCh: map[string]chan struct{}{}, failedCh: map[string]chan struct{}{},
		payload: bytes.Repeat([]byte("x"), 64<<10), start: time.Now()}
	hs.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer hs.handlerCompleted.Add(1)
		body, _ := io.ReadAll(r.Body)
		op := r.URL.Query().Get("op")
		hs.mu.Lock()
		hs.seen[op]++
		n := hs.seen[op]
		hs.bodies[op] = append(hs.bodies[op], string(body))
		hs.served[r.RemoteAddr] = true
		hs.mu.Unlock()
		hs.logf("op %s copy %d on %s", op, n, r.RemoteAddr)
		hedged, failed := hs.steps(op)
		if n == 2 {
			close(hedged)
		}
		if n == 1 {
			if hs.firstStatus != 0 {
				// It fails once the hedge has arrived, however late a
				// loaded machine sends it (before, it would be retried,
				// not raced).
				select {
				case <-hedged:
				case <-time.After(5 * time.Second):
				}
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(hs.firstStatus)
				w.Write(bytes.Repeat([]byte("e"), 4<<10))
				http.NewResponseController(w).Flush()
				close(failed)
				return
			}
			hs.hung.Add(1)
			select {
			case <-r.Context().Done():
				hs.released.Add(1)
			case <-time.After(5 * time.Second):
			}
			return
		}
		if hs.firstStatus != 0 {
			// The failed first copy is held while this one runs: it
			// answers well after the failure, which the race must have
			// seen first however a loaded machine schedules the two.
			select {
			case <-failed:
			case <-time.After(5 * time.Second):
			}
			time.Sleep(150 * time.Millisecond)
		}
		w.Write(hs.payload)
	}))
	hs.srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		hs.logf("conn %s %v", c.RemoteAddr(), s)
		switch s {
		case http.StateNew:
			hs.conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			hs.closed.Add(1)
		}
	}
	if maxStreams > 0 {
		hs.srv.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: int(maxStreams)}
	}
	if h2 {
		hs.srv.EnableHTTP2 = true
		hs.srv.StartTLS()
	} else {
		hs.srv.Start()
	}
	t.Cleanup(hs.srv.Close)
	return hs
}

// servedConns returns how many connections carried a request. It, not
// the count of connections accepted, is what says that copies share a
// connection: net/http's HTTP/2 client dials once for each request that
// finds no connection in its pool, so when the first copy's handshake
// takes longer than the hedge delay (a loaded machine, -race), the hedge
// dials a second connection; the first one up then carries both copies,
// and the other is closed unused.
func (hs *hedgeServer) servedConns() int64 {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return int64(len(hs.served))
}

// getAll sends n GETs through client, one after another, and checks that
// each got the whole payload; it returns each response's protocol major.
func (hs *hedgeServer) getAll(t *testing.T, client *http.Client, n int) []int {
	t.Helper()
	protos := make([]int, n)
	for i := range n {
		resp, err := client.Get(fmt.Sprintf("%s/?op=%d", hs.srv.URL, i))
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || len(b) != len(hs.payload) {
			t.Fatalf("op %d: status %d, %d bytes, err %v; want 200, %d bytes, nil", i, resp.StatusCode, len(b), err, len(hs.payload))
		}
		protos[i] = resp.ProtoMajor
	}
	return protos
}

func hedgeClient(t *testing.T, hs *hedgeServer, strict bool) *http.Client {
	base := hs.srv.Client().Transport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = 100 // no connection closed for want of room in the pool
	if strict {
		base.HTTP2 = &http.HTTP2Config{StrictMaxConcurrentRequests: true}
	}
	rt := transport.New(transport.Options{Base: base, Disable: transport.LayerRetryBudget, Hedge: &policy.Hedge{Delay: 20 * time.Millisecond}})
	c := &http.Client{Transport: rt}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// Hedging over HTTP/2: the copies share one connection; the loser's reset
// never touches the winner's stream or the connection, so a run of
// hedged GETs reads every winner whole over the one connection it
// started with.
func TestHedgeHTTP2OneConnection(t *testing.T) {
	for _, tt := range []struct {
		name        string
		h1          bool
		maxStreams  uint32
		strict      bool
		firstStatus int
		wantConns   int64
	}{
		{"hung loser", false, 0, false, 0, 1},
		{"failed loser drained", false, 0, false, http.StatusServiceUnavailable, 1},
		// net/http's HTTP/2 client counts a reset stream against the
		// limit until the server acknowledges it, and dials meanwhile:
		// the connections it keeps, and uses, are not counted here.
		{"max streams 1", false, 1, false, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hs := newHedgeServer(t, !tt.h1, tt.maxStreams, tt.firstStatus)
			client := hedgeClient(t, hs, tt.strict)
			for i, proto := range hs.getAll(t, client, 20) {
				if proto != 2 && !tt.h1 {
					t.Fatalf("op %d: HTTP/%d, want HTTP/2", i, proto)
				}
			}
			// The losers' streams end, their handlers return.
			deadline := time.Now().Add(3 * time.Second)
			for hs.released.Load() < hs.hung.Load() && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if got, want := hs.released.Load(), hs.hung.Load(); got != want {
				t.Errorf("hung copies released by their reset = %d, want %d", got, want)
			}
			t.Logf("connections: %d accepted, %d carried a request", hs.conns.Load(), hs.servedConns())
			if got, want := hs.servedConns(), tt.wantConns; want > 0 && got > want {
				hs.mu.Lock()
				t.Errorf("connections that carried a request = %d, want at most %d; the server saw:\n%s", got, want, strings.Join(hs.events, "\n"))
				hs.mu.Unlock()
			}
		})
	}
}

// A hedged GET with a body (GetBody set) over HTTP/2: every copy sends
// the body whole.
func TestHedgeHTTP2GetWithBody(t *testing.T) {
	hs := newHedgeServer(t, true, 0, 0)
	client := hedgeClient(t, hs, false)
	for i := range 10 {
		body := strings.Repeat(fmt.Sprint(i), 3000)
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/?op=%d", hs.srv.URL, i), strings.NewReader(body))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		hs.mu.Lock()
		got := hs.bodies[fmt.Sprint(i)]
		hs.mu.Unlock()
		if len(got) != 2 {
			t.Fatalf("op %d: copies the server got = %d, want 2", i, len(got))
		}
		for j, g := range got {
			if g != body {
				t.Errorf("op %d copy %d: body of %d bytes, want %d", i, j, len(g), len(body))
			}
		}
	}
	if got, want := hs.servedConns(), int64(1); got > want {
		hs.mu.Lock()
		t.Errorf("connections that carried a request = %d, want at most %d; the server saw:\n%s", got, want, strings.Join(hs.events, "\n"))
		hs.mu.Unlock()
	}
}

// Promise: failed attempts' bodies are drained (bounded) and closed so
// connections are reused. Over HTTP/1.1, a copy that failed (a 503)
// while the hedge ran is drained in the background once the hedge wins;
// the winner's body read to its end (which releases the operation's
// context, the parent of every copy) must not cut that drain and close
// the loser's connection: a run of such races keeps its two connections.
func TestHedgeHTTP1FailedLoserConnectionReused(t *testing.T) {
	hs := newHedgeServer(t, false, 0, http.StatusServiceUnavailable)
	client := hedgeClient(t, hs, false)
	hs.getAll(t, client, 20)
	time.Sleep(50 * time.Millisecond) // the last drain
	if got, want := hs.closed.Load(), int64(0); got != want {
		hs.mu.Lock()
		t.Errorf("connections closed during 20 hedged GETs = %d (of %d opened), want %d; the server saw:\n%s", got, hs.conns.Load(), want, strings.Join(hs.events, "\n"))
		hs.mu.Unlock()
	}
	if got, want := hs.conns.Load(), int64(3); got > want {
		t.Errorf("connections the server accepted = %d, want at most %d", got, want)
	}
}
