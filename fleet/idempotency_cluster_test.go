package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sturdyhttp/sturdy/fleet"
	"github.com/sturdyhttp/sturdy/fleet/internal/redisproc"
	"github.com/sturdyhttp/sturdy/idempotency"
)

// startCluster starts a one-node Redis Cluster that owns every slot and
// returns a cluster client of it.
func startCluster(t *testing.T) rueidis.Client {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("no redis-server")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--dir", dir,
		"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
		"--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	var single rueidis.Client
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		single, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
		if err == nil {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal(err)
		}
	}
	defer single.Close()
	ctx := context.Background()
	if err := single.Do(ctx, single.B().Arbitrary("CLUSTER", "ADDSLOTSRANGE", "0", "16383").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		info, _ := single.Do(ctx, single.B().Arbitrary("CLUSTER", "INFO").Build()).ToString()
		if strings.Contains(info, "cluster_state:ok") {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("cluster not ok: %s", info)
		}
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// A key is any visible ASCII, '}' first included; its hash tag is then
// empty, and Redis Cluster hashes each whole key name: the Begin's two keys
// (the record and its gone marker) fall in different slots.
func TestIdempotencyClusterKeyWithEmptyHashTag(t *testing.T) {
	c := startCluster(t)
	store := fleet.NewIdempotencyStore(c, fleet.IdempotencyOptions{Timeout: 2 * time.Second})
	for _, key := range []string{"order-1", "}order-2", "}"} {
		var (
			res idempotency.BeginResult
			err error
		)
		func() {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panic: %v", p)
				}
			}()
			res, err = store.Begin(context.Background(), key, "fp", time.Minute)
		}()
		if got, want := res.State, idempotency.Acquired; err != nil || got != want {
			t.Errorf("Begin(%q) = %v, %v; want %v, nil", key, got, err, want)
		}
	}
}

