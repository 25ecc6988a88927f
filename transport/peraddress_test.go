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
