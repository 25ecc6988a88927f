package fleet_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sturdyhttp/sturdy/fleet"
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
