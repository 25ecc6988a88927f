package faultproxy

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
)

// The toxiproxy release the suite runs: its server binary, and the client
// package of the same module version (go.mod).
const (
	ToxiproxyModule  = "github.com/Shopify/toxiproxy/v2"
	ToxiproxyVersion = "v2.5.0"
	toxiproxyServer  = ToxiproxyModule + "/cmd/server"
)

// ServerEnv names the environment variable that gives the path of the
// toxiproxy-server binary. .ci/run installs it with
//
//	GOBIN=DIR go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.5.0
//
// and sets TOXIPROXY_SERVER=DIR/server.
const ServerEnv = "TOXIPROXY_SERVER"

// FindServer returns the path of the toxiproxy-server binary to run, and
// whether a missing one is an error rather than a reason to skip:
//
//   - $TOXIPROXY_SERVER when set: it must exist.
//   - Otherwise the copy in the user's cache directory
//     (sturdy-faultproxy/toxiproxy-v2.5.0/server), installed there on
//     first use with the same go install as CI's, from the module proxy
//     or the module cache (about a minute, once). With CI=true nothing is
//     installed: CI installs it first, so its absence is a failure.
//
// The binary must be toxiproxy v2.5.0, as its build information says.
func FindServer() (path string, required bool, err error) {
	if p := os.Getenv(ServerEnv); p != "" {
		return p, true, checkServer(p)
	}
	ci := os.Getenv("CI") == "true"
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", ci, fmt.Errorf("faultproxy: no %s and no cache directory: %w", ServerEnv, err)
	}
	dir = filepath.Join(dir, "sturdy-faultproxy", "toxiproxy-"+ToxiproxyVersion)
	path = filepath.Join(dir, "server")
	if _, err := os.Stat(path); err == nil {
		return path, ci, checkServer(path)
	}
	if ci {
		return "", true, fmt.Errorf("faultproxy: CI=true and %s is not set: .ci/run installs toxiproxy-server %s", ServerEnv, ToxiproxyVersion)
	}
	cmd := exec.Command("go", "install", toxiproxyServer+"@"+ToxiproxyVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", false, fmt.Errorf("faultproxy: installing toxiproxy-server: %v\n%s", err, out)
	}
	return path, false, checkServer(path)
}

// checkServer checks that path is toxiproxy's server at ToxiproxyVersion.
func checkServer(path string) error {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("faultproxy: %s: %w", path, err)
	}
	if bi.Path != toxiproxyServer || bi.Main.Version != ToxiproxyVersion {
		return fmt.Errorf("faultproxy: %s is %s %s, want %s %s", path, bi.Path, bi.Main.Version, toxiproxyServer, ToxiproxyVersion)
	}
	return nil
}

// Toxiproxy is a running toxiproxy-server whose API listens on a loopback
// port only, and a client of that API.
type Toxiproxy struct {
	// API is the host:port of the server's HTTP API, on 127.0.0.1.
	API string
	// Client drives the API.
	Client *toxiproxy.Client

	cmd  *exec.Cmd
	log  *lockedBuffer
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done
}

