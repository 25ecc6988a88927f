package transport

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
)

// TestPerAddressResolvesAgain: a host's addresses are resolved again
// every RefreshInterval, and soon after a connection to one fails;
// requests follow the new addresses.
func TestPerAddressResolvesAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := httptestutil.NewNetwork()
		var mu sync.Mutex
		served := map[string]int{}
		var srvs []*httptestutil.Server
		for _, a := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
			srvs = append(srvs, n.Serve(a+":80", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				served[a]++
				mu.Unlock()
				io.WriteString(w, "ok")
			})))
		}
		base := n.Transport()
		t.Cleanup(func() {
			base.CloseIdleConnections()
			for _, s := range srvs {
				s.Close()
			}
		})
		var answer atomic.Value
		answer.Store([]string{"10.0.0.1"})
		var lookups atomic.Int64
		lookup := func(context.Context, string) ([]string, error) {
			lookups.Add(1)
			return answer.Load().([]string), nil
		}
		rt := New(Options{Base: base, Retry: policy.Retry{MaxAttempts: 3, Backoff: constant(10 * time.Millisecond)},
			Endpoints: Endpoints{PerAddress: true, LookupHost: lookup, RefreshInterval: 10 * time.Second}})
		c := &http.Client{Transport: rt}
		get := func() string {
			t.Helper()
			resp, err := c.Get("http://api.test/")
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			op, _ := OperationOf(resp)
			return op.Address
		}
		step := func(name, want string) {
			t.Helper()
			for range 3 {
				if got := get(); got != want {
					t.Fatalf("%s: served by %q, want %q", name, got, want)
				}
			}
		}
		step("first resolution", "10.0.0.1")
		answer.Store([]string{"10.0.0.2"})
		step("before RefreshInterval", "10.0.0.1")
		time.Sleep(10 * time.Second)
		step("after RefreshInterval", "10.0.0.2")

		// 10.0.0.2 goes away and the name moves to 10.0.0.3: the refused
		// connection has the name resolved again a second later.
		srvs[1].Close()
		answer.Store([]string{"10.0.0.3"})
		before := lookups.Load()
		if _, err := c.Get("http://api.test/"); err == nil {
			t.Fatal("GET with the only address refusing: no error")
		}
		time.Sleep(time.Second)
		step("after a refused connection", "10.0.0.3")
		if got := lookups.Load() - before; got != 1 {
			t.Errorf("%d lookups after the refused connection, want 1", got)
		}
		c.CloseIdleConnections()
	})
}

// TestPerAddressForgetsIdleHosts: past its bound of hosts, PerAddress
// forgets the hosts idle for two RefreshIntervals; when none is, a new
// host is served by the base.
func TestPerAddressForgetsIdleHosts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := httptestutil.NewNetwork()
		srv := n.Serve("10.0.0.1:80", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
		base := n.Transport()
		t.Cleanup(func() {
			base.CloseIdleConnections()
			srv.Close()
		})
		// The base dials host names itself on the in-memory network:
		// a.test and b.test listen nowhere, so only a per-address pool
		// reaches 10.0.0.1.
		p := newPerAddress(base, &Endpoints{RefreshInterval: time.Second,
			LookupHost: func(context.Context, string) ([]string, error) { return []string{"10.0.0.1"}, nil }})
		p.maxHosts = 1
		get := func(host string) error {
			req, _ := http.NewRequest(http.MethodGet, "http://"+host+"/", nil)
			resp, err := p.RoundTrip(req)
			if err == nil {
				readAll(t, resp)
			}
			return err
		}
		if err := get("a.test"); err != nil {
			t.Fatalf("first host: %v", err)
		}
		if err := get("b.test"); err == nil {
			t.Fatal("second host, the bound full: served through a pool, want the base (which cannot reach it)")
		}
		time.Sleep(3 * time.Second)
		if err := get("b.test"); err != nil {
			t.Fatalf("second host, the first idle: %v", err)
		}
		if got := len(p.hosts); got != 1 {
			t.Errorf("%d hosts kept, want 1", got)
		}
		p.CloseIdleConnections()
	})
}
