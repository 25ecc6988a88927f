package bench

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-cleanhttp"
)

// bodyCheck answers 200 when the request body is what the operation
// sent, and 400 otherwise.
func bodyCheck(want []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		got, err := io.ReadAll(r.Body)
		if err != nil || !bytes.Equal(got, want) {
			http.Error(w, "bench: body mismatch", http.StatusBadRequest)
			return
		}
		w.Write([]byte("ok\n"))
	}
}

// TestClientsSucceed checks every client of the overhead tables: each
// operation succeeds once over the in-memory base and over loopback, and
// a POST's body reaches the server byte for byte.
func TestClientsSucceed(t *testing.T) {
	srv := newLoopback(t, bodyCheck(nil))
	srvBody := newLoopback(t, bodyCheck(payload))
	for _, k := range allKinds {
		for _, base := range []string{"mem", "loopback"} {
			for _, o := range successOps("http://api.test/v1/things") {
				t.Run(k.name+"/"+base+"/"+o.name, func(t *testing.T) {
					var rt http.RoundTripper = memTransport{}
					if base == "loopback" {
						tr := cleanhttp.DefaultPooledTransport()
						defer tr.CloseIdleConnections()
						rt = tr
						o.op.url = srv.URL
						if o.op.body != noBody {
							o.op.url = srvBody.URL
						}
					}
					c := k.new(clientConfig{base: rt})
					status, err := c.do(context.Background(), o.op)
					if err != nil || status != http.StatusOK {
						t.Fatalf("got %d, %v; want 200, nil", status, err)
					}
				})
			}
		}
	}
}

// TestClientsRetry checks that every client but bare turns a 503 and
// then a 200 into a 200 with noWait, as BenchmarkFailure relies on, and
// that bare does not retry.
func TestClientsRetry(t *testing.T) {
	for _, k := range failureKinds {
		t.Run(k.name, func(t *testing.T) {
			var n atomic.Int64
			srv := newLoopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) == 1 {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				w.Write([]byte("ok\n"))
			}))
			tr := cleanhttp.DefaultPooledTransport()
			defer tr.CloseIdleConnections()
			c := k.new(clientConfig{base: tr, noWait: true})
			status, err := c.do(context.Background(), op{method: http.MethodGet, url: srv.URL})
			want, wantReqs := http.StatusOK, int64(2)
			if k.name == "bare" {
				want, wantReqs = http.StatusServiceUnavailable, 1
			}
			if err != nil || status != want || n.Load() != wantReqs {
				t.Errorf("got %d, %v after %d requests; want %d, nil after %d", status, err, n.Load(), want, wantReqs)
			}
		})
	}
}
