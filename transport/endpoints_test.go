package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
)

// originServers counts what an origin and its alternate serve. The
// alternate wants its own auth header, which Endpoints.Adjust sets, and
// each POST body (an operation's id) must reach the servers once.
type originServers struct {
	mu        sync.Mutex
	origin    int
	alternate int
	posts     map[string]int // body -> times processed, on either server
	hosts     map[string]int // Host header the alternate saw
	badAuth   int
}

func newOriginServers() *originServers {
	return &originServers{posts: map[string]int{}, hosts: map[string]int{}}
}

func (s *originServers) handler(alt bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		defer s.mu.Unlock()
		if alt {
			s.hosts[r.Host]++
			if r.Header.Get("Authorization") != "Bearer alternate" {
				s.badAuth++
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			s.alternate++
		} else {
			s.origin++
		}
		if r.Method == http.MethodPost {
			s.posts[string(body)]++
		}
		fmt.Fprintf(w, "%s?%s", r.URL.Path, r.URL.RawQuery)
	})
}

func (s *originServers) counts() (origin, alternate int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.origin, s.alternate
}

// failoverEnv is an origin that can refuse connections and one alternate.
type failoverEnv struct {
	base      *http.Transport
	originURL string // "http://host:port"
	altURL    string
	setDown   func(bool) // refuse connections to the origin, or serve again
	close     func()
}

