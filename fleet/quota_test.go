package fleet_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sturdyhttp/sturdy/fleet"
	"github.com/sturdyhttp/sturdy/fleet/internal/redisproc"
)

// commandCalls returns how many times Redis ran each command, from INFO
// commandstats: "evalsha" → 12.
func commandCalls(t testing.TB, c rueidis.Client) map[string]int {
	t.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || name == line {
			continue
		}
		n := 0
		for _, ch := range rest {
			if ch < '0' || ch > '9' {
				break
			}
			n = n*10 + int(ch-'0')
		}
		calls[name] = n
	}
	return calls
}

// Four processes taking as fast as they can share one fleet-wide rate: in
// every 1s window, at most the limit + Burst + one RefreshInterval's worth
// of the rate go out (+ what the callers' own lateness shifts into the
// window: a goroutine told to wait 5ms that wakes 30ms later sends later
// than its place), and at least 90% of the limit is used.
func TestQuotaStoreSharedRate(t *testing.T) {
	srv := redisproc.StartT(t)
	const perSecond = 200
	limits := []fleet.Limit{{Host: host, Requests: perSecond, Per: time.Second}}
	var mu sync.Mutex
	var sent []time.Time
	var late time.Duration // the most a caller sent after its place
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(3 * time.Second)
	for range 4 {
		q := newFleet(t, srv, fleet.Options{Limits: limits}).Quotas()
		for range 8 {
			wg.Go(func() {
				for {
					taken := time.Now()
					wait, err := q.Take(context.Background(), host, "", time.Hour)
					if err != nil {
						t.Errorf("Take: %v", err)
						return
					}
					place := taken.Add(wait)
					time.Sleep(wait)
					now := time.Now()
					if now.After(end) {
						q.Return(host, "")
						return
					}
					mu.Lock()
					sent = append(sent, now)
					late = max(late, now.Sub(place))
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	// Burst is 100ms worth (20); leased places live one RefreshInterval
	// (20ms: 4 more).
	tolerance := 20 + 4 + int(math.Ceil(late.Seconds()*perSecond))
	t.Logf("%d requests in %v; callers up to %v late; tolerance %d", len(sent), end.Sub(start), late, tolerance)
	for w := start; w.Add(time.Second).Before(end); w = w.Add(100 * time.Millisecond) {
		n := 0
		for _, s := range sent {
			if !s.Before(w) && s.Before(w.Add(time.Second)) {
				n++
			}
		}
		if n > perSecond+tolerance {
			t.Errorf("window from %v: %d requests, want at most %d + %d", w.Sub(start), n, perSecond, tolerance)
		}
		if w.Sub(start) >= time.Second && n < perSecond*9/10 {
			t.Errorf("window from %v: %d requests, want at least 90%% of %d", w.Sub(start), n, perSecond)
		}
	}
}

// A busy process leases places in batches: far fewer Redis calls than
// requests.
func TestQuotaStoreBatches(t *testing.T) {
	srv := redisproc.StartT(t)
	c := newClient(t, srv)
	f := newFleet(t, srv, fleet.Options{
		Limits:          []fleet.Limit{{Host: host, Requests: 100_000, Per: time.Second}},
		RefreshInterval: time.Hour, // no refresh calls
	})
	q := f.Quotas()
	before := commandCalls(t, c)["evalsha"]
	const n = 5000
	for range n {
		if wait, err := q.Take(context.Background(), host, "", time.Hour); err != nil || wait != 0 {
			t.Fatalf("Take = %v, %v; want no wait", wait, err)
		}
	}
	calls := commandCalls(t, c)["evalsha"] - before
	t.Logf("%d Takes, %d Redis calls", n, calls)
	if calls > n/20 {
		t.Errorf("%d Takes made %d Redis calls, want at most %d (batches)", n, calls, n/20)
	}
}

// A pause published by one process holds back the others: at once for a
// process whose next Take leases (the lease reads the pause), and from its
// next refresh for one that has places left or no limit.
func TestQuotaStorePauseShared(t *testing.T) {
	srv := redisproc.StartT(t)
	limits := []fleet.Limit{{Host: host, Requests: 1000, Per: time.Second}}
	f1 := newFleet(t, srv, fleet.Options{Limits: limits})
	leaser := newFleet(t, srv, fleet.Options{Limits: limits, RefreshInterval: time.Hour}).Quotas()
	unlimited := newFleet(t, srv, fleet.Options{})
	if w, _ := unlimited.Quotas().Take(context.Background(), host, "chat", time.Hour); w != 0 {
		t.Fatalf("Take before any pause = %v, want 0", w)
	}

	until := time.Now().Add(3 * time.Second)
	f1.Quotas().Pause(host, "chat", until)
	eventually(t, "pause written", func() bool {
		n, _ := newClient(t, srv).Do(context.Background(), newClient(t, srv).B().Hexists().Key("sturdy:q:{"+host+"}").Field("p:chat").Build()).AsInt64()
		return n == 1
	})
	tests := []struct {
		name     string
		take     func(resource string) (time.Duration, error)
		resource string
		paused   bool
	}{
		{"next lease", func(r string) (time.Duration, error) { return leaser.Take(context.Background(), host, r, time.Hour) }, "chat", true},
		{"other resource", func(r string) (time.Duration, error) { return leaser.Take(context.Background(), host, r, time.Hour) }, "embeddings", false},
	}
	for _, tt := range tests {
		wait, err := tt.take(tt.resource)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := wait > 2*time.Second; got != tt.paused {
			t.Errorf("%s: Take(%q) waits %v, want paused %v (until %v)", tt.name, tt.resource, wait, tt.paused, time.Until(until))
		}
	}
	nextRefresh(t, unlimited)
	if wait, _ := unlimited.Quotas().Take(context.Background(), host, "chat", time.Hour); wait < 2*time.Second || wait > 3*time.Second {
		t.Errorf("after a refresh, a process without a limit waits %v, want the pause's %v", wait, time.Until(until))
	}
	// A pause of the whole host ("") holds every resource.
	f1.Quotas().Pause(host, "", time.Now().Add(time.Minute))
	nextRefresh(t, f1)
	nextRefresh(t, unlimited)
	if wait, _ := unlimited.Quotas().Take(context.Background(), host, "embeddings", time.Hour); wait < 50*time.Second {
		t.Errorf("host-wide pause: Take(embeddings) waits %v, want about 1m", wait)
	}
}

// Beyond maxWait nothing is taken: the wait is returned so that the
// request fails at once, and the place stays free for others.
func TestQuotaStoreMaxWait(t *testing.T) {
	srv := redisproc.StartT(t)
	limits := []fleet.Limit{{Host: host, Requests: 1, Per: time.Second, Burst: 1}}
	q1 := newFleet(t, srv, fleet.Options{Limits: limits}).Quotas()
	q2 := newFleet(t, srv, fleet.Options{Limits: limits}).Quotas()
	if w, err := q1.Take(context.Background(), host, "", 0); w != 0 || err != nil {
		t.Fatalf("first Take = %v, %v; want 0", w, err)
	}
	w, err := q2.Take(context.Background(), host, "", 100*time.Millisecond)
	if err != nil || w < 500*time.Millisecond {
		t.Fatalf("Take beyond maxWait = %v, %v; want about 1s", w, err)
	}
	// Nothing was reserved: the next one is still about 1s away, not 2s.
	w, _ = q2.Take(context.Background(), host, "", time.Hour)
	if w < 500*time.Millisecond || w > 1100*time.Millisecond {
		t.Errorf("Take after one refused = %v, want about 1s", w)
	}
}

// With Redis gone, Take waits on it at most once for Timeout, then uses
// the local limiter (Requests/Processes) without asking Redis; errors reach
// OnError; once Redis is back the fleet's rate applies again.
func TestQuotaStoreRedisDown(t *testing.T) {
	srv := redisproc.StartT(t)
	var log errorLog
	f := newFleet(t, srv, fleet.Options{
		Timeout: 50 * time.Millisecond,
		Limits:  []fleet.Limit{{Host: host, Requests: 100, Per: time.Second, Processes: 4, Burst: 1}},
		OnError: log.add,
	})
	q := f.Quotas()
	if _, err := q.Take(context.Background(), host, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	start := time.Now()
	if _, err := q.Take(context.Background(), host, "", time.Hour); err == nil {
		t.Errorf("Take with Redis paused: no error")
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Take with Redis paused took %v, want about the 50ms timeout", took)
	}
	// Local state now: 25 requests a second for this process (one every
	// 40ms: the waits of requests sent back to back grow by 40ms), and no
	// waiting on Redis.
	var prev time.Duration
	for i := range 5 {
		start := time.Now()
		wait, err := q.Take(context.Background(), host, "", time.Hour)
		if err == nil {
			t.Fatalf("Take %d with Redis paused: no error", i)
		}
		if took := time.Since(start); took > 20*time.Millisecond {
			t.Errorf("Take while Redis is known down took %v, want no wait on Redis", took)
		}
		if step := wait - prev; i > 0 && math.Abs(float64(step-40*time.Millisecond)) > float64(5*time.Millisecond) {
			t.Errorf("local wait %d = %v after %v, want 40ms more (25/s)", i, wait, prev)
		}
		prev = wait
	}
	srv.Kill()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Take through Redis again", func() bool {
		_, err := q.Take(context.Background(), host, "", time.Hour)
		return err == nil
	})
	if log.find(nil, "sturdy:rate:{"+host+"}") == nil {
		t.Errorf("no error naming the key reached OnError; got %v", log.errs)
	}
}

// Keys fleet did not write give a clear error in OnError, never a panic;
// the request goes on under local state.
func TestQuotaStoreMalformed(t *testing.T) {
	srv := redisproc.StartT(t)
	c := newClient(t, srv)
	var log errorLog
	f := newFleet(t, srv, fleet.Options{Limits: []fleet.Limit{{Host: host, Requests: 10}}, OnError: log.add})
	redisDo(t, c, "SET", "sturdy:q:{"+host+"}", "garbage")
	_, err := f.Quotas().Take(context.Background(), host, "", time.Hour)
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("Take over a pause key of the wrong type = %v, want a WRONGTYPE error", err)
	}
	redisDo(t, c, "DEL", "sturdy:q:{"+host+"}")
	redisDo(t, c, "HSET", "sturdy:q:{"+host+"}", "p:", "soon", "x", "1")
	eventually(t, "malformed pause reported", func() bool {
		return log.find(fleet.ErrMalformed, `field "p:" = "soon"`) != nil
	})
	if err := log.find(fleet.ErrMalformed, "sturdy:q:{"+host+"}"); err == nil {
		t.Errorf("ErrMalformed does not name the key")
	}
	_ = errors.New
}

// With a wait longer than maxWait, Take takes no place and the request
// fails now (ratelimit.QuotaStore). With Redis down, the local fallback
// follows the same rule: a refused Take does not push its schedule back,
// or every refused request would delay the ones after it.
func TestQuotaStoreRedisDownRefusedTakesNothing(t *testing.T) {
	srv := redisproc.StartT(t)
	f := newFleet(t, srv, fleet.Options{
		Timeout:         50 * time.Millisecond,
		RefreshInterval: time.Hour, // only the failed lease marks Redis down
		Limits:          []fleet.Limit{{Host: host, Requests: 10, Per: time.Second, Processes: 1, Burst: 1}},
	})
	q := f.Quotas()
	if _, err := q.Take(context.Background(), host, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	// The first Take with Redis paused waits its Timeout once and marks
	// Redis down; from then on, the local limiter: 10/s, one every 100ms.
	q.Take(context.Background(), host, "", time.Hour)
	time.Sleep(200 * time.Millisecond) // the local bucket is full again
	if w, err := q.Take(context.Background(), host, "", 0); err == nil || w != 0 {
		t.Fatalf("Take with a full local bucket = %v, %v; want no wait (and errRedisDown)", w, err)
	}
	// Twenty requests whose budget is 10ms: each would wait ~100ms or
	// more, so each is refused, and none should take a place.
	for i := range 20 {
		w, _ := q.Take(context.Background(), host, "", 10*time.Millisecond)
		if w <= 10*time.Millisecond {
			t.Fatalf("Take %d = %v, want a wait past maxWait", i, w)
		}
	}
	// Nothing was taken by the refused ones: the next place is at most
	// 100ms away, not 2s.
	w, _ := q.Take(context.Background(), host, "", time.Hour)
	if w > 150*time.Millisecond {
		t.Errorf("after 20 refused Takes, the next waits %v, want at most 100ms: the refused ones took places", w)
	}
}

// OnError is never called with a lock held: a malformed pause field that
// the refresh reads is reported once the host's quota view is unlocked,
// so an OnError that asks the quota store for the same host (as a request
// sent from the hook through the stack does) goes ahead.
func TestOnErrorMalformedPauseNoLockHeld(t *testing.T) {
	srv := redisproc.StartT(t)
	c := newClient(t, srv)
	var (
		f       *fleet.Fleet
		blocked = make(chan bool, 16)
	)
	hook := func(err error) {
		if !errors.Is(err, fleet.ErrMalformed) {
			return
		}
		// What a request sent from the hook through the stack does:
		// take its place in the host's quota. Give it a second.
		done := make(chan struct{})
		go func() {
			f.Quotas().Take(context.Background(), host, "", time.Hour)
			close(done)
		}()
		select {
		case <-done:
			blocked <- false
		case <-time.After(time.Second):
			blocked <- true // (waiting for done here would deadlock: the refresh holds the lock)
		}
	}
	f = newFleet(t, srv, fleet.Options{Limits: []fleet.Limit{{Host: host, Requests: 1000, Per: time.Second}}, OnError: hook})
	if _, err := f.Quotas().Take(context.Background(), host, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	redisDo(t, c, "HSET", "sturdy:q:{"+host+"}", "p:", "soon")
	select {
	case b := <-blocked:
		if b {
			t.Errorf("a Take for the host from inside OnError (malformed pause) was blocked for 1s: OnError ran with the quota view's lock held")
		}
		redisDo(t, c, "DEL", "sturdy:q:{"+host+"}")
	case <-time.After(5 * time.Second):
		t.Fatal("malformed pause never reported to OnError")
	}
}

// A lease of quota cut by its caller's deadline says nothing about Redis either: the process's
// next requests must still lease from the fleet's rate, not fall back to
// the local limiter as if Redis were unreachable.
func TestQuotaStoreCallerDeadlineDoesNotMarkRedisDown(t *testing.T) {
	redis := redisproc.StartT(t)
	f := newFleet(t, redis, fleet.Options{
		RefreshInterval: time.Second,
		Limits:          []fleet.Limit{{Host: host, Requests: 1000, Per: time.Second, Burst: 1}},
	})
	q := f.Quotas()
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	q.Take(ctx, host, "", time.Hour)
	if _, err := q.Take(context.Background(), host, "", time.Hour); err != nil {
		t.Errorf("Take after a caller's expired Take = %v, want nil: Redis is up", err)
	}
}

// Every key the fleet writes expires. A pause whose end, by Redis's
// clock, passed more than a second ago (one sent by a process whose clock
// runs a few seconds behind Redis's) must not leave the pause hash
// without a TTL.
func TestQuotaStoreStalePauseLeavesNoKeyWithoutTTL(t *testing.T) {
	redis := redisproc.StartT(t)
	c := newClient(t, redis)
	f := newFleet(t, redis, fleet.Options{})
	f.Quotas().Pause(host, "", time.Now().Add(-3*time.Second))
	f.Quotas().Pause(host, "gpt", time.Now().Add(-3*time.Second))
	time.Sleep(300 * time.Millisecond) // sent at once, within the 20ms refresh
	if pttl, _ := redisDo(t, c, "PTTL", "sturdy:q:{"+host+"}").AsInt64(); pttl == -1 {
		t.Errorf("PTTL of the pause hash = %d, want it to expire (or be gone: -2)", pttl)
	}
}
