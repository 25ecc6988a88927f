package httptestutil

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Network is an in-memory network made of [net.Pipe] connections. A real
// [http.Server] serves each of its listeners and a real [http.Transport]
// dials them, so the whole net/http stack runs without a socket. Because no
// real I/O is involved, a test that uses a Network inside a
// [testing/synctest] bubble runs on the bubble's virtual clock: a 60 s
// backoff takes microseconds. (Real loopback sockets are not durably
// blocking, so they keep a bubble from advancing its clock.)
//
// The zero value is not usable; call [NewNetwork]. A Network is safe for
// concurrent use by multiple goroutines.
type Network struct {
	mu        sync.Mutex
	listeners map[string]*pipeListener
	refuse    map[string]func() bool
	dials     atomic.Int64
}

// NewNetwork returns an empty in-memory network.
func NewNetwork() *Network {
	return &Network{listeners: make(map[string]*pipeListener)}
}

// Listen returns a listener for addr ("host:port"; a missing port means
// 80). Dials to addr reach it until it is closed.
func (n *Network) Listen(addr string) (net.Listener, error) {
	addr = withPort(addr)
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.listeners[addr]; ok {
		return nil, &net.OpError{Op: "listen", Net: "pipe", Addr: pipeAddr(addr), Err: syscall.EADDRINUSE}
	}
	l := &pipeListener{net: n, addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
	n.listeners[addr] = l
	return l, nil
}

// DialContext connects to the listener at addr. With no listener there, it
// fails at once with an error that wraps [syscall.ECONNREFUSED], as a real
// dial to a closed port does. It has the signature of
// [http.Transport.DialContext].
func (n *Network) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	addr = withPort(addr)
	n.mu.Lock()
	l := n.listeners[addr]
	refuse := n.refuse[addr]
	n.mu.Unlock()
	refused := &net.OpError{Op: "dial", Net: network, Addr: pipeAddr(addr), Err: syscall.ECONNREFUSED}
	if l == nil || (refuse != nil && refuse()) {
		return nil, refused
	}
	client, server := net.Pipe()
	select {
	case l.conns <- &pipeConn{Conn: server, local: pipeAddr(addr), remote: pipeAddr("client")}:
		n.dials.Add(1)
		return &pipeConn{Conn: client, local: pipeAddr("client"), remote: pipeAddr(addr)}, nil
	case <-l.done:
		client.Close()
		server.Close()
		return nil, refused
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, &net.OpError{Op: "dial", Net: network, Addr: pipeAddr(addr), Err: ctx.Err()}
	}
}

// RefuseWhen makes dials to addr fail with ECONNREFUSED, as if nothing
// listened there, whenever refuse reports true; connections already made
// are not touched. A nil refuse removes the rule. [Outage.Refusing] fits.
func (n *Network) RefuseWhen(addr string, refuse func() bool) {
	addr = withPort(addr)
	n.mu.Lock()
	defer n.mu.Unlock()
	if refuse == nil {
		delete(n.refuse, addr)
		return
	}
	if n.refuse == nil {
		n.refuse = make(map[string]func() bool)
	}
	n.refuse[addr] = refuse
}

// Dials reports how many connections have been established on n.
func (n *Network) Dials() int64 { return n.dials.Load() }

// Transport returns a new [http.Transport] that dials n. It keeps idle
// connections like any pooled transport; call its CloseIdleConnections (or
// [Server.Close]) before a synctest bubble ends so that no goroutine is left.
func (n *Network) Transport() *http.Transport {
	return &http.Transport{
		DialContext:         n.DialContext,
		MaxIdleConnsPerHost: 100,
		ForceAttemptHTTP2:   false,
	}
}

// Server is an [http.Server] serving one address of a [Network].
type Server struct {
	// URL is the base URL of the server, "http://host:port".
	URL string
	// Server is the underlying server. Set its fields (ConnState, ...)
	// only through [Network.Start]'s configure function.
	Server *http.Server

	done  chan struct{}
	conns sync.WaitGroup // connections not yet closed or hijacked
}

// Serve starts an [http.Server] for h at addr ("host" or "host:port") and
// returns it. It panics if addr is in use, as [httptest.NewServer] panics
// when it cannot listen: a test cannot go on without its server.
func (n *Network) Serve(addr string, h http.Handler) *Server {
	return n.Start(addr, &http.Server{Handler: h})
}

// Start serves srv at addr. It is [Network.Serve] for a server whose fields
// (ConnState, timeouts) the caller has set.
func (n *Network) Start(addr string, srv *http.Server) *Server {
	l, err := n.Listen(addr)
	if err != nil {
		panic("httptestutil: " + err.Error())
	}
	s := &Server{URL: "http://" + l.Addr().String(), Server: srv, done: make(chan struct{})}
	hook := srv.ConnState
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			defer s.conns.Done()
		}
		if hook != nil {
			hook(c, st)
		}
	}
	go func() {
		defer close(s.done)
		srv.Serve(l)
	}()
	return s
}

// Close closes the listener and every connection of the server, as
// [httptest.Server.Close] does, and waits for the serving goroutine and
// every connection's goroutine to end. (net/http may linger on a
// connection it closes after a request it did not read whole; inside a
// synctest bubble, a goroutine still sleeping there when the test ends
// would fail it.)
func (s *Server) Close() {
	s.Server.Close()
	<-s.done
	s.conns.Wait()
}

type pipeListener struct {
	net   *Network
	addr  string
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.net.mu.Lock()
		if l.net.listeners[l.addr] == l {
			delete(l.net.listeners, l.addr)
		}
		l.net.mu.Unlock()
	})
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr(l.addr) }

// pipeConn gives a net.Pipe end the addresses of the fake network, so
// server logs and RemoteAddr look like real ones.
type pipeConn struct {
	net.Conn
	local, remote net.Addr
}

func (c *pipeConn) LocalAddr() net.Addr  { return c.local }
func (c *pipeConn) RemoteAddr() net.Addr { return c.remote }

type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }

func withPort(addr string) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	if strings.Count(addr, ":") > 1 && !strings.HasPrefix(addr, "[") { // bare IPv6
		addr = "[" + addr + "]"
	}
	return addr + ":80"
}
