package transport

import (
	"bytes"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sturdyhttp/sturdy/httptestutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeEnv is a server on an in-memory network and a pooled transport that
// dials it, for tests inside a synctest bubble. Both are shut down when
// the test ends.
type fakeEnv struct {
	net  *httptestutil.Network
	srv  *httptestutil.Server
	base *http.Transport
	url  string
}

func newFakeEnv(t *testing.T, h http.Handler) *fakeEnv {
	t.Helper()
	n := httptestutil.NewNetwork()
	srv := n.Serve("api.test", h)
	base := n.Transport()
	t.Cleanup(func() {
		base.CloseIdleConnections()
		srv.Close()
	})
	return &fakeEnv{net: n, srv: srv, base: base, url: srv.URL}
}

// seen is what a server saw of one request.
type seen struct {
	method string
	header http.Header
	body   []byte
	at     time.Time
}

// capture wraps h and keeps every request's method, headers, body and
// arrival time.
type capture struct {
	mu   sync.Mutex
	reqs []seen
	h    http.Handler
}

func newCapture(h http.Handler) *capture { return &capture{h: h} }

func (c *capture) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.reqs = append(c.reqs, seen{r.Method, r.Header.Clone(), b, time.Now()})
	c.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(b))
	c.h.ServeHTTP(w, r)
}

func (c *capture) all() []seen {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]seen(nil), c.reqs...)
}

// constant is a Backoff that always waits d.
func constant(d time.Duration) func(int, time.Duration) time.Duration {
	return func(int, time.Duration) time.Duration { return d }
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return string(b)
}
