package transport

import (
	"io"
	"net/http"
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
