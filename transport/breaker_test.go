package transport

import (
	"context"
	"errors"
	"fmt"
	"github.com/sturdyhttp/sturdy/internal/circuit"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
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
	"github.com/sturdyhttp/sturdy/internal/hosts"
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

// breakerStateOf returns the state of key's breaker in rt, made by
// Breaker (see Breakers.State); BreakerClosed when rt has none for key.
func breakerStateOf(t *testing.T, rt http.RoundTripper, key string) BreakerState {
	t.Helper()
	key = breakerKey(key)
	st := BreakerClosed
	rt.(*breakerTransport).b.slot.Range(func(_ hosts.Key, e *circuit.Circuit) bool {
		if e.Name() != key {
			return true
		}
		st = e.State()
		if st == BreakerOpen && !e.IsOpen(e.Since()) {
			st = BreakerHalfOpen
		}
		return false
	})
	return st
}

// breakerKey returns the key of the breaker of a URL, as in
// "http://api.test" for "http://api.test:80"; a key that is not a URL
// is returned as it is.
func breakerKey(key string) string {
	if u, err := url.Parse(key); err == nil && u.Scheme != "" && u.Host != "" {
		return hosts.KeyOf(u).String()
	}
	return key
}

// breakerKeys returns the keys rt holds a breaker for.
func breakerKeys(rt http.RoundTripper) map[string]bool {
	keys := map[string]bool{}
	rt.(*breakerTransport).b.slot.Range(func(_ hosts.Key, e *circuit.Circuit) bool {
		keys[e.Name()] = true
		return true
	})
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
		{"zero settings, 503", BreakerSettings{}, 503, 5},
		{"zero settings, connection error", BreakerSettings{}, -1, 5},
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

// A quiet host that hangs every request opens its breaker after
// ConsecutiveFailures timeouts, however many callers each send one
// request at a time to it: staggered, each failure ends while another
// caller's request is in flight, and a run that counted only failures
// no other overlapped never grew. A Deadline of 2 s beneath the breaker
// times each request out; the callers start a second apart.
func TestBreakerQuietHostOverlappingCallersTrip(t *testing.T) {
	for _, callers := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("callers=%d", callers), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := Func(func(r *http.Request) (*http.Response, error) {
					<-r.Context().Done()
					return nil, r.Context().Err()
				})
				var opened atomic.Int64
				start := time.Now()
				rt := Chain(base, Breaker(BreakerSettings{OnStateChange: func(_ string, _, to BreakerState) {
					if to == BreakerOpen {
						opened.CompareAndSwap(0, int64(time.Since(start)))
					}
				}}), Deadline(2*time.Second))
				var wg sync.WaitGroup
				for i := range callers {
					wg.Go(func() {
						time.Sleep(time.Duration(i) * time.Second)
						for time.Since(start) < time.Minute && opened.Load() == 0 {
							breakerSend(t, rt, "http://api.test/")
						}
					})
				}
				wg.Wait()
				// 5 failures counted, one per timeout: open at 10 s (+ the
				// last caller's start).
				if got, want := time.Duration(opened.Load()), 10*time.Second+time.Duration(callers-1)*time.Second; got == 0 || got > want {
					t.Errorf("opened at %v; want by %v", got, want)
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
		// Open for between 15s and 30s (Cooldown, jittered), 12.3s of it gone.
		if got := ce.RetryIn; got < 2700*time.Millisecond || got > 17700*time.Millisecond {
			t.Errorf("RetryIn = %v, want between 2.7s and 17.7s", got)
		}
		if !errors.Is(err, ErrCircuitOpen) {
			t.Errorf("errors.Is(err, ErrCircuitOpen) = false, want true")
		}
		if errors.Is(err, gobreaker.ErrOpenState) {
			t.Errorf("errors.Is(err, gobreaker.ErrOpenState) = true, want false: gobreaker is not part of the contract")
		}
		if got, want := err.Error(), "transport: circuit open for https://api.test:8443 (retry in "+ce.RetryIn.Round(time.Millisecond).String()+")"; got != want {
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
		d := policy.DefaultClassifier(policy.Outcome{Err: err})
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

				// Open for between 30s and a minute (Cooldown, jittered).
				time.Sleep(30*time.Second - time.Millisecond)
				if _, err := breakerSend(t, rt, url); !errors.Is(err, ErrCircuitOpen) {
					t.Fatalf("before half the cooldown: err = %v, want ErrCircuitOpen", err)
				}
				time.Sleep(30*time.Second + 2*time.Millisecond)

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
						case errors.As(err, &ce) && ce.State == BreakerHalfOpen && errors.Is(err, ErrCircuitOpen):
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
		if got := ce.RetryIn; got < 5*time.Second || got > 10*time.Second {
			t.Errorf("RetryIn after reopening = %v, want between 5s and 10s (Cooldown, jittered, not doubled)", got)
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
		rt := Breaker(BreakerSettings{ConsecutiveFailures: 100, FailureRatio: 0.5, MinRequests: 10, Window: 10 * time.Second})(host)
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
			return err != nil || r.StatusCode >= 500 || r.StatusCode == 429
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

// A probe whose RoundTrip panics counts as a failed probe: the panic goes
// on to the caller, the breaker opens again rather than keep the place
// taken forever, and the next probe after the open period is sent.
func TestBreakerPanickingProbeReopens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &breakerHost{}
		host.status.Store(500)
		var panicking atomic.Bool
		base := Func(func(req *http.Request) (*http.Response, error) {
			if panicking.Load() {
				panic(http.ErrAbortHandler)
			}
			return host.RoundTrip(req)
		})
		rec := &breakerRecorder{}
		rt := Breaker(BreakerSettings{ConsecutiveFailures: 1, Cooldown: time.Minute, OnStateChange: rec.hook})(base)
		breakerSend(t, rt, "http://api.test/")
		time.Sleep(time.Minute + time.Millisecond)

		panicking.Store(true)
		func() {
			defer func() {
				if got, want := recover(), any(http.ErrAbortHandler); got != want {
					t.Errorf("recovered %v, want %v", got, want)
				}
			}()
			breakerSend(t, rt, "http://api.test/")
		}()
		if got, want := breakerStateOf(t, rt, "http://api.test"), BreakerOpen; got != want {
			t.Errorf("state after the panicking probe = %v, want %v", got, want)
		}
		panicking.Store(false)
		host.status.Store(200)
		time.Sleep(time.Minute + time.Millisecond)
		if code, err := breakerSend(t, rt, "http://api.test/"); code != 200 {
			t.Fatalf("next probe = %d, %v; want 200", code, err)
		}
		k := "http://api.test"
		rec.want(t,
			breakerTransition{k, BreakerClosed, BreakerOpen},
			breakerTransition{k, BreakerOpen, BreakerHalfOpen},
			breakerTransition{k, BreakerHalfOpen, BreakerOpen},
			breakerTransition{k, BreakerOpen, BreakerHalfOpen},
			breakerTransition{k, BreakerHalfOpen, BreakerClosed},
		)
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
			if errors.As(err, &ce) && ce.Key != breakerKey(bad.URL) {
				t.Errorf("refusal key = %q, want %q", ce.Key, breakerKey(bad.URL))
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

// breakerPattern is a fake host whose i-th request fails when fail(i)
// says so (a 503), after latency.
type breakerPattern struct {
	fail    func(i int64) bool
	latency time.Duration
	n       atomic.Int64
}

func (h *breakerPattern) RoundTrip(req *http.Request) (*http.Response, error) {
	i := h.n.Add(1) - 1
	if h.latency > 0 {
		time.Sleep(h.latency)
	}
	code := http.StatusOK
	if h.fail(i) {
		code = http.StatusServiceUnavailable
	}
	return &http.Response{StatusCode: code, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// A busy host that fails a share of its requests keeps its breaker
// closed however the failures fall; one that fails everything, or most
// requests, opens it within a few tens of requests. Requests arrive every
// 5 ms (200 a second).
func TestBreakerTripsOnEvidence(t *testing.T) {
	rng := func(seed uint64, p float64) func(int64) bool {
		r := rand.New(rand.NewPCG(seed, 1))
		return func(int64) bool { return r.Float64() < p }
	}
	tests := []struct {
		name      string
		fail      func(i int64) bool // from request 1000 on; all succeed before
		wantTrip  bool
		maxBefore int64 // failures sent before the trip, at most
	}{
		{"1% at random", rng(1, 0.01), false, 0},
		{"10% at random", rng(2, 0.10), false, 0},
		{"50% at random", rng(3, 0.50), false, 0},
		{"every other", func(i int64) bool { return i%2 == 0 }, false, 0},
		{"everything", func(int64) bool { return true }, true, 20},
		{"90% at random", rng(4, 0.90), true, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				host := &breakerPattern{fail: func(i int64) bool { return i >= 1000 && tt.fail(i) }}
				rec := &breakerRecorder{}
				rt := Breaker(BreakerSettings{OnStateChange: rec.hook})(host)
				start := time.Now()
				var tripped time.Duration
				for i := range 6000 {
					if i == 1000 {
						start = time.Now()
					}
					_, err := breakerSend(t, rt, "http://api.test/")
					if errors.Is(err, ErrCircuitOpen) {
						tripped = time.Since(start)
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				rec.mu.Lock()
				opened := len(rec.got) > 0
				rec.mu.Unlock()
				if opened != tt.wantTrip {
					t.Fatalf("opened = %v (after %d requests), want %v", opened, host.n.Load(), tt.wantTrip)
				}
				if !tt.wantTrip {
					return
				}
				if sent := host.n.Load() - 1000; sent > tt.maxBefore {
					t.Errorf("requests sent to the failing host before the trip = %d, want at most %d", sent, tt.maxBefore)
				}
				if tripped > time.Second {
					t.Errorf("tripped %v after the host began failing, want within a second", tripped)
				}
			})
		})
	}
}

// Connections dialed together and hung by one fault time out together: a
// burst of failures that end at one instant, amid a busy host's
// successes, is one event and does not open the breaker.
func TestBreakerBurstOfTimeoutsIsOneEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hang atomic.Bool
		base := Func(func(r *http.Request) (*http.Response, error) {
			if hang.Load() {
				<-r.Context().Done()
				return nil, r.Context().Err()
			}
			return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
		})
		rt := Chain(base, Breaker(BreakerSettings{}), Deadline(time.Second))
		for range 200 { // busy: 200 successes within the window
			breakerSend(t, rt, "http://api.test/")
			time.Sleep(10 * time.Millisecond)
		}
		// 60 requests hang at once and time out together, a second later.
		hang.Store(true)
		var wg sync.WaitGroup
		for range 60 {
			wg.Go(func() { breakerSend(t, rt, "http://api.test/") })
		}
		synctest.Wait()
		hang.Store(false)
		wg.Wait()
		if _, err := breakerSend(t, rt, "http://api.test/"); err != nil {
			t.Errorf("after the burst: err = %v, want the request sent", err)
		}
		if got := breakerStateOf(t, rt, "http://api.test"); got != BreakerClosed {
			t.Errorf("state = %v, want closed", got)
		}
	})
}

// A stall holds up every request a busy client has in flight: 40 callers,
// each sending one request every 100 ms, send theirs during a stall of
// 100 ms, and each waits for it: they time out one after the other a
// second later, 40 failures in a row over 100 ms with no success between
// them. All were sent before the first of them failed: one event, and the
// breaker stays closed. A host that keeps hanging fails the requests sent
// after that first failure too, and opens it one attempt's timeout later.
func TestBreakerStallIsOneEvent(t *testing.T) {
	tests := []struct {
		name     string
		stall    time.Duration // requests sent within it, from 1s on, hang
		wantOpen bool
	}{
		{"a stall of 100ms", 100 * time.Millisecond, false},
		{"a host that keeps hanging", time.Hour, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				base := Func(func(r *http.Request) (*http.Response, error) {
					if at := time.Since(start); at >= time.Second && at < time.Second+tt.stall {
						<-r.Context().Done()
						return nil, r.Context().Err()
					}
					return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
				})
				var opened atomic.Int64 // since start
				rt := Chain(base, Breaker(BreakerSettings{OnStateChange: func(_ string, _, to BreakerState) {
					if to == BreakerOpen {
						opened.CompareAndSwap(0, int64(time.Since(start)))
					}
				}}), Deadline(time.Second))
				var wg sync.WaitGroup
				for i := range 40 { // 400 requests a second: a busy host
					wg.Go(func() {
						time.Sleep(time.Duration(i) * 100 * time.Millisecond / 40)
						for time.Since(start) < 4*time.Second {
							breakerSend(t, rt, "http://api.test/")
							time.Sleep(100 * time.Millisecond)
						}
					})
				}
				wg.Wait()
				at := time.Duration(opened.Load())
				if got := at != 0; got != tt.wantOpen {
					t.Fatalf("opened = %v (at %v), want %v", got, at, tt.wantOpen)
				}
				// The first timeouts end at 2s; the requests sent after
				// them, from 2.1s, time out from 3.1s.
				if tt.wantOpen && at > 3200*time.Millisecond {
					t.Errorf("opened at %v, want by 3.2s: one attempt's timeout after the first failures", at)
				}
			})
		})
	}
}

// A breaker judges a host by what it has seen. With fewer than
// MinRequests outcomes in its window (a client that has just started, or
// a breaker that has just closed and forgotten), a host is quiet, and 5
// failures in a row, each sent after the one before failed, open it: a
// busy client starting against a host that fails half its requests
// opens in some starts (logged; 59 of 300 when measured). With a history
// of successes, the busy rules judge it, and it never opens.
func TestBreakerFlakyHostFromAFreshStart(t *testing.T) {
	tests := []struct {
		name      string
		warm      int64 // successes before the host fails half its requests
		wantNever bool
	}{
		{"fresh", 0, false},
		{"after 50 successes", 50, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const starts = 300
			opens := 0
			for seed := range uint64(starts) {
				synctest.Test(t, func(t *testing.T) {
					var mu sync.Mutex
					r := rand.New(rand.NewPCG(seed, 9))
					var n atomic.Int64
					base := Func(func(req *http.Request) (*http.Response, error) {
						code := http.StatusOK
						if n.Add(1) > tt.warm {
							mu.Lock()
							if r.Float64() < 0.5 {
								code = http.StatusServiceUnavailable
							}
							mu.Unlock()
						}
						return &http.Response{StatusCode: code, Body: http.NoBody, Request: req}, nil
					})
					var opened atomic.Bool
					rt := Breaker(BreakerSettings{OnStateChange: func(_ string, _, to BreakerState) {
						if to == BreakerOpen {
							opened.Store(true)
						}
					}})(base)
					var wg sync.WaitGroup
					for i := range 16 { // 400 requests a second
						wg.Go(func() {
							time.Sleep(time.Duration(i) * 40 * time.Millisecond / 16)
							for range 30 {
								breakerSend(t, rt, "http://api.test/")
								time.Sleep(40 * time.Millisecond)
							}
						})
					}
					wg.Wait()
					if opened.Load() {
						opens++
					}
				})
			}
			t.Logf("%s: the breaker opened in %d of %d starts against a host failing half its requests", tt.name, opens, starts)
			if tt.wantNever && opens != 0 {
				t.Errorf("opened in %d of %d starts, want 0", opens, starts)
			}
		})
	}
}

// Recovery does not slow down while the host stays down: every open
// period lasts between Cooldown/2 and Cooldown, however many probes
// failed, and callers are back within a Cooldown of the host's return.
func TestBreakerProbesOnAShortJitteredSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &breakerHost{}
		host.status.Store(503)
		rec := &breakerRecorder{}
		const cooldown = 200 * time.Millisecond
		rt := Breaker(BreakerSettings{ConsecutiveFailures: 1, OnStateChange: rec.hook})(host)
		breakerSend(t, rt, "http://api.test/") // opens
		opened, start := time.Now(), time.Now()
		var periods []time.Duration
		for time.Since(start) < 30*time.Second {
			before := host.hits.Load()
			breakerSend(t, rt, "http://api.test/")
			if host.hits.Load() > before { // a probe went out, and failed
				periods = append(periods, time.Since(opened))
				opened = time.Now()
			}
			time.Sleep(time.Millisecond)
		}
		if len(periods) < 100 {
			t.Fatalf("probes in 30s = %d, want at least 100 (one every 100-200ms)", len(periods))
		}
		distinct := map[time.Duration]bool{}
		for i, d := range periods {
			if d < cooldown/2 || d > cooldown+2*time.Millisecond {
				t.Errorf("open period %d = %v, want between %v and %v", i, d, cooldown/2, cooldown)
			}
			distinct[d.Round(10*time.Millisecond)] = true
		}
		if len(distinct) < 4 {
			t.Errorf("open periods take %d distinct values, want them jittered", len(distinct))
		}
		// The host comes back: the next probe closes the breaker.
		host.status.Store(200)
		back := time.Now()
		for {
			if code, _ := breakerSend(t, rt, "http://api.test/"); code == 200 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if d := time.Since(back); d > cooldown {
			t.Errorf("first success %v after the host's return, want within %v", d, cooldown)
		}
	})
}

