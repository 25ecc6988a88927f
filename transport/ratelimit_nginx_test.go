package transport

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-cleanhttp"

	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
)

// nginxFullEnv, when set to 1, runs the full nginx table: every
// configuration for nginxFullDuration per client (.ci/run sets it).
// nginxOnlyEnv, when set, runs only the rows whose configuration and
// client contain it ("sturdy", "100 r/s", "Retry-After: 1").
const (
	nginxFullEnv      = "STURDY_NGINX_FULL"
	nginxOnlyEnv      = "STURDY_NGINX_ONLY"
	nginxFullDuration = 20 * time.Second
	// nginxOtherDuration is how long the bare client and the naive loop
	// run in the full table.
	nginxOtherDuration = 5 * time.Second
	nginxWorkers       = 20
)

// nginxConfig is one configuration of nginx's limit_req.
type nginxConfig struct {
	rate       int  // requests a second
	retryAfter bool // nginx adds Retry-After: 1
	nodelay    bool // limit_req ... nodelay: the burst is served at once, not queued
}

// why says why sturdy may miss a target against c: the table prints it
// beside a miss.
func (c nginxConfig) why() string {
	switch {
	case !c.nodelay && !c.retryAfter:
		return "under load the client cannot time the limiter's queue to the millisecond"
	case !c.nodelay:
		return "the first 429's pause is held whole (nothing is known yet), then the queue's drain measures the pace"
	case !c.retryAfter:
		return "nginx's first burst (its burst of 5) says nothing of its rate: the guess grows from 20/s to the limit over seconds"
	case c.rate <= 20:
		return "the first burst's 429s (14-19, nothing known yet), and a probe above the limit every few seconds, refused at once"
	}
	return "the first Retry-After is held for the host (nothing known yet); the guess then grows to the limit over seconds, and each probe above it is refused at once"
}

func (c nginxConfig) String() string {
	ra := "no Retry-After"
	if c.retryAfter {
		ra = "Retry-After: 1"
	}
	burst := "burst 5"
	if c.nodelay {
		burst = "burst 5 nodelay"
	}
	return fmt.Sprintf("%d r/s, %s, %s", c.rate, burst, ra)
}

// nginxBinary returns nginx's path, skipping the test when it is absent
// outside CI and failing it in CI.
func nginxBinary(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/sbin/nginx", "nginx"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("nginx not found; CI installs nginx-light (see .ci/run)")
	}
	t.Skip("nginx not found (apt-get install nginx-light)")
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

