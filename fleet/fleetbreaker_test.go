package fleet_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
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

// switchable is a server that answers 503 while down, 200 otherwise, and
// counts the requests that reach it.
type switchable struct {
	down     atomic.Bool
	requests atomic.Int64
}

func (s *switchable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	if s.down.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ok"))
}

// stack is one process's client: a Breaker shared with the fleet over an
// in-memory base that serves srv.
type stack struct {
	f  *fleet.Fleet
	rt http.RoundTripper
}

func newStacks(t *testing.T, redis *redisproc.Server, n int, srv http.Handler, s transport.BreakerSettings) []stack {
	stacks := make([]stack, n)
	for i := range stacks {
		f := newFleet(t, redis, fleet.Options{})
		s := s
		s.Store = f.Breakers()
		stacks[i] = stack{f, transport.Breaker(s)(httptestutil.NewHandlerTransport(srv))}
	}
	return stacks
}

// One process's open breaker makes the others fail fast, without sending,
// from their next refresh on: within RefreshInterval + Timeout.
func TestFleetBreakerFailFast(t *testing.T) {
	redis := redisproc.StartT(t)
	srv := &switchable{}
	srv.down.Store(true)
	stacks := newStacks(t, redis, 4, srv, transport.BreakerSettings{ConsecutiveFailures: 3, Cooldown: time.Minute})
	for _, s := range stacks[1:] {
		if _, err := get(s.rt); err != nil { // the others have seen the host
			t.Fatal(err)
		}
	}
	for range 3 {
		get(stacks[0].rt)
	}
	if _, err := get(stacks[0].rt); !errors.Is(err, transport.ErrCircuitOpen) {
		t.Fatalf("the first process after 3 failures: %v, want ErrCircuitOpen", err)
	}
	c := newClient(t, redis)
	published := time.Now()
	eventually(t, "open published", func() bool {
		s, _ := c.Do(context.Background(), c.B().Hget().Key("sturdy:brk:{"+host+"}").Field("s").Build()).ToString()
		return s == "o"
	})
	for i, s := range stacks[1:] {
		nextRefresh(t, s.f)
		before := srv.requests.Load()
		_, err := get(s.rt)
		var ce *transport.CircuitOpenError
		if !errors.As(err, &ce) || ce.RetryIn < 25*time.Second {
			t.Errorf("process %d after its refresh: %v, want ErrCircuitOpen for the rest of the open period (30s to 1m)", i+1, err)
		}
		if n := srv.requests.Load() - before; n != 0 {
			t.Errorf("process %d sent %d requests to a host the fleet knows is down, want 0", i+1, n)
		}
		t.Logf("process %d failing fast %v after the open was published", i+1, time.Since(published).Round(time.Millisecond))
	}
}

