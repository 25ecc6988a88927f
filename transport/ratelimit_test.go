package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
)

// rlServer serves h on an in-memory network and returns a client whose
// transport is base wrapped by mws. Call stop before the bubble ends.
func rlServer(h http.Handler, mws ...Middleware) (c *http.Client, url string, stop func()) {
	n := httptestutil.NewNetwork()
	srv := n.Serve("api.test", h)
	base := n.Transport()
	c = &http.Client{Transport: Chain(base, mws...)}
	return c, srv.URL, func() {
		base.CloseIdleConnections()
		srv.Close()
	}
}

// rlArrivals records when requests reach a server, relative to start.
type rlArrivals struct {
	mu    sync.Mutex
	start time.Time
	at    []time.Duration
}

func (a *rlArrivals) add() {
	a.mu.Lock()
	a.at = append(a.at, time.Since(a.start))
	a.mu.Unlock()
}

func (a *rlArrivals) sorted() []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := slices.Clone(a.at)
	slices.Sort(out)
	return out
}

// rlLoad sends GETs from 20 goroutines for run, counting in ok those
// answered 200 in time, then waits a second for the handlers of the
// cancelled requests to finish. The run ends by a cancel, not a
// deadline: a deadline would make the last second's waits fail at once,
// and the workers spin.
func rlLoad(c *http.Client, run time.Duration, ok *atomic.Int64) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(run, cancel)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if code, err := rlGet(ctx, c, "http://api.test/v1/items"); err == nil && code == 200 && ctx.Err() == nil {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	time.Sleep(time.Second) // the handlers of cancelled requests finish
}

func rlGet(ctx context.Context, c *http.Client, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func TestRateLimitAwareWaitsForReset(t *testing.T) {
	// Every response says: 0 left of 10, window resets in 2 s. The next
	// request reaches the server 2 s later, in every header family.
	for _, fam := range httptestutil.Families() {
		t.Run(string(fam), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				arr := &rlArrivals{start: time.Now()}
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					arr.add()
					httptestutil.QuotaHeaders(w.Header(), fam,
						httptestutil.Quota{Limit: 10, Remaining: 0, Reset: 2 * time.Second}, time.Now())
				})
				c, url, stop := rlServer(h, RateLimitAware(ratelimit.Options{}))
				defer stop()
				for range 2 {
					if code, err := rlGet(context.Background(), c, url); err != nil || code != 200 {
						t.Fatalf("GET = %d, %v; want 200", code, err)
					}
				}
				if got, want := arr.sorted(), []time.Duration{0, 2 * time.Second}; !slices.Equal(got, want) {
					t.Errorf("server saw requests at %v, want %v", got, want)
				}
			})
		})
	}
}

func TestRateLimitAwareFailsFast(t *testing.T) {
	// Reset in 2 s, deadline in 1 s: the request fails at once, unsent,
	// with an error that says when the quota resets.
	synctest.Test(t, func(t *testing.T) {
		var hits atomic.Int32
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Reset-After", "2")
		})
		var rejects []ratelimit.RejectEvent
		c, url, stop := rlServer(h, RateLimitAware(ratelimit.Options{
			OnReject: func(e ratelimit.RejectEvent) { rejects = append(rejects, e) },
		}))
		defer stop()
		if _, err := rlGet(context.Background(), c, url); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		_, err := rlGet(ctx, c, url)
		if took := time.Since(start); took != 0 {
			t.Errorf("failing request took %v, want 0", took)
		}
		if !errors.Is(err, ratelimit.ErrQuotaExhausted) {
			t.Fatalf("err = %v, want ErrQuotaExhausted", err)
		}
		var qe *ratelimit.QuotaError
		if !errors.As(err, &qe) || qe.Wait != 2*time.Second || !qe.Reset.Equal(start.Add(2*time.Second)) {
			t.Errorf("QuotaError = %+v, want Wait 2s, Reset at +2s", qe)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err matches DeadlineExceeded; the deadline had not passed")
		}
		if got := hits.Load(); got != 1 {
			t.Errorf("server saw %d requests, want 1", got)
		}
		// The key is the host's: scheme and host, the default port left out.
		if want := strings.TrimSuffix(url, ":80"); len(rejects) != 1 || rejects[0].Key != want {
			t.Errorf("OnReject = %+v, want one for %s", rejects, want)
		}
	})
}