// No hook runs with a lock held: a hook that sends a request through the
// same stack, while the change it reports is being made, completes.
func TestBreakerHookSendsThroughTheSameStack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := httptestutil.NewRecorder(httptestutil.Status(503, "").Forever())
		env := newFakeEnv(t, rec)
		var (
			client *http.Client
			mu     sync.Mutex
			seen   []string
		)
		hook := func(key string, from, to BreakerState) {
			// A request from inside the hook: refused at once while open.
			_, err := client.Get(env.url + "/from-hook")
			mu.Lock()
			seen = append(seen, from.String()+" -> "+to.String()+": "+strconv.FormatBool(errors.Is(err, ErrCircuitOpen)))
			mu.Unlock()
		}
		client = &http.Client{Transport: New(Options{
			Base:    env.base,
			Retry:   policy.Retry{MaxAttempts: 1},
			Breaker: BreakerSettings{ConsecutiveFailures: 2, OnStateChange: hook},
		})}
		for range 3 {
			if resp, err := client.Get(env.url); err == nil {
				resp.Body.Close()
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"closed -> open: true"}; !slices.Equal(seen, want) {
			t.Errorf("hook saw %q, want %q", seen, want)
		}
	})
}

// Changes are delivered to the hook in the order they were made, even
// when many goroutines make them.
func TestBreakerHookOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		// Down for 20ms, up for 20ms, over and over.
		host := &breakerPattern{latency: time.Millisecond, fail: func(int64) bool { return time.Since(start)/(20*time.Millisecond)%2 == 1 }}
		rec := &breakerRecorder{}
		rt := Breaker(BreakerSettings{ConsecutiveFailures: 1, MinRequests: 1 << 20, Cooldown: 10 * time.Millisecond, OnStateChange: rec.hook})(host)
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for range 200 {
					breakerSend(t, rt, "http://api.test/")
					time.Sleep(time.Millisecond)
				}
			})
		}
		wg.Wait()
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.got) < 10 {
			t.Fatalf("changes = %d, want at least 10", len(rec.got))
		}
		state := BreakerClosed
		for i, c := range rec.got {
			if c.from != state {
				t.Fatalf("change %d = %v -> %v, want one from %v (the previous change's target)", i, c.from, c.to, state)
			}
			state = c.to
		}
	})
}

