package transport

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.uber.org/goleak"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
)

// breakerHost is a fake host for breaker tests: a RoundTripper that
// answers every request with the status its test sets (0 means 200, a
// negative status means a connection error) after latency, and counts the
// requests that reached it.
type breakerHost struct {
	status  atomic.Int32
	latency time.Duration
	hits    atomic.Int64
}

var errBreakerTestRefused = errors.New("dial tcp: connection refused")

func (h *breakerHost) RoundTrip(req *http.Request) (*http.Response, error) {
	h.hits.Add(1)
	if h.latency > 0 {
		select {
		case <-time.After(h.latency):
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	code := int(h.status.Load())
	if code < 0 {
		return nil, errBreakerTestRefused
	}
	if code == 0 {
		code = http.StatusOK
	}
	return &http.Response{
		StatusCode: code,
		Header:     http.Header{},
		Body:       io.NopCloser(strings.NewReader("status " + http.StatusText(code))),
		Request:    req,
	}, nil
}

// breakerSend sends one GET to url through rt and closes the body. It
// returns the status (0 on error) and the error.
func breakerSend(t *testing.T, rt http.RoundTripper, url string) (int, error) {
	t.Helper()
	return breakerSendCtx(t, context.Background(), rt, url)
}

func breakerSendCtx(t *testing.T, ctx context.Context, rt http.RoundTripper, url string) (int, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// breakerState returns the state of key's breaker in rt, made by Breaker;
// BreakerClosed when rt has no breaker for key.
func breakerStateOf(t *testing.T, rt http.RoundTripper, key string) BreakerState {
	t.Helper()
	b := rt.(*breakerTransport)
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.RLock()
		for _, e := range sh.m {
			if e.name == key {
				s := stateOf(e.cb.State())
				sh.mu.RUnlock()
				return s
			}
		}
		sh.mu.RUnlock()
	}
	return BreakerClosed
}

// breakerKeys returns the keys rt holds a breaker for.
func breakerKeys(rt http.RoundTripper) map[string]bool {
	b := rt.(*breakerTransport)
	keys := map[string]bool{}
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.RLock()
		for _, e := range sh.m {
			keys[e.name] = true
		}
		sh.mu.RUnlock()
	}
	return keys
}

// breakerTransition is one call of OnStateChange.
type breakerTransition struct {
	key      string
	from, to BreakerState
}

// breakerRecorder records OnStateChange calls.
type breakerRecorder struct {
	mu  sync.Mutex
	got []breakerTransition
}

func (r *breakerRecorder) hook(key string, from, to BreakerState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, breakerTransition{key, from, to})
}

func (r *breakerRecorder) want(t *testing.T, want ...breakerTransition) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) != len(want) {
		t.Fatalf("transitions = %v, want %v", r.got, want)
	}
	for i := range want {
		if r.got[i] != want[i] {
			t.Errorf("transition %d = %v, want %v", i, r.got[i], want[i])
		}
	}
}

func TestBreakerTripsAfterConsecutiveFailures(t *testing.T) {
	tests := []struct {
		name     string
		settings BreakerSettings
		status   int32 // of the failing host; -1: connection error
		trips    int   // failures that open the breaker
	}{
		{"zero settings, 503", BreakerSettings{}, 503, DefaultBreakerFailures},
		{"zero settings, connection error", BreakerSettings{}, -1, DefaultBreakerFailures},
		{"one failure, 500", BreakerSettings{ConsecutiveFailures: 1}, 500, 1},
		{"three failures, 502", BreakerSettings{ConsecutiveFailures: 3}, 502, 3},
		{"three failures, 504", BreakerSettings{ConsecutiveFailures: 3}, 504, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				host := &breakerHost{}
				host.status.Store(tt.status)
				rt := Breaker(tt.settings)(host)
				for i := range tt.trips {
					code, err := breakerSend(t, rt, "https://api.test/x")
					if errors.Is(err, ErrCircuitOpen) {
						t.Fatalf("request %d refused after %d failures, want it sent", i+1, i)
					}
					if tt.status < 0 && err == nil || tt.status > 0 && code != int(tt.status) {
						t.Fatalf("request %d = %d, %v, want the host's failure", i+1, code, err)
					}
				}
				if got, want := breakerStateOf(t, rt, "https://api.test"), BreakerOpen; got != want {
					t.Errorf("state after %d failures = %v, want %v", tt.trips, got, want)
				}
				for range 3 {
					_, err := breakerSend(t, rt, "https://api.test/y")
					if !errors.Is(err, ErrCircuitOpen) {
						t.Fatalf("request to an open breaker: err = %v, want ErrCircuitOpen", err)
					}
				}
				if got, want := host.hits.Load(), int64(tt.trips); got != want {
					t.Errorf("host hits = %d, want %d (refused requests must not be sent)", got, want)
				}
			})
		})
	}
}

func TestBreakerSuccessResetsTheRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &breakerHost{}
		rt := Breaker(BreakerSettings{ConsecutiveFailures: 3})(host)
		for i := range 30 {
			// Two failures, one success, over and over: never three in a row.
			if i%3 == 2 {
				host.status.Store(200)
			} else {
				host.status.Store(503)
			}
			if _, err := breakerSend(t, rt, "http://api.test/"); err != nil {
				t.Fatalf("request %d: err = %v, want a response", i+1, err)
			}
		}
		if got, want := host.hits.Load(), int64(30); got != want {
			t.Errorf("host hits = %d, want %d", got, want)
		}
	})
}

func TestBreakerRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &breakerHost{}
		host.status.Store(503)
		rt := Breaker(BreakerSettings{ConsecutiveFailures: 1, Cooldown: 30 * time.Second})(host)
		breakerSend(t, rt, "https://api.test:8443/v1/chat")

		time.Sleep(12*time.Second + 300*time.Millisecond)
		body := &breakerBody{r: strings.NewReader(`{"a":1}`)}
		req, _ := http.NewRequest("POST", "https://api.test:8443/v1/chat", body)
		resp, err := rt.RoundTrip(req)
		if resp != nil {
			t.Errorf("response = %v, want nil", resp)
		}
		var ce *CircuitOpenError
		if !errors.As(err, &ce) {
			t.Fatalf("err = %T %v, want *CircuitOpenError", err, err)
		}
		if got, want := ce.Key, "https://api.test:8443"; got != want {
			t.Errorf("Key = %q, want %q", got, want)
		}
		if got, want := ce.State, BreakerOpen; got != want {
			t.Errorf("State = %v, want %v", got, want)
		}
		if got, want := ce.RetryIn, 17*time.Second+700*time.Millisecond; got != want {
			t.Errorf("RetryIn = %v, want %v", got, want)
		}
		if !errors.Is(err, ErrCircuitOpen) {
			t.Errorf("errors.Is(err, ErrCircuitOpen) = false, want true")
		}
		if !errors.Is(err, gobreaker.ErrOpenState) {
			t.Errorf("errors.Is(err, gobreaker.ErrOpenState) = false, want true")
		}
		if got, want := err.Error(), "transport: circuit open for https://api.test:8443 (retry in 17.7s)"; got != want {
			t.Errorf("message = %q, want %q", got, want)
		}
		if !body.closed {
			t.Errorf("refused request's body not closed, want closed")
		}
		if got, want := host.hits.Load(), int64(1); got != want {
			t.Errorf("host hits = %d, want %d", got, want)
		}

		// Through http.Client the error is wrapped in *url.Error.
		_, err = (&http.Client{Transport: rt}).Get("https://api.test:8443/v1/models")
		if !errors.Is(err, ErrCircuitOpen) || !errors.As(err, &ce) {
			t.Errorf("through http.Client: err = %v, want ErrCircuitOpen and *CircuitOpenError", err)
		}
		// And no retry policy retries it.
		d := policy.DefaultClassifier(policy.Outcome{Err: err, Idempotent: true})
		if d.Retry {
			t.Errorf("DefaultClassifier(%v).Retry = true, want false", err)
		}
	})
}

type breakerBody struct {
	r      io.Reader
	closed bool
}

func (b *breakerBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *breakerBody) Close() error               { b.closed = true; return nil }

