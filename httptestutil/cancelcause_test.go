package httptestutil

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"testing/synctest"
)

// TestHandlerTransportCancelCause: a request whose context is canceled
// with a cause fails with the cause, not context.Canceled, before it is
// sent, while it waits for its headers and while its body is read: from
// HandlerTransport as from net/http's own Transport over a Network.
func TestHandlerTransportCancelCause(t *testing.T) {
	cause := errors.New("user left")
	for _, at := range []string{"before send", "waiting for headers", "reading the body"} {
		t.Run(at, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if at == "reading the body" {
						io.WriteString(w, "partial")
						w.(http.Flusher).Flush()
					}
					<-r.Context().Done()
				})
				n := NewNetwork()
				srv := n.Serve("api.test:80", h)
				real := n.Transport()
				defer func() {
					real.CloseIdleConnections()
					srv.Close()
				}()
				for _, rt := range []struct {
					name string
					rt   http.RoundTripper
				}{{"net/http", real}, {"HandlerTransport", NewHandlerTransport(h)}} {
					ctx, cancel := context.WithCancelCause(context.Background())
					if at == "before send" {
						cancel(cause)
					}
					req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test/", nil)
					got := make(chan error, 1)
					go func() {
						resp, err := rt.rt.RoundTrip(req)
						if err == nil {
							_, err = io.ReadAll(resp.Body)
							resp.Body.Close()
						}
						got <- err
					}()
					synctest.Wait() // the handler waits, or the body is read
					cancel(cause)
					if err := <-got; !errors.Is(err, cause) {
						t.Errorf("%s: err = %v, want the cause", rt.name, err)
					}
					synctest.Wait()
				}
			})
		})
	}
}