func TestBreakersState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &breakerHost{}
		b := NewBreakers(BreakerSettings{ConsecutiveFailures: 1, Cooldown: time.Minute})
		rt := b.Middleware()(host)
		u, _ := url.Parse("https://API.test:443/v1/x")
		other, _ := url.Parse("https://api.test:8443/")
		if got := b.State(u); got != BreakerClosed {
			t.Errorf("unknown host: State = %v, want closed", got)
		}
		host.status.Store(500)
		breakerSend(t, rt, "https://api.test/v1")
		if got := b.State(u); got != BreakerOpen {
			t.Errorf("after a failure: State = %v, want open", got)
		}
		if got := b.State(other); got != BreakerClosed {
			t.Errorf("another port: State = %v, want closed", got)
		}
		time.Sleep(time.Minute + time.Millisecond)
		if got := b.State(u); got != BreakerHalfOpen {
			t.Errorf("after the open period: State = %v, want half-open (the next request is a probe)", got)
		}
		host.status.Store(200)
		breakerSend(t, rt, "https://api.test/v1")
		if got := b.State(u); got != BreakerClosed {
			t.Errorf("after a good probe: State = %v, want closed", got)
		}
		if got := b.State(&url.URL{}); got != BreakerClosed {
			t.Errorf("empty URL: State = %v, want closed", got)
		}
	})
}

