package faultproxy

import (
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The toxiproxy server shared by the tests, started by the first one
// that needs it and stopped by TestMain.
var (
	tpOnce     sync.Once
	tpShared   *Toxiproxy
	tpErr      error
	tpRequired bool
)

func TestMain(m *testing.M) {
	code := m.Run()
	if tpShared != nil {
		if err := tpShared.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "toxiproxy-server:", err)
		}
	}
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// server returns the shared toxiproxy server. Without one it fails the
// test when the server is required (CI=true, or TOXIPROXY_SERVER set) and
// skips it otherwise.
func server(t *testing.T) *Toxiproxy {
	t.Helper()
	tpOnce.Do(func() {
		var path string
		path, tpRequired, tpErr = FindServer()
		if tpErr == nil {
			tpShared, tpErr = StartToxiproxy(path)
		}
	})
	if tpErr != nil {
		if tpRequired {
			t.Fatal(tpErr)
		}
		t.Skip(tpErr)
	}
	return tpShared
}

// settings returns the run's settings: Long with FAULTPROXY=long, else
// Short.
func settings() Settings {
	if os.Getenv(LongEnv) == "long" {
		return Long
	}
	return Short
}

// verifyNoLeaks checks, when the test and its subtests are done, that no
// goroutine they started is left: every client, proxy and upstream was
// closed.
func verifyNoLeaks(t *testing.T) {
	before := goleak.IgnoreCurrent() // the toxiproxy server's process
	t.Cleanup(func() {
		http.DefaultTransport.(*http.Transport).CloseIdleConnections() // toxiproxy's client
		goleak.VerifyNone(t, before)
	})
}

// TestFaultProxyServer checks the toxiproxy server the suite runs: the
// release go.mod names, its API on loopback only, and proxies that listen
// on loopback only.
func TestFaultProxyServer(t *testing.T) {
	tp := server(t)
	verifyNoLeaks(t)
	host, port, err := net.SplitHostPort(tp.API)
	if err != nil || host != "127.0.0.1" {
		t.Fatalf("API on %q, want 127.0.0.1", tp.API)
	}
	up := NewUpstream(UpstreamOptions{})
	defer up.Close()
	px, err := tp.Proxy("loopback-check", up.Addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Delete()
	pxHost, pxPort, _ := net.SplitHostPort(px.Listen)
	if pxHost != "127.0.0.1" {
		t.Errorf("proxy listens on %q, want 127.0.0.1", px.Listen)
	}
	// From every other address of this machine, both ports are closed.
	addrs, _ := net.InterfaceAddrs()
	others := 0
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		others++
		for _, p := range []string{port, pxPort} {
			addr := net.JoinHostPort(ipn.IP.String(), p)
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				t.Errorf("dialled %s: toxiproxy listens beyond loopback, want 127.0.0.1 only", addr)
			}
		}
	}
	t.Logf("API %s and proxy %s checked closed on %d other addresses", tp.API, px.Listen, others)
}

// TestFaultProxyPhases runs every phase, for the default sturdy stack,
// for a bare client with a retry loop and for plain net/http, once with
// vouched requests (a key on each, an upstream that deduplicates) and
// once without (no key, an upstream that performs whatever arrives). It
// checks sturdy's promises exactly, per operation; checks that sturdy
// fails no more operations than plain net/http (within [Allowed]); and
// prints the table.
func TestFaultProxyPhases(t *testing.T) {
	tp := server(t)
	verifyNoLeaks(t)
	s := settings()
	var (
		mu   sync.Mutex
		rows = map[string]Summary{}
	)
	clients := []Client{Sturdy(), Bare(), NetHTTP()}
	for _, vouched := range []bool{true, false} {
		s := s
		s.Vouched = vouched
		for _, ph := range Phases(s) {
			name := ph.Name + "/" + vouchedName(vouched)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				failed := map[string]Summary{}
				defer func() {
					st, bare := failed[Sturdy().Name], failed[NetHTTP().Name]
					if allowed := Allowed(st.Ops-st.OK, st.Ops, bare.Ops-bare.OK, bare.Ops); float64(st.Ops-st.OK) > allowed {
						t.Errorf("sturdy failed %d of %d operations, plain net/http %d of %d: more than the %.1f allowed",
							st.Ops-st.OK, st.Ops, bare.Ops-bare.OK, bare.Ops, allowed)
					}
				}()
				for _, c := range clients {
					res, err := Run(t.Context(), tp, ph.Phase, c, s)
					if err != nil {
						t.Fatal(err)
					}
					sm := res.Summarize()
					failed[c.Name] = sm
					mu.Lock()
					rows[name+"/"+c.Name] = sm
					mu.Unlock()
					t.Logf("%-8s ok %d/%d, duplicates %d, late %d, longest %v, connections %d, arrivals %d, failures %v",
						c.Name, sm.OK, sm.Ops, sm.Duplicates, sm.Late, sm.Longest.Round(time.Millisecond), sm.Conns, sm.Arrivals, sm.Failures)
					if c.Bare {
						continue
					}
					if err := res.Check(); err != nil {
						t.Errorf("%s broke its promises:\n%v", c.Name, err)
					}
					// Where nothing breaks a connection, each serves
					// RequestsPerConn requests (a dial that races a
					// connection coming back to the pool may add a few).
					if want := int64(s.Ops/s.RequestsPerConn + s.Workers); ph.Reuse && sm.Conns > want {
						t.Errorf("%s opened %d connections, want at most %d (one per %d requests, and one per worker): nothing broke one",
							c.Name, sm.Conns, want, s.RequestsPerConn)
					}
				}
			})
		}
	}
	t.Cleanup(func() {
		t.Logf("%s\n%s", caption(s), table(rows, Phases(s), clients))
	})
}

