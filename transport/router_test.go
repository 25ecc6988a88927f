package transport_test

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// router is a RoundTripper sturdy did not write that sends the requests
// whose path starts with /a to a and every other to b, as an API gateway
// client or a per-endpoint transport does beneath a layer of the stack.
func router(a, b http.RoundTripper) http.RoundTripper {
	return transport.Func(func(r *http.Request) (*http.Response, error) {
		if strings.HasPrefix(r.URL.Path, "/a") {
			return a.RoundTrip(r)
		}
		return b.RoundTrip(r)
	})
}

// TestRouterBranchesKeepTheirOwnLayers builds a stack whose outermost
// layer stands above a router to two sub-chains: what one sub-chain's
// layers tell the stack (a Retry that checks bodies, a Throttle) must not
// change how the other sub-chain's layers judge its requests. Each case
// first sends a request through sub-chain a, then runs its scenario
// through sub-chain b, whose breaker opens after one failure; beside it,
// the same scenario through sub-chain b alone (no stack above) gives the
// outcome wanted.
func TestRouterBranchesKeepTheirOwnLayers(t *testing.T) {
	tests := []struct {
		name string
		// a is sub-chain a's layers, above the base.
		a []transport.Middleware
		// handler is the server's.
		handler http.HandlerFunc
		// scenario is sent through sub-chain b: its last call's outcome
		// is compared.
		scenario []func() *http.Request
	}{
		{
			name: "a Retry in one sub-chain: the other still checks the caller's body",
			a:    []transport.Middleware{transport.Retry(policy.Retry{})},
			handler: func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				io.WriteString(w, "ok")
			},
			scenario: []func() *http.Request{
				func() *http.Request { // the caller's error: a body shorter than declared
					r, _ := http.NewRequest("PUT", "http://api.test/b", onlyReaderOf("abc"))
					r.ContentLength = 10
					return r
				},
				func() *http.Request { r, _ := http.NewRequest("GET", "http://api.test/b", nil); return r },
			},
		},
		{
			name: "a Throttle in one sub-chain: the other's breaker still counts a 503",
			a:    []transport.Middleware{transport.Throttle(nil)},
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("fail") != "" {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				io.WriteString(w, "ok")
			},
			scenario: []func() *http.Request{
				func() *http.Request { r, _ := http.NewRequest("GET", "http://api.test/b?fail=1", nil); return r },
				func() *http.Request { r, _ := http.NewRequest("GET", "http://api.test/b", nil); return r },
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := httptestutil.NewNetwork()
				srv := n.Serve("api.test", tc.handler)
				defer srv.Close()
				base := n.Transport()
				defer base.CloseIdleConnections()

				outcome := func(rt http.RoundTripper, routed bool) string {
					if routed {
						req, _ := http.NewRequest("GET", "http://api.test/a", nil)
						resp, err := rt.RoundTrip(req)
						if err != nil {
							t.Fatalf("request through sub-chain a: %v", err)
						}
						resp.Body.Close()
					}
					var last string
					for _, mk := range tc.scenario {
						resp, err := rt.RoundTrip(mk())
						if err != nil {
							last = "error"
							if errors.Is(err, transport.ErrCircuitOpen) {
								last = "circuit open"
							}
							continue
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						last = resp.Status
					}
					return last
				}
				b := func() http.RoundTripper {
					return transport.Chain(base, transport.Breaker(transport.BreakerSettings{ConsecutiveFailures: 1, Cooldown: time.Minute}))
				}
				want := outcome(b(), false)
				routed := transport.Chain(router(transport.Chain(base, tc.a...), b()), transport.Deadline(time.Minute))
				if got := outcome(routed, true); got != want {
					t.Errorf("last call through sub-chain b beneath the router: got %q, want %q (as through b alone)", got, want)
				}
			})
		})
	}
}

// onlyReaderOf returns a body that is a bare reader, which net/http does
// not measure: a wrong ContentLength shows only as it is sent.
func onlyReaderOf(s string) io.Reader {
	return struct{ io.Reader }{strings.NewReader(s)}
}

// TestBreakerAboveThrottleCountsOverload: a Breaker leaves the answers of
// an overloaded server to a Throttle above it, never to one beneath it,
// which sheds nothing before the breaker judges. Beneath a Deadline (a
// layer that carries the stack), Breaker above Throttle opens on a 503
// as the Breaker alone does.
func TestBreakerAboveThrottleCountsOverload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := httptestutil.NewNetwork()
		srv := n.Serve("api.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("fail") != "" {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			io.WriteString(w, "ok")
		}))
		defer srv.Close()
		base := n.Transport()
		defer base.CloseIdleConnections()
		breaker := func() transport.Middleware {
			return transport.Breaker(transport.BreakerSettings{ConsecutiveFailures: 1, Cooldown: time.Minute})
		}
		stacks := []struct {
			name string
			rt   http.RoundTripper
		}{
			{"Breaker alone", transport.Chain(base, breaker())},
			{"Deadline, Breaker, Throttle", transport.Chain(base, transport.Deadline(time.Minute), breaker(), transport.Throttle(nil))},
		}
		for _, s := range stacks {
			var got []string
			for _, u := range []string{"http://api.test/?fail=1", "http://api.test/"} {
				req, _ := http.NewRequest("GET", u, nil)
				resp, err := s.rt.RoundTrip(req)
				switch {
				case errors.Is(err, transport.ErrCircuitOpen):
					got = append(got, "circuit open")
				case err != nil:
					got = append(got, err.Error())
				default:
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					got = append(got, resp.Status)
				}
			}
			if want := []string{"503 Service Unavailable", "circuit open"}; !slices.Equal(got, want) {
				t.Errorf("%s: got %q, want %q", s.name, got, want)
			}
		}
	})
}

// TestRetryAsksTheBreakersOfItsOwnRoute: a Retry above a router to two
// sub-chains, each with its own Breaker, asks the Breaker that judged its
// operation whether a later attempt would be refused, not the first that
// told the stack of itself. Sub-chain a's circuit is open; an operation
// routed to b, whose circuit is closed, is retried there as it is through
// b alone. The failures are 500s, which a Breaker counts beneath a
// Throttle too (it leaves 503s to the Throttle).
func TestRetryAsksTheBreakersOfItsOwnRoute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := httptestutil.NewNetwork()
		var bCalls int
		srv := n.Serve("api.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/a") {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			if bCalls++; bCalls%2 == 1 { // every other call to b fails
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
			{"a Retry above a router", transport.Chain(router(breaker(1), breaker(5)), retry)},
			{"beneath a Deadline that carries the operation", transport.Chain(router(breaker(1), breaker(5)), transport.Deadline(time.Minute), retry)},
			{"beneath a Throttle that carries the operation", transport.Chain(router(breaker(1), breaker(5)), transport.Throttle(nil), retry)},
		} {
			bCalls = 0
			if _, err := get(tc.rt, "/a"); err != nil && !errors.Is(err, transport.ErrCircuitOpen) {
				t.Fatalf("%s: GET /a: %v", tc.name, err)
			}
			status, err := get(tc.rt, "/b")
			if err != nil || status != 200 || bCalls != 2 {
				t.Errorf("%s: GET /b = %d, %v after %d requests; want 200 after 2 (retried, as through b alone)", tc.name, status, err, bCalls)
			}
		}
		bCalls = 0
		status, err := get(base, "/b") // the bare client, beside: one request, no retry
		if err != nil || status != 500 {
			t.Errorf("bare GET /b = %d, %v; want the 500", status, err)
		}
	})
}
