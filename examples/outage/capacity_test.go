package main

import (
	"context"
	"net"
	"testing"
	"testing/synctest"

	"github.com/sturdyhttp/sturdy/httptestutil"
)

// TestCapacityStory runs the second part's default workload in virtual
// time and checks the story its table tells: against a server of finite
// capacity asked for twice what it can serve, the clients that send every
// request collapse (the server works for callers who left), and sturdy's
// callers get the most operations through, at least 85% of what the
// server can serve.
func TestCapacityStory(t *testing.T) {
	c := defaultCapacityConfig()
	got := make(map[kind]capacityResult)
	for _, k := range kinds {
		synctest.Test(t, func(t *testing.T) {
			n := httptestutil.NewNetwork()
			nw := network{listen: func() (net.Listener, error) { return n.Listen("capacity.test:80") }, dial: n.DialContext}
			r, err := runCapacity(context.Background(), c, k, nw)
			if err != nil {
				t.Fatalf("runCapacity(%v): %v", k, err)
			}
			got[k] = r
		})
		r := got[k]
		t.Logf("%-14s %d of %d succeeded (%.0f a second), %d refused, server work for callers who left %d of %d",
			k, r.ok, r.ops, float64(r.ok)/c.Run.Seconds(), r.refused, r.abandoned, r.served)
	}
	st := got[kindSturdy]
	for _, k := range kinds {
		if k != kindSturdy && got[k].ok >= st.ok {
			t.Errorf("%v: %d operations succeeded, sturdy %d; want sturdy's callers to get the most", k, got[k].ok, st.ok)
		}
	}
	if rate, want := float64(st.ok)/c.Run.Seconds(), 0.85*c.capacity(); rate < want {
		t.Errorf("sturdy: %.0f successful operations a second, want at least %.0f (85%% of capacity)", rate, want)
	}
	if st.refused == 0 {
		t.Errorf("sturdy: no operation refused by its concurrency limit, want the excess refused")
	}
}
