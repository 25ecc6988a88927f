package fleet_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sturdyhttp/sturdy/fleet"
	"github.com/sturdyhttp/sturdy/fleet/internal/redisproc"
	"github.com/sturdyhttp/sturdy/idempotency"
)

// relay forwards TCP connections to a Redis primary, for its replica. Held,
// it stops forwarding what the primary sends, as a lagging link does: the
// replica falls behind while both stay connected. Cut, it drops what it
// holds and closes every connection.
type relay struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	cond   *sync.Cond
	held   bool
	cut    bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newRelay(t *testing.T, target string) *relay {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{l: l, target: target}
	r.cond = sync.NewCond(&r.mu)
	r.wg.Go(r.accept)
	t.Cleanup(func() { r.stop(); r.wg.Wait() })
	return r
}

func (r *relay) addr() (host, port string) {
	host, port, _ = net.SplitHostPort(r.l.Addr().String())
	return host, port
}

func (r *relay) accept() {
	for {
		down, err := r.l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", r.target)
		if err != nil {
			down.Close()
			continue
		}
		r.mu.Lock()
		if r.cut {
			r.mu.Unlock()
			down.Close()
			up.Close()
			continue
		}
		r.conns = append(r.conns, down, up)
		r.mu.Unlock()
		r.wg.Go(func() { io.Copy(up, down); up.Close() })
		r.wg.Go(func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := up.Read(buf)
				r.mu.Lock()
				for r.held && !r.cut {
					r.cond.Wait()
				}
				cut := r.cut
				r.mu.Unlock()
				if cut || err != nil {
					down.Close()
					return
				}
				if _, err := down.Write(buf[:n]); err != nil {
					return
				}
			}
		})
	}
}

func (r *relay) hold() { r.mu.Lock(); r.held = true; r.mu.Unlock() }

// stop cuts every connection and stops accepting.
func (r *relay) stop() {
	r.mu.Lock()
	r.cut = true
	r.cond.Broadcast()
	for _, c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.l.Close()
}

