package limiters

import (
	_ "embed"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/httprate"
	"github.com/redis/rueidis"
)

// binary returns the path of a system binary the tests run, skipping the
// test when it is absent outside CI and failing it in CI.
func binary(t *testing.T, name, pkg string) string {
	t.Helper()
	for _, p := range []string{"/usr/sbin/" + name, "/usr/bin/" + name, name} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not found; CI installs %s (see .ci/run)", name, pkg)
	}
	t.Skipf("%s not found (apt-get install %s)", name, pkg)
	return ""
}

// freePort returns a loopback port nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startProcess runs cmd until the test ends, and waits until addr
// accepts connections.
func startProcess(t *testing.T, cmd *exec.Cmd, addr, logFile string) {
	t.Helper()
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	for deadline := time.Now().Add(10 * time.Second); ; {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logFile)
			t.Fatalf("%s did not listen on %s: %v\n%s", cmd.Path, addr, err, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// upstream is the API behind every limiter: it answers "ok".
func upstream(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(okHandler)
	t.Cleanup(srv.Close)
	return srv
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

// startHAProxy runs HAProxy in front of up, with a stick table that
// counts each client's http_req_rate over a sliding second, every
// request counted, and denies with 429 a request that takes the rate
// over limit; it returns the base URL.
func startHAProxy(t *testing.T, up string, limit int) string {
	bin := binary(t, "haproxy", "haproxy")
	dir := t.TempDir()
	port := freePort(t)
	conf := fmt.Sprintf(`global
	maxconn 4096
defaults
	mode http
	timeout connect 5s
	timeout client 30s
	timeout server 30s
	timeout http-keep-alive 30s
frontend api
	bind 127.0.0.1:%d
	stick-table type ip size 1k expire 30s store http_req_rate(1s)
	http-request track-sc0 src
	http-request deny deny_status 429 if { sc_http_req_rate(0) gt %d }
	default_backend app
backend app
	http-reuse always
	server app %s
`, port, limit, up)
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	startProcess(t, exec.Command(bin, "-db", "-f", path), fmt.Sprintf("127.0.0.1:%d", port), path)
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

// startHTTPRate serves the API behind go-chi/httprate's LimitAll: limit
// requests a sliding window of a second, X-RateLimit-* and Retry-After.
func startHTTPRate(t *testing.T, limit int) string {
	srv := httptest.NewServer(httprate.LimitAll(limit, time.Second)(okHandler))
	t.Cleanup(srv.Close)
	return srv.URL
}

// gcraScript is the GCRA limiter the Redis-backed server runs: one
// request every ARGV[1] microseconds, ARGV[2] more at once, on the
// theoretical arrival time kept at KEYS[1], on Redis's clock. It returns
// {allowed, remaining, reset after, retry after}, times in microseconds.
//
//go:embed gcra.lua
var gcraScript string

// startGCRA runs a redis-server of its own and serves the API behind the
// GCRA limiter in it at rate a second with burst, answering with IETF
// RateLimit-Policy (q per w) and RateLimit (r left, t seconds until the
// bucket is full, rounded up) headers, and Retry-After (seconds until the
// next request fits, rounded up) on a 429.
func startGCRA(t *testing.T, rate, burst int) string {
	bin := binary(t, "redis-server", "redis-server")
	port := freePort(t)
	dir := t.TempDir()
	logFile := filepath.Join(dir, "redis.log")
	startProcess(t, exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", dir, "--logfile", logFile), fmt.Sprintf("127.0.0.1:%d", port), logFile)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{fmt.Sprintf("127.0.0.1:%d", port)}, DisableCache: true})
	if err != nil {
		t.Fatalf("connect to redis-server: %v", err)
	}
	t.Cleanup(c.Close)
	script := rueidis.NewLuaScript(gcraScript)
	key := fmt.Sprintf("gcra:%d", time.Now().UnixNano())
	interval := strconv.Itoa(1_000_000 / rate)
	policy := fmt.Sprintf(`"default";q=%d;w=1`, rate)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		vs, err := script.Exec(r.Context(), c, []string{key}, []string{interval, strconv.Itoa(burst)}).AsIntSlice()
		if err != nil || len(vs) != 4 {
			http.Error(w, fmt.Sprint("gcra: ", err), http.StatusInternalServerError)
			return
		}
		h := w.Header()
		h.Set("RateLimit-Policy", policy)
		h.Set("RateLimit", fmt.Sprintf(`"default";r=%d;t=%d`, vs[1], ceilSeconds(vs[2])))
		if vs[0] == 0 {
			h.Set("Retry-After", strconv.FormatInt(ceilSeconds(vs[3]), 10))
			http.Error(w, "rate limited", http.StatusTooManyRequests)
			return
		}
		okHandler(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func ceilSeconds(us int64) int64 { return (us + 999_999) / 1_000_000 }

// fixedWindow counts limit requests a Unix second and answers as GitHub
// does: X-RateLimit-Limit, -Remaining, -Used, -Reset (Unix seconds) and
// -Resource, a 429 beyond the limit.
type fixedWindow struct {
	mu    sync.Mutex
	limit int
	sec   int64
	used  int
}

func startFixedWindow(t *testing.T, limit int) string {
	f := &fixedWindow{limit: limit}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv.URL
}

func (f *fixedWindow) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	if sec := time.Now().Unix(); sec != f.sec {
		f.sec, f.used = sec, 0
	}
	ok := f.used < f.limit
	if ok {
		f.used++
	}
	used, sec := f.used, f.sec
	f.mu.Unlock()
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(f.limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(f.limit-used))
	h.Set("X-RateLimit-Used", strconv.Itoa(used))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(sec+1, 10))
	h.Set("X-RateLimit-Resource", "core")
	if !ok {
		http.Error(w, "API rate limit exceeded", http.StatusTooManyRequests)
		return
	}
	okHandler(w, r)
}