func TestRateLimitAwareHerdBehind429(t *testing.T) {
	// The first request gets 429 Retry-After: 5. A hundred goroutines
	// then send nothing for 5 s, and arrive spread out over at most a
	// second, not in one burst.
	for _, aware := range []bool{true, false} {
		t.Run(fmt.Sprintf("aware=%v", aware), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				arr := &rlArrivals{start: time.Now()}
				var first atomic.Bool
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if first.CompareAndSwap(false, true) {
						w.Header().Set("Retry-After", "5")
						w.WriteHeader(http.StatusTooManyRequests)
						return
					}
					arr.add()
				})
				var mws []Middleware
				if aware {
					mws = append(mws, RateLimitAware(ratelimit.Options{}))
				}
				c, url, stop := rlServer(h, mws...)
				defer stop()
				if code, err := rlGet(context.Background(), c, url); err != nil || code != 429 {
					t.Fatalf("first GET = %d, %v; want 429", code, err)
				}
				var wg sync.WaitGroup
				for range 100 {
					wg.Go(func() {
						if code, err := rlGet(context.Background(), c, url); err != nil || code != 200 {
							t.Errorf("GET = %d, %v; want 200", code, err)
						}
					})
				}
				wg.Wait()
				at := arr.sorted()
				if len(at) != 100 {
					t.Fatalf("server saw %d requests, want 100", len(at))
				}
				busiest := 0 // most arrivals in any 100 ms
				for i := range at {
					j := i
					for j < len(at) && at[j]-at[i] < 100*time.Millisecond {
						j++
					}
					busiest = max(busiest, j-i)
				}
				minGap := at[99] - at[0]
				for i := 1; i < len(at); i++ {
					minGap = min(minGap, at[i]-at[i-1])
				}
				t.Logf("aware=%v: first %v, last %v, spread %v, smallest gap %v, busiest 100ms: %d requests",
					aware, at[0], at[99], at[99]-at[0], minGap, busiest)
				if !aware {
					if at[0] != 0 || busiest != 100 {
						t.Errorf("without RateLimitAware: first at %v, busiest %d; want 0 and 100 (the test shows nothing otherwise)", at[0], busiest)
					}
					return
				}
				if at[0] != 5*time.Second {
					t.Errorf("first request after the 429 arrived at %v, want 5s", at[0])
				}
				if spread := at[99] - at[0]; spread < 900*time.Millisecond || spread > time.Second {
					t.Errorf("spread = %v, want between 900ms and 1s", spread)
				}
				if minGap < 9*time.Millisecond || busiest > 11 {
					t.Errorf("two requests arrived %v apart, %d in 100ms; want at least 9ms apart, at most 11", minGap, busiest)
				}
			})
		})
	}
}

func TestRateLimitAwareAgainstEmulator(t *testing.T) {
	// 50 goroutines call a rate-limited API (100 requests per 10 s per
	// client) for a minute of virtual time, each pausing 10 ms between
	// calls and honouring Retry-After on a 429, as a careful client
	// without quota tracking does.
	type result struct{ ok, rejected int64 }
	run := func(t *testing.T, fam httptestutil.Family, fixed, aware bool) result {
		var res result
		synctest.Test(t, func(t *testing.T) {
			api := httptestutil.NewRateLimitedAPI(httptestutil.RateLimitConfig{
				Limit: 100, Window: 10 * time.Second, FixedWindow: fixed, Family: fam,
			})
			var mws []Middleware
			if aware {
				mws = append(mws, RateLimitAware(ratelimit.Options{}))
			}
			c, url, stop := rlServer(api, mws...)
			defer stop()
			start := time.Now()
			var wg sync.WaitGroup
			for range 50 {
				wg.Go(func() {
					for time.Since(start) < time.Minute {
						req, _ := http.NewRequest("GET", url, nil)
						resp, err := c.Do(req)
						if err != nil {
							t.Errorf("GET: %v", err)
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode == http.StatusTooManyRequests {
							d, _ := policy.ParseRetryAfter(resp.Header, time.Now())
							time.Sleep(d)
						}
						time.Sleep(10 * time.Millisecond)
					}
				})
			}
			wg.Wait()
			res = result{api.Accepted(), api.Rejected()}
		})
		return res
	}
	for _, fam := range httptestutil.Families() {
		for _, fixed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fixed=%v", fam, fixed), func(t *testing.T) {
				with := run(t, fam, fixed, true)
				without := run(t, fam, fixed, false)
				t.Logf("with RateLimitAware: %d ok, %d 429s; without: %d ok, %d 429s",
					with.ok, with.rejected, without.ok, without.rejected)
				if with.rejected > 5 {
					t.Errorf("with RateLimitAware: %d 429s, want at most 5", with.rejected)
				}
				if without.rejected < 100 {
					t.Errorf("without RateLimitAware: %d 429s, want hundreds (else the test shows nothing)", without.rejected)
				}
				// Politeness must not cost throughput: the quota allows
				// 600 to 700 requests in the minute.
				if with.ok < 550 {
					t.Errorf("with RateLimitAware: %d requests served, want at least 550", with.ok)
				}
			})
		}
	}
}

