package transport

import (
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/sturdyhttp/sturdy/internal/hosts"
	"github.com/sturdyhttp/sturdy/policy"
)

// breakerBenchBase is an in-memory host that answers 200 with a shared,
// empty response: no allocation, so what a benchmark measures above it is
// the middleware's own cost.
func breakerBenchBase() http.RoundTripper {
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody}
	return Func(func(*http.Request) (*http.Response, error) { return resp, nil })
}

// breakerBenchRequests returns one GET per host, to host0.test ...
func breakerBenchRequests(b *testing.B, hosts int) []*http.Request {
	reqs := make([]*http.Request, hosts)
	for i := range reqs {
		r, err := http.NewRequest("GET", "https://host"+strconv.Itoa(i)+".test/v1/x", nil)
		if err != nil {
			b.Fatal(err)
		}
		reqs[i] = r
	}
	return reqs
}

// BenchmarkBreaker measures the cost of a successful request through
// Breaker over an in-memory base, with requests spread over 1, 100 and
// 10,000 hosts, against the bare base. Run with -cpu 1,2 for contention.
func BenchmarkBreaker(b *testing.B) {
	for _, hosts := range []int{1, 100, 10000} {
		for _, mode := range []string{"none", "breaker"} {
			b.Run("hosts="+strconv.Itoa(hosts)+"/"+mode, func(b *testing.B) {
				reqs := breakerBenchRequests(b, hosts)
				rt := breakerBenchBase()
				if mode == "breaker" {
					rt = Breaker(BreakerSettings{})(rt)
				}
				for _, r := range reqs { // create the breakers first
					if _, err := rt.RoundTrip(r); err != nil {
						b.Fatal(err)
					}
				}
				var next atomic.Int64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := int(next.Add(7919)) // each goroutine starts elsewhere
					for pb.Next() {
						i++
						if i >= len(reqs) {
							i = 0
						}
						if _, err := rt.RoundTrip(reqs[i]); err != nil {
							b.Error(err)
							return
						}
					}
				})
				if mode == "breaker" {
					if got := rt.(*breakerTransport).b.slot.Registry().Len(); got != hosts {
						b.Errorf("breakers = %d, want %d", got, hosts)
					}
				}
			})
		}
	}
}

// BenchmarkBreakerRefusal measures a request refused by an open breaker:
// it is not sent, and costs the error it returns.
func BenchmarkBreakerRefusal(b *testing.B) {
	fail := Func(func(*http.Request) (*http.Response, error) { return nil, errors.New("refused") })
	rt := Breaker(BreakerSettings{ConsecutiveFailures: 1})(fail)
	req := breakerBenchRequests(b, 1)[0]
	rt.RoundTrip(req)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := rt.RoundTrip(req); !errors.Is(err, ErrCircuitOpen) {
				b.Errorf("err = %v, want ErrCircuitOpen", err)
				return
			}
		}
	})
}

// BenchmarkGobreaker compares gobreaker's two ways of wrapping a call:
// the two-step breaker returns a callback per request, which allocates;
// Execute with a closure that does not escape does not.
func BenchmarkGobreaker(b *testing.B) {
	b.Run("TwoStep", func(b *testing.B) {
		cb := gobreaker.NewTwoStepCircuitBreaker[*http.Response](gobreaker.Settings{})
		b.ReportAllocs()
		for b.Loop() {
			done, err := cb.Allow()
			if err != nil {
				b.Fatal(err)
			}
			done(nil)
		}
	})
	b.Run("Execute", func(b *testing.B) {
		cb := gobreaker.NewCircuitBreaker[*http.Response](gobreaker.Settings{})
		resp := &http.Response{StatusCode: 200}
		b.ReportAllocs()
		for b.Loop() {
			var got *http.Response
			_, err := cb.Execute(func() (*http.Response, error) { got = resp; return resp, nil })
			if err != nil || got == nil {
				b.Fatal(err)
			}
		}
	})
}

// gobreakerFully is the design that Breaker's own state machine was
// measured against: one gobreaker per host that runs every state, closed
// included, counting in its rolling window (Interval Window, BucketPeriod
// Window/10), told of ignored outcomes through IsExcluded, and either
// through the two-step API (twoStep) or Execute.
type gobreakerFully struct {
	slot    *hosts.Slot[gobreaker.TwoStepCircuitBreaker[struct{}]]
	exec    *hosts.Slot[gobreaker.CircuitBreaker[struct{}]]
	twoStep bool
	next    http.RoundTripper
}

