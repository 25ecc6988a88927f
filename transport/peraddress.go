package transport

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-cleanhttp"

	"github.com/sturdyhttp/sturdy/internal/hosts"
	"github.com/sturdyhttp/sturdy/policy"
)

// staleRefresh is the least time between two resolutions of a host after
// a connection to one of its addresses failed.
const staleRefresh = time.Second

// PerAddress returns a RoundTripper that sends each request through a
// connection pool of one resolved address of its host, as
// [Endpoints.PerAddress] describes: a clone of base dialing that address,
// which still verifies TLS for the host name and negotiates HTTP/2 as base
// does. A nil base means the default base of [New]. It reads e's
// PerAddress-related fields: LookupHost, Outlier, RefreshInterval and
// OnEject. [New] makes one when Options.Endpoints.PerAddress is set; use
// this function to put it beneath a RoundTripper of your own.
//
// Pools are kept for up to 10,000 hosts. To make room, hosts unused for
// two RefreshIntervals are forgotten and their idle connections closed;
// when none is, a new host uses base.
//
// The operation's record of the addresses it tried is kept by the
// outermost layer of [Layers]; without it, requests are still spread and
// addresses ejected, but a retry may go to an address already tried.
func PerAddress(base *http.Transport, e Endpoints) http.RoundTripper {
	if base == nil {
		base = defaultBase()
	}
	return newPerAddress(base, &e)
}

// defaultBase is the base of [New] when Options.Base is nil.
func defaultBase() *http.Transport {
	t := cleanhttp.DefaultPooledTransport()
	t.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	t.MaxResponseHeaderBytes = DefaultMaxResponseHeaderBytes
	return t
}

// perAddressMiddleware returns the bottom layer of Endpoints.PerAddress:
// next, when it is an *http.Transport, behind per-address pools; any
// other next as it is (see Endpoints.PerAddress).
func (ep *endpoints) perAddressMiddleware() Middleware {
	return func(next http.RoundTripper) http.RoundTripper {
		if next == nil {
			next = http.DefaultTransport
		}
		if t, ok := next.(*http.Transport); ok {
			return newPerAddress(t, &ep.e)
		}
		return next
	}
}

type perAddress struct {
	base    *http.Transport
	lookup  func(ctx context.Context, host string) ([]string, error)
	outlier policy.Outlier
	refresh time.Duration
	onEject func(EjectionEvent)

	mu       sync.RWMutex
	hosts    map[hosts.Key]*addrHost
	maxHosts int // hosts with pools of their own; more use the base
}

func newPerAddress(base *http.Transport, e *Endpoints) *perAddress {
	p := &perAddress{base: base, lookup: e.LookupHost, outlier: e.Outlier, refresh: e.RefreshInterval, onEject: e.OnEject,
		hosts: make(map[hosts.Key]*addrHost), maxHosts: hosts.DefaultMaxHosts}
	if p.lookup == nil {
		p.lookup = net.DefaultResolver.LookupHost
	}
	if p.refresh <= 0 {
		p.refresh = DefaultRefreshInterval
	}
	return p
}

// addrHost is one host's addresses and their pools.
type addrHost struct {
	name, port string // the host name, and the port dialed
	hostport   string // for events
	direct     bool   // an IP address, or sent through a proxy: the base serves it

	mu        sync.Mutex
	addrs     []*addrPool          // the addresses of the latest resolution
	pools     map[string]*addrPool // every address seen, for CloseIdleConnections
	resolved  time.Time            // when the latest resolution ended
	stale     bool                 // a connection failed: resolve again soon
	resolving chan struct{}        // closed when the resolution under way ends; nil when none
	rr        int                  // where the next pick starts
	used      time.Time            // the latest pick
}

// addrPool is one address of a host and its connection pool.
type addrPool struct {
	ip string
	rt *http.Transport
	a  policy.Address // guarded by the host's mu
}