// startNginx runs nginx with limit_req configured by c in front of
// upstream, as a child process stopped when the test ends, and returns
// its base URL.
func startNginx(t *testing.T, bin, upstream string, c nginxConfig) string {
	t.Helper()
	dir := t.TempDir()
	port := freePort(t)
	extra, nodelay := "", ""
	if c.nodelay {
		nodelay = " nodelay"
	}
	if c.retryAfter {
		extra = "add_header Retry-After 1 always;"
	}
	conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log error;
events { worker_connections 1024; }
http {
	access_log off;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	limit_req_zone $binary_remote_addr zone=api:1m rate=%[2]dr/s;
	limit_req_status 429;
	upstream app {
		server %[3]s;
		keepalive 64;
	}
	server {
		listen 127.0.0.1:%[4]d;
		location / {
			limit_req zone=api burst=5%[6]s;
			%[5]s
			proxy_pass http://app;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
		}
	}
}
`, dir, c.rate, upstream, port, extra, nodelay)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", path, "-e", filepath.Join(dir, "error.log"))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nginx: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	waitNginx(t, addr, dir)
	return "http://" + addr
}

// counted counts the attempts a client sends and the 429s it gets.
type counted struct {
	next              http.RoundTripper
	attempts, tooMany atomic.Int64
	trace             *nginxTrace // nil unless STURDY_NGINX_TRACE is set
}

func (c *counted) RoundTrip(r *http.Request) (*http.Response, error) {
	c.attempts.Add(1)
	resp, err := c.next.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		c.tooMany.Add(1)
	}
	if c.trace != nil && err == nil {
		c.trace.add(fmt.Sprint(resp.StatusCode), 0)
	}
	return resp, err
}

// nginxTrace counts, each second, the responses by status and the
// stack's waits by reason (STURDY_NGINX_TRACE=1): what the client sees.
type nginxTrace struct {
	mu    sync.Mutex
	start time.Time
	secs  [64]map[string]time.Duration
}

func (tr *nginxTrace) add(what string, d time.Duration) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	i := min(int(time.Since(tr.start)/time.Second), 63)
	if tr.secs[i] == nil {
		tr.secs[i] = map[string]time.Duration{}
	}
	if d == 0 {
		d = 1 // a count
	}
	tr.secs[i][what] += d
}

func (tr *nginxTrace) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var b strings.Builder
	for i, m := range tr.secs {
		if m == nil {
			continue
		}
		fmt.Fprintf(&b, "\n  %02d: 200×%d 429×%d", i, m["200"], m["429"])
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if k != "200" && k != "429" {
				fmt.Fprintf(&b, " %s %v", k, m[k].Round(time.Millisecond))
			}
		}
	}
	return b.String()
}

func (c *counted) CloseIdleConnections() { closeIdle(c.next) }

// nginxResult is one client's run against one configuration.
type nginxResult struct {
	client                    string
	attempts, tooMany, ok     int64
	attemptsPerS, okPerS, pct float64
	trace                     string // each second (STURDY_NGINX_TRACE)
}

// nginxClient sends one operation and reports whether it succeeded.
type nginxClient struct {
	name string
	make func(base http.RoundTripper) func(ctx context.Context, url string) bool
}

func get(ctx context.Context, rt http.RoundTripper, url string) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

var nginxClients = []nginxClient{
	{"sturdy (transport.New)", func(base http.RoundTripper) func(context.Context, string) bool {
		o := Options{Base: base}
		if c, ok := base.(*counted); ok && c.trace != nil {
			o.Hooks.OnRateLimitWait = func(e ratelimit.WaitEvent) { c.trace.add(e.Reason, e.Wait) }
			o.Hooks.OnRetry = func(e policy.RetryEvent) { c.trace.add("retry", e.Wait) }
		}
		rt := New(o)
		return func(ctx context.Context, url string) bool {
			code, err := get(ctx, rt, url)
			return err == nil && code == http.StatusOK
		}
	}},
	{"bare client", func(base http.RoundTripper) func(context.Context, string) bool {
		return func(ctx context.Context, url string) bool {
			code, err := get(ctx, base, url)
			return err == nil && code == http.StatusOK
		}
	}},
	{"naive retry loop (5 tries, 50 ms apart)", func(base http.RoundTripper) func(context.Context, string) bool {
		return func(ctx context.Context, url string) bool {
			for range 5 {
				code, err := get(ctx, base, url)
				if err == nil && code == http.StatusOK {
					return true
				}
				select {
				case <-ctx.Done():
					return false
				case <-time.After(50 * time.Millisecond):
				}
			}
			return false
		}
	}},
}

// runNginx runs nginxWorkers goroutines of client against url for d.
func runNginx(c nginxClient, url string, d time.Duration) nginxResult {
	pooled := cleanhttp.DefaultPooledTransport()
	pooled.MaxIdleConnsPerHost = 64
	base := &counted{next: pooled}
	if os.Getenv("STURDY_NGINX_TRACE") != "" {
		base.trace = &nginxTrace{start: time.Now()}
	}
	op := c.make(base)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var ok atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range nginxWorkers {
		wg.Go(func() {
			for ctx.Err() == nil {
				if op(ctx, url) && ctx.Err() == nil {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	pooled.CloseIdleConnections()
	r := nginxResult{client: c.name, attempts: base.attempts.Load(), tooMany: base.tooMany.Load(), ok: ok.Load()}
	r.attemptsPerS, r.okPerS = float64(r.attempts)/secs, float64(r.ok)/secs
	if r.attempts > 0 {
		r.pct = 100 * float64(r.tooMany) / float64(r.attempts)
	}
	if base.trace != nil {
		r.trace = base.trace.String()
	}
	return r
}

// TestRateLimitAwareAgainstNginx runs transport.New against a real nginx
// limit_req (20 r/s, burst 5, limit_req_status 429) in front of a local
// upstream. The short version (every go test) runs sturdy for 3 s without
// Retry-After; with STURDY_NGINX_FULL=1 it runs the whole table: 20 and
// 100 r/s, burst queued or nodelay, with and without Retry-After, sturdy
// (20 s) against a bare client and a naive retry loop (5 s each), 20
// goroutines, reports sturdy against
// the targets (429s under 5% of attempts, successful operations
// within 10% of the limit) and fails on a regression from the measured
// table. STURDY_NGINX_ONLY=sturdy runs sturdy's rows only;
// STURDY_NGINX_TRACE=1 logs, for each row, each second's 200s and 429s
// and the stack's waits by reason.
func TestRateLimitAwareAgainstNginx(t *testing.T) {
	bin := nginxBinary(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	upstream := strings.TrimPrefix(up.URL, "http://")

	if os.Getenv(nginxFullEnv) != "1" {
		url := startNginx(t, bin, upstream, nginxConfig{rate: 20}) + "/v1/items"
		r := runNginx(nginxClients[0], url, 3*time.Second)
		t.Logf("%s: %d attempts, %d 429s (%.1f%%), %.1f ok/s", r.client, r.attempts, r.tooMany, r.pct, r.okPerS)
		// 3 s of a 20 r/s limit: the first burst of 20 goroutines meets
		// 14 429s (of about 74 attempts), before anything is known; from
		// then on the client keeps the pace it measured (18.3 ok/s on the
		// shared VM). A bare client gets over 99%.
		if r.pct >= 35 {
			t.Errorf("429s = %.1f%% of attempts, want under 35%% (a bare client gets over 99%%)", r.pct)
		}
		if r.okPerS < 13 || r.okPerS > 22 {
			t.Errorf("successful operations = %.1f/s, want 13 to 22 (the limit is 20/s)", r.okPerS)
		}
		return
	}

	var table strings.Builder
	table.WriteString("| nginx limit_req | client | attempts/s | 429s (% of attempts) | successful ops/s (of the limit) | target |\n")
	table.WriteString("| --- | --- | ---: | ---: | ---: | --- |\n")
	for _, cfg := range []nginxConfig{
		{20, false, false}, {20, true, false}, {100, false, false}, {100, true, false},
		{20, false, true}, {20, true, true}, {100, false, true}, {100, true, true},
	} {
		for i, c := range nginxClients {
			if only := os.Getenv(nginxOnlyEnv); only != "" && !strings.Contains(cfg.String()+" "+c.name, only) {
				continue
			}
			url := startNginx(t, bin, upstream, cfg) + "/v1/items"
			d := nginxFullDuration
			if i != 0 {
				d = nginxOtherDuration // they show brute force, not a pace
			}
			r := runNginx(c, url, d)
			if r.trace != "" {
				t.Logf("%s, %s, each second:%s", cfg, r.client, r.trace)
			}
			verdict := "—"
			if i == 0 {
				var miss []string
				if lim := float64(cfg.rate); r.okPerS < 0.9*lim || r.okPerS > 1.1*lim {
					miss = append(miss, "ok/s")
				}
				if r.pct >= 5 {
					miss = append(miss, "429s")
				}
				verdict = "met"
				if len(miss) > 0 {
					verdict = "missed (" + strings.Join(miss, ", ") + "): " + cfg.why()
				}
			}
			fmt.Fprintf(&table, "| %s | %s (%v) | %.1f | %d (%.1f%%) | %.1f (%.0f%%) | %s |\n", cfg, r.client, d, r.attemptsPerS, r.tooMany, r.pct, r.okPerS, 100*r.okPerS/float64(cfg.rate), verdict)
			if i != 0 {
				continue
			}
			// The targets (429s under 5% of attempts, successful
			// operations within 10% of the limit) are met on a quiet
			// machine (BENCHMARKS.md, "Rate limiting against nginx"): 0.7-3.6% and 93-97%.
			// Under load the client cannot time the limiter's queue to
			// the millisecond, and the 100 r/s rows fell to 78-91% with
			// three busy loops on the 2-core VM (CI runs under heavier
			// load still); so a miss is reported, and the test fails on
			// a regression only: 429s at a tenth of attempts (the code
			// before measured 8-19% at 20 r/s, a bare client 99%), fewer
			// than half the limit's operations (it measured 44% at
			// 100 r/s with Retry-After), or more than the limit allows.
			if r.pct >= 5 {
				t.Logf("%s: target missed: sturdy's 429s = %.1f%% of attempts, target under 5%%", cfg, r.pct)
			}
			if lim := float64(cfg.rate); r.okPerS < 0.9*lim || r.okPerS > 1.1*lim {
				t.Logf("%s: target missed: sturdy's successful ops = %.1f/s, target within 10%% of %v", cfg, r.okPerS, lim)
			}
			if r.pct >= 10 {
				t.Errorf("%s: sturdy's 429s = %.1f%% of attempts, want under 10%%", cfg, r.pct)
			}
			if lim := float64(cfg.rate); r.okPerS < 0.5*lim || r.okPerS > 1.1*lim {
				t.Errorf("%s: sturdy's successful ops = %.1f/s, want between %.1f and %.1f", cfg, r.okPerS, 0.5*lim, 1.1*lim)
			}
		}
	}
	t.Logf("%d goroutines:\n%s", nginxWorkers, table.String())
	if p := os.Getenv("STURDY_NGINX_TABLE"); p != "" {
		if err := os.WriteFile(p, []byte(table.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// waitNginx waits, for up to 10 s, until the nginx whose prefix is dir
// listens on addr; it fails the test with nginx's error log otherwise.
func waitNginx(t *testing.T, addr, dir string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx did not listen on %s: %v\n%s", addr, err, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
