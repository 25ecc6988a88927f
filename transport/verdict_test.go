package transport

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/internal/verdict"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
)

// judgeCounter counts, per host, the judgments of attempts (see
// verdict.Hook). Each test names hosts of its own, so that tests running
// beside it count nothing here.
type judgeCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func countJudgments(t *testing.T) *judgeCounter {
	c := &judgeCounter{n: map[string]int{}}
	f := func(r *http.Request) {
		c.mu.Lock()
		c.n[r.URL.Host]++
		c.mu.Unlock()
	}
	if !verdict.Hook.CompareAndSwap(nil, &f) {
		t.Fatal("another test counts judgments")
	}
	t.Cleanup(func() { verdict.Hook.Store(nil) })
	return c
}

func (c *judgeCounter) of(host string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[host]
}

// uncomparable is an error that == cannot compare.
type uncomparable []string

func (e uncomparable) Error() string { return "uncomparable" }

// quotaResponse is a 200 that reports a quota of 10 with remaining left.
func quotaResponse(remaining int) *http.Response {
	h := http.Header{}
	h.Set("X-RateLimit-Limit", "10")
	h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10))
	return &http.Response{StatusCode: 200, Header: h, Body: http.NoBody}
}

// TestOneVerdictPerAttempt: through a stack with every layer that judges
// an attempt (Throttle, RateLimitAware, Concurrency, Breaker; or
// GoBreaker), built by New or by Chain, each attempt is judged once,
// whatever it ended with, and the layers act on the one verdict: an
// attempt that never connected or was not processed gives its quota
// unit back, so the operation costs one unit, not two.
func TestOneVerdictPerAttempt(t *testing.T) {
	counter := countJudgments(t)
	notProcessed := errors.New("http: server closed idle connection")
	reset := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	status := func(c int) func(*http.Request) (*http.Response, error) {
		return func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: c, Header: http.Header{}, Body: http.NoBody}, nil
		}
	}
	// noConn fails the attempt as a dial still under way when its time
	// ran out: the connection was asked for and never got.
	noConn := func(r *http.Request) (*http.Response, error) {
		if tr := httptrace.ContextClientTrace(r.Context()); tr != nil && tr.GetConn != nil {
			tr.GetConn(r.URL.Host)
		}
		return nil, context.DeadlineExceeded
	}
	tests := []struct {
		name      string
		method    string
		gobreaker bool
		first     func(*http.Request) (*http.Response, error) // the operation's first attempt; then a 200
		sends     int
		remaining int // the quota left after the operation
	}{
		{name: "a success", method: "GET", sends: 1, remaining: 4},
		{name: "a 503, retried", method: "GET", first: status(503), sends: 2, remaining: 3},
		{name: "a 429, retried", method: "GET", first: status(429), sends: 2, remaining: 3},
		{name: "a reset, retried", method: "GET", first: func(*http.Request) (*http.Response, error) { return nil, reset }, sends: 2, remaining: 3},
		{name: "not processed, resent free", method: "POST", first: func(*http.Request) (*http.Response, error) { return nil, notProcessed }, sends: 2, remaining: 4},
		{name: "never connected, resent", method: "POST", first: noConn, sends: 2, remaining: 4},
		{name: "a 503 through GoBreaker", method: "GET", gobreaker: true, first: status(503), sends: 2, remaining: 3},
	}
	for i, tt := range tests {
		for _, built := range []string{"Chain", "New"} {
			t.Run(tt.name+"/"+built, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					host := "c" + strconv.Itoa(i) + built + ".verdict.test"
					calls := 0
					base := Func(func(r *http.Request) (*http.Response, error) {
						calls++
						switch {
						case calls == 1:
							return quotaResponse(5), nil // the quota becomes known: RateLimitAware holds a unit of each request
						case calls == 2 && tt.first != nil:
							return tt.first(r)
						}
						return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}, nil
					})
					tr := ratelimit.NewTracker(ratelimit.Options{})
					var rt http.RoundTripper
					if built == "New" {
						o := Options{Base: base, Throttle: &policy.Throttle{}, Concurrency: &policy.Concurrency{}}
						if tt.gobreaker {
							o.GoBreaker = &GoBreakerSettings{}
						}
						rt = New(o)
					} else {
						breaker := Breaker(BreakerSettings{})
						if tt.gobreaker {
							breaker = GoBreaker(GoBreakerSettings{})
						}
						rt = Chain(base, Retry(policy.Retry{}), Throttle(&policy.Throttle{}), RateLimitTracker(tr),
							Concurrency(&policy.Concurrency{}), breaker)
					}
					u := "http://" + host + "/x"
					for op := range 2 {
						req, _ := http.NewRequest(tt.method, u, nil)
						before, sentBefore := counter.of(host), calls
						resp, err := rt.RoundTrip(req)
						if err != nil {
							t.Fatalf("operation %d: %v", op+1, err)
						}
						resp.Body.Close()
						if got, want := counter.of(host)-before, calls-sentBefore; got != want {
							t.Errorf("operation %d: %d judgments of %d attempts, want one each", op+1, got, want)
						}
					}
					if got, want := calls, 1+tt.sends; got != want {
						t.Errorf("attempts sent = %d, want %d", got, want)
					}
					if built == "New" {
						return // its tracker is its own
					}
					req, _ := http.NewRequest("GET", u, nil)
					if q, ok := tr.Quota(req); !ok {
						t.Error("no quota known")
					} else if got := q.Remaining; got != tt.remaining {
						t.Errorf("quota remaining = %d, want %d", got, tt.remaining)
					}
				})
			})
		}
	}
}