// nodeClient returns a client of the one cluster node at addr, for the
// test to set the cluster up and watch it.
func nodeClient(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// clusterClient returns a cluster client that starts from addr, as a
// server of the fleet would have, without rueidis's own retries.
func clusterClient(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode() != rueidis.ClientModeCluster {
		t.Fatalf("client mode %v, want cluster", c.Mode())
	}
	t.Cleanup(c.Close)
	return c
}

// clusterField returns a field of CLUSTER INFO.
func clusterField(c rueidis.Client, field string) string {
	s, err := c.Do(context.Background(), c.B().Arbitrary("CLUSTER", "INFO").Build()).ToString()
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(strings.TrimPrefix(s, "txt:"), "\r\n") { // RESP3 marks it verbatim text
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

// clusterNodeArgs start a redis-server as a node of a Redis Cluster that
// takes a node as failed after 500ms.
var clusterNodeArgs = []string{"--cluster-enabled", "yes", "--cluster-node-timeout", "500"}

// addReplica starts a cluster node, makes it a replica of the primary
// that pc talks to, and waits until it is in sync and the primary lists it.
func addReplica(t *testing.T, pc rueidis.Client) (*redisproc.Server, rueidis.Client) {
	t.Helper()
	replica := redisproc.StartTCPT(t, clusterNodeArgs...)
	rc := nodeClient(t, replica.Addr)
	host, port, _ := net.SplitHostPort(replica.Addr)
	redisDo(t, pc, "CLUSTER", "MEET", host, port)
	id, _ := redisDo(t, pc, "CLUSTER", "MYID").ToString()
	if !until(10*time.Second, func() bool {
		nodes, _ := rc.Do(context.Background(), rc.B().Arbitrary("CLUSTER", "NODES").Build()).ToString()
		return strings.Contains(nodes, id)
	}) {
		t.Fatal("the replica did not meet the primary within 10s")
	}
	redisDo(t, rc, "CLUSTER", "REPLICATE", id)
	if !until(10*time.Second, func() bool {
		nodes, _ := pc.Do(context.Background(), pc.B().Arbitrary("CLUSTER", "NODES").Build()).ToString()
		return info(rc, "master_link_status") == "up" && strings.Contains(nodes, "slave "+id)
	}) {
		t.Fatal("the replica did not sync within 10s")
	}
	return replica, rc
}

// clusterOK waits until the cluster node that c talks to says the
// cluster is ok.
func clusterOK(t *testing.T, c rueidis.Client) {
	t.Helper()
	if !until(10*time.Second, func() bool { return clusterField(c, "cluster_state") == "ok" }) {
		t.Fatal("the cluster was not ok within 10s")
	}
}

// payFleet is servers of one fleet that serve /pay through
// idempotency.Handler, with the default IdempotencyOptions but Timeout,
// and count its runs per key; and /plain, for the bare client.
type payFleet struct {
	t         *testing.T
	client    *http.Client
	mu        sync.Mutex
	runs      map[string]int
	storeErrs []error
}

func newPayFleet(t *testing.T) *payFleet {
	client := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	return &payFleet{t: t, client: client, runs: map[string]int{}}
}

// server starts a server whose store uses c.
func (f *payFleet) server(c rueidis.Client) *httptest.Server {
	store := fleet.NewIdempotencyStore(c, fleet.IdempotencyOptions{Timeout: 500 * time.Millisecond})
	mux := http.NewServeMux()
	mux.Handle("/pay", idempotency.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(idempotency.DefaultHeader)
		f.mu.Lock()
		f.runs[key]++
		f.mu.Unlock()
		io.WriteString(w, "charged "+key)
	}), idempotency.HandlerOptions{Store: store, LockTTL: time.Minute, RetryAfter: 100 * time.Millisecond,
		OnStoreError: func(_ *http.Request, err error) {
			f.mu.Lock()
			f.storeErrs = append(f.storeErrs, err)
			f.mu.Unlock()
		}}))
	mux.HandleFunc("/plain", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	srv := httptest.NewServer(mux)
	f.t.Cleanup(srv.Close)
	return srv
}

// send posts key's request to srv and returns the answer as "status body";
// and, beside it, checks that the bare client gets srv's /plain.
func (f *payFleet) send(srv *httptest.Server, key string) string {
	f.t.Helper()
	req, _ := http.NewRequest("POST", srv.URL+"/pay", strings.NewReader(`{"amount":100}`))
	req.Header.Set(idempotency.DefaultHeader, key)
	resp, err := f.client.Do(req)
	if err != nil {
		f.t.Fatalf("POST /pay: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if code, err := get200(f.client, srv.URL+"/plain"); err != nil || code != http.StatusOK {
		f.t.Errorf("bare GET /plain = %d, %v; want 200", code, err)
	}
	return fmt.Sprint(resp.StatusCode, " ", string(body))
}

// deliver sends key's request until srv answers other than 503, for at
// most 5s, as a client that lost the answer does.
func (f *payFleet) deliver(srv *httptest.Server, key string) string {
	f.t.Helper()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		got := f.send(srv, key)
		if !strings.HasPrefix(got, "503 ") || time.Now().After(end) {
			return got
		}
	}
}

// takeErrs returns the store errors so far, and forgets them.
func (f *payFleet) takeErrs() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	errs := f.storeErrs
	f.storeErrs = nil
	return errs
}

func (f *payFleet) ran(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[key]
}

// notReplicated reports whether errs is one error, which wraps
// ErrNotReplicated.
func notReplicated(errs []error) bool {
	return len(errs) == 1 && errors.Is(errs[0], fleet.ErrNotReplicated)
}

