package main

import (
	"context"
	"math"
	"net"
	"testing"
	"testing/synctest"

	"github.com/sturdyhttp/sturdy/httptestutil"
)

// runVirtual runs the workload c with clients of kind k in a synctest
// bubble, over an in-memory network, and summarizes the run.
func runVirtual(t *testing.T, c config, k kind) summary {
	t.Helper()
	return summarize(c, runVirtualResult(t, c, k))
}

// runVirtualResult runs the workload c with clients of kind k in a
// synctest bubble, over an in-memory network: the program's own code on a
// virtual clock, so a run of seconds takes a fraction of one, and no
// timer of a busy machine fires late.
func runVirtualResult(t *testing.T, c config, k kind) result {
	t.Helper()
	var r result
	synctest.Test(t, func(t *testing.T) {
		n := httptestutil.NewNetwork()
		nw := network{listen: func() (net.Listener, error) { return n.Listen("api.test:80") }, dial: n.DialContext}
		var err error
		r, err = run(context.Background(), c, k, nw)
		if err != nil {
			t.Fatalf("run(%v): %v", k, err)
		}
	})
	return r
}

// TestStory runs the program's default workload in virtual time, and
// checks the story the table tells: against a server of finite capacity,
// whose failed requests still cost it work, sturdy's callers get the most
// operations through and the server is back soonest, while the naive
// loop's retries keep it down for good.
func TestStory(t *testing.T) {
	c := defaults()
	sums := make(map[kind]summary)
	for _, k := range kinds {
		s := runVirtual(t, c, k)
		sums[k] = s
		t.Logf("%-14s succeeded %s, server back after %s, %d requests while down, %d failed for overload",
			k, pct(s.ok, s.ops), backAfter(c, s), s.during, s.overloaded)
	}
	rate := func(s summary) float64 { return float64(s.ok) / float64(max(s.ops, 1)) }
	back := func(s summary) float64 {
		if s.serverNever {
			return math.Inf(1)
		}
		return s.serverBack.Seconds()
	}
	st := sums[kindSturdy]
	if st.serverNever {
		t.Errorf("sturdy: the server was not back by the end of the run, want back soon after its return")
	}
	for _, k := range []kind{kindNaive, kindBackoff} {
		o := sums[k]
		if got, other := rate(st), rate(o); got <= other {
			t.Errorf("sturdy's callers: %s of operations succeeded, %v's %s; want sturdy's the highest", pct(st.ok, st.ops), k, pct(o.ok, o.ops))
		}
		if got, other := back(st), back(o); got >= other {
			t.Errorf("server back after its return: %s with sturdy, %s with the %v; want sturdy's the soonest", backAfter(c, st), backAfter(c, o), k)
		}
		if st.during >= o.during {
			t.Errorf("requests while down: sturdy %d, %v %d; want sturdy's the fewest", st.during, k, o.during)
		}
	}
	if n := sums[kindNaive]; !n.serverNever {
		t.Errorf("naive loop: the server was back %s after its return, want it kept down by the retries to the end", backAfter(c, n))
	}
	// The same ops were asked of every kind: callers start operations on
	// a schedule, whatever became of the earlier ones.
	for _, k := range kinds {
		if got, want := sums[k].ops, sums[kindSturdy].ops; math.Abs(float64(got-want)) > 0.05*float64(want) {
			t.Errorf("%v started %d operations, sturdy %d; want the same workload within 5%%", k, got, want)
		}
	}
}

// TestStoryWithoutCapacity runs the same workload against a server with
// no capacity limit, the demo's former story: nothing keeps the server
// down, so every kind of client has it back at once.
func TestStoryWithoutCapacity(t *testing.T) {
	c := defaults()
	c.Clients, c.Instances, c.Capacity = 60, 3, 0
	for _, k := range kinds {
		s := runVirtual(t, c, k)
		if s.serverNever || s.serverBack > 0 || s.overloaded != 0 {
			t.Errorf("%v: server back after %s, %d requests failed for overload; want back at once, none", k, backAfter(c, s), s.overloaded)
		}
	}
}

// TestStoryClosed runs the workload with -closed: each caller waits for its
// operation to end before it starts the next. A client that fails fast
// then starts more operations than one that waits on the server, which is
// why the program's default has callers arrive on a schedule instead.
func TestStoryClosed(t *testing.T) {
	c := defaults()
	c.Clients, c.Instances, c.Closed = 60, 3, true
	backoff, st := runVirtual(t, c, kindBackoff), runVirtual(t, c, kindSturdy)
	if st.ops <= backoff.ops*5/4 {
		t.Errorf("closed workload: sturdy started %d operations, the fixed backoff %d; want sturdy's callers, failing fast, to start more", st.ops, backoff.ops)
	}
}