// A foreign RoundTripper between Retry and Breaker (an OpenTelemetry
// transport, an SDK's logger) does not turn off Retry's fail-fast: it
// does not wait for an attempt that an open breaker will refuse.
func TestRetryFailsFastThroughAForeignRoundTripper(t *testing.T) {
	passThrough := func(next http.RoundTripper) http.RoundTripper {
		return Func(func(r *http.Request) (*http.Response, error) {
			return next.RoundTrip(r.WithContext(context.WithValue(r.Context(), struct{ k int }{1}, "span")))
		})
	}
	tests := []struct {
		name string
		mws  []Middleware
	}{
		{"adjacent", nil},
		{"a foreign layer between", []Middleware{passThrough}},
		{"two foreign layers between", []Middleware{passThrough, passThrough}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				host := &breakerHost{}
				host.status.Store(503)
				var attempts atomic.Int32
				mws := []Middleware{Retry(policy.Retry{
					MaxAttempts: 5,
					Backoff:     policy.Exponential(10*time.Second, 10*time.Second),
					OnAttempt:   func(policy.AttemptEvent) { attempts.Add(1) },
				})}
				mws = append(mws, tt.mws...)
				mws = append(mws, Breaker(BreakerSettings{ConsecutiveFailures: 2, Cooldown: time.Minute}))
				rt := Chain(host, mws...)
				start := time.Now()
				code, err := breakerSend(t, rt, "http://api.test/")
				if code != 503 || err != nil {
					t.Fatalf("got %d, %v; want the last 503", code, err)
				}
				// One backoff (10s) between the two failures; none after
				// the second, which opened the breaker.
				if got, want := time.Since(start), 10*time.Second; got != want {
					t.Errorf("took %v, want %v (no backoff wait before a refused attempt)", got, want)
				}
				if got, want := attempts.Load(), int32(2); got != want {
					t.Errorf("attempts = %d, want %d", got, want)
				}
			})
		})
	}
}