// failoverOps runs GETs, keyed POSTs and unkeyed POSTs while the origin
// refuses connections: every one must be served by the alternate, with no
// failure and no POST processed twice. Then the origin comes back, and
// its traffic must return within 5 s.
func failoverOps(t *testing.T, env *failoverEnv, s *originServers) {
	originKey, altKey := originOf(env.originURL), originOf(env.altURL)
	var failovers atomic.Int64
	rt := New(Options{
		Base: env.base,
		Endpoints: Endpoints{
			Alternates: map[string][]string{env.originURL: {env.altURL}},
			Adjust:     func(r *http.Request, origin string) { r.Header.Set("Authorization", "Bearer alternate") },
		},
		Hooks: Hooks{OnFailover: func(e FailoverEvent) {
			if e.From != originKey || e.To != altKey {
				t.Errorf("FailoverEvent from %s to %s, want %s to %s", e.From, e.To, originKey, altKey)
			}
			failovers.Add(1)
		}},
	})
	c := &http.Client{Transport: rt}
	defer c.CloseIdleConnections()
	bare := &http.Client{Transport: env.base}

	env.setDown(true)
	kinds := []string{"GET", "keyed POST", "unkeyed POST"}
	for i := range 30 {
		kind := kinds[i%3]
		var req *http.Request
		if kind == "GET" {
			req, _ = http.NewRequest(http.MethodGet, env.originURL+"/v1/items?i="+fmt.Sprint(i), nil)
		} else {
			req, _ = http.NewRequest(http.MethodPost, env.originURL+"/v1/items?i="+fmt.Sprint(i), strings.NewReader(fmt.Sprintf("op-%d", i)))
			if kind == "keyed POST" {
				req.Header.Set("Idempotency-Key", fmt.Sprintf("key-%d", i))
			}
		}
		if i%3 == 0 { // the bare client beside: the fault is real
			if resp, err := bare.Get(env.originURL + "/"); err == nil {
				resp.Body.Close()
				t.Fatalf("bare client: %s, want the origin refusing connections", resp.Status)
			}
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %d: %v", kind, i, err)
		}
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusOK || body != fmt.Sprintf("/v1/items?i=%d", i) {
			t.Fatalf("%s %d: %s %q, want 200 with the path and query kept", kind, i, resp.Status, body)
		}
		if op, _ := OperationOf(resp); op.Origin != altKey {
			t.Errorf("%s %d: OperationOf(resp).Origin = %q, want %q", kind, i, op.Origin, altKey)
		}
	}
	s.mu.Lock()
	for id, n := range s.posts {
		if n != 1 {
			t.Errorf("POST %s processed %d times, want once", id, n)
		}
	}
	if len(s.posts) != 20 || s.badAuth != 0 || s.origin != 0 {
		t.Errorf("POSTs processed %d, requests without the alternate's auth %d, served by the origin %d; want 20, 0, 0", len(s.posts), s.badAuth, s.origin)
	}
	altHost := strings.TrimPrefix(env.altURL, "http://")
	if s.hosts[altHost] != s.alternate {
		t.Errorf("Host headers at the alternate: %v, want all %s", s.hosts, altHost)
	}
	s.mu.Unlock()
	if failovers.Load() < 30 {
		t.Errorf("%d failover events, want one per attempt sent to the alternate (30 at least)", failovers.Load())
	}

	// The origin comes back: its traffic returns within 5 s.
	env.setDown(false)
	back := time.Now()
	o0, _ := s.counts()
	for time.Since(back) < 5*time.Second {
		resp, err := c.Get(env.originURL + "/v1/items")
		if err != nil {
			t.Fatalf("after recovery: %v", err)
		}
		resp.Body.Close()
		if o, _ := s.counts(); o > o0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(back)
	if o, _ := s.counts(); o == o0 {
		t.Fatalf("the origin got no request within 5 s of its recovery")
	}
	t.Logf("traffic back on the origin %v after its recovery", took.Round(time.Millisecond))
	// And it stays there.
	for i := range 10 {
		resp, err := c.Get(env.originURL + "/v1/items")
		if err != nil {
			t.Fatalf("after recovery %d: %v", i, err)
		}
		resp.Body.Close()
		if op, _ := OperationOf(resp); op.Origin != originKey {
			t.Errorf("after recovery %d: served by %s, want the origin", i, op.Origin)
		}
	}
}

// TestAlternatesWhileOriginRefuses runs failoverOps on an in-memory
// network in a synctest bubble (where timing matters), and on real
// loopback sockets, whose refused connections come from the kernel.
func TestAlternatesWhileOriginRefuses(t *testing.T) {
	t.Run("synctest", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newOriginServers()
			n := httptestutil.NewNetwork()
			origin := n.Serve("origin.test", s.handler(false))
			alt := n.Serve("alternate.test", s.handler(true))
			var down atomic.Bool
			n.RefuseWhen("origin.test", down.Load)
			base := n.Transport()
			t.Cleanup(func() {
				base.CloseIdleConnections()
				origin.Close()
				alt.Close()
			})
			env := &failoverEnv{base: base, originURL: origin.URL, altURL: alt.URL, setDown: down.Store}
			failoverOps(t, env, s)
		})
	})
	t.Run("loopback", func(t *testing.T) {
		s := newOriginServers()
		alt := httptest.NewServer(s.handler(true))
		defer alt.Close()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // nothing listens: connections are refused
		var srv *http.Server
		env := &failoverEnv{
			base:      &http.Transport{},
			originURL: "http://" + addr,
			altURL:    alt.URL,
			setDown: func(down bool) {
				if down {
					return
				}
				l, err := net.Listen("tcp", addr)
				if err != nil {
					t.Skipf("cannot listen on %s again: %v", addr, err)
				}
				srv = &http.Server{Handler: s.handler(false)}
				go srv.Serve(l)
			},
		}
		defer func() {
			env.base.CloseIdleConnections()
			if srv != nil {
				srv.Close()
			}
		}()
		failoverOps(t, env, s)
	})
}