var errGobreakerFailing, errGobreakerIgnored = errors.New("failing"), errors.New("ignored")

func gobreakerSettings(name string) gobreaker.Settings {
	c := BreakerSettings{}.config()
	return gobreaker.Settings{
		Name:         name,
		MaxRequests:  c.HalfOpen,
		Interval:     c.Window,
		BucketPeriod: c.Window / 10,
		Timeout:      c.Cooldown,
		ReadyToTrip: func(n gobreaker.Counts) bool {
			ended := uint64(n.TotalSuccesses + n.TotalFailures)
			if ended < c.MinRequests {
				return n.ConsecutiveFailures >= c.Consecutive
			}
			return float64(n.TotalFailures) >= c.Ratio*float64(ended) || uint64(n.ConsecutiveFailures) >= c.MinRequests
		},
		IsExcluded: func(err error) bool { return err == errGobreakerIgnored },
	}
}

func newGobreakerFully(twoStep bool, next http.RoundTripper) *gobreakerFully {
	reg := hosts.New(hosts.Options{})
	never := func(*gobreaker.TwoStepCircuitBreaker[struct{}], time.Time) bool { return false }
	neverExec := func(*gobreaker.CircuitBreaker[struct{}], time.Time) bool { return false }
	return &gobreakerFully{
		slot: hosts.NewSlot(reg, func(k hosts.Key) *gobreaker.TwoStepCircuitBreaker[struct{}] {
			return gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreakerSettings(k.String()))
		}, never),
		exec: hosts.NewSlot(reg, func(k hosts.Key) *gobreaker.CircuitBreaker[struct{}] {
			return gobreaker.NewCircuitBreaker[struct{}](gobreakerSettings(k.String()))
		}, neverExec),
		twoStep: twoStep,
		next:    next,
	}
}

// gobreakerErr is what a verdict tells gobreaker.
func gobreakerErr(v policy.HostVerdict) error {
	switch v {
	case policy.HostFailing:
		return errGobreakerFailing
	case policy.HostIgnored:
		return errGobreakerIgnored
	}
	return nil
}

func (t *gobreakerFully) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.twoStep {
		done, err := t.slot.GetURL(req.URL).Allow()
		if err != nil {
			return nil, err
		}
		resp, err := t.next.RoundTrip(req)
		done(gobreakerErr(verdictOf(req, resp, err).Host))
		return resp, err
	}
	var resp *http.Response
	_, err := t.exec.GetURL(req.URL).Execute(func() (struct{}, error) {
		var err error
		resp, err = t.next.RoundTrip(req)
		if err != nil {
			return struct{}{}, err
		}
		return struct{}{}, gobreakerErr(verdictOf(req, resp, err).Host)
	})
	if resp != nil {
		err = nil // a response that counted as a failure is still the caller's
	}
	return resp, err
}

// BenchmarkBreakerChoice measures a successful request through a closed
// breaker, for the two designs considered: Breaker's own state machine
// (atomics while closed), and gobreaker running every state
// (gobreakerFully), through its two-step API or Execute. Run with
// -cpu 1,2: gobreaker takes its mutex twice per request.
func BenchmarkBreakerChoice(b *testing.B) {
	for _, hostCount := range []int{1, 100} {
		for _, design := range []string{"own", "gobreaker-twostep", "gobreaker-execute"} {
			b.Run("hosts="+strconv.Itoa(hostCount)+"/"+design, func(b *testing.B) {
				reqs := breakerBenchRequests(b, hostCount)
				var rt http.RoundTripper
				switch design {
				case "own":
					rt = Breaker(BreakerSettings{})(breakerBenchBase())
				default:
					rt = newGobreakerFully(design == "gobreaker-twostep", breakerBenchBase())
				}
				for _, r := range reqs {
					if _, err := rt.RoundTrip(r); err != nil {
						b.Fatal(err)
					}
				}
				var next atomic.Int64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := int(next.Add(7919))
					for pb.Next() {
						i++
						if i >= len(reqs) {
							i = 0
						}
						if _, err := rt.RoundTrip(reqs[i]); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