// sentinelClient returns a client that finds the primary through the
// sentinel, as a server of the fleet would, without rueidis's own retries.
func sentinelClient(t *testing.T, sentinel *redisproc.Server) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  []string{sentinel.Addr},
		Sentinel:     rueidis.SentinelOption{MasterSet: "primary"},
		DisableCache: true,
		DisableRetry: true,
	})
	if err != nil {
		t.Fatalf("connect through redis-sentinel: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// until polls cond every 20ms for at most d.
func until(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// info returns a field of INFO replication.
func info(c rueidis.Client, field string) string {
	s, err := c.Do(context.Background(), c.B().Info().Section("replication").Build()).ToString()
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

// A failover mid-run: three servers keep their idempotency keys on a
// primary whose two replicas lag (their link held), keyed requests go to them
// concurrently, then the primary is killed and sentinel promotes a
// replica. Every key is sent again after the failover, as clients that
// lost a response do. Waiting for a replica's acknowledgement (Replicas
// 1, and the default under a Sentinel client), no key's handler runs
// twice: the requests that reach a lagging replica or the failover are
// refused with 503 and Retry-After, and run once when sent again; none
// is lost. Without it (Replicas -1), the locks and responses the replica
// never got are lost in the promotion and their keys run again: the row
// that shows the test can fail.
func TestIdempotencyFailover(t *testing.T) {
	tests := []struct {
		replicas  int
		twiceWant bool // some key runs twice
	}{
		{replicas: 1, twiceWant: false},
		{replicas: 0, twiceWant: false}, // the default: 1 under Sentinel
		{replicas: -1, twiceWant: true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("replicas=%d", tt.replicas), func(t *testing.T) {
			testFailover(t, tt.replicas, tt.twiceWant)
		})
	}
}

func testFailover(t *testing.T, replicas int, twiceWant bool) {
	primary := redisproc.StartTCPT(t)
	link := newRelay(t, primary.Addr)
	host, port := link.addr()
	// Two replicas: after the failover, the one not promoted replicates
	// from the new primary, and acknowledges its locks.
	var rcs []rueidis.Client
	for range 2 {
		replica := redisproc.StartTCPT(t, "--replicaof", host, port)
		rc := newClientURL(t, replica.URL()) // to see it in sync, and promoted
		if !until(10*time.Second, func() bool { return info(rc, "master_link_status") == "up" }) {
			t.Fatal("a replica did not sync within 10s")
		}
		rcs = append(rcs, rc)
	}
	sentinel := redisproc.StartSentinelT(t, "primary", primary.Addr, 300*time.Millisecond)
	sc := newClientURL(t, sentinel.URL())
	if !until(15*time.Second, func() bool {
		r, err := sc.Do(context.Background(), sc.B().Arbitrary("SENTINEL", "REPLICAS", "primary").Build()).ToArray()
		return err == nil && len(r) == 2
	}) {
		t.Fatal("the sentinel did not find the replicas within 15s")
	}

	// Three servers of one fleet, each with its own client.
	var mu sync.Mutex
	runs := map[string]int{}
	var storeErrs atomic.Int64
	var servers []*httptest.Server
	for range 3 {
		store := fleet.NewIdempotencyStore(sentinelClient(t, sentinel), fleet.IdempotencyOptions{Timeout: 500 * time.Millisecond, Replicas: replicas})
		mux := http.NewServeMux()
		mux.Handle("/pay", idempotency.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := r.Header.Get(idempotency.DefaultHeader)
			mu.Lock()
			runs[key]++
			mu.Unlock()
			time.Sleep(20 * time.Millisecond) // the charge
			io.WriteString(w, "charged "+key)
		}), idempotency.HandlerOptions{
			Store:        store,
			LockTTL:      time.Minute, // no lock expires during the test: a key run twice is a lost lock
			RetryAfter:   100 * time.Millisecond,
			OnStoreError: func(*http.Request, error) { storeErrs.Add(1) },
		}))
		mux.HandleFunc("/plain", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		servers = append(servers, srv)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	bare := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	t.Cleanup(bare.CloseIdleConnections)

	// send sends key's request to a server and reports its answer.
	var refused, refusedNoRetryAfter, lost atomic.Int64
	send := func(key string) (ok bool) {
		srv := servers[rand.IntN(len(servers))]
		req, _ := http.NewRequest("POST", srv.URL+"/pay", strings.NewReader(`{"amount":100}`))
		req.Header.Set(idempotency.DefaultHeader, key)
		resp, err := client.Do(req)
		if err != nil {
			lost.Add(1)
			t.Errorf("key %s: %v", key, err)
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == 200 && string(body) == "charged "+key:
			return true
		case resp.StatusCode == 503 || resp.StatusCode == 409:
			refused.Add(1)
			if resp.Header.Get("Retry-After") == "" {
				refusedNoRetryAfter.Add(1)
			}
			return false
		}
		lost.Add(1)
		t.Errorf("key %s: status %d, body %q", key, resp.StatusCode, body)
		return false
	}
	// deliver sends key until a server answers it, as a client that
	// honours 503 and 409 does.
	deliver := func(key string, deadline time.Time) bool {
		for time.Now().Before(deadline) {
			if send(key) {
				return true
			}
			time.Sleep(100 * time.Millisecond)
		}
		return false
	}

	stop := make(chan struct{})
	var keys sync.Map // key → delivered
	var wg sync.WaitGroup
	var bareOps, bareFailed atomic.Int64
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("k%d-%d", w, i)
				keys.Store(key, false)
				keys.Store(key, deliver(key, time.Now().Add(20*time.Second)))
			}
		})
	}
	wg.Go(func() { // the bare client beside: the servers answer throughout
		for {
			select {
			case <-stop:
				return
			default:
			}
			bareOps.Add(1)
			resp, err := bare.Get(servers[rand.IntN(len(servers))].URL + "/plain")
			if err != nil {
				bareFailed.Add(1)
				continue
			}
			resp.Body.Close()
			time.Sleep(10 * time.Millisecond)
		}
	})

	time.Sleep(500 * time.Millisecond)
	link.hold() // the replica falls behind
	time.Sleep(700 * time.Millisecond)
	killed := time.Now()
	primary.Kill()
	link.stop()
	if !until(15*time.Second, func() bool { return info(rcs[0], "role") == "master" || info(rcs[1], "role") == "master" }) {
		t.Fatal("sentinel did not promote a replica within 15s")
	}
	promoted := time.Since(killed)
	time.Sleep(700 * time.Millisecond) // requests on the new primary
	close(stop)
	wg.Wait()

	// Every key sent again, as by a client that lost the response.
	last := 10 * time.Second
	if twiceWant {
		last = 2 * time.Second // what is shown is shown; keys left locked need not wait their TTL
	}
	var n, undelivered atomic.Int64
	var undeliveredKeys sync.Map
	sem := make(chan struct{}, 8)
	keys.Range(func(k, v any) bool {
		n.Add(1)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if !deliver(k.(string), time.Now().Add(last)) {
				undelivered.Add(1)
				undeliveredKeys.Store(k, true)
			}
		})
		return true
	})
	wg.Wait()
	if !twiceWant {
		// What the promoted primary holds of each key never answered:
		// a lock no one will complete keeps it refused until its TTL.
		nc := sentinelClient(t, sentinel)
		undeliveredKeys.Range(func(k, _ any) bool {
			rec, err := nc.Do(context.Background(), nc.B().Hgetall().Key("sturdy:idem:{"+k.(string)+"}").Build()).AsStrMap()
			delete(rec, "resp")
			mu.Lock()
			ran := runs[k.(string)]
			mu.Unlock()
			t.Logf("key %s never answered: its handler ran %d times; the primary holds %v (err %v)", k, ran, rec, err)
			return true
		})
	}

	twice := 0
	mu.Lock()
	for k, c := range runs {
		if c > 1 {
			twice++
			if !twiceWant && twice <= 5 {
				t.Errorf("key %s: the handler ran %d times", k, c)
			}
		}
	}
	mu.Unlock()
	t.Logf("replicas %d: %d keys, %d run twice; failover took %v; %d answers 503/409 (%d without Retry-After), %d lost; %d store errors; bare client %d/%d delivered",
		replicas, n.Load(), twice, promoted.Round(time.Millisecond), refused.Load(), refusedNoRetryAfter.Load(), lost.Load(), storeErrs.Load(),
		bareOps.Load()-bareFailed.Load(), bareOps.Load())
	if twiceWant && twice == 0 {
		t.Errorf("without waiting for a replica, no key ran twice: the failover lost no lock, and the test shows nothing")
	}
	if twiceWant {
		return
	}
	if undelivered.Load() > 0 || lost.Load() > 0 || refusedNoRetryAfter.Load() > 0 {
		t.Errorf("%d keys never answered, %d answers lost, %d refusals without Retry-After; want none", undelivered.Load(), lost.Load(), refusedNoRetryAfter.Load())
	}
	if bareFailed.Load() > 0 {
		t.Errorf("the bare client failed %d of %d requests: the servers did not answer throughout", bareFailed.Load(), bareOps.Load())
	}
	mu.Lock()
	if int64(len(runs)) != n.Load() {
		t.Errorf("%d keys ran, want all %d (every one was delivered)", len(runs), n.Load())
	}
	mu.Unlock()
}

// newClientURL returns a client of the Redis at url, closed when the test
// ends.
func newClientURL(t *testing.T, url string) rueidis.Client {
	t.Helper()
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
