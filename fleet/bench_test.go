package fleet_test

import (
	"context"
	"crypto/tls"
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
	"time"

	"github.com/redis/rueidis"
	"github.com/sony/gobreaker/v2"

	"github.com/sturdyhttp/sturdy/fleet"
	"github.com/sturdyhttp/sturdy/fleet/internal/redisproc"
	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
	"github.com/sturdyhttp/sturdy/transport"
)

// The benchmarks measure what sharing state on Redis adds to a request,
// over an in-memory base that answers 200 at once: the latency per request
// (p50 and p99, at 1 and 64 concurrent callers) and the round trips to
// Redis per request: the writes the client makes to its connection (a
// command is one; commands pipelined together share one), the background
// refreshes included.
//
//	cd fleet && go test -run '^$' -bench . -benchtime 2000x -count 3

// ok is the in-memory base: 200 with an empty body.
var ok = transport.Func(func(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
})

// writes counts the writes of the benchmark clients to their connections.
var writes atomic.Int64

type countingConn struct{ net.Conn }

func (c countingConn) Write(p []byte) (int, error) {
	writes.Add(1)
	return c.Conn.Write(p)
}

// newCountingClient is newClient with every write to Redis counted.
func newCountingClient(b testing.TB, srv *redisproc.Server) rueidis.Client {
	opt, err := rueidis.ParseURL(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	opt.DisableCache = true
	opt.DialCtxFn = func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
		c, err := d.DialContext(ctx, "unix", addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c}, nil
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c
}

// run sends b.N requests through rt from callers goroutines and reports
// latency percentiles, round trips to Redis per request, and the fraction of
// requests that failed (gobreaker's distributed breaker fails a request
// whose lock it could not take within 5s).
func run(b *testing.B, callers int, rt http.RoundTripper) {
	req, _ := http.NewRequest("GET", "https://api.example.com/v1/models", nil)
	lat := make([]time.Duration, b.N)
	var failed atomic.Int64
	before := writes.Load()
	b.ResetTimer()
	var wg sync.WaitGroup
	per := (b.N + callers - 1) / callers
	for g := range callers {
		wg.Go(func() {
			for i := g * per; i < min(b.N, (g+1)*per); i++ {
				start := time.Now()
				resp, err := rt.RoundTrip(req)
				lat[i] = time.Since(start)
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	trips := writes.Load() - before
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(trips)/float64(b.N), "round-trips/op")
	b.ReportMetric(float64(failed.Load())/float64(b.N), "failed/op")
}

// gobreakerStore is gobreaker's SharedDataStore on the same Redis, written
// as its documentation describes one: a lock with SET NX PX, released by
// a DEL, and the state under a plain key.
type gobreakerStore struct{ c rueidis.Client }

var errLocked = errors.New("locked")

func (s gobreakerStore) Lock(name string) error {
	ctx := context.Background()
	err := s.c.Do(ctx, s.c.B().Set().Key(name).Value("1").Nx().PxMilliseconds(5000).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return errLocked
	}
	return err
}

func (s gobreakerStore) Unlock(name string) error {
	return s.c.Do(context.Background(), s.c.B().Del().Key(name).Build()).Error()
}

func (s gobreakerStore) GetData(name string) ([]byte, error) {
	b, err := s.c.Do(context.Background(), s.c.B().Get().Key(name).Build()).AsBytes()
	if rueidis.IsRedisNil(err) {
		return nil, nil
	}
	return b, err
}

func (s gobreakerStore) SetData(name string, data []byte) error {
	return s.c.Do(context.Background(), s.c.B().Set().Key(name).Value(rueidis.BinaryString(data)).Build()).Error()
}

// distributed is a RoundTripper behind gobreaker's DistributedCircuitBreaker.
type distributed struct {
	cb   *gobreaker.DistributedCircuitBreaker[*http.Response]
	next http.RoundTripper
}

func (d distributed) RoundTrip(r *http.Request) (*http.Response, error) {
	return d.cb.Execute(func() (*http.Response, error) { return d.next.RoundTrip(r) })
}

func BenchmarkBreakerPath(b *testing.B) {
	srv := redisproc.StartT(b)
	c := newCountingClient(b, srv)
	for _, callers := range []int{1, 64} {
		b.Run(fmt.Sprintf("local/callers=%d", callers), func(b *testing.B) {
			run(b, callers, transport.Breaker(transport.BreakerSettings{})(ok))
		})
		b.Run(fmt.Sprintf("fleet/callers=%d", callers), func(b *testing.B) {
			f, err := fleet.New(c, fleet.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			run(b, callers, transport.Breaker(transport.BreakerSettings{Store: f.Breakers()})(ok))
		})
		b.Run(fmt.Sprintf("gobreaker-distributed/callers=%d", callers), func(b *testing.B) {
			cb, err := gobreaker.NewDistributedCircuitBreaker[*http.Response](gobreakerStore{c}, gobreaker.Settings{Name: "api.example.com"})
			if err != nil {
				b.Fatal(err)
			}
			run(b, callers, distributed{cb, ok})
		})
	}
}

func BenchmarkQuotaPath(b *testing.B) {
	srv := redisproc.StartT(b)
	c := newCountingClient(b, srv)
	limited := func(burst int) http.RoundTripper {
		f, err := fleet.New(c, fleet.Options{Limits: []fleet.Limit{{Host: "https://api.example.com", Requests: 1_000_000, Per: time.Second, Burst: burst}}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		return transport.RateLimitAware(ratelimit.Options{Store: f.Quotas()})(ok)
	}
	for _, callers := range []int{1, 64} {
		b.Run(fmt.Sprintf("local/callers=%d", callers), func(b *testing.B) {
			run(b, callers, transport.RateLimitAware(ratelimit.Options{})(ok))
		})
		// Leases in batches (Burst 100ms of the rate: up to 100,000).
		b.Run(fmt.Sprintf("fleet/callers=%d", callers), func(b *testing.B) {
			run(b, callers, limited(0))
		})
		// Burst 1: one lease, one round trip, per request, as a GCRA
		// script per request (go-redis/redis_rate) does.
		b.Run(fmt.Sprintf("fleet-lease-per-request/callers=%d", callers), func(b *testing.B) {
			run(b, callers, limited(1))
		})
	}
}

// BenchmarkIdempotencyReplicas measures what waiting for a replica costs
// a keyed request: Begin and Complete of a new key on a primary with one
// replica on loopback TCP, with Replicas 0 (no WAIT) and 1 (WAIT 1,
// pipelined after each script), one caller at a time and 16 at once.
//
//	cd fleet && go test -run '^$' -bench IdempotencyReplicas -benchtime 2000x -count 3
func BenchmarkIdempotencyReplicas(b *testing.B) {
	primary := redisproc.StartTCPT(b)
	host, port, _ := net.SplitHostPort(primary.Addr)
	replica := redisproc.StartTCPT(b, "--replicaof", host, port)
	rc := newClientURLTB(b, replica.URL())
	for start := time.Now(); !strings.Contains(infoOf(rc), "master_link_status:up"); time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			b.Fatal("the replica did not sync within 10s")
		}
	}
	for _, replicas := range []int{0, 1} {
		for _, callers := range []int{1, 16} {
			b.Run(fmt.Sprintf("replicas=%d/callers=%d", replicas, callers), func(b *testing.B) {
				c := newClientURLTB(b, primary.URL())
				store := fleet.NewIdempotencyStore(c, fleet.IdempotencyOptions{Replicas: replicas})
				resp := &idempotency.StoredResponse{Status: 200, Body: []byte(`{"id":"ch_1"}`)}
				var n atomic.Int64
				lat := make([]time.Duration, b.N)
				run := time.Now().UnixNano() // b.N grows over runs: new keys each
				b.ResetTimer()
				var wg sync.WaitGroup
				for range callers {
					wg.Go(func() {
						for i := n.Add(1) - 1; i < int64(b.N); i = n.Add(1) - 1 {
							start := time.Now()
							key := fmt.Sprintf("k%d-%d", run, i)
							res, err := store.Begin(context.Background(), key, "fp", time.Minute)
							if err != nil || res.State != idempotency.Acquired {
								b.Errorf("Begin: %v, %v", res.State, err)
								return
							}
							if err := store.Complete(context.Background(), key, res.Token, resp, time.Minute); err != nil {
								b.Errorf("Complete: %v", err)
								return
							}
							lat[i] = time.Since(start)
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
				b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
			})
		}
	}
}

func newClientURLTB(b testing.TB, url string) rueidis.Client {
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c
}

func infoOf(c rueidis.Client) string {
	s, _ := c.Do(context.Background(), c.B().Info().Section("replication").Build()).ToString()
	return s
}

// BenchmarkBudgetBusy measures the Redis round trips per operation of a
// busy process whose host fails everything, with the fleet's budget: an
// in-memory base answers 503, 64 callers send operations that retry up
// to 3 times, their backoff 1ms.
//
//	cd fleet && go test -run '^$' -bench BudgetBusy -benchtime 20000x -count 3
func BenchmarkBudgetBusy(b *testing.B) {
	srv := redisproc.StartT(b)
	f, err := fleet.New(newCountingClient(b, srv), fleet.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	unavailable := transport.Func(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 503, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
	})
	rt := transport.New(transport.Options{
		Base: unavailable,
		Retry: policy.Retry{MaxAttempts: 4, Backoff: policy.Exponential(time.Millisecond, time.Millisecond),
			Budget: &policy.Budget{Store: f.Budgets()}},
		Disable: transport.LayerBreaker,
	})
	run(b, 64, rt)
}
