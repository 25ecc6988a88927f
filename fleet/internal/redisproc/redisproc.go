// Package redisproc starts and stops redis-server processes for the fleet
// tests and the fleet example: each on a unix socket in a directory of its
// own, with persistence off, so that nothing outlives the process.
package redisproc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ErrNotInstalled is returned by [Start] when redis-server is not on the
// PATH.
var ErrNotInstalled = errors.New("redisproc: redis-server not found on the PATH (install it: apt-get install redis-server)")

// Server is one redis-server process on a unix socket.
type Server struct {
	// Addr is the path of the server's unix socket, which stays the same
	// across [Server.Restart]; or, for [StartTCP] and [StartSentinel],
	// its loopback host:port.
	Addr string

	bin  string
	dir  string
	cmd  *exec.Cmd
	args []string // the arguments of a TCP server; nil for a unix socket's
	tcp  bool
}

// URL returns the server's address as a redis URL (unix:///path, or
// redis://host:port).
func (s *Server) URL() string {
	if s.tcp {
		return "redis://" + s.Addr
	}
	return "unix://" + s.Addr
}

// StartTCP starts a redis-server on a free loopback TCP port, with
// persistence off, and extra arguments such as "--replicaof", "127.0.0.1",
// "6380". It returns [ErrNotInstalled] when there is no redis-server on
// the PATH.
func StartTCP(extra ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNotInstalled
	}
	return startTCP(bin, func(dir string, port int) ([]string, error) {
		return append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "no", "--loglevel", "warning"}, extra...), nil
	})
}

// StartSentinel starts a redis-sentinel on a free loopback TCP port that
// monitors the primary at addr (host:port) under name, alone (quorum 1),
// taking it as down after downAfter without an answer. It returns
// [ErrNotInstalled] when there is no redis-sentinel on the PATH.
func StartSentinel(name, addr string, downAfter time.Duration) (*Server, error) {
	bin, err := exec.LookPath("redis-sentinel")
	if err != nil {
		return nil, ErrNotInstalled
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	return startTCP(bin, func(dir string, own int) ([]string, error) {
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s %s %s 1\n"+
			"sentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s 10000\n",
			own, dir, name, host, port, name, downAfter.Milliseconds(), name)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return nil, err
		}
		return []string{conf}, nil
	})
}

// startTCP starts bin with the arguments that args makes for a new
// directory and a free port.
func startTCP(bin string, args func(dir string, port int) ([]string, error)) (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "redis")
	if err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	a, err := args(dir, port)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), bin: bin, dir: dir, args: a, tcp: true}
	if err := s.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// StartTCPT is [StartTCP] for a test, as [StartT] is [Start]; the server
// is stopped when the test ends.
func StartTCPT(t testing.TB, extra ...string) *Server {
	t.Helper()
	return orSkip(t)(StartTCP(extra...))
}

// StartSentinelT is [StartSentinel] for a test, as [StartT] is [Start];
// the sentinel is stopped when the test ends.
func StartSentinelT(t testing.TB, name, addr string, downAfter time.Duration) *Server {
	t.Helper()
	return orSkip(t)(StartSentinel(name, addr, downAfter))
}

// orSkip returns a function that hands back a started server, closed when
// t ends, or skips or fails t as [StartT] does.
func orSkip(t testing.TB) func(*Server, error) *Server {
	return func(s *Server, err error) *Server {
		t.Helper()
		if errors.Is(err, ErrNotInstalled) && os.Getenv("CI") != "true" {
			t.Skip(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
}

// Start starts a redis-server on a unix socket in a new temporary
// directory and waits until it accepts connections. It returns
// [ErrNotInstalled] when there is no redis-server on the PATH.
func Start() (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNotInstalled
	}
	// A short directory name: a unix socket path is limited to 107 bytes.
	dir, err := os.MkdirTemp("", "redis")
	if err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	s := &Server{Addr: filepath.Join(dir, "redis.sock"), bin: bin, dir: dir}
	if err := s.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// StartT starts a server for a test and stops it when the test ends. When
// redis-server is missing the test is skipped, or fails when the
// environment variable CI is "true": continuous integration must run these
// tests.
func StartT(t testing.TB) *Server {
	t.Helper()
	return orSkip(t)(Start())
}

func (s *Server) start() error {
	args := s.args
	if !s.tcp {
		args = []string{
			"--port", "0",
			"--unixsocket", s.Addr,
			"--unixsocketperm", "700",
			"--dir", s.dir,
			"--save", "",
			"--appendonly", "no",
			"--loglevel", "warning",
		}
	}
	cmd := exec.Command(s.bin, args...)
	out, err := os.Create(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return fmt.Errorf("redisproc: %w", err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redisproc: start redis-server: %w", err)
	}
	s.cmd = cmd
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err := ping(s.network(), s.Addr); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			s.kill()
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redisproc: redis-server did not answer within 10s: %v; log: %s", err, strings.TrimSpace(string(log)))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *Server) network() string {
	if s.tcp {
		return "tcp"
	}
	return "unix"
}

// ping sends an inline PING and waits for +PONG.
func ping(network, addr string) error {
	c, err := net.DialTimeout(network, addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 7)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if string(buf[:n]) != "+PONG\r\n" {
		return fmt.Errorf("unexpected answer to PING: %q", buf[:n])
	}
	return nil
}

// Kill stops the server at once (SIGKILL), as a crash would; its data is
// lost. [Server.Restart] starts it again on the same socket.
func (s *Server) Kill() {
	s.kill()
	if !s.tcp {
		os.Remove(s.Addr)
	}
}

func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill() // a paused server dies too, without running what it was sent
	s.cmd.Wait()
	s.cmd = nil
}

// Restart starts a killed server again, empty, on the same socket.
func (s *Server) Restart() error {
	if s.cmd != nil {
		return errors.New("redisproc: server is running")
	}
	return s.start()
}

// Pause stops the server's process (SIGSTOP) so that it accepts
// connections and commands but answers none, as an overloaded or
// partitioned server would; [Server.Resume] lets it go on.
func (s *Server) Pause() {
	if s.cmd != nil {
		s.cmd.Process.Signal(syscall.SIGSTOP)
	}
}

// Resume continues a paused server.
func (s *Server) Resume() {
	if s.cmd != nil {
		s.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Close kills the server and removes its directory.
func (s *Server) Close() {
	s.kill()
	os.RemoveAll(s.dir)
}