// Inside New, Retry asks the stack's breakers from the first attempt on:
// an attempt that opens the breaker is not followed by a backoff wait.
func TestNewFailsFastFromTheFirstAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := httptestutil.NewRecorder(httptestutil.Status(503, "").Forever())
		env := newFakeEnv(t, rec)
		c := newStack(env, Options{
			Retry:   policy.Retry{Backoff: policy.Exponential(10*time.Second, 10*time.Second)},
			Breaker: BreakerSettings{ConsecutiveFailures: 1, Cooldown: time.Minute},
		})
		start := time.Now()
		resp, err := c.Get(env.url)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if resp.StatusCode != 503 {
			t.Errorf("status = %d, want 503", resp.StatusCode)
		}
		if got := time.Since(start); got != 0 {
			t.Errorf("took %v, want 0 (no wait before a refused attempt)", got)
		}
		if got, want := rec.Count(), 1; got != want {
			t.Errorf("server requests = %d, want %d", got, want)
		}
	})
}

// One breaker per key, however many goroutines race to make it.
func TestBreakerOneBreakerPerKey(t *testing.T) {
	b := NewBreakers(BreakerSettings{})
	const keys = 200
	for i := range keys {
		var (
			wg    sync.WaitGroup
			got   [64]*circuit.Circuit
			start = make(chan struct{})
		)
		k := hosts.MakeKey("http", "h"+strconv.Itoa(i)+".test")
		for g := range got {
			wg.Go(func() {
				<-start
				got[g] = b.slot.Get(k)
			})
		}
		close(start)
		wg.Wait()
		for g := range got {
			if got[g] == nil || got[g] != got[0] {
				t.Fatalf("%v: goroutine %d got breaker %p, goroutine 0 got %p; want one breaker", k, g, got[g], got[0])
			}
		}
	}
	if got, want := b.slot.Registry().Len(), keys; got != want {
		t.Errorf("breakers = %d, want %d", got, want)
	}
}