func TestRateLimitAwareQuotaErrorNotRetried(t *testing.T) {
	// Inside Retry, an exhausted quota that cannot be waited out is
	// handed to the caller at once: no second attempt, no backoff.
	synctest.Test(t, func(t *testing.T) {
		var hits atomic.Int32
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			w.Header().Set("RateLimit-Policy", `"hourly";q=100;w=3600`)
			w.Header().Set("RateLimit", `"hourly";r=0;t=1800`)
		})
		c, url, stop := rlServer(h,
			Retry(policy.Retry{MaxAttempts: 3, Backoff: policy.Exponential(time.Second, time.Second)}),
			RateLimitAware(ratelimit.Options{}))
		defer stop()
		if code, err := rlGet(context.Background(), c, url); err != nil || code != 200 {
			t.Fatalf("first GET = %d, %v; want 200", code, err)
		}
		start := time.Now()
		_, err := rlGet(context.Background(), c, url)
		if !errors.Is(err, ratelimit.ErrQuotaExhausted) {
			t.Fatalf("err = %v, want ErrQuotaExhausted", err)
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("failing request took %v, want 0", took)
		}
		if got := hits.Load(); got != 1 {
			t.Errorf("server saw %d requests, want 1", got)
		}
		if !strings.Contains(err.Error(), "resets in 30m0s") {
			t.Errorf("err = %q, want it to say the quota resets in 30m0s", err)
		}
	})
}

func TestRateLimitAwareContract(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A rejected request's body is closed.
		idle := &idleCounter{}
		base := &rlIdleBase{idleCounter: idle, resp: func(r *http.Request) *http.Response {
			h := http.Header{}
			h.Set("X-RateLimit-Remaining", "0")
			h.Set("X-RateLimit-Reset", "30")
			return &http.Response{StatusCode: 200, Header: h, Body: http.NoBody, Request: r}
		}}
		rt := RateLimitAware(ratelimit.Options{MaxWait: time.Second})(base)
		req, _ := http.NewRequest("GET", "https://api.example.com/", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		body := &rlBody{Reader: strings.NewReader("payload")}
		req, _ = http.NewRequest("POST", "https://api.example.com/", body)
		if _, err := rt.RoundTrip(req); !errors.Is(err, ratelimit.ErrQuotaExhausted) {
			t.Fatalf("err = %v, want ErrQuotaExhausted", err)
		}
		if !body.closed {
			t.Errorf("request body of a rejected request not closed")
		}
		if got := base.calls; got != 1 {
			t.Errorf("base called %d times, want 1", got)
		}
		// The request is not modified.
		if len(req.Header) != 0 {
			t.Errorf("request headers modified: %v", req.Header)
		}
		// CloseIdleConnections reaches the base.
		rt.(interface{ CloseIdleConnections() }).CloseIdleConnections()
		if idle.n != 1 {
			t.Errorf("CloseIdleConnections reached the base %d times, want 1", idle.n)
		}
		// Errors from the base come back unchanged.
		boom := errors.New("boom")
		rt = RateLimitAware(ratelimit.Options{})(Func(func(*http.Request) (*http.Response, error) { return nil, boom }))
		req, _ = http.NewRequest("GET", "https://other.example.com/", nil)
		if _, err := rt.RoundTrip(req); err != boom {
			t.Errorf("err = %v, want the base's error", err)
		}
	})
}