// While the host is half-open, one request in the whole fleet probes it:
// a failed probe opens every breaker again, a successful one closes them.
func TestFleetBreakerOneProbe(t *testing.T) {
	redis := redisproc.StartT(t)
	srv := &switchable{}
	srv.down.Store(true)
	stacks := newStacks(t, redis, 4, srv, transport.BreakerSettings{ConsecutiveFailures: 3, Cooldown: 300 * time.Millisecond})
	// The others read the host's state from their next refresh on, and
	// learn of the opening from the fleet, sending nothing: had they
	// opened their own breakers, their later openings, published while
	// the first one is waited out, would hold the fleet open longer.
	for _, s := range stacks[1:] {
		s.f.Breakers().Load(host)
	}
	for range 3 {
		get(stacks[0].rt)
	}
	c := newClient(t, redis)
	eventually(t, "open published", func() bool {
		s, _ := c.Do(context.Background(), c.B().Hget().Key("sturdy:brk:{"+host+"}").Field("s").Build()).ToString()
		return s == "o"
	})
	nextRefresh(t, stacks[0].f)
	opened := stacks[0].f.Breakers().Load(host)
	for i, s := range stacks[1:] {
		nextRefresh(t, s.f)
		if got := s.f.Breakers().Load(host); got.Version != opened.Version || got.State != transport.BreakerOpen {
			t.Fatalf("process %d after its refresh: state %+v, want the first's opening %+v", i+1, got, opened)
		}
	}
	// burst has 4 processes × 8 goroutines send requests back to back
	// for d, and returns how many reached the server, which processes
	// got a 200, and the last error of each.
	burst := func(d time.Duration) (int64, [4]bool, [4]error) {
		before := srv.requests.Load()
		var ok [4]atomic.Bool
		var last [4]atomic.Pointer[error]
		var wg sync.WaitGroup
		end := time.Now().Add(d)
		for i, s := range stacks {
			for range 8 {
				wg.Go(func() {
					for time.Now().Before(end) {
						status, err := get(s.rt)
						if status == 200 {
							ok[i].Store(true)
						} else if err != nil {
							last[i].Store(&err)
						}
					}
				})
			}
		}
		wg.Wait()
		var got [4]bool
		var errs [4]error
		for i := range ok {
			got[i] = ok[i].Load()
			if e := last[i].Load(); e != nil {
				errs[i] = *e
			}
		}
		return srv.requests.Load() - before, got, errs
	}
	// untilHalfOpen waits for the end of the open period the fleet knows,
	// once every process has sent the changes it published (a refresh
	// sends them first) and the first has read them.
	untilHalfOpen := func() {
		for _, s := range stacks {
			nextRefresh(t, s.f)
		}
		nextRefresh(t, stacks[0].f)
		time.Sleep(time.Until(stacks[0].f.Breakers().Load(host).Until) + 5*time.Millisecond)
	}

	untilHalfOpen()
	// A failed probe opens the fleet's breakers again for at least
	// Cooldown/2 (150ms): within 100ms, no second probe.
	if n, _, errs := burst(100 * time.Millisecond); n != 1 {
		t.Errorf("host still down: %d requests reached it in the half-open period, want 1 probe; last errors %v", n, errs)
	}

	srv.down.Store(false)
	untilHalfOpen()
	n, ok, errs := burst(time.Second)
	if ok != [4]bool{true, true, true, true} {
		t.Errorf("host back: processes that succeeded again within 1s: %v, want all; last errors %v", ok, errs)
	}
	t.Logf("host back: %d requests in the second after the half-open period began", n)
}