// TestLayerAloneJudges: each layer that judges attempts, used alone (no
// operation, no verdict kept), judges each failed attempt itself, once,
// and acts on it.
func TestLayerAloneJudges(t *testing.T) {
	counter := countJudgments(t)
	reset := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	fail := Func(func(*http.Request) (*http.Response, error) { return nil, reset })
	b := NewBreakers(BreakerSettings{ConsecutiveFailures: 3})
	th := &policy.Throttle{}
	tests := []struct {
		name string
		mw   Middleware
	}{
		{"Breaker", b.Middleware()},
		{"GoBreaker", GoBreaker(GoBreakerSettings{})},
		{"Throttle", Throttle(th)},
		{"RateLimitAware", RateLimitAware(ratelimit.Options{})},
		{"Concurrency", Concurrency(&policy.Concurrency{})},
	}
	for i, tt := range tests {
		host := "alone" + strconv.Itoa(i) + ".verdict.test"
		rt := Chain(fail, tt.mw)
		for range 3 {
			req, _ := http.NewRequest("GET", "http://"+host+"/", nil)
			if _, err := rt.RoundTrip(req); !errors.Is(err, reset) {
				t.Fatalf("%s: error %v, want the reset", tt.name, err)
			}
		}
		if got, want := counter.of(host), 3; got != want {
			t.Errorf("%s alone: %d judgments of 3 attempts, want %d", tt.name, got, want)
		}
	}
	u, _ := url.Parse("http://alone0.verdict.test/")
	if got, want := b.State(u), BreakerOpen; got != want {
		t.Errorf("Breaker alone, after 3 resets: state %v, want %v", got, want)
	}
}

// TestVerdictKept: an attempt's verdict is computed by the first layer
// that asks and read by the next; an outcome other than the one kept is
// judged afresh, by the same rule; a hedge's copy or a later attempt
// starts with no verdict; an error that cannot be compared is judged.
func TestVerdictKept(t *testing.T) {
	counter := countJudgments(t)
	const host = "kept.verdict.test"
	req, _ := http.NewRequest("GET", "http://"+host+"/", nil)
	_, req = withOp(req)
	r503 := &http.Response{StatusCode: 503}
	reset := &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}
	steps := []struct {
		name      string
		req       *http.Request
		resp      *http.Response
		err       error
		judgments int // after the step
		want      policy.Verdict
	}{
		{"first asks", req, r503, nil, 1, policy.JudgeStatus(503)},
		{"next reads", req, r503, nil, 1, policy.JudgeStatus(503)},
		{"a layer between changed it", req, nil, reset, 2, policy.Judge(policy.Outcome{Request: req, Err: reset})},
		{"a hedge's copy", req.WithContext(withScope(req.Context(), func(s *scope) { s.copy = 1 })), r503, nil, 3, policy.JudgeStatus(503)},
		{"the next attempt", req.WithContext(withScope(req.Context(), func(s *scope) { s.attempt = 2 })), nil, reset, 4, policy.Judge(policy.Outcome{Request: req, Err: reset})},
		{"cannot be compared", req, nil, uncomparable{"x"}, 5, policy.Judge(policy.Outcome{Request: req, Err: uncomparable{"x"}})},
		{"cannot be compared, again", req, nil, uncomparable{"x"}, 6, policy.Judge(policy.Outcome{Request: req, Err: uncomparable{"x"}})},
	}
	for _, st := range steps {
		if got := verdictOf(st.req, st.resp, st.err); got != st.want {
			t.Errorf("%s: verdict %+v, want %+v", st.name, got, st.want)
		}
		if got := counter.of(host); got != st.judgments {
			t.Errorf("%s: %d judgments, want %d", st.name, got, st.judgments)
		}
	}
	// A scope the caller made (WithAttempts), which many requests share,
	// keeps no verdict: one request's is not another's.
	shared := WithAttempts(context.Background(), 2)
	ended, cancel := context.WithCancel(shared)
	cancel()
	a, _ := http.NewRequestWithContext(ended, "GET", "http://"+host+"/", nil)
	b, _ := http.NewRequestWithContext(shared, "GET", "http://"+host+"/", nil)
	if got := verdictOf(a, nil, context.DeadlineExceeded).Host; got != policy.HostIgnored {
		t.Errorf("the caller ended it: host verdict %v, want ignored", got)
	}
	if got := verdictOf(b, nil, context.DeadlineExceeded).Host; got != policy.HostFailing {
		t.Errorf("another request of the caller's scope, a timeout of its own: host verdict %v, want failing", got)
	}
	// A throttle's mark is the same attempt: it reads the kept verdict.
	fresh, _ := http.NewRequest("GET", "http://"+host+"/", nil)
	_, fresh = withOp(fresh)
	verdictOf(fresh, r503, nil)
	n := counter.of(host)
	marked := fresh.WithContext(withScope(fresh.Context(), func(s *scope) { s.throttled = true }))
	verdictOf(marked, r503, nil)
	if got := counter.of(host); got != n {
		t.Errorf("a throttle's mark judged the attempt again: %d judgments, want %d", got, n)
	}
}