// A Redis Cluster fails over by promoting a replica, as Sentinel does, and
// the default Replicas (zero) waits for one wherever the cluster lists a
// replica for the key's shard: one primary, with or without a replica,
// serves a keyed request through idempotency.Handler; with a replica, the
// primary is then killed, the replica promoted (CLUSTER FAILOVER
// TAKEOVER), and the key sent again to a server of the new primary. A
// replica that is up gets the lock and the response, and the key is
// answered from them after the failover; a replica that is down (stopped,
// its link cut) would not, so the request is refused and runs once after
// the failover; a cluster without replicas, where no failover can promote
// a stale copy, serves the key without waiting. The handler runs once in
// each row.
func TestIdempotencyClusterFailover(t *testing.T) {
	tests := []struct {
		name        string
		replica     bool   // the primary has a replica
		replicaDown bool   // the replica is stopped and its link cut before the request
		firstWant   string // the first answer
		refusedWant bool   // the first Begin fails with ErrNotReplicated
	}{
		{name: "replica up", replica: true, firstWant: "200 charged pay-1"},
		{name: "replica down", replica: true, replicaDown: true, firstWant: "503 ", refusedWant: true},
		{name: "no replica", firstWant: "200 charged pay-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			primary := redisproc.StartTCPT(t, clusterNodeArgs...)
			pc := nodeClient(t, primary.Addr)
			redisDo(t, pc, "CLUSTER", "ADDSLOTSRANGE", "0", "16383")
			var replica *redisproc.Server
			var rc rueidis.Client
			if tt.replica {
				replica, rc = addReplica(t, pc)
			}
			clusterOK(t, pc)

			f := newPayFleet(t)
			before := f.server(clusterClient(t, primary.Addr))
			if tt.replicaDown {
				replica.Pause()
				redisDo(t, pc, "CLIENT", "KILL", "TYPE", "replica")
			}
			if got := f.send(before, "pay-1"); !strings.HasPrefix(got, tt.firstWant) {
				t.Errorf("first answer %q, want %q", got, tt.firstWant)
			}
			if errs := f.takeErrs(); notReplicated(errs) != tt.refusedWant {
				t.Errorf("store errors %v; want one ErrNotReplicated: %v", errs, tt.refusedWant)
			}

			after := before
			if tt.replica {
				primary.Kill()
				replica.Resume()
				redisDo(t, rc, "CLUSTER", "FAILOVER", "TAKEOVER")
				if !until(10*time.Second, func() bool {
					return info(rc, "role") == "master" && clusterField(rc, "cluster_state") == "ok"
				}) {
					t.Fatal("the replica was not promoted within 10s")
				}
				after = f.server(clusterClient(t, replica.Addr))
			}
			if got, want := f.deliver(after, "pay-1"), "200 charged pay-1"; got != want {
				t.Errorf("answer after the failover %q, want %q", got, want)
			}
			if got, want := f.ran("pay-1"), 1; got != want {
				t.Errorf("the handler ran %d times, want %d", got, want)
			}
		})
	}
}

// The default Replicas waits per shard: on a cluster of two primaries,
// one with a replica that is down, one without any, a key of the first
// is refused and a key of the second runs; once the replica is back, the
// first key runs too, once.
func TestIdempotencyClusterPerShard(t *testing.T) {
	a := redisproc.StartTCPT(t, clusterNodeArgs...)
	ac := nodeClient(t, a.Addr)
	b := redisproc.StartTCPT(t, clusterNodeArgs...)
	bc := nodeClient(t, b.Addr)
	redisDo(t, ac, "CLUSTER", "ADDSLOTSRANGE", "0", "8191")
	redisDo(t, bc, "CLUSTER", "ADDSLOTSRANGE", "8192", "16383")
	host, port, _ := net.SplitHostPort(b.Addr)
	redisDo(t, ac, "CLUSTER", "MEET", host, port)
	replica, _ := addReplica(t, ac)
	clusterOK(t, ac)
	clusterOK(t, bc)
	// A key of each shard: the records' slots are those of their hash tags.
	keyOf := func(lo, hi int64) string {
		for i := 0; ; i++ {
			key := fmt.Sprintf("pay-%d", i)
			slot, err := redisDo(t, ac, "CLUSTER", "KEYSLOT", key).AsInt64()
			if err == nil && lo <= slot && slot <= hi {
				return key
			}
		}
	}
	keyA, keyB := keyOf(0, 8191), keyOf(8192, 16383)

	f := newPayFleet(t)
	srv := f.server(clusterClient(t, a.Addr))
	replica.Pause()
	redisDo(t, ac, "CLIENT", "KILL", "TYPE", "replica")
	if got, want := f.send(srv, keyA), "503 "; !strings.HasPrefix(got, want) {
		t.Errorf("%s, on the shard whose replica is down: %q, want %q", keyA, got, want)
	}
	if errs := f.takeErrs(); !notReplicated(errs) {
		t.Errorf("store errors %v; want one ErrNotReplicated", errs)
	}
	if got, want := f.send(srv, keyB), "200 charged "+keyB; got != want {
		t.Errorf("%s, on the shard without replicas: %q, want %q", keyB, got, want)
	}
	replica.Resume()
	if got, want := f.deliver(srv, keyA), "200 charged "+keyA; got != want {
		t.Errorf("%s, the replica back: %q, want %q", keyA, got, want)
	}
	if got, want := f.send(srv, keyB), "200 charged "+keyB; got != want {
		t.Errorf("%s sent again: %q, want %q", keyB, got, want)
	}
	for _, key := range []string{keyA, keyB} {
		if got, want := f.ran(key), 1; got != want {
			t.Errorf("%s: the handler ran %d times, want %d", key, got, want)
		}
	}
}

// get200 sends a GET with c and returns its status.
func get200(c *http.Client, url string) (int, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}