// CloseIdleConnections closes the idle connections of every pool.
func (p *perAddress) CloseIdleConnections() {
	p.base.CloseIdleConnections()
	p.mu.RLock()
	hs := make([]*addrHost, 0, len(p.hosts))
	for _, h := range p.hosts {
		hs = append(hs, h)
	}
	p.mu.RUnlock()
	for _, h := range hs {
		h.mu.Lock()
		rts := make([]*http.Transport, 0, len(h.pools))
		for _, pl := range h.pools {
			rts = append(rts, pl.rt)
		}
		h.mu.Unlock()
		for _, rt := range rts {
			rt.CloseIdleConnections()
		}
	}
}

// host returns req's addrHost, made on first use.
func (p *perAddress) host(req *http.Request) *addrHost {
	k := hosts.KeyOf(req.URL)
	p.mu.RLock()
	h := p.hosts[k]
	p.mu.RUnlock()
	if h != nil {
		return h
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if h = p.hosts[k]; h != nil {
		return h
	}
	name, port := req.URL.Hostname(), req.URL.Port()
	if port == "" {
		port = "80"
		if k.Scheme == "https" {
			port = "443"
		}
	}
	if len(p.hosts) >= p.maxHosts && !p.forgetIdle() {
		return &addrHost{direct: true} // no room: the base serves it
	}
	h = &addrHost{name: name, port: port, hostport: net.JoinHostPort(name, port), pools: make(map[string]*addrPool)}
	h.direct = net.ParseIP(name) != nil
	if p.base.Proxy != nil && !h.direct {
		u, err := p.base.Proxy(req)
		h.direct = err != nil || u != nil
	}
	p.hosts[k] = h
	return h
}

// forgetIdle forgets the hosts not used for two RefreshIntervals and
// closes their idle connections, with p.mu held. It reports whether it
// made room.
func (p *perAddress) forgetIdle() bool {
	cut := time.Now().Add(-2 * p.refresh)
	n := len(p.hosts)
	for k, h := range p.hosts {
		h.mu.Lock()
		idle := h.resolving == nil && h.used.Before(cut)
		h.mu.Unlock()
		if !idle {
			continue
		}
		delete(p.hosts, k)
		for _, pl := range h.pools {
			pl.rt.CloseIdleConnections()
		}
	}
	return len(p.hosts) < n
}

// pool returns a clone of the base that dials ip on port.
func (p *perAddress) pool(ip, port string) *http.Transport {
	t := p.base.Clone()
	t.Proxy = nil
	addr := net.JoinHostPort(ip, port)
	dial := p.base.DialContext
	if dial == nil {
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
		dial = d.DialContext
	}
	t.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) { return dial(ctx, network, addr) }
	if dt := p.base.DialTLSContext; dt != nil {
		t.DialTLSContext = func(ctx context.Context, network, _ string) (net.Conn, error) { return dt(ctx, network, addr) }
	}
	return t
}

// errNoAddresses is the error of a host name that resolved to nothing.
var errNoAddresses = errors.New("no addresses")

// resolve makes sure h has addresses, resolving it when it has none or
// when they are due to be resolved again. It is called with h.mu held,
// and returns with it held.
func (p *perAddress) resolve(ctx context.Context, h *addrHost, now time.Time) error {
	for {
		due := len(h.addrs) == 0 || now.Sub(h.resolved) >= p.refresh || h.stale && now.Sub(h.resolved) >= staleRefresh
		if !due {
			return nil
		}
		if ch := h.resolving; ch != nil {
			if len(h.addrs) > 0 {
				return nil // another request resolves it; use what is known
			}
			h.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				h.mu.Lock()
				return context.Cause(ctx)
			}
			h.mu.Lock()
			continue
		}
		ch := make(chan struct{})
		h.resolving = ch
		h.mu.Unlock()
		ips, err := p.lookup(ctx, h.name)
		h.mu.Lock()
		h.resolving = nil
		close(ch)
		h.resolved, h.stale = time.Now(), false
		if err == nil && len(ips) == 0 {
			err = &net.DNSError{Err: errNoAddresses.Error(), Name: h.name, IsNotFound: true}
		}
		if err != nil {
			if len(h.addrs) > 0 {
				return nil // keep the addresses known
			}
			// A dial error, as net/http's own for a name that does not
			// resolve: nothing was sent.
			return &net.OpError{Op: "dial", Net: "tcp", Err: err}
		}
		addrs := make([]*addrPool, 0, len(ips))
		for _, ip := range ips {
			pl := h.pools[ip]
			if pl == nil {
				pl = &addrPool{ip: ip, rt: p.pool(ip, h.port)}
				h.pools[ip] = pl
			}
			addrs = append(addrs, pl)
		}
		h.addrs = addrs
		return nil
	}
}