func TestRateLimitTrackerShared(t *testing.T) {
	// Two stacks sharing a tracker share the quota: what one learns holds
	// the other back.
	synctest.Test(t, func(t *testing.T) {
		tr := ratelimit.NewTracker(ratelimit.Options{})
		calls := 0
		base := Func(func(r *http.Request) (*http.Response, error) {
			calls++
			h := http.Header{}
			h.Set("X-RateLimit-Limit", "5")
			h.Set("X-RateLimit-Remaining", "0")
			h.Set("X-RateLimit-Reset-After", "3")
			return &http.Response{StatusCode: 200, Header: h, Body: http.NoBody, Request: r}, nil
		})
		a := Chain(base, RateLimitTracker(tr))
		b := Chain(base, RateLimitTracker(tr))
		req, _ := http.NewRequest("GET", "https://api.example.com/", nil)
		if _, err := a.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
		if q, ok := tr.Quota(req); !ok || q.Remaining != 0 || q.Limit != 5 {
			t.Errorf("Quota = %+v, %v; want Limit 5, Remaining 0", q, ok)
		}
		start := time.Now()
		if _, err := b.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got != 3*time.Second {
			t.Errorf("second stack waited %v, want 3s", got)
		}
	})
}

type rlIdleBase struct {
	*idleCounter
	calls int
	resp  func(*http.Request) *http.Response
}

func (b *rlIdleBase) RoundTrip(r *http.Request) (*http.Response, error) {
	b.calls++
	return b.resp(r), nil
}

type rlBody struct {
	io.Reader
	closed bool
}

func (b *rlBody) Close() error { b.closed = true; return nil }

func ExampleRateLimitAware() {
	// A server that has spent its client's quota: none left, 30 s to the
	// reset.
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Limit", "100")
		w.Header().Set("X-RateLimit-Remaining", "0")
		w.Header().Set("X-RateLimit-Reset", "30")
		fmt.Fprintln(w, "ok")
	})
	client := &http.Client{Transport: Chain(httptestutil.NewHandlerTransport(api),
		RateLimitAware(ratelimit.Options{}))}

	resp, err := client.Get("http://api.test/first")
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println("first:", resp.Status)

	// The next call cannot be answered within its 5 s budget: it fails
	// now, without being sent, instead of in 5 s with a 429.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test/second", nil)
	_, err = client.Do(req)
	var qe *ratelimit.QuotaError
	fmt.Println("second:", errors.Is(err, ratelimit.ErrQuotaExhausted), errors.As(err, &qe) && qe.Wait > 29*time.Second)
	// Output:
	// first: 200 OK
	// second: true true
}

func TestRateLimitAwareInsideRetrySpreadsHerd(t *testing.T) {
	// The recommended order: Retry outside, RateLimitAware inside. Until
	// 5 s the server answers 429 with Retry-After up to then. Goroutines
	// that got a 429 wait in Retry, the others in RateLimitAware; either
	// way they reach the server after 5 s spread out, not in one burst.
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		open := start.Add(5 * time.Second)
		arr := &rlArrivals{start: start}
		var rejected atomic.Int32
		allIn := make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if now := time.Now(); now.Before(open) {
				// Hold the first answers until all 40 are in flight, so
				// that every goroutine gets a 429 and waits in Retry,
				// where RateLimitAware cannot see it.
				if rejected.Add(1) == 40 {
					close(allIn)
				}
				<-allIn
				w.Header().Set("Retry-After", fmt.Sprint(int(open.Sub(now).Seconds()+0.999)))
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			arr.add()
		})
		c, url, stop := rlServer(h,
			Retry(policy.Retry{MaxAttempts: 3, Backoff: policy.Exponential(time.Millisecond, time.Millisecond)}),
			RateLimitAware(ratelimit.Options{}))
		defer stop()
		var wg sync.WaitGroup
		for range 40 {
			wg.Go(func() {
				if code, err := rlGet(context.Background(), c, url); err != nil || code != 200 {
					t.Errorf("GET = %d, %v; want 200", code, err)
				}
			})
		}
		wg.Wait()
		at := arr.sorted()
		if len(at) != 40 {
			t.Fatalf("server answered %d requests, want 40", len(at))
		}
		minGap := at[len(at)-1]
		for i := 1; i < len(at); i++ {
			minGap = min(minGap, at[i]-at[i-1])
		}
		t.Logf("%d 429s; 200s from %v to %v, smallest gap %v: %v", rejected.Load(), at[0], at[len(at)-1], minGap, at)
		if got := rejected.Load(); got != 40 {
			t.Errorf("%d 429s, want 40", got)
		}
		if at[0] < 5*time.Second {
			t.Errorf("first 200 at %v, want after 5s", at[0])
		}
		// 41 requests held (40 told to pause, and the one asking) at
		// 20/s would take 2 s: the spread is cut to a second.
		if last := at[len(at)-1]; last > 6*time.Second {
			t.Errorf("last 200 at %v, want by 6s: the spread ends a second after the pause", last)
		}
		if minGap < 20*time.Millisecond {
			t.Errorf("two requests arrived %v apart, want at least 20ms", minGap)
		}
	})
}

