package transport

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// stallBody stalls its Read until closed, and counts its Closes.
type stallBody struct {
	once   sync.Once
	closed chan struct{}
	closes atomic.Int32
}

func (b *stallBody) Read(p []byte) (int, error) {
	<-b.closed
	return 0, io.ErrClosedPipe
}

func (b *stallBody) Close() error {
	b.closes.Add(1)
	b.once.Do(func() { close(b.closed) })
	return nil
}

// A failed attempt's body cut for idleness is closed once: io.Closer
// leaves a second Close undefined.
func TestIdleCutBodyClosedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		first := &stallBody{closed: make(chan struct{})}
		base := Func(func(r *http.Request) (*http.Response, error) {
			if n.Add(1) == 1 {
				return &http.Response{StatusCode: 503, Header: http.Header{"Content-Type": {"text/plain"}}, Body: first, Request: r}, nil
			}
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
		})
		rt := New(Options{Base: base, IdleTimeout: time.Second, Retry: policy.Retry{Backoff: constant(0)}})
		req, _ := http.NewRequest("GET", "http://api.test/x", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		synctest.Wait()
		if got := first.closes.Load(); got != 1 {
			t.Errorf("failed body closed %d times; want 1", got)
		}
	})
}