func TestBreakerFailureResponseIntact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := httptestutil.NewNetwork()
		srv := n.Serve("api.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":"down for maintenance"}`)
		}))
		defer srv.Close()
		tr := n.Transport()
		defer tr.CloseIdleConnections()
		rt := Breaker(BreakerSettings{ConsecutiveFailures: 1})(tr)

		resp, err := (&http.Client{Transport: rt}).Get(srv.URL + "/x")
		if err != nil {
			t.Fatalf("err = %v, want nil: a failure response is still a response", err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("reading body: %v", err)
		}
		if got, want := resp.StatusCode, 503; got != want {
			t.Errorf("status = %d, want %d", got, want)
		}
		if got, want := string(b), `{"error":"down for maintenance"}`; got != want {
			t.Errorf("body = %q, want %q", got, want)
		}
		if got, want := resp.Header.Get("Retry-After"), "7"; got != want {
			t.Errorf("Retry-After = %q, want %q", got, want)
		}
		if got, want := breakerStateOf(t, rt, srv.URL), BreakerOpen; got != want {
			t.Errorf("state = %v, want %v", got, want)
		}
	})
}

func TestBreakerHalfOpenProbes(t *testing.T) {
	for _, probes := range []uint32{0, 1, 3} {
		want := int(max(probes, 1))
		t.Run("HalfOpenRequests="+strconv.Itoa(int(probes)), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				host := &breakerHost{latency: time.Second}
				host.status.Store(500)
				rec := &breakerRecorder{}
				rt := Breaker(BreakerSettings{
					ConsecutiveFailures: 2,
					Cooldown:            time.Minute,
					HalfOpenRequests:    probes,
					OnStateChange:       rec.hook,
				})(host)
				const url = "http://api.test/"
				breakerSend(t, rt, url)
				breakerSend(t, rt, url)

				// Just before the cooldown ends, still open.
				time.Sleep(time.Minute - time.Second)
				if _, err := breakerSend(t, rt, url); !errors.Is(err, ErrCircuitOpen) {
					t.Fatalf("before cooldown: err = %v, want ErrCircuitOpen", err)
				}
				time.Sleep(time.Second + time.Millisecond)

				// The host has recovered. want+2 requests at once: want
				// probes are sent, the others refused as half-open.
				host.status.Store(200)
				hits := host.hits.Load()
				var (
					wg       sync.WaitGroup
					ok, half atomic.Int32
				)
				for range want + 2 {
					wg.Go(func() {
						code, err := breakerSend(t, rt, url)
						var ce *CircuitOpenError
						switch {
						case code == 200:
							ok.Add(1)
						case errors.As(err, &ce) && ce.State == BreakerHalfOpen && errors.Is(err, gobreaker.ErrTooManyRequests) && errors.Is(err, ErrCircuitOpen):
							half.Add(1)
						default:
							t.Errorf("probe: %d, %v; want 200 or a half-open refusal", code, err)
						}
					})
				}
				synctest.Wait() // probes in flight, the rest refused
				if got := host.hits.Load() - hits; got != int64(want) {
					t.Errorf("probes in flight = %d, want %d", got, want)
				}
				if got := half.Load(); got != 2 {
					t.Errorf("half-open refusals = %d, want 2", got)
				}
				wg.Wait()
				if got := ok.Load(); got != int32(want) {
					t.Errorf("successful probes = %d, want %d", got, want)
				}

				// All probes succeeded: closed, everything goes through.
				for i := range 5 {
					if code, err := breakerSend(t, rt, url); code != 200 {
						t.Fatalf("request %d after recovery = %d, %v; want 200", i+1, code, err)
					}
				}
				rec.want(t,
					breakerTransition{"http://api.test", BreakerClosed, BreakerOpen},
					breakerTransition{"http://api.test", BreakerOpen, BreakerHalfOpen},
					breakerTransition{"http://api.test", BreakerHalfOpen, BreakerClosed},
				)
			})
		})
	}
}

func TestBreakerFailedProbeReopens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &breakerHost{}
		host.status.Store(-1)
		rec := &breakerRecorder{}
		rt := Breaker(BreakerSettings{
			ConsecutiveFailures: 1,
			Cooldown:            10 * time.Second,
			HalfOpenRequests:    2,
			OnStateChange:       rec.hook,
		})(host)
		const url = "http://api.test/"
		breakerSend(t, rt, url)
		time.Sleep(10*time.Second + time.Millisecond)

		if _, err := breakerSend(t, rt, url); !errors.Is(err, errBreakerTestRefused) {
			t.Fatalf("probe: err = %v, want the host's error", err)
		}
		_, err := breakerSend(t, rt, url)
		var ce *CircuitOpenError
		if !errors.As(err, &ce) || ce.State != BreakerOpen {
			t.Fatalf("after a failed probe: err = %v, want an open refusal", err)
		}
		if got, want := ce.RetryIn, 20*time.Second; got != want {
			t.Errorf("RetryIn after reopening = %v, want %v (twice the cooldown)", got, want)
		}
		if got, want := host.hits.Load(), int64(2); got != want {
			t.Errorf("host hits = %d, want %d", got, want)
		}
		rec.want(t,
			breakerTransition{"http://api.test", BreakerClosed, BreakerOpen},
			breakerTransition{"http://api.test", BreakerOpen, BreakerHalfOpen},
			breakerTransition{"http://api.test", BreakerHalfOpen, BreakerOpen},
		)
	})
}

func TestBreakerFailureRatio(t *testing.T) {
	tests := []struct {
		name      string
		fail      func(i int) bool // whether request i fails
		wantTrips bool
	}{
		{"steady 30% trips", func(i int) bool { return i%10 < 3 }, true},
		{"steady 30% spread out trips", func(i int) bool { return i%10 == 0 || i%10 == 4 || i%10 == 7 }, true},
		{"steady 5% does not trip", func(i int) bool { return i%20 == 7 }, false},
		{"no failures", func(int) bool { return false }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				host := &breakerHost{}
				rt := Breaker(BreakerSettings{
					FailureRatio: 0.2,
					MinRequests:  20,
					Window:       10 * time.Second,
				})(host)
				refusedAt := -1
				for i := range 1000 {
					if tt.fail(i) {
						host.status.Store(500)
					} else {
						host.status.Store(200)
					}
					_, err := breakerSend(t, rt, "http://api.test/")
					if errors.Is(err, ErrCircuitOpen) {
						refusedAt = i
						break
					}
					time.Sleep(100 * time.Millisecond) // 100 requests per window
				}
				if got := refusedAt >= 0; got != tt.wantTrips {
					t.Fatalf("tripped = %v (first refusal at request %d), want %v", got, refusedAt, tt.wantTrips)
				}
				if tt.wantTrips && refusedAt < 20 {
					t.Errorf("first refusal at request %d, want none before MinRequests (20) ended", refusedAt)
				}
			})
		})
	}
}

func TestBreakerFailureRatioWindowForgets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &breakerHost{}
		rt := Breaker(BreakerSettings{FailureRatio: 0.5, MinRequests: 10, Window: 10 * time.Second})(host)
		host.status.Store(500)
		for range 9 {
			breakerSend(t, rt, "http://api.test/")
		}
		// Once the window has moved past them, the 9 failures are forgotten:
		// 1 failure in 10 is under the ratio. (Counted together, 10 of 19
		// would be over it.)
		time.Sleep(11 * time.Second)
		host.status.Store(200)
		for range 9 {
			breakerSend(t, rt, "http://api.test/")
		}
		host.status.Store(500)
		if _, err := breakerSend(t, rt, "http://api.test/"); errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("err = %v, want the request sent", err)
		}
		if got, want := breakerStateOf(t, rt, "http://api.test"), BreakerClosed; got != want {
			t.Errorf("state = %v, want %v", got, want)
		}
	})
}

func TestBreakerNotFailures(t *testing.T) {
	tests := []struct {
		name      string
		status    int32
		isFailure func(*http.Response, error) bool
		wantOpen  bool
	}{
		{"429", 429, nil, false},
		{"404", 404, nil, false},
		{"400", 400, nil, false},
		{"409", 409, nil, false},
		{"429 with IsFailure counting it", 429, func(r *http.Response, err error) bool {
			return DefaultIsFailure(r, err) || r.StatusCode == 429
		}, true},
		{"503 with IsFailure ignoring 503", 503, func(r *http.Response, err error) bool {
			return err != nil || r.StatusCode >= 500 && r.StatusCode != 503
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				host := &breakerHost{}
				host.status.Store(tt.status)
				rt := Breaker(BreakerSettings{ConsecutiveFailures: 3, IsFailure: tt.isFailure})(host)
				for range 50 {
					breakerSend(t, rt, "http://api.test/")
				}
				if got := breakerStateOf(t, rt, "http://api.test") == BreakerOpen; got != tt.wantOpen {
					t.Errorf("open after 50 × %d = %v, want %v", tt.status, got, tt.wantOpen)
				}
			})
		})
	}
}

func TestBreakerCallerCancellationNotCounted(t *testing.T) {
	tests := []struct {
		name   string
		ctx    func() (context.Context, context.CancelFunc)
		wrap   []Middleware // beneath the breaker
		want   error
		counts bool
	}{
		{"caller cancels", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(time.Second, cancel)
			return ctx, cancel
		}, nil, context.Canceled, false},
		{"caller's deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Second)
		}, nil, context.DeadlineExceeded, false},
		{"attempt timeout beneath the breaker counts", func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}, []Middleware{Deadline(time.Second)}, context.DeadlineExceeded, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := httptestutil.NewNetwork()
				srv := n.Serve("hang.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					<-r.Context().Done()
				}))
				defer srv.Close()
				tr := n.Transport()
				defer tr.CloseIdleConnections()
				rt := Chain(tr, append([]Middleware{Breaker(BreakerSettings{ConsecutiveFailures: 3})}, tt.wrap...)...)

				for i := range 10 {
					ctx, cancel := tt.ctx()
					_, err := breakerSendCtx(t, ctx, rt, srv.URL)
					cancel()
					if tt.counts && i >= 3 {
						if !errors.Is(err, ErrCircuitOpen) {
							t.Fatalf("request %d: err = %v, want ErrCircuitOpen", i+1, err)
						}
						continue
					}
					if !errors.Is(err, tt.want) {
						t.Fatalf("request %d: err = %v, want %v", i+1, err, tt.want)
					}
				}
				if got := breakerStateOf(t, rt, srv.URL) == BreakerOpen; got != tt.counts {
					t.Errorf("open = %v, want %v", got, tt.counts)
				}
			})
		})
	}
}

func TestBreakerCanceledProbeFreesItsPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &breakerHost{latency: time.Second}
		host.status.Store(500)
		rt := Breaker(BreakerSettings{ConsecutiveFailures: 1, Cooldown: time.Minute})(host)
		breakerSend(t, rt, "http://api.test/")
		time.Sleep(time.Minute + time.Millisecond)

		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := breakerSendCtx(t, ctx, rt, "http://api.test/")
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("canceled probe: err = %v, want DeadlineExceeded", err)
		}
		host.status.Store(200)
		if code, err := breakerSend(t, rt, "http://api.test/"); code != 200 {
			t.Fatalf("next probe = %d, %v; want 200", code, err)
		}
		if got, want := breakerStateOf(t, rt, "http://api.test"), BreakerClosed; got != want {
			t.Errorf("state = %v, want %v", got, want)
		}
	})
}

func TestBreakerPerHostIsolation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := httptestutil.NewNetwork()
		bad := n.Serve("bad.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
		}))
		defer bad.Close()
		good := n.Serve("good.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "ok")
		}))
		defer good.Close()
		tr := n.Transport()
		defer tr.CloseIdleConnections()
		rt := Breaker(BreakerSettings{ConsecutiveFailures: 2})(tr)

		for i := range 10 {
			_, err := breakerSend(t, rt, bad.URL)
			if i >= 2 && !errors.Is(err, ErrCircuitOpen) {
				t.Fatalf("bad host request %d: err = %v, want ErrCircuitOpen", i+1, err)
			}
			var ce *CircuitOpenError
			if errors.As(err, &ce) && ce.Key != bad.URL {
				t.Errorf("refusal key = %q, want %q", ce.Key, bad.URL)
			}
			if code, err := breakerSend(t, rt, good.URL+"/v1"); code != 200 {
				t.Fatalf("good host request %d = %d, %v; want 200", i+1, code, err)
			}
		}
	})

	// Scheme and port are part of the default key.
	synctest.Test(t, func(t *testing.T) {
		host := &breakerHost{}
		host.status.Store(500)
		rt := Breaker(BreakerSettings{ConsecutiveFailures: 1})(host)
		breakerSend(t, rt, "http://api.test:8080/")
		for _, url := range []string{"http://api.test:9090/", "https://api.test:8080/", "http://api.test/", "http://other.test:8080/"} {
			if _, err := breakerSend(t, rt, url); errors.Is(err, ErrCircuitOpen) {
				t.Errorf("%s refused after a failure of http://api.test:8080, want it sent", url)
			}
		}
		if _, err := breakerSend(t, rt, "http://api.test:8080/other"); !errors.Is(err, ErrCircuitOpen) {
			t.Errorf("http://api.test:8080: err = %v, want ErrCircuitOpen", err)
		}
	})
}

func TestBreakerCustomKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &breakerHost{}
		host.status.Store(500)
		// One breaker per host and first path segment; health checks bypass.
		key := func(r *http.Request) string {
			if r.URL.Path == "/healthz" {
				return ""
			}
			seg, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
			return r.URL.Host + "/" + seg
		}
		rt := Breaker(BreakerSettings{ConsecutiveFailures: 2, Key: key})(host)
		breakerSend(t, rt, "http://api.test/chat/completions")
		breakerSend(t, rt, "http://api.test/chat/stream")

		_, err := breakerSend(t, rt, "http://api.test/chat/x")
		var ce *CircuitOpenError
		if !errors.As(err, &ce) || ce.Key != "api.test/chat" {
			t.Errorf("err = %v, want a refusal for key api.test/chat", err)
		}
		if _, err := breakerSend(t, rt, "http://api.test/embeddings"); errors.Is(err, ErrCircuitOpen) {
			t.Errorf("/embeddings refused, want sent: its key is another breaker")
		}
		for range 10 {
			if _, err := breakerSend(t, rt, "http://api.test/healthz"); errors.Is(err, ErrCircuitOpen) {
				t.Fatalf("/healthz refused, want it to bypass the breakers")
			}
		}
		if got, want := len(breakerKeys(rt)), 2; got != want {
			t.Errorf("breakers = %v, want %d", breakerKeys(rt), want)
		}
	})
}

func TestBreakerConcurrent(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		var healthy atomic.Bool
		var hits atomic.Int64
		n := httptestutil.NewNetwork()
		srv := n.Serve("api.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			time.Sleep(10 * time.Millisecond)
			if !healthy.Load() {
				w.WriteHeader(http.StatusBadGateway)
			}
		}))
		defer srv.Close()
		tr := n.Transport()
		defer tr.CloseIdleConnections()
		const (
			workers   = 64
			perWorker = 20
			failures  = 5
		)
		rt := Breaker(BreakerSettings{ConsecutiveFailures: failures, Cooldown: 5 * time.Second, HalfOpenRequests: 2})(tr)
		client := &http.Client{Transport: rt}

		// run sends perWorker requests from each of workers goroutines, and
		// counts what happened to them.
		run := func() (ok, failed, refused int64) {
			var a, b, c atomic.Int64
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for range perWorker {
						resp, err := client.Get(srv.URL + "/x")
						switch {
						case errors.Is(err, ErrCircuitOpen):
							c.Add(1)
						case err != nil:
							t.Errorf("err = %v, want a response or ErrCircuitOpen", err)
						case resp.StatusCode == 200:
							a.Add(1)
						default:
							b.Add(1)
						}
						if resp != nil {
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
						time.Sleep(time.Millisecond)
					}
				})
			}
			wg.Wait()
			return a.Load(), b.Load(), c.Load()
		}

		ok, failed, refused := run()
		// Requests let through before the trip: at most the failures that
		// tripped it plus the others in flight then.
		if failed < failures || failed > failures+workers-1 {
			t.Errorf("failed requests sent = %d, want %d..%d", failed, failures, failures+workers-1)
		}
		if got, want := ok+failed+refused, int64(workers*perWorker); got != want {
			t.Errorf("outcomes = %d, want %d", got, want)
		}
		if got := hits.Load(); got != failed {
			t.Errorf("server hits = %d, want %d (refused requests must not be sent)", got, failed)
		}
		if got, want := breakerStateOf(t, rt, srv.URL), BreakerOpen; got != want {
			t.Errorf("state = %v, want %v", got, want)
		}

		// Recovery: after the cooldown, probes close the breaker and the
		// 64 goroutines get through.
		healthy.Store(true)
		time.Sleep(5 * time.Second)
		_, _, _ = run()
		if got, want := breakerStateOf(t, rt, srv.URL), BreakerClosed; got != want {
			t.Fatalf("state after recovery = %v, want %v", got, want)
		}
		ok, failed, refused = run()
		if ok != workers*perWorker || failed != 0 || refused != 0 {
			t.Errorf("after recovery: ok, failed, refused = %d, %d, %d; want %d, 0, 0", ok, failed, refused, workers*perWorker)
		}
		if got, want := len(breakerKeys(rt)), 1; got != want {
			t.Errorf("breakers = %d, want %d", got, want)
		}
	})
}

func TestBreakerOneBreakerPerKey(t *testing.T) {
	rt := Breaker(BreakerSettings{})(&breakerHost{})
	b := rt.(*breakerTransport)
	const keys = 200
	for i := range keys {
		url := "http://h" + strconv.Itoa(i) + ".test/"
		var (
			wg    sync.WaitGroup
			got   [64]*breakerEntry
			start = make(chan struct{})
		)
		for g := range got {
			wg.Go(func() {
				req, _ := http.NewRequest("GET", url, nil)
				<-start
				got[g] = b.entry(req)
			})
		}
		close(start)
		wg.Wait()
		for g := range got {
			if got[g] == nil || got[g] != got[0] {
				t.Fatalf("%s: goroutine %d got breaker %p, goroutine 0 got %p; want one breaker", url, g, got[g], got[0])
			}
		}
	}
	if got, want := b.count.Load(), int64(keys); got != want {
		t.Errorf("count = %d, want %d", got, want)
	}
	if got, want := len(breakerKeys(rt)), keys; got != want {
		t.Errorf("breakers = %d, want %d", got, want)
	}
}

func TestBreakerBoundedMap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &breakerHost{}
		const maxHosts = 16
		rt := Breaker(BreakerSettings{ConsecutiveFailures: 1, MaxHosts: maxHosts, Cooldown: time.Hour})(host)
		b := rt.(*breakerTransport)
		host.status.Store(500)
		breakerSend(t, rt, "http://down.test/") // opens down.test
		host.status.Store(200)
		for i := range 1000 {
			url := "http://h" + strconv.Itoa(i) + ".test/"
			if code, err := breakerSend(t, rt, url); code != 200 {
				t.Fatalf("%s = %d, %v; want 200", url, code, err)
			}
			if got := b.count.Load(); got > maxHosts {
				t.Fatalf("after %d hosts: %d breakers, want at most %d", i+1, got, maxHosts)
			}
			time.Sleep(time.Second)
		}
		if got := len(breakerKeys(rt)); got > maxHosts {
			t.Errorf("breakers = %d, want at most %d", got, maxHosts)
		}
		if _, err := breakerSend(t, rt, "http://down.test/"); !errors.Is(err, ErrCircuitOpen) {
			t.Errorf("down.test after churn: err = %v, want ErrCircuitOpen (an open breaker is kept)", err)
		}
	})
}

func TestBreakerFullOfOpenBreakers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &breakerHost{}
		host.status.Store(500)
		rt := Breaker(BreakerSettings{ConsecutiveFailures: 1, MaxHosts: 4, Cooldown: time.Hour})(host)
		for i := range 4 {
			breakerSend(t, rt, "http://down"+strconv.Itoa(i)+".test/")
		}
		// No room: a fifth host passes unguarded, nothing is forgotten.
		for range 10 {
			if _, err := breakerSend(t, rt, "http://fifth.test/"); errors.Is(err, ErrCircuitOpen) {
				t.Fatalf("fifth.test refused, want it to pass unguarded")
			}
		}
		for i := range 4 {
			if _, err := breakerSend(t, rt, "http://down"+strconv.Itoa(i)+".test/"); !errors.Is(err, ErrCircuitOpen) {
				t.Errorf("down%d.test: err = %v, want ErrCircuitOpen", i, err)
			}
		}
		// Once their cooldown has passed, open breakers may make room.
		time.Sleep(time.Hour + time.Second)
		host.status.Store(200)
		breakerSend(t, rt, "http://fifth.test/")
		if !breakerKeys(rt)["http://fifth.test"] {
			t.Errorf("breakers = %v, want one for http://fifth.test", breakerKeys(rt))
		}
	})
}

func TestBreakerIdleEviction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &breakerHost{}
		rt := Breaker(BreakerSettings{ConsecutiveFailures: 1, IdleTimeout: time.Minute, Cooldown: 10 * time.Minute})(host)
		send := func(h string) { t.Helper(); breakerSend(t, rt, "http://"+h+"/") }
		host.status.Store(500)
		send("open.test") // open for 10 minutes
		host.status.Store(200)
		send("busy.test")
		send("idle.test")

		// A breaker is dropped when it was not used between two sweeps;
		// sweeps run when a key is added, at most once per IdleTimeout.
		time.Sleep(61 * time.Second)
		send("busy.test")
		send("new1.test") // sweep 1: all were used before it; new1 is added after
		time.Sleep(61 * time.Second)
		send("busy.test")
		send("new2.test") // sweep 2: idle.test unused since sweep 1
		want := map[string]bool{"http://open.test": true, "http://busy.test": true, "http://new1.test": true, "http://new2.test": true}
		if got := breakerKeys(rt); !breakerEqualKeys(got, want) {
			t.Errorf("after sweep 2: breakers = %v, want %v (open.test is open, so kept)", got, want)
		}

		time.Sleep(61 * time.Second)
		send("new3.test") // sweep 3: busy, new1 and open.test (still open) unused since sweep 2
		want = map[string]bool{"http://open.test": true, "http://new2.test": true, "http://new3.test": true}
		if got := breakerKeys(rt); !breakerEqualKeys(got, want) {
			t.Errorf("after sweep 3: breakers = %v, want %v", got, want)
		}

		// Once its open period has passed, an idle open breaker goes too.
		time.Sleep(10 * time.Minute)
		send("new4.test") // sweep 4: open.test past its open period, new2
		want = map[string]bool{"http://new3.test": true, "http://new4.test": true}
		if got := breakerKeys(rt); !breakerEqualKeys(got, want) {
			t.Errorf("after sweep 4: breakers = %v, want %v", got, want)
		}
		if got, want := rt.(*breakerTransport).count.Load(), int64(2); got != want {
			t.Errorf("count = %d, want %d", got, want)
		}
	})
}

func breakerEqualKeys(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func TestBreakerBypass(t *testing.T) {
	host := &breakerHost{}
	host.status.Store(500)
	rt := Breaker(BreakerSettings{ConsecutiveFailures: 1})(host)
	// A request without a URL has no key: it passes to the base, which
	// decides what to do with it.
	for range 3 {
		if _, err := rt.RoundTrip(&http.Request{Method: "GET", Header: http.Header{}}); errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("request without URL refused, want it passed on")
		}
	}
	if got, want := host.hits.Load(), int64(3); got != want {
		t.Errorf("host hits = %d, want %d", got, want)
	}
}

type breakerIdleCounter struct {
	breakerHost
	closed int
}

func (c *breakerIdleCounter) CloseIdleConnections() { c.closed++ }

func TestBreakerCloseIdleConnections(t *testing.T) {
	base := &breakerIdleCounter{}
	c := &http.Client{Transport: Chain(base, Breaker(BreakerSettings{}))}
	c.CloseIdleConnections()
	if got, want := base.closed, 1; got != want {
		t.Errorf("base CloseIdleConnections calls = %d, want %d", got, want)
	}
}

func TestCircuitOpenErrorMessage(t *testing.T) {
	tests := []struct {
		err  *CircuitOpenError
		want string
	}{
		{&CircuitOpenError{Key: "https://api.example.com", State: BreakerOpen, RetryIn: 4200 * time.Millisecond},
			"transport: circuit open for https://api.example.com (retry in 4.2s)"},
		{&CircuitOpenError{Key: "https://api.example.com", State: BreakerOpen, RetryIn: 29*time.Second + 999999*time.Microsecond},
			"transport: circuit open for https://api.example.com (retry in 30s)"},
		{&CircuitOpenError{Key: "http://10.0.0.1:8080", State: BreakerOpen},
			"transport: circuit open for http://10.0.0.1:8080 (retry in 0s)"},
		{&CircuitOpenError{Key: "https://api.example.com", State: BreakerHalfOpen},
			"transport: circuit half-open for https://api.example.com (all probes in flight, retry when they end)"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
		if !errors.Is(tt.err, ErrCircuitOpen) {
			t.Errorf("errors.Is(%q, ErrCircuitOpen) = false, want true", tt.want)
		}
		if tt.err.Retriable() {
			t.Errorf("Retriable() = true, want false")
		}
	}
	if errors.Is(errors.New("transport: circuit open"), ErrCircuitOpen) {
		t.Errorf("errors.Is matched an unrelated error with the same text, want no match")
	}
}

func TestBreakerStateString(t *testing.T) {
	tests := []struct {
		s    BreakerState
		want string
	}{
		{BreakerClosed, "closed"},
		{BreakerHalfOpen, "half-open"},
		{BreakerOpen, "open"},
		{BreakerState(7), "BreakerState(7)"},
	}
	for _, tt := range tests {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("BreakerState(%d).String() = %q, want %q", int(tt.s), got, tt.want)
		}
	}
}

func TestBreakerNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &breakerHost{}
		host.status.Store(503)
		var attempts atomic.Int32
		rt := Chain(host,
			Retry(policy.Retry{
				MaxAttempts: 5,
				Backoff:     policy.Exponential(time.Second, time.Second),
				OnAttempt:   func(policy.AttemptEvent) { attempts.Add(1) },
			}),
			Breaker(BreakerSettings{ConsecutiveFailures: 2, Cooldown: time.Minute}),
		)

		// Two 503s open the breaker: Retry does not wait for a third
		// attempt the breaker would refuse, though three are left; it
		// hands back the second 503 after one backoff.
		start := time.Now()
		status, err := breakerSend(t, rt, "http://api.test/")
		if err != nil || status != 503 {
			t.Fatalf("got (%d, %v), want the last 503", status, err)
		}
		if got, want := attempts.Load(), int32(2); got != want {
			t.Errorf("attempts = %d, want %d", got, want)
		}
		if got, want := time.Since(start), time.Second; got != want {
			t.Errorf("took %v, want %v", got, want)
		}
		if got, want := host.hits.Load(), int64(2); got != want {
			t.Errorf("host hits = %d, want %d", got, want)
		}

		// While open: one attempt, refused at once, no wait.
		attempts.Store(0)
		mark := time.Now()
		_, err = breakerSend(t, rt, "http://api.test/")
		if !errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("err = %v, want ErrCircuitOpen", err)
		}
		if got, want := attempts.Load(), int32(1); got != want {
			t.Errorf("attempts while open = %d, want %d", got, want)
		}
		if got := time.Since(mark); got != 0 {
			t.Errorf("refusal took %v of virtual time, want 0", got)
		}
		if got, want := host.hits.Load(), int64(2); got != want {
			t.Errorf("host hits = %d, want %d", got, want)
		}
	})
}

// Each failed probe doubles the open period up to MaxCooldown; a success
// starts again from Cooldown.
func TestBreakerCooldownBackoff(t *testing.T) {
	tests := []struct {
		name        string
		cooldown    time.Duration
		maxCooldown time.Duration
		want        []time.Duration // open periods after each failed probe, the first opening included
	}{
		{"defaults", 0, 0, []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}},
		{"capped", 10 * time.Second, 25 * time.Second, []time.Duration{10 * time.Second, 20 * time.Second, 25 * time.Second, 25 * time.Second}},
		{"fixed", 5 * time.Second, 5 * time.Second, []time.Duration{5 * time.Second, 5 * time.Second, 5 * time.Second}},
		{"cooldown above the default max", time.Minute, 0, []time.Duration{time.Minute, time.Minute}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				host := &breakerHost{}
				host.status.Store(503)
				rt := Breaker(BreakerSettings{ConsecutiveFailures: 1, Cooldown: tt.cooldown, MaxCooldown: tt.maxCooldown})(host)
				const url = "http://api.test/"
				breakerSend(t, rt, url) // opens
				for i, want := range tt.want {
					_, err := breakerSend(t, rt, url)
					var ce *CircuitOpenError
					if !errors.As(err, &ce) {
						t.Fatalf("step %d: err = %v, want a refusal", i, err)
					}
					if ce.RetryIn != want {
						t.Errorf("step %d: open for %v, want %v", i, ce.RetryIn, want)
					}
					time.Sleep(ce.RetryIn + time.Millisecond)
					breakerSend(t, rt, url) // the probe fails: open again
				}
				// Recovery: the probe succeeds, the breaker closes, and the
				// next opening starts from Cooldown again.
				_, err := breakerSend(t, rt, url)
				var ce *CircuitOpenError
				errors.As(err, &ce)
				time.Sleep(ce.RetryIn + time.Millisecond)
				host.status.Store(200)
				if code, err := breakerSend(t, rt, url); code != 200 {
					t.Fatalf("probe after recovery = %d, %v; want 200", code, err)
				}
				host.status.Store(503)
				breakerSend(t, rt, url)
				_, err = breakerSend(t, rt, url)
				if !errors.As(err, &ce) || ce.RetryIn != tt.want[0] {
					t.Errorf("after closing and opening again: %v, want open for %v", err, tt.want[0])
				}
			})
		})
	}
}

// A breaker that reopens after a failed probe stays open for the doubled
// period even when a request sent before it opened ends in the meantime:
// that late outcome makes gobreaker (whose own timeout is Cooldown) turn
// half-open, but no probe may go out before the doubled period has passed.
func TestBreakerDoubledCooldownSurvivesStraggler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var sent atomic.Int32
		base := Func(func(r *http.Request) (*http.Response, error) {
			sent.Add(1)
			if r.URL.Path == "/slow" {
				<-release
			}
			return &http.Response{StatusCode: 503, Body: http.NoBody, Request: r}, nil
		})
		rt := Breaker(BreakerSettings{ConsecutiveFailures: 1, Cooldown: time.Second})(base)
		done := make(chan struct{})
		go func() { // the straggler, in flight while the breaker opens
			defer close(done)
			breakerSend(t, rt, "http://api.test/slow")
		}()
		synctest.Wait()
		breakerSend(t, rt, "http://api.test/") // fails: open for 1s
		time.Sleep(1500 * time.Millisecond)
		breakerSend(t, rt, "http://api.test/") // the probe fails: open for 2s, until 3.5s
		time.Sleep(1200 * time.Millisecond)    // 2.7s: past gobreaker's own 1s timeout
		close(release)
		<-done
		before := sent.Load()
		_, err := breakerSend(t, rt, "http://api.test/") // 2.7s: still in the doubled period
		if !errors.Is(err, ErrCircuitOpen) {
			t.Errorf("at 2.7s: err = %v, want ErrCircuitOpen (open until 3.5s)", err)
		}
		if got, want := sent.Load()-before, int32(0); got != want {
			t.Errorf("requests sent at 2.7s = %d, want %d", got, want)
		}
	})
}

// A MaxCooldown of math.MaxInt64 ("no cap") must not make the open period
// wrap around to a negative one after many failed probes: it grows and
// stays positive, and the breaker keeps refusing.
func TestBreakerCooldownNoOverflow(t *testing.T) {
	tests := []struct {
		name        string
		cooldown    time.Duration
		maxCooldown time.Duration
	}{
		{"1s, no cap", time.Second, math.MaxInt64},
		{"1h, no cap", time.Hour, math.MaxInt64},
		{"1h, cap just under MaxInt64", time.Hour, math.MaxInt64 - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBreakerTransport(BreakerSettings{Cooldown: tt.cooldown, MaxCooldown: tt.maxCooldown}, nil)
			prev := time.Duration(0)
			for k := int32(0); k < 70; k++ {
				got := b.openFor(k)
				if got < prev || got > tt.maxCooldown {
					t.Fatalf("openFor(%d) = %v, want in [%v, %v]", k, got, prev, tt.maxCooldown)
				}
				prev = got
			}
			// The breaker opened long after its epoch stays open.
			e := &breakerEntry{}
			b.epoch = time.Now().Add(-time.Hour)
			b.changed(e, BreakerHalfOpen, BreakerOpen)
			for range 70 {
				b.changed(e, BreakerHalfOpen, BreakerOpen)
			}
			if !e.open(time.Since(b.epoch)) {
				t.Errorf("after 70 failed probes: not open, openUntil = %v", time.Duration(e.openUntil.Load()))
			}
		})
	}
}

// maybeSweep decides whether the map is full under its lock: a goroutine
// that found it full and then waited for another's sweep must not sweep
// again, or it drops every breaker not used in the instant between the
// two sweeps (the first one cleared their marks), busy hosts' included.
func TestBreakerSweepFullRecheckedUnderLock(t *testing.T) {
	host := &breakerHost{}
	rt := Breaker(BreakerSettings{MaxHosts: 8})(host)
	b := rt.(*breakerTransport)
	for i := range 8 {
		breakerSend(t, rt, "http://h"+strconv.Itoa(i)+".test/")
	}
	b.sweepMu.Lock() // another goroutine is sweeping
	done := make(chan struct{})
	go func() { defer close(done); b.maybeSweep() }() // finds the map full, waits
	time.Sleep(50 * time.Millisecond)
	// What the other sweep does: it drops four breakers and clears the
	// marks of the rest, which are all in use.
	n := 0
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if n < 4 {
				delete(sh.m, k)
				b.count.Add(-1)
			} else {
				e.used.Store(false)
			}
			n++
		}
		sh.mu.Unlock()
	}
	b.lastSweep = time.Since(b.epoch)
	b.sweepMu.Unlock()
	<-done
	if got, want := b.count.Load(), int64(4); got != want {
		t.Errorf("breakers after the waiting sweep = %d, want %d (the map was no longer full)", got, want)
	}
}

// A Window of math.MaxInt64 ("count forever") must not overflow
// gobreaker's interval arithmetic into a breaker that panics on its first
// request; the ratio rule still works.
func TestBreakerHugeWindow(t *testing.T) {
	for _, w := range []time.Duration{math.MaxInt64, math.MaxInt64 - time.Second, math.MaxInt64 / 10 * 10} {
		t.Run(w.String(), func(t *testing.T) {
			host := &breakerHost{}
			host.status.Store(500)
			rt := Breaker(BreakerSettings{FailureRatio: 0.5, MinRequests: 4, Window: w})(host)
			for i := range 4 {
				if code, err := breakerSend(t, rt, "http://a.test/"); code != 500 {
					t.Fatalf("request %d = %d, %v; want 500", i+1, code, err)
				}
			}
			if _, err := breakerSend(t, rt, "http://a.test/"); !errors.Is(err, ErrCircuitOpen) {
				t.Errorf("after 4 failures of 4: err = %v, want ErrCircuitOpen", err)
			}
		})
	}
}
