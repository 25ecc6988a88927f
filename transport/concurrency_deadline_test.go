package transport

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
)

// TestTimeoutWhileWaitingForSlotSaysWhatRefused: a request that waits for
// a concurrency slot until New's Timeout runs out fails with an error that
// names the limit whose slot it waited for, matches both
// ErrConcurrencyLimit and context.DeadlineExceeded, and is both a
// *DeadlineError and a *ConcurrencyLimitError, with Retry on or off, and
// after an attempt as before any. A stream holds the host's one slot
// meanwhile. The bare client beside sends at once (it has no limit); the
// stack sends the request no more than the attempts it says it made.
func TestTimeoutWhileWaitingForSlotSaysWhatRefused(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, tc := range []struct {
		name    string
		disable Layer
		// fails503 makes the server answer the first GET /fast with a
		// 503, retried after 100ms, by when the stream holds the slot.
		fails503 bool
		want     string // the error text, after `Get "...": `
		sent     int32  // the GETs /fast the server has from the stack
	}{
		{name: "before any attempt",
			want: "transport: Timeout of 300ms exceeded while waiting for a concurrency slot of http://api.test (limit 1, 1 in flight): not sent"},
		{name: "Retry off", disable: LayerRetry,
			want: "transport: Timeout of 300ms exceeded while waiting for a concurrency slot of http://api.test (limit 1, 1 in flight): not sent"},
		{name: "after an attempt", fails503: true, sent: 1,
			want: "transport: Timeout of 300ms exceeded after 1 attempt, while waiting for a concurrency slot of http://api.test (limit 1, 1 in flight)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				var fast atomic.Int32
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/stream" {
						w.Header().Set("Content-Type", "text/event-stream")
						w.WriteHeader(http.StatusOK)
						w.(http.Flusher).Flush()
						<-release // no event: the stream keeps its slot
						return
					}
					if fast.Add(1) == 1 && tc.fails503 {
						w.WriteHeader(http.StatusServiceUnavailable)
					}
				})
				n := httptestutil.NewNetwork()
				srv := n.Serve("api.test", h)
				base := n.Transport()
				defer func() {
					base.CloseIdleConnections()
					srv.Close()
				}()

				// The bare client: no limit, the GET goes and is answered.
				if code, err := rlGet(context.Background(), &http.Client{Transport: base}, srv.URL+"/fast"); err != nil || code != http.StatusOK && !tc.fails503 {
					t.Fatalf("bare GET = %d, %v; want it answered", code, err)
				}
				fast.Store(0)

				c := &http.Client{Transport: New(Options{
					Base: base, Timeout: timeout, Disable: tc.disable,
					Concurrency: &policy.Concurrency{Initial: 1, Min: 1, Max: 1},
					Retry:       policy.Retry{Backoff: policy.Exponential(100*time.Millisecond, 100*time.Millisecond)},
				})}
				stream := func() {
					req, _ := http.NewRequest("GET", srv.URL+"/stream", nil)
					if resp, err := c.Do(req); err == nil {
						resp.Body.Close()
					}
				}
				start := time.Now()
				var err error
				done := make(chan struct{})
				if tc.fails503 {
					// The GET has its 503 at once; the stream takes the
					// slot before the retry.
					go func() { _, err = rlGet(context.Background(), c, srv.URL+"/fast"); close(done) }()
					time.Sleep(50 * time.Millisecond)
					go stream()
				} else {
					go stream()
					synctest.Wait()
					go func() { _, err = rlGet(context.Background(), c, srv.URL+"/fast"); close(done) }()
				}
				<-done
				took := time.Since(start) // the GET started at start
				close(release)

				if err == nil || !strings.HasSuffix(err.Error(), ": "+tc.want) {
					t.Errorf("err = %v, want it to end with %q", err, tc.want)
				}
				if !errors.Is(err, ErrConcurrencyLimit) || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("errors.Is(err, ErrConcurrencyLimit) = %v, errors.Is(err, context.DeadlineExceeded) = %v; want both true",
						errors.Is(err, ErrConcurrencyLimit), errors.Is(err, context.DeadlineExceeded))
				}
				var de *DeadlineError
				var ce *ConcurrencyLimitError
				if !errors.As(err, &de) || !errors.As(err, &ce) {
					t.Fatalf("err %T: errors.As *DeadlineError %v, *ConcurrencyLimitError %v; want both", err, errors.As(err, &de), errors.As(err, &ce))
				}
				if de.Bound != "Timeout" || de.Limit != timeout || ce.Host != "http://api.test" || ce.Limit != 1 {
					t.Errorf("DeadlineError %+v, ConcurrencyLimitError %+v; want Timeout of %v, http://api.test with limit 1", de, ce, timeout)
				}
				if took != timeout {
					t.Errorf("the GET took %v, want %v", took, timeout)
				}
				if got := fast.Load(); got != tc.sent {
					t.Errorf("the server had the GET %d times from the stack, want %d", got, tc.sent)
				}
			})
		})
	}
}