// Breakers live in a bounded registry: unused ones are forgotten, an open
// one is kept until its open period has passed, and when every breaker
// must be kept a new host passes unguarded.
func TestBreakerBoundedRegistry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &breakerHost{}
		reg := hosts.New(hosts.Options{MaxHosts: 4, IdleTimeout: time.Minute})
		rt := newBreakers(BreakerSettings{ConsecutiveFailures: 1, Cooldown: 2 * time.Hour}, reg).Middleware()(host)
		host.status.Store(500)
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
		// Once their open period has passed, they may make room.
		time.Sleep(2*time.Hour + time.Second)
		host.status.Store(200)
		breakerSend(t, rt, "http://fifth.test/")
		if !breakerKeys(rt)["http://fifth.test"] {
			t.Errorf("breakers = %v, want one for http://fifth.test", breakerKeys(rt))
		}
		if got := reg.Len(); got > 4 {
			t.Errorf("breakers = %d, want at most 4", got)
		}
	})
}

// memBreakerStore is a fleet's BreakerStore held in memory: what other
// processes published is set with put.
type memBreakerStore struct {
	mu sync.Mutex
	m  map[string]SharedBreakerState
}

func (s *memBreakerStore) Publish(key string, st SharedBreakerState) { s.put(key, st) }

func (s *memBreakerStore) put(key string, st SharedBreakerState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]SharedBreakerState{}
	}
	s.m[key] = st
}