// TestAlternatesCircuitOpen: with the origin's circuit open, the first
// attempt goes to the alternate, unsent to the origin, even for a POST
// that is not safe to send twice; without Endpoints it fails fast.
func TestAlternatesCircuitOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newOriginServers()
		n := httptestutil.NewNetwork()
		origin := n.Serve("origin.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusInternalServerError)
		}))
		alt := n.Serve("alternate.test", s.handler(true))
		base := n.Transport()
		t.Cleanup(func() {
			base.CloseIdleConnections()
			origin.Close()
			alt.Close()
		})
		breakers := NewBreakers(BreakerSettings{Cooldown: time.Hour})
		with := New(Options{Base: base, Breakers: breakers, Retry: policy.Retry{MaxAttempts: 1},
			Endpoints: Endpoints{Alternates: map[string][]string{origin.URL: {alt.URL}},
				Adjust: func(r *http.Request, _ string) { r.Header.Set("Authorization", "Bearer alternate") }}})
		// Open the origin's circuit: 500s, one after another.
		u := origin.URL + "/x"
		for range 10 {
			resp, err := (&http.Client{Transport: New(Options{Base: base, Breakers: breakers, Retry: policy.Retry{MaxAttempts: 1}})}).Get(u)
			if err != nil {
				break
			}
			resp.Body.Close()
			time.Sleep(time.Millisecond)
		}
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		if st := breakers.State(req.URL); st != BreakerOpen {
			t.Fatalf("origin breaker %v, want open", st)
		}
		resp, err := (&http.Client{Transport: with}).Post(u, "text/plain", strings.NewReader("once"))
		if err != nil {
			t.Fatalf("POST with the origin's circuit open: %v", err)
		}
		readAll(t, resp)
		if op, _ := OperationOf(resp); resp.StatusCode != 200 || op.Origin != originOf(alt.URL) || op.Attempts != 1 {
			t.Errorf("POST: %s, %+v; want 200 from %s at the first attempt", resp.Status, op, alt.URL)
		}
		without := New(Options{Base: base, Breakers: breakers, Retry: policy.Retry{MaxAttempts: 1}})
		if _, err := (&http.Client{Transport: without}).Get(u); !errors.Is(err, ErrCircuitOpen) {
			t.Errorf("without Endpoints: err = %v, want ErrCircuitOpen", err)
		}
	})
}

func TestEndpointsValidate(t *testing.T) {
	tests := []struct {
		alts map[string][]string
		ok   bool
	}{
		{nil, true},
		{map[string][]string{"https://api.example.com": {"https://eu.example.com", "http://127.0.0.1:8080"}}, true},
		{map[string][]string{"https://api.example.com/": {"https://eu.example.com/"}}, true},
		{map[string][]string{"api.example.com": {"https://eu.example.com"}}, false},
		{map[string][]string{"https://api.example.com": {"https://eu.example.com/v1"}}, false},
		{map[string][]string{"https://api.example.com": {"ftp://eu.example.com"}}, false},
		{map[string][]string{"https://api.example.com?x=1": {"https://eu.example.com"}}, false},
		{map[string][]string{"https://api.example.com": {"%zz"}}, false},
	}
	for i, tt := range tests {
		err := Endpoints{Alternates: tt.alts}.Validate()
		if (err == nil) != tt.ok || err != nil && !errors.Is(err, ErrEndpoints) {
			t.Errorf("step %d: Validate(%v) = %v, want ok %v", i, tt.alts, err, tt.ok)
		}
	}
	// A request to an origin of a bad configuration fails, unsent, with
	// the same error.
	var sent atomic.Int64
	rt := New(Options{Base: Func(func(r *http.Request) (*http.Response, error) {
		sent.Add(1)
		return nil, errors.New("sent")
	}), Endpoints: Endpoints{Alternates: map[string][]string{"https://api.example.com": {"https://eu.example.com/v1"}}}})
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://api.example.com/", nil)
	if _, err := rt.RoundTrip(req); !errors.Is(err, ErrEndpoints) || sent.Load() != 0 {
		t.Errorf("RoundTrip = %v, sent %d; want ErrEndpoints, unsent", err, sent.Load())
	}
}

// TestEndpointsZeroAddsNothing: the zero Endpoints adds no layer.
func TestEndpointsZeroAddsNothing(t *testing.T) {
	if got, want := len(Layers(Options{Endpoints: Endpoints{LookupHost: lookupThree}})), len(Layers(Options{})); got != want {
		t.Errorf("Layers with a zero Endpoints: %d, want %d", got, want)
	}
	if got, want := len(Layers(Options{Endpoints: Endpoints{PerAddress: true}})), len(Layers(Options{}))+2; got != want {
		t.Errorf("Layers with PerAddress: %d, want %d", got, want)
	}
}

// originOf returns the origin of the URL u, as Endpoints names origins.
func originOf(u string) string {
	r, _ := http.NewRequest(http.MethodGet, u, nil)
	return HostKey(r)
}