// A 429's Retry-After date is measured from the response's Date: a server
// whose clock is an hour behind still pauses the host for 10 s, not 0.
func TestRateLimitAwareRetryAfterDateSkew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		var arrivals []time.Time
		var mu sync.Mutex
		n := httptestutil.NewNetwork()
		srv := n.Serve("api.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			arrivals = append(arrivals, time.Now())
			mu.Unlock()
			if calls.Add(1) == 1 {
				server := time.Now().Add(-time.Hour).UTC()
				w.Header().Set("Date", server.Format(http.TimeFormat))
				w.Header().Set("Retry-After", server.Add(10*time.Second).Format(http.TimeFormat))
				w.WriteHeader(http.StatusTooManyRequests)
			}
		}))
		defer srv.Close()
		base := n.Transport()
		defer base.CloseIdleConnections()
		c := &http.Client{Transport: Chain(base, RateLimitAware(ratelimit.Options{}))}
		for range 2 {
			resp, err := c.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		if len(arrivals) != 2 {
			t.Fatalf("server got %d requests, want 2", len(arrivals))
		}
		if got, want := arrivals[1].Sub(arrivals[0]), 10*time.Second; got < want || got > want+time.Second {
			t.Errorf("second request after %v, want %v (up to 1s of release spreading)", got, want)
		}
	})
}

// A request whose context ends before it reaches the server uses no
// quota: its unit is given back when net/http reports that it never got
// a connection (the dial hung), and stays spent once it had one (the
// request may have been read). The host has 5 left of 10 for an hour;
// the caller's deadline is 1 s.
func TestRateLimitContextEndedUsesQuotaOnlyIfConnected(t *testing.T) {
	for _, tc := range []struct {
		name      string
		connected bool
		want      int
	}{
		{"dial hangs", false, 5},
		{"server never answers", true, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				defer close(release)
				base := &http.Transport{
					DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
						if !tc.connected {
							<-release // a SYN lost
							return nil, errors.New("gave up")
						}
						client, server := net.Pipe()
						go func() {
							io.Copy(io.Discard, server) // reads the request, never answers
						}()
						go func() {
							<-release
							server.Close()
						}()
						return client, nil
					},
				}
				defer base.CloseIdleConnections()
				tr := ratelimit.NewTracker(ratelimit.Options{})
				rt := Chain(base, RateLimitTracker(tr))
				probe, _ := http.NewRequest("GET", "http://api.test/x", nil)
				h := http.Header{}
				h.Set("X-RateLimit-Limit", "10")
				h.Set("X-RateLimit-Remaining", "5")
				h.Set("X-RateLimit-Reset-After", "3600")
				tr.Observe(probe, h)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test/x", nil)
				if _, err := rt.RoundTrip(req); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("err = %v; want DeadlineExceeded", err)
				}
				if q, _ := tr.Quota(probe); q.Remaining != tc.want {
					t.Errorf("Remaining = %d; want %d", q.Remaining, tc.want)
				}
			})
		})
	}
}

// Retry never waits only to be refused by a quota: a 429 whose quota
// headers say the quota resets in an hour (no Retry-After), under the
// default 10-minute Timeout, is handed back at once, not after a backoff
// that the quota layer beneath would end with an error. (Retry asks the
// tracker, as it asks the breakers, before it waits.)
func TestRetryNeverWaitsOnlyForAQuotaToRefuse(t *testing.T) {
	for _, f := range []httptestutil.Family{httptestutil.FamilyGitHub, httptestutil.FamilyOpenAI, httptestutil.FamilyIETF} {
		t.Run(string(f), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := httptestutil.NewRecorder(httptestutil.RateLimitHeaders(429, "slow down",
					httptestutil.Quota{Limit: 60, Remaining: 0, Reset: time.Hour}, f).Forever())
				env := newFakeEnv(t, rec)
				c := newStack(env, Options{}) // backoff: constant 1 s
				start := time.Now()
				resp, err := c.Get(env.url + "/v1/items")
				took := time.Since(start)
				if err == nil {
					readAll(t, resp)
				}
				if err != nil || took != 0 {
					t.Errorf("after %v: (resp, err) = (%v, %v), want the 429 at once (no wait that cannot lead to a send)", took, status(resp), err)
				}
				rec.WantCount(t, 1)
			})
		})
	}
}