func (s *memBreakerStore) Load(key string) SharedBreakerState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key]
}

func (s *memBreakerStore) ClaimProbe(context.Context, string, time.Duration) (bool, error) {
	return true, nil
}

// State reports the more restrictive of the process's own breaker and
// the fleet's view of it, as requests meet them: a host the fleet holds
// open is open even where this process has never sent to it.
func TestBreakersStateWithFleet(t *testing.T) {
	const key = "https://api.test"
	for _, tc := range []struct {
		name  string
		local BreakerState // made by this process's own requests; closed: none sent
		fleet BreakerState // what the fleet's view says
		want  BreakerState
	}{
		{"nothing known", BreakerClosed, BreakerClosed, BreakerClosed},
		{"open in the fleet only", BreakerClosed, BreakerOpen, BreakerOpen},
		{"half-open in the fleet only", BreakerClosed, BreakerHalfOpen, BreakerHalfOpen},
		{"open here, closed in the fleet", BreakerOpen, BreakerClosed, BreakerOpen},
		{"open here, half-open in the fleet", BreakerOpen, BreakerHalfOpen, BreakerOpen},
		{"half-open here, open in the fleet", BreakerHalfOpen, BreakerOpen, BreakerOpen},
		{"half-open here and in the fleet", BreakerHalfOpen, BreakerHalfOpen, BreakerHalfOpen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &memBreakerStore{}
				b := NewBreakers(BreakerSettings{ConsecutiveFailures: 1, Cooldown: time.Minute, Store: store})
				host := &breakerHost{}
				host.status.Store(500)
				if tc.local != BreakerClosed {
					breakerSend(t, b.Middleware()(host), key+"/v1")
				}
				if tc.local == BreakerHalfOpen {
					time.Sleep(time.Minute + time.Millisecond) // the open period ends
				}
				switch tc.fleet { // another process's word, published after this one's
				case BreakerClosed:
					store.put(key, SharedBreakerState{State: BreakerClosed})
				case BreakerOpen:
					store.put(key, SharedBreakerState{State: BreakerOpen, Until: time.Now().Add(time.Minute)})
				case BreakerHalfOpen:
					store.put(key, SharedBreakerState{State: BreakerOpen, Until: time.Now().Add(-time.Second)})
				}
				u, _ := url.Parse(key + "/v1/x")
				if got := b.State(u); got != tc.want {
					t.Errorf("State = %v, want %v", got, tc.want)
				}
			})
		})
	}
}

// TestBreakerDefaults: the defaults BreakerSettings documents are those
// the circuit applies.
func TestBreakerDefaults(t *testing.T) {
	c := BreakerSettings{}.config()
	got := []any{c.Consecutive, c.MinRequests, c.Ratio, c.Window, c.Cooldown, c.HalfOpen}
	want := []any{uint32(5), uint64(20), 0.8, 10 * time.Second, DefaultBreakerCooldown, uint32(1)}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("defaults %v, want %v", got, want)
	}
	if r := (BreakerSettings{FailureRatio: 1.5}).config().Ratio; !math.IsInf(r, 1) {
		t.Errorf("FailureRatio 1.5: ratio %v, want off (+Inf)", r)
	}
}
