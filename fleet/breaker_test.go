package fleet_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sturdyhttp/sturdy/fleet"
	"github.com/sturdyhttp/sturdy/fleet/internal/redisproc"
	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/transport"
)

const host = "https://api.example.com"

// newFleet returns a Fleet on its own client of srv, as a separate process
// would have, refreshing every 20ms, closed when the test ends.
func newFleet(t testing.TB, srv *redisproc.Server, o fleet.Options) *fleet.Fleet {
	t.Helper()
	if o.RefreshInterval == 0 {
		o.RefreshInterval = 20 * time.Millisecond
	}
	if o.Timeout == 0 {
		// Generous: this machine is shared and the tests run with -race.
		// The tests about Redis being slow set their own.
		o.Timeout = 2 * time.Second
	}
	f, err := fleet.New(newClient(t, srv), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// errorLog collects what a Fleet reports to OnError.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

// find returns the first error reported that matches target (when not nil)
// and whose message contains substr.
func (l *errorLog) find(target error, substr string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, err := range l.errs {
		if (target == nil || errors.Is(err, target)) && strings.Contains(err.Error(), substr) {
			return err
		}
	}
	return nil
}

// eventually polls cond every 5ms for up to 5s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// nextRefresh waits until f has completed a refresh that started after
// the call: whatever Redis held at the call is then in f's view.
func nextRefresh(t testing.TB, f *fleet.Fleet) {
	t.Helper()
	n := f.Refreshes()
	eventually(t, "refresh", func() bool { return f.Refreshes() >= n+2 })
}

// A change published by one process is in every other process's view
// after their next refresh.
func TestBreakerStoreShared(t *testing.T) {
	srv := redisproc.StartT(t)
	c := newClient(t, srv)
	f1, f2 := newFleet(t, srv, fleet.Options{}), newFleet(t, srv, fleet.Options{})
	b1, b2 := f1.Breakers(), f2.Breakers()
	if s := b2.Load(host); s != (transport.SharedBreakerState{}) {
		t.Fatalf("Load before any change = %+v, want the zero state", s)
	}

	until := time.Now().Add(5 * time.Second).Truncate(time.Millisecond)
	b1.Publish(host, transport.SharedBreakerState{State: transport.BreakerOpen, Until: until})
	eventually(t, "open written", func() bool {
		s, _ := c.Do(context.Background(), c.B().Hget().Key("sturdy:brk:{"+host+"}").Field("s").Build()).ToString()
		return s == "o"
	})
	nextRefresh(t, f2)
	open := b2.Load(host)
	if open.State != transport.BreakerOpen || !open.Until.Equal(until) || open.Version == 0 {
		t.Errorf("other process's view = %+v, want open until %v with a version", open, until)
	}
	if s := b1.Load(host); s != open {
		t.Errorf("publisher's view = %+v, want %+v", s, open)
	}

	b2.Publish(host, transport.SharedBreakerState{State: transport.BreakerClosed})
	eventually(t, "closed written", func() bool {
		s, _ := c.Do(context.Background(), c.B().Hget().Key("sturdy:brk:{"+host+"}").Field("s").Build()).ToString()
		return s == "c"
	})
	nextRefresh(t, f1)
	closed := b1.Load(host)
	if closed.State != transport.BreakerClosed || closed.Version <= open.Version {
		t.Errorf("view after the close = %+v, want closed with a version above %d", closed, open.Version)
	}
}

// While a host is half-open, one process in the fleet wins the probe;
// publishing its outcome frees the claim for the next half-open period,
// and a claim whose outcome never comes expires.
func TestBreakerStoreOneProbe(t *testing.T) {
	srv := redisproc.StartT(t)
	c := newClient(t, srv)
	stores := make([]transport.BreakerStore, 8)
	for i := range stores {
		stores[i] = newFleet(t, srv, fleet.Options{}).Breakers()
	}
	probeKey := "sturdy:brk:{" + host + "}:probe"
	for round := range 5 {
		var wins atomic.Int32
		winner := -1
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i, s := range stores {
			wg.Go(func() {
				ok, err := s.ClaimProbe(context.Background(), host, time.Minute)
				if err != nil {
					t.Errorf("ClaimProbe: %v", err)
				}
				if ok {
					wins.Add(1)
					mu.Lock()
					winner = i
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if got := wins.Load(); got != 1 {
			t.Fatalf("round %d: %d processes won the probe, want 1", round, got)
		}
		stores[winner].Publish(host, transport.SharedBreakerState{State: transport.BreakerClosed})
		eventually(t, "claim freed by the closing", func() bool {
			n, _ := c.Do(context.Background(), c.B().Exists().Key(probeKey).Build()).AsInt64()
			return n == 0
		})
	}

	// An opening keeps the claim taken until its open period ends.
	stores[0].Publish(host, transport.SharedBreakerState{State: transport.BreakerOpen, Until: time.Now().Add(time.Hour)})
	eventually(t, "claim held by the opening", func() bool {
		ms, _ := c.Do(context.Background(), c.B().Pttl().Key(probeKey).Build()).AsInt64()
		return ms > 3500*1000
	})
	stores[0].Publish(host, transport.SharedBreakerState{State: transport.BreakerClosed})

	// A process that lost the last round answers from memory for up to
	// RefreshInterval; then it claims the free key.
	eventually(t, "claim of a free key", func() bool {
		ok, _ := stores[0].ClaimProbe(context.Background(), host, 30*time.Millisecond)
		return ok
	})
	before := commandCalls(t, c)["set"]
	for range 10 {
		if ok, _ := stores[1].ClaimProbe(context.Background(), host, time.Minute); ok {
			t.Fatal("ClaimProbe while claimed = true, want false")
		}
	}
	if n := commandCalls(t, c)["set"] - before; n > 1 {
		t.Errorf("10 lost claims in a row made %d SETs, want at most 1 (then answered from memory)", n)
	}
	eventually(t, "abandoned claim expires", func() bool {
		ok, _ := stores[1].ClaimProbe(context.Background(), host, time.Minute)
		return ok
	})
}

// With Redis paused or killed, Publish returns at once, ClaimProbe fails
// within Timeout, views keep what they knew, errors reach OnError; a change
// made during the outage reaches the fleet once Redis is back.
func TestBreakerStoreRedisDown(t *testing.T) {
	srv := redisproc.StartT(t)
	var log errorLog
	o := fleet.Options{Timeout: 50 * time.Millisecond, OnError: log.add}
	f1, f2 := newFleet(t, srv, o), newFleet(t, srv, o)
	b1, b2 := f1.Breakers(), f2.Breakers()
	b2.Load(host)
	b1.Publish(host, transport.SharedBreakerState{State: transport.BreakerOpen, Until: time.Now().Add(time.Hour)})
	eventually(t, "open seen", func() bool { return b2.Load(host).State == transport.BreakerOpen })
	seen := b2.Load(host)

	for _, outage := range []struct {
		name string
		do   func()
	}{{"paused", srv.Pause}, {"killed", srv.Kill}} {
		outage.do()
		start := time.Now()
		ok, err := b2.ClaimProbe(context.Background(), host, time.Minute)
		if took := time.Since(start); ok || err == nil || took > time.Second {
			t.Errorf("%s: ClaimProbe = %v, %v after %v; want false and an error within the 50ms timeout", outage.name, ok, err, took)
		}
		nextRefresh(t, f2)
		if s := b2.Load(host); s != seen {
			t.Errorf("%s: view = %+v, want what was known before: %+v", outage.name, s, seen)
		}
	}
	start := time.Now()
	b2.Publish(host, transport.SharedBreakerState{State: transport.BreakerClosed})
	// A Publish that waited on Redis would take its 50ms Timeout; 40ms
	// leaves room for a pause of the race detector's GC.
	if took := time.Since(start); took > 40*time.Millisecond {
		t.Errorf("Publish took %v with Redis down, want it to return at once (well inside the 50ms Timeout)", took)
	}
	nextRefresh(t, f2)
	if log.find(nil, "sturdy:brk:{"+host+"}") == nil {
		t.Errorf("no error naming the key reached OnError; got %v", log.errs)
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// The close published during the outage reaches the other process.
	eventually(t, "close from the outage reaches the fleet", func() bool {
		s := b1.Load(host)
		return s.State == transport.BreakerClosed && s.Version > seen.Version
	})
}

// Keys fleet did not write give a clear error in OnError, never a panic,
// and leave the view as it was.
func TestBreakerStoreMalformed(t *testing.T) {
	srv := redisproc.StartT(t)
	c := newClient(t, srv)
	key := "sturdy:brk:{" + host + "}"
	tests := []struct {
		name  string
		setup []string
		want  error // nil: any error naming the key
	}{
		{"string", []string{"SET", key, "open"}, nil},
		{"bad state", []string{"HSET", key, "s", "x", "u", "1", "v", "1"}, fleet.ErrMalformed},
		{"bad until", []string{"HSET", key, "s", "o", "u", "soon", "v", "1"}, fleet.ErrMalformed},
		{"missing version", []string{"HSET", key, "s", "o", "u", "1"}, fleet.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			redisDo(t, c, "DEL", key)
			redisDo(t, c, tt.setup...)
			var log errorLog
			f := newFleet(t, srv, fleet.Options{OnError: log.add})
			b := f.Breakers()
			b.Load(host)
			eventually(t, "error reported", func() bool { return log.find(tt.want, key) != nil })
			if s := b.Load(host); s != (transport.SharedBreakerState{}) {
				t.Errorf("view = %+v, want the zero state", s)
			}
		})
	}
	// Publishing over a key of the wrong type fails with a clear error.
	redisDo(t, c, "DEL", key)
	redisDo(t, c, "RPUSH", key, "x")
	var log errorLog
	b := newFleet(t, srv, fleet.Options{OnError: log.add}).Breakers()
	b.Publish(host, transport.SharedBreakerState{State: transport.BreakerClosed})
	eventually(t, "publish error reported", func() bool { return log.find(nil, "WRONGTYPE") != nil })
}

var _ = rueidis.Nil

// An opening published while Redis was gone reaches the fleet when Redis
// is back, and holds the probe claim until its open period ends, not for
// the whole open period counted from when Redis came back: otherwise
// every process of the fleet refuses the host (half-open, probe taken)
// for up to one more Cooldown after it should have been probed.
func TestBreakerStoreLateOpeningHoldsClaimUntilItsEnd(t *testing.T) {
	srv := redisproc.StartT(t)
	f1 := newFleet(t, srv, fleet.Options{Timeout: 50 * time.Millisecond})
	f2 := newFleet(t, srv, fleet.Options{})
	b1, b2 := f1.Breakers(), f2.Breakers()
	c := newClient(t, srv)
	b2.Load(host) // f2 reads the host's state at each refresh

	srv.Kill()
	until := time.Now().Add(3 * time.Second) // room for the restart and the queued send on a loaded machine
	b1.Publish(host, transport.SharedBreakerState{State: transport.BreakerOpen, Until: until})
	time.Sleep(600 * time.Millisecond)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "opening written once Redis is back", func() bool {
		s, _ := c.Do(context.Background(), c.B().Hget().Key("sturdy:brk:{"+host+"}").Field("s").Build()).ToString()
		return s == "o"
	})
	nextRefresh(t, f2) // f2 is connected again, and sees the opening
	time.Sleep(time.Until(until) + 100*time.Millisecond)
	won, err := b2.ClaimProbe(context.Background(), host, time.Minute)
	if !won || err != nil {
		pttl, _ := c.Do(context.Background(), c.B().Pttl().Key("sturdy:brk:{"+host+"}:probe").Build()).AsInt64()
		t.Errorf("ClaimProbe 100ms after the open period ended = %v, %v (claim PTTL %dms); want true: the fleet is half-open", won, err, pttl)
	}
}

// A request whose own deadline runs out while it claims the fleet's probe
// says nothing about Redis: it must not make the process take Redis as
// unreachable, or the process's next requests to the half-open host skip
// the fleet's claim and are all sent, beside the probe another process
// has out.
func TestFleetCallerDeadlineDoesNotMarkRedisDown(t *testing.T) {
	redis := redisproc.StartT(t)
	srv := &switchable{}
	fa := newFleet(t, redis, fleet.Options{RefreshInterval: time.Second})
	fb := newFleet(t, redis, fleet.Options{RefreshInterval: time.Second})
	rt := transport.Breaker(transport.BreakerSettings{Store: fa.Breakers()})(httptestutil.NewHandlerTransport(srv))

	// The fleet holds the host open for a moment; then another process
	// wins the probe, and its probe is out.
	fa.Breakers().Publish(host, transport.SharedBreakerState{State: transport.BreakerOpen, Until: time.Now().Add(50 * time.Millisecond)})
	eventually(t, "opening in A's view", func() bool { return fa.Breakers().Load(host).State == transport.BreakerOpen })
	time.Sleep(time.Until(fa.Breakers().Load(host).Until) + 10*time.Millisecond)
	// The opening holds the claim for its open period, counted from when
	// Redis got it: on a loaded machine that ends a little after Until.
	// A claim B lost is answered from memory for its RefreshInterval (1s).
	eventually(t, "B wins the probe", func() bool {
		won, err := fb.Breakers().ClaimProbe(context.Background(), host, time.Minute)
		if err != nil {
			t.Fatalf("B's claim: %v", err)
		}
		return won
	})

	// A request of A's whose caller's deadline has passed.
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	fa.Breakers().ClaimProbe(ctx, host, time.Minute)

	before := srv.requests.Load()
	status, err := get(rt)
	if !errors.Is(err, transport.ErrCircuitOpen) || srv.requests.Load() != before {
		t.Errorf("A's next request while B's probe is out: status %d, err %v, %d sent; want ErrCircuitOpen, none sent",
			status, err, srv.requests.Load()-before)
	}
}

// An opening whose open period ended while Redis was gone says nothing
// any more: sent when Redis is back, it must not free the probe claim
// that another process has won since, or a third process wins it too and
// two probes go to the half-open host at once.
func TestBreakerStoreEndedOpeningKeepsAnotherClaim(t *testing.T) {
	srv := redisproc.StartT(t)
	f1 := newFleet(t, srv, fleet.Options{RefreshInterval: time.Second, Timeout: 50 * time.Millisecond})

	srv.Kill()
	f1.Breakers().Publish(host, transport.SharedBreakerState{State: transport.BreakerOpen, Until: time.Now().Add(200 * time.Millisecond)})
	time.Sleep(400 * time.Millisecond) // the open period is over; f1 still holds the opening, to send at its next tick
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	f2 := newFleet(t, srv, fleet.Options{})
	if won, err := f2.Breakers().ClaimProbe(context.Background(), host, time.Minute); !won || err != nil {
		t.Fatalf("f2's claim = %v, %v; want won", won, err)
	}
	nextRefresh(t, f1) // f1 has sent what it held

	f3 := newFleet(t, srv, fleet.Options{})
	won, err := f3.Breakers().ClaimProbe(context.Background(), host, time.Minute)
	if got, want := won, false; got != want || err != nil {
		t.Errorf("f3's claim while f2's probe is out = %v, %v; want %v, nil", got, err, want)
	}
}