// Redis killed in the middle of a run and started again: requests keep
// flowing under each process's own breaker, nothing panics, and once
// Redis is back an opening reaches the other processes again.
func TestFleetBreakerRedisKilled(t *testing.T) {
	redis := redisproc.StartT(t)
	srv := &switchable{}
	stacks := newStacks(t, redis, 4, srv, transport.BreakerSettings{ConsecutiveFailures: 3, Cooldown: time.Minute})
	var failures atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range stacks[1:] {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if status, err := get(s.rt); err != nil || status != 200 {
					failures.Add(1)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	redis.Kill()
	time.Sleep(200 * time.Millisecond) // requests go on with Redis gone
	if err := redis.Restart(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	if n := failures.Load(); n != 0 {
		t.Errorf("%d requests failed while Redis was killed and restarted, want 0", n)
	}
	// The shared view resumes: an opening in one process reaches another.
	srv.down.Store(true)
	for range 3 {
		get(stacks[0].rt)
	}
	eventually(t, "opening shared after the restart", func() bool {
		_, err := get(stacks[3].rt)
		return errors.Is(err, transport.ErrCircuitOpen)
	})
}

// Breakers.State tells what requests meet: a process that has never sent
// to a host the fleet holds open reports it open once its view has the
// fleet's word, and closed again once the fleet closes it.
func TestFleetBreakersState(t *testing.T) {
	redis := redisproc.StartT(t)
	srv := &switchable{}
	srv.down.Store(true)
	var fleets [2]*fleet.Fleet
	var breakers [2]*transport.Breakers
	for i := range fleets {
		fleets[i] = newFleet(t, redis, fleet.Options{})
		breakers[i] = transport.NewBreakers(transport.BreakerSettings{ConsecutiveFailures: 3, Cooldown: time.Minute, Store: fleets[i].Breakers()})
	}
	u, err := url.Parse(host + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	if got := breakers[1].State(u); got != transport.BreakerClosed {
		t.Fatalf("before anything: State = %v, want closed", got)
	}
	rt := breakers[0].Middleware()(httptestutil.NewHandlerTransport(srv))
	for range 3 {
		get(rt)
	}
	if got := breakers[0].State(u); got != transport.BreakerOpen {
		t.Fatalf("the process that saw 3 failures: State = %v, want open", got)
	}
	eventually(t, "the other process's view", func() bool { return breakers[1].State(u) == transport.BreakerOpen })
	if n := srv.requests.Load(); n != 3 {
		t.Errorf("requests sent: got %d, want 3 (the other process never sent)", n)
	}
	fleets[0].Breakers().Publish(host, transport.SharedBreakerState{State: transport.BreakerClosed}) // a probe elsewhere closed it
	eventually(t, "the fleet's close", func() bool { return breakers[1].State(u) == transport.BreakerClosed })
}

// While a host is half-open, one request in the whole fleet probes it,
// and the others are refused until the prober publishes the outcome,
// even when the probe takes longer than Cooldown (the host answers in
// 1 s, as an LLM API does): the probe's claim lasts as long as the probe
// may run.
func TestFleetOneProbeWhileSlowProbeInFlight(t *testing.T) {
	redis := redisproc.StartT(t)
	var inFlight, maxInFlight, requests atomic.Int64
	srv := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(time.Second)
		w.Write([]byte("ok"))
	})
	stacks := newStacks(t, redis, 2, srv, transport.BreakerSettings{}) // default Cooldown 200ms
	// The fleet holds the host open for a moment (another process tripped).
	stacks[0].f.Breakers().Publish(host, transport.SharedBreakerState{State: transport.BreakerOpen, Until: time.Now().Add(100 * time.Millisecond)})
	for _, s := range stacks {
		get(s.rt) // refused (open) or sent; marks the view used
	}
	for _, s := range stacks {
		nextRefresh(t, s.f)
	}
	time.Sleep(time.Until(stacks[0].f.Breakers().Load(host).Until) + 10*time.Millisecond)
	if st := stacks[1].f.Breakers().Load(host); st.State != transport.BreakerOpen {
		t.Fatalf("fleet view = %+v, want open (half-open now)", st)
	}
	before := requests.Load()
	var wg sync.WaitGroup
	wg.Go(func() { get(stacks[0].rt) }) // the fleet's probe: 1s
	time.Sleep(400 * time.Millisecond)
	status, err := get(stacks[1].rt)
	wg.Wait()
	if n := requests.Load() - before; n != 1 || maxInFlight.Load() > 1 {
		t.Errorf("half-open fleet: %d requests reached the host, %d at once (second process: status %d, err %v); want 1 probe, the other refused with ErrCircuitOpen",
			n, maxInFlight.Load(), status, err)
	}
	if !errors.Is(err, transport.ErrCircuitOpen) {
		t.Errorf("second process while the fleet's probe is in flight: status %d, err %v; want ErrCircuitOpen", status, err)
	}
}

// A breaker state in Redis that no process of the fleet could have
// written (an open period a day long, where Cooldown is 200 ms; or one
// process's wall clock a day ahead) is treated as absent: the request
// goes out under local state.
func TestFleetImplausibleOpenPeriodIsIgnored(t *testing.T) {
	redis := redisproc.StartT(t)
	srv := &switchable{}
	stacks := newStacks(t, redis, 1, srv, transport.BreakerSettings{}) // Cooldown 200ms
	get(stacks[0].rt)                                                  // the host is in use
	c := newClient(t, redis)
	until := time.Now().Add(24 * time.Hour).UnixMilli()
	redisDo(t, c, "HSET", "sturdy:brk:{"+host+"}", "s", "o", "u", strconv.FormatInt(until, 10), "v", "1")
	nextRefresh(t, stacks[0].f)
	time.Sleep(time.Second) // 5 Cooldowns
	_, err := get(stacks[0].rt)
	var ce *transport.CircuitOpenError
	if errors.As(err, &ce) {
		t.Errorf("host up, local breaker closed, fleet key says open for a day: err = %v (RetryIn %v); want the request sent under local state", err, ce.RetryIn)
	}
}

// A probe whose caller cancels it says nothing of the host: it gives the
// fleet's claim up (ReleaseProbe), so that another process probes at once
// instead of being refused until the claim expires. The first process's
// probe hangs for 5 s and is canceled at 300 ms; the second's request,
// sent then, goes through.
func TestFleetCanceledProbeReleasesItsClaim(t *testing.T) {
	redis := redisproc.StartT(t)
	var requests atomic.Int64
	srv := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.URL.Path == "/hang" {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		w.Write([]byte("ok"))
	})
	stacks := newStacks(t, redis, 2, srv, transport.BreakerSettings{})
	stacks[0].f.Breakers().Publish(host, transport.SharedBreakerState{State: transport.BreakerOpen, Until: time.Now().Add(100 * time.Millisecond)})
	for _, s := range stacks {
		get(s.rt)
	}
	for _, s := range stacks {
		nextRefresh(t, s.f)
	}
	time.Sleep(time.Until(stacks[0].f.Breakers().Load(host).Until) + 10*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", host+"/hang", nil)
		resp, err := stacks[0].rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the canceled probe: %v", err)
	}
	var status int
	var err error
	eventually(t, "the second process's request sent", func() bool {
		status, err = get(stacks[1].rt)
		return err == nil
	})
	if status != http.StatusOK {
		t.Errorf("second process after the canceled probe: %d, %v; want 200", status, err)
	}
}

// gatedClient holds back the fleet's single-key scripts (the probe
// release) until gate is closed: the release is late, as it is when the
// fleet's goroutine or Redis is slow.
type gatedClient struct {
	rueidis.Client
	entered chan struct{}
	gate    chan struct{}
	done    chan struct{}
}

func (c *gatedClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	args := cmd.Commands()
	if len(args) >= 3 && (args[0] == "EVALSHA" || args[0] == "EVAL") && args[2] == "1" {
		c.entered <- struct{}{}
		<-c.gate
		r := c.Client.Do(ctx, cmd)
		c.done <- struct{}{}
		return r
	}
	return c.Client.Do(ctx, cmd)
}

// A release of a probe claim that arrives after the claim expired, and
// after the same process claimed the probe again, leaves the new claim:
// each claim has its own token. (Without, another process would win the
// claim too, and the fleet would have two probes out at once.) It
// happens when a probe is ended by its caller's deadline: its claim
// lasts until exactly that deadline, and expires as its release is
// queued.
func TestFleetLateReleaseLeavesANewerClaim(t *testing.T) {
	srv := redisproc.StartT(t)
	gc := &gatedClient{Client: newClient(t, srv), entered: make(chan struct{}, 1), gate: make(chan struct{}), done: make(chan struct{}, 1)}
	fa, err := fleet.New(gc, fleet.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	fb, err := fleet.New(newClient(t, srv), fleet.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	a, b := fa.Breakers(), fb.Breakers()
	ctx := context.Background()
	const key = "api.example.com:443"

	if won, err := a.ClaimProbe(ctx, key, 100*time.Millisecond); !won || err != nil {
		t.Fatalf("A's first claim: %v, %v", won, err)
	}
	a.ReleaseProbe(key) // A's first probe was canceled
	<-gc.entered
	time.Sleep(200 * time.Millisecond) // the first claim expires
	if won, err := a.ClaimProbe(ctx, key, time.Minute); !won || err != nil {
		t.Fatalf("A's second claim: %v, %v", won, err)
	}
	close(gc.gate) // the first probe's release arrives now
	<-gc.done
	if won, _ := b.ClaimProbe(ctx, key, time.Minute); won {
		t.Fatalf("B won the probe claim while A's second probe holds it: the first probe's late release deleted A's new claim")
	}
}