// TestFailoverSpendsNoBudget: a failover to an alternate after the origin
// refused the connection is the operation's first request to the
// alternate, not a retry: with a budget that allows one retry, and no
// breaker to open, every operation is still served by the alternate,
// while the bare client fails each. A retry that stays on the alternate
// draws on the alternate's budget.
func TestFailoverSpendsNoBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newOriginServers()
		n := httptestutil.NewNetwork()
		origin := n.Serve("origin.test", s.handler(false))
		var altFails atomic.Int64 // the alternate answers 503 while above zero
		alt := n.Serve("alternate.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if altFails.Add(-1) >= 0 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			s.handler(true).ServeHTTP(w, r)
		}))
		n.RefuseWhen("origin.test", func() bool { return true })
		base := n.Transport()
		t.Cleanup(func() {
			base.CloseIdleConnections()
			origin.Close()
			alt.Close()
		})
		budget := &policy.Budget{MinRetries: 1, Ratio: -1}
		rt := New(Options{
			Base:    base,
			Disable: LayerBreaker,
			Retry:   policy.Retry{Budget: budget, MaxAttempts: 3},
			Endpoints: Endpoints{
				Alternates: map[string][]string{origin.URL: {alt.URL}},
				Adjust:     func(r *http.Request, _ string) { r.Header.Set("Authorization", "Bearer alternate") },
			},
		})
		c := &http.Client{Transport: rt}
		defer c.CloseIdleConnections()
		bare := &http.Client{Transport: base}
		for i := range 10 {
			if resp, err := bare.Get(origin.URL + "/"); err == nil {
				resp.Body.Close()
				t.Fatalf("bare client: %s, want the origin refusing connections", resp.Status)
			}
			resp, err := c.Get(origin.URL + "/v1/items?i=" + fmt.Sprint(i))
			if err != nil {
				t.Fatalf("GET %d: %v", i, err)
			}
			if got := readAll(t, resp); resp.StatusCode != http.StatusOK || got != fmt.Sprintf("/v1/items?i=%d", i) {
				t.Fatalf("GET %d: %s %q, want 200", i, resp.Status, got)
			}
		}
		if o, a := s.counts(); o != 0 || a != 10 {
			t.Errorf("served by the origin %d, the alternate %d; want 0, 10", o, a)
		}

		// The alternate fails too: a GET that the origin refused and the
		// alternate answered 503 goes back to the origin (the list wraps),
		// a retry that the origin's budget pays for. Its one retry pays
		// for the first such operation, which ends when its attempts are
		// used; the second ends on the alternate's 503, the budget spent.
		var ends []string
		for i := range 2 {
			altFails.Store(1)
			resp, err := c.Get(origin.URL + "/v1/again?i=" + fmt.Sprint(i))
			if err != nil {
				var re *RetryError
				if !errors.As(err, &re) {
					t.Fatalf("GET again %d: %v, want a *RetryError", i, err)
				}
				ends = append(ends, fmt.Sprintf("%d attempts (%s)", re.Attempts, re.Reason))
				continue
			}
			resp.Body.Close()
			op, _ := OperationOf(resp)
			ends = append(ends, fmt.Sprintf("%s after %d attempts (%s)", resp.Status, op.Attempts, op.Reason))
		}
		want := []string{"3 attempts (attempts used)", "503 Service Unavailable after 2 attempts (retry budget spent)"}
		if fmt.Sprint(ends) != fmt.Sprint(want) {
			t.Errorf("ends %q, want %q", ends, want)
		}
	})
}

// TestAlternatesAllocateOnlyTheOperationsRecord: a GET to an origin with
// alternates, served by the origin, allocates at most four times more
// than one without (the operation's endpoint record and its scope): what
// every request's send shares is made once, with the transport.
func TestAlternatesAllocateOnlyTheOperationsRecord(t *testing.T) {
	base := Func(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	allocs := func(o Options) float64 {
		rt := New(o)
		return testing.AllocsPerRun(200, func() {
			req, _ := http.NewRequest(http.MethodGet, "http://api.test/x", nil)
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	without := allocs(Options{Base: base})
	with := allocs(Options{Base: base, Endpoints: Endpoints{Alternates: map[string][]string{"http://api.test": {"http://alt.test"}}}})
	if got, want := with-without, 4.0; got > want {
		t.Errorf("allocations a GET adds with alternates: %v (%v against %v), want at most %v", got, with, without, want)
	}
}