// pick returns the address an attempt goes to: in turn, the first that
// is not ejected and the operation has not tried; else one not ejected;
// else one not tried; else any.
func (p *perAddress) pick(ctx context.Context, h *addrHost, tried []*addrPool) (*addrPool, error) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := p.resolve(ctx, h, now); err != nil {
		return nil, err
	}
	h.used = now
	n := len(h.addrs)
	start := h.rr % n
	h.rr = start + 1
	var best *addrPool
	rank := 4
	for k := range n {
		pl := h.addrs[(start+k)%n]
		r := 0
		if pl.a.Ejected(now) {
			r += 2
		}
		for _, t := range tried {
			if t == pl {
				r++
				break
			}
		}
		if r < rank {
			best, rank = pl, r
			if r == 0 {
				break
			}
		}
	}
	return best, nil
}

// record counts the outcome of an attempt sent to pl, and ejects pl when
// policy.Outlier says so.
func (p *perAddress) record(h *addrHost, pl *addrPool, req *http.Request, resp *http.Response, err error) {
	v := policy.JudgeHost(req, resp, err, callerEnded(req.Context()))
	if !policy.AddressCounted(v) {
		return
	}
	failed := policy.AddressFailed(v)
	now := time.Now()
	h.mu.Lock()
	if !failed && pl.a == (policy.Address{}) {
		h.mu.Unlock()
		return // the success path: nothing to change
	}
	ejected := 0
	for _, o := range h.addrs {
		if o != pl && o.a.Ejected(now) {
			ejected++
		}
	}
	var eject bool
	pl.a, eject = p.outlier.Record(pl.a, failed, now, ejected, len(h.addrs))
	if failed && err != nil {
		h.stale = true // a connection failed: the host may have moved
	}
	e := EjectionEvent{Host: h.hostport, Address: pl.ip, Failures: pl.a.Failures, Ejections: pl.a.Ejections, Duration: pl.a.EjectedUntil.Sub(now)}
	h.mu.Unlock()
	if eject && p.onEject != nil {
		p.onEject(e)
	}
}

// AddressOf returns the address that the attempt whose response is resp
// was sent to by [Endpoints.PerAddress]: an IP address, or "" when the
// attempt was not sent through a per-address pool. [OperationOf] gives
// it for a whole operation.
func AddressOf(resp *http.Response) string {
	if resp == nil || resp.Request == nil {
		return ""
	}
	if s := scopeOf(resp.Request.Context()); s != nil {
		return s.addr
	}
	return ""
}

// RoundTrip sends req through the pool of one of its host's addresses.
func (p *perAddress) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil || req.URL.Host == "" {
		return p.base.RoundTrip(req) // let the base report the error
	}
	h := p.host(req)
	if h.direct {
		return p.base.RoundTrip(req)
	}
	ctx := req.Context()
	op := endpointOpOf(ctx)
	pl, err := p.pick(ctx, h, op.triedSnapshot())
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	op.addTried(pl)
	r := req.WithContext(withScope(ctx, func(s *scope) { s.addr = pl.ip }))
	resp, err := pl.rt.RoundTrip(r)
	p.record(h, pl, req, resp, err)
	if err == nil {
		op.served("", pl.ip)
	}
	return resp, err
}
