package transport

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// A losing copy's drain must not be cut by the operation's end: once
// detached, the copy's context must stay live after the caller's ends.
func TestHedgeDetachedLoserOutlivesTheOperation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		seen := make(chan error, 1)
		next := Func(func(r *http.Request) (*http.Response, error) {
			switch HedgeCopyFromContext(r.Context()) {
			case 1:
				time.Sleep(20 * time.Millisecond)
				body := readerFunc(func(p []byte) (int, error) {
					<-release
					err := r.Context().Err() // what an in-memory transport checks
					seen <- err
					if err != nil {
						return 0, err
					}
					return 0, io.EOF
				})
				return &http.Response{StatusCode: 503, Header: http.Header{}, Body: io.NopCloser(body), Request: r}, nil
			default:
				time.Sleep(40 * time.Millisecond)
				return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
			}
		})
		rt := Chain(next, Hedge(policy.Hedge{Delay: 10 * time.Millisecond}))
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test/x", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("got %v %v", resp, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		cancel() // the operation is over
		synctest.Wait()
		close(release)
		if err := <-seen; err != nil {
			t.Errorf("detached loser's context Err during its drain = %v, want nil", err)
		}
	})
}