// StartToxiproxy runs the server at path with its API on a free port of
// 127.0.0.1 and waits until the API answers. A port taken in between is
// tried again with another, up to three times.
func StartToxiproxy(path string) (*Toxiproxy, error) {
	var errs []error
	for range 3 {
		tp, err := startToxiproxy(path)
		if err == nil {
			return tp, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func startToxiproxy(path string) (*Toxiproxy, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	tp := &Toxiproxy{API: net.JoinHostPort("127.0.0.1", port), log: &lockedBuffer{}, done: make(chan struct{})}
	// -host 127.0.0.1: the API listens on loopback only (its default,
	// "localhost", may also resolve to ::1); a fixed seed makes the
	// toxics' coin tosses repeat from run to run.
	tp.cmd = exec.Command(path, "-host", "127.0.0.1", "-port", port, "-seed", "21")
	tp.cmd.Stdout = tp.log
	tp.cmd.Stderr = tp.log
	if err := tp.cmd.Start(); err != nil {
		return nil, fmt.Errorf("faultproxy: starting %s: %w", path, err)
	}
	go func() {
		tp.err = tp.cmd.Wait()
		close(tp.done)
	}()
	probe := &http.Client{Timeout: time.Second, Transport: &http.Transport{}}
	defer probe.CloseIdleConnections()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
		select {
		case <-tp.done:
			return nil, fmt.Errorf("faultproxy: toxiproxy-server exited (%v):\n%s", tp.err, tp.log)
		default:
		}
		resp, err := probe.Get("http://" + tp.API + "/version")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				tp.Client = toxiproxy.NewClient(tp.API)
				return tp, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	tp.Close()
	return nil, fmt.Errorf("faultproxy: toxiproxy-server's API did not answer on %s in 15s:\n%s", tp.API, tp.log)
}

// Log returns what the server has logged.
func (tp *Toxiproxy) Log() string { return tp.log.String() }

// Close stops the server (SIGTERM, which it handles, then SIGKILL after
// 5 seconds) and waits for it to exit. It also closes the idle
// connections of http.DefaultTransport, which toxiproxy's client uses.
func (tp *Toxiproxy) Close() error {
	defer http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	tp.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-tp.done:
	case <-time.After(5 * time.Second):
		tp.cmd.Process.Kill()
		<-tp.done
	}
	var ee *exec.ExitError
	if errors.As(tp.err, &ee) && !ee.Exited() {
		return nil // stopped by our signal
	}
	return tp.err
}

// Proxy creates a proxy named name from a free port of 127.0.0.1 to
// upstream, with toxics, and returns it; its Listen field is the address
// to dial.
func (tp *Toxiproxy) Proxy(name, upstream string, toxics []Toxic) (*toxiproxy.Proxy, error) {
	p, err := tp.Client.CreateProxy(name, "127.0.0.1:0", upstream)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: creating proxy %s: %w", name, err)
	}
	if err := addToxics(p, toxics); err != nil {
		p.Delete()
		return nil, err
	}
	return p, nil
}

// addToxics adds toxics to the proxy p.
func addToxics(p *toxiproxy.Proxy, toxics []Toxic) error {
	for _, tx := range toxics {
		if _, err := p.AddToxic(tx.Name(), tx.Type, tx.Stream, tx.Toxicity, tx.Attributes); err != nil {
			return fmt.Errorf("faultproxy: proxy %s: adding toxic %s: %w", p.Name, tx.Name(), err)
		}
	}
	return nil
}

// Toxic is one toxiproxy toxic: a fault applied to a share (Toxicity) of
// the connections through a proxy, in one direction.
type Toxic struct {
	// Type is toxiproxy's name for it: latency, reset_peer, timeout,
	// slicer, limit_data, bandwidth, ...
	Type string
	// Stream is "upstream" (client to server: the request) or
	// "downstream" (server to client: the response).
	Stream string
	// Toxicity is the probability, from 0 to 1, that a new connection
	// gets the toxic.
	Toxicity float32
	// Attributes are the toxic's settings, as toxiproxy names them.
	Attributes toxiproxy.Attributes
}

// Name returns the toxic's name in the proxy, its type and stream.
func (t Toxic) Name() string { return t.Type + "_" + t.Stream }

// String describes the toxic, as in "reset_peer on the response (timeout=0) for 30% of connections".
func (t Toxic) String() string {
	side := "request"
	if t.Stream == "downstream" {
		side = "response"
	}
	var attrs []string
	for k, v := range t.Attributes {
		attrs = append(attrs, fmt.Sprintf("%s=%v", k, v))
	}
	slices.Sort(attrs)
	return fmt.Sprintf("%s on the %s (%s) for %.0f%% of connections", t.Type, side, strings.Join(attrs, " "), t.Toxicity*100)
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (string, error) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("faultproxy: finding a free port: %w", err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port, nil
}

// lockedBuffer is a bytes.Buffer safe for concurrent use, for a process's
// output.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
