package transport_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// As TestRetryAsksTheBreakersOfItsOwnRoute, with the operation carried by
// a Throttle above (its context carries the stack but does not answer
// opBreakersKey), and 500s, which a Breaker beneath a Throttle counts.
func TestRetryAsksTheBreakersOfItsOwnRouteBeneathAThrottle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := httptestutil.NewNetwork()
		var bCalls int
		srv := n.Serve("api.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/a") {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			if bCalls++; bCalls%2 == 1 {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			io.WriteString(w, "ok")
		}))
		defer srv.Close()
		base := n.Transport()
		defer base.CloseIdleConnections()
		retry := transport.Retry(policy.Retry{MaxAttempts: 3, Backoff: func(int, time.Duration) time.Duration { return time.Second }})
		breaker := func(failures uint32) http.RoundTripper {
			return transport.Chain(base, transport.Breaker(transport.BreakerSettings{ConsecutiveFailures: failures, Cooldown: time.Minute}))
		}
		get := func(rt http.RoundTripper, path string) (int, error) {
			req, _ := http.NewRequest("GET", "http://api.test"+path, nil)
			resp, err := rt.RoundTrip(req)
			if err != nil {
				return 0, err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode, nil
		}
		for _, tc := range []struct {
			name string
			rt   http.RoundTripper
		}{
			{"b alone", transport.Chain(breaker(5), retry)},
			{"Retry above router", transport.Chain(router(breaker(1), breaker(5)), retry)},
			{"Throttle above Retry above router", transport.Chain(router(breaker(1), breaker(5)), transport.Throttle(nil), retry)},
		} {
			bCalls = 0
			if _, err := get(tc.rt, "/a"); err != nil && !errors.Is(err, transport.ErrCircuitOpen) {
				t.Fatalf("%s: GET /a: %v", tc.name, err)
			}
			status, err := get(tc.rt, "/b")
			if err != nil || status != 200 || bCalls != 2 {
				t.Errorf("%s: GET /b = %d, %v after %d requests; want 200 after 2", tc.name, status, err, bCalls)
			}
		}
	})
}
