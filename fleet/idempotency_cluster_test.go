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
		replica     bool // the primary has a replica
		replicaDown bool // the replica is stopped and its link cut before the request
		firstWant   int  // the status of the first answer
		refusedWant bool // the first Begin fails with ErrNotReplicated
	}{
		{name: "replica up", replica: true, firstWant: http.StatusOK},
		{name: "replica down", replica: true, replicaDown: true, firstWant: http.StatusServiceUnavailable, refusedWant: true},
		{name: "no replica", firstWant: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			primary := redisproc.StartTCPT(t, clusterNodeArgs...)
			pc := nodeClient(t, primary.Addr)
			redisDo(t, pc, "CLUSTER", "ADDSLOTSRANGE", "0", "16383")
			var replica *redisproc.Server
			var rc rueidis.Client
			if tt.replica {
				replica = redisproc.StartTCPT(t, clusterNodeArgs...)
				rc = nodeClient(t, replica.Addr)
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
			}
			if !until(10*time.Second, func() bool { return clusterField(pc, "cluster_state") == "ok" }) {
				t.Fatal("the cluster was not ok within 10s")
			}

			var mu sync.Mutex
			runs := 0
			var storeErrs []error
			// server serves /pay with a store on c, and /plain for the
			// bare client.
			server := func(c rueidis.Client) *httptest.Server {
				store := fleet.NewIdempotencyStore(c, fleet.IdempotencyOptions{Timeout: 500 * time.Millisecond})
				mux := http.NewServeMux()
				mux.Handle("/pay", idempotency.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					mu.Lock()
					runs++
					mu.Unlock()
					io.WriteString(w, "charged "+r.Header.Get(idempotency.DefaultHeader))
				}), idempotency.HandlerOptions{Store: store, LockTTL: time.Minute, RetryAfter: 100 * time.Millisecond,
					OnStoreError: func(_ *http.Request, err error) {
						mu.Lock()
						storeErrs = append(storeErrs, err)
						mu.Unlock()
					}}))
				mux.HandleFunc("/plain", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
				srv := httptest.NewServer(mux)
				t.Cleanup(srv.Close)
				return srv
			}
			client := &http.Client{Timeout: 5 * time.Second}
			t.Cleanup(client.CloseIdleConnections)
			send := func(srv *httptest.Server) (int, string) {
				t.Helper()
				req, _ := http.NewRequest("POST", srv.URL+"/pay", strings.NewReader(`{"amount":100}`))
				req.Header.Set(idempotency.DefaultHeader, "pay-1")
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("POST /pay: %v", err)
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(body)
			}
			bareOK := func(srv *httptest.Server) { // the bare client beside
				t.Helper()
				if code, err := get200(client, srv.URL+"/plain"); err != nil || code != http.StatusOK {
					t.Errorf("bare GET /plain = %d, %v; want 200", code, err)
				}
			}

			before := server(clusterClient(t, primary.Addr))
			if tt.replicaDown {
				replica.Pause()
				redisDo(t, pc, "CLIENT", "KILL", "TYPE", "replica")
			}
			code, body := send(before)
			bareOK(before)
			if code != tt.firstWant {
				t.Errorf("first answer %d %q, want %d", code, body, tt.firstWant)
			}
			mu.Lock()
			if got := len(storeErrs) > 0 && errors.Is(storeErrs[0], fleet.ErrNotReplicated); got != tt.refusedWant {
				t.Errorf("store errors %v: ErrNotReplicated %v, want %v", storeErrs, got, tt.refusedWant)
			}
			mu.Unlock()

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
				after = server(clusterClient(t, replica.Addr))
			}
			// Sent again, as by a client that lost the answer, until a
			// server answers it.
			for end := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				code, body = send(after)
				if code != http.StatusServiceUnavailable || time.Now().After(end) {
					break
				}
			}
			bareOK(after)
			if got, want := fmt.Sprint(code, " ", body), "200 charged pay-1"; got != want {
				t.Errorf("answer after the failover %q, want %q", got, want)
			}
			mu.Lock()
			defer mu.Unlock()
			if got, want := runs, 1; got != want {
				t.Errorf("the handler ran %d times, want %d", got, want)
			}
		})
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