// TestFaultProxyDeadlinePropagation runs the slow-uplink phase with
// sturdy as is and with deadline propagation (PropagateDeadline to an
// upstream behind idempotency.DeadlineHandler): with both ends opted in,
// no request that reaches the upstream after its caller gave up is
// performed.
func TestFaultProxyDeadlinePropagation(t *testing.T) {
	tp := server(t)
	verifyNoLeaks(t)
	s := settings()
	var ph PhaseSpec
	for _, p := range Phases(s) {
		if p.SlowUplink {
			ph = p
		}
	}
	var (
		mu   sync.Mutex
		rows = map[string]Summary{}
	)
	clients := []Client{Sturdy(), SturdyDeadline()}
	for _, vouched := range []bool{true, false} {
		s := s
		s.Vouched = vouched
		t.Run(vouchedName(vouched), func(t *testing.T) {
			t.Parallel()
			for _, c := range clients {
				res, err := Run(t.Context(), tp, ph.Phase, c, s)
				if err != nil {
					t.Fatal(err)
				}
				if err := res.Check(); err != nil {
					t.Errorf("%s broke its promises:\n%v", c.Name, err)
				}
				sm := res.Summarize()
				mu.Lock()
				rows[ph.Name+"/"+vouchedName(vouched)+"/"+c.Name] = sm
				mu.Unlock()
				if c.Name == "sturdy+deadline" && sm.Late != 0 {
					t.Errorf("with deadline propagation, %d requests were performed after their caller gave up, want 0", sm.Late)
				}
			}
		})
	}
	t.Cleanup(func() {
		t.Logf("%s\n%s", caption(s), table(rows, []PhaseSpec{ph}, clients))
	})
}

// caption describes a run's settings, above its table.
func caption(s Settings) string {
	mode := "short"
	if s == Long {
		mode = "long"
	}
	return fmt.Sprintf("fault-proxy suite, %s run: %d operations per row by %d workers (each at most one per %v), "+
		"%v deadline, %v per attempt, bodies of %d-%d KiB, the upstream closing each connection after %d requests:",
		mode, s.Ops, s.Workers, s.Pace, s.Deadline, s.Attempt, s.MinBody>>10, s.MaxBody>>10, s.RequestsPerConn)
}

func vouchedName(v bool) string {
	if v {
		return "vouched"
	}
	return "unvouched"
}

// table formats the summaries as a Markdown table, per phase and
// client.
func table(rows map[string]Summary, phases []PhaseSpec, clients []Client) string {
	var b strings.Builder
	b.WriteString("| phase | requests | client | ok | duplicates | late performed | longest | connections | failed: why |\n")
	b.WriteString("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, v := range []bool{true, false} {
		for _, ph := range phases {
			for _, c := range clients {
				sm, ok := rows[ph.Name+"/"+vouchedName(v)+"/"+c.Name]
				if !ok {
					continue
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %d/%d | %d | %d | %.2f s | %d | %s |\n",
					ph.Name, vouchedName(v), c.Name, sm.OK, sm.Ops, sm.Duplicates, sm.Late, sm.Longest.Seconds(), sm.Conns, failures(sm.Failures))
			}
		}
	}
	return b.String()
}

// failures formats failure counts, most first: "circuit open 12, timeout 3".
func failures(m map[string]int) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
