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
	// Addr is the path of the server's unix socket; it stays the same
	// across [Server.Restart].
	Addr string

	bin string
	dir string
	cmd *exec.Cmd
}

// URL returns the server's address as a redis URL (unix:///path).
func (s *Server) URL() string { return "unix://" + s.Addr }

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
	s, err := Start()
	if errors.Is(err, ErrNotInstalled) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func (s *Server) start() error {
	cmd := exec.Command(s.bin,
		"--port", "0",
		"--unixsocket", s.Addr,
		"--unixsocketperm", "700",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--loglevel", "warning",
	)
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
		if err := ping(s.Addr); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			s.kill()
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redisproc: redis-server did not answer within 10s: %v; log: %s", err, strings.TrimSpace(string(log)))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ping sends an inline PING and waits for +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("unix", addr, time.Second)
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
	os.Remove(s.Addr)
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
