// Package endpoint keeps a connection pool per resolved address of each
// host: it resolves hosts and resolves them again, picks the address an
// attempt goes to, and ejects an address that fails as [policy.Outlier]
// says. transport.PerAddress wires it to requests and operations.
package endpoint

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sturdyhttp/sturdy/internal/hosts"
	"github.com/sturdyhttp/sturdy/policy"
)

// staleRefresh is the least time between two resolutions of a host after
// a connection to one of its addresses failed.
const staleRefresh = time.Second

// Config is what [Pools] needs to know, defaults applied by the caller.
type Config struct {
	// LookupHost resolves a host name; nil means net.DefaultResolver's.
	LookupHost func(ctx context.Context, host string) ([]string, error)
	// Outlier says when an address is ejected and for how long.
	Outlier policy.Outlier
	// Refresh is how often a host's addresses are resolved again; more
	// than zero.
	Refresh time.Duration
	// OnEject, when set, is called when an address is ejected.
	OnEject func(Ejection)
}

// Ejection reports an address of a host that was ejected.
type Ejection struct {
	Host      string // host and port
	Address   string
	Failures  int // in a row
	Ejections int // this one included
	Duration  time.Duration
}

// Pools is the per-address pools of every host a stack sends to.
type Pools struct {
	base    *http.Transport
	lookup  func(ctx context.Context, host string) ([]string, error)
	outlier policy.Outlier
	refresh time.Duration
	onEject func(Ejection)

	mu       sync.RWMutex
	hosts    map[hosts.Key]*Host
	maxHosts int // hosts with pools of their own; more use the base
}

// New returns the pools of clones of base.
func New(base *http.Transport, c Config) *Pools {
	p := &Pools{base: base, lookup: c.LookupHost, outlier: c.Outlier, refresh: c.Refresh, onEject: c.OnEject,
		hosts: make(map[hosts.Key]*Host), maxHosts: hosts.DefaultMaxHosts}
	if p.lookup == nil {
		p.lookup = net.DefaultResolver.LookupHost
	}
	return p
}

// Base returns the transport the pools are clones of, which serves the
// hosts that have none.
func (p *Pools) Base() *http.Transport { return p.base }

// Host is one host's addresses and their pools.
type Host struct {
	name, port string // the host name, and the port dialed
	hostport   string // for events
	direct     bool   // an IP address, or sent through a proxy: the base serves it

	mu        sync.Mutex
	addrs     []*Pool          // the addresses of the latest resolution
	pools     map[string]*Pool // every address seen, for CloseIdleConnections
	resolved  time.Time        // when the latest resolution ended
	stale     bool             // a connection failed: resolve again soon
	resolving chan struct{}    // closed when the resolution under way ends; nil when none
	rr        int              // where the next pick starts
	used      time.Time        // the latest pick
}

// Direct reports whether the base serves h: it is an IP address, is
// sent through a proxy, or found no room among the pools.
func (h *Host) Direct() bool { return h.direct }

// Pool is one address of a host and its connection pool.
type Pool struct {
	ip string
	rt *http.Transport
	a  policy.Address // guarded by the host's mu
}

// IP returns the address pl dials.
func (pl *Pool) IP() string { return pl.ip }

// RoundTrip sends req through pl's connection pool.
func (pl *Pool) RoundTrip(req *http.Request) (*http.Response, error) { return pl.rt.RoundTrip(req) }

// CloseIdleConnections closes the idle connections of every pool.
func (p *Pools) CloseIdleConnections() {
	p.base.CloseIdleConnections()
	p.mu.RLock()
	hs := make([]*Host, 0, len(p.hosts))
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

// Host returns req's Host, made on first use.
func (p *Pools) Host(req *http.Request) *Host {
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
		return &Host{direct: true} // no room: the base serves it
	}
	h = &Host{name: name, port: port, hostport: net.JoinHostPort(name, port), pools: make(map[string]*Pool)}
	h.direct = net.ParseIP(name) != nil
	if p.base.Proxy != nil && !h.direct {
		u, err := p.base.Proxy(req)
		h.direct = err != nil || u != nil
	}
	p.hosts[k] = h
	return h
}

// forgetIdle forgets the hosts not used for two refresh intervals and
// closes their idle connections, with p.mu held. It reports whether it
// made room.
func (p *Pools) forgetIdle() bool {
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
func (p *Pools) pool(ip, port string) *http.Transport {
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
func (p *Pools) resolve(ctx context.Context, h *Host, now time.Time) error {
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
		addrs := make([]*Pool, 0, len(ips))
		for _, ip := range ips {
			pl := h.pools[ip]
			if pl == nil {
				pl = &Pool{ip: ip, rt: p.pool(ip, h.port)}
				h.pools[ip] = pl
			}
			addrs = append(addrs, pl)
		}
		h.addrs = addrs
		return nil
	}
}

// Pick returns the address an attempt to h goes to: in turn, the first
// that is not ejected and the operation has not tried; else one not
// ejected; else one not tried; else any. It resolves h first when its
// addresses are due.
func (p *Pools) Pick(ctx context.Context, h *Host, tried []*Pool) (*Pool, error) {
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
	var best *Pool
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

// Record counts the outcome of an attempt sent to pl, as the attempt's
// verdict v says of its host (see policy.Judge), and ejects pl when
// policy.Outlier says so. err is the attempt's error.
func (p *Pools) Record(h *Host, pl *Pool, v policy.HostVerdict, err error) {
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
	e := Ejection{Host: h.hostport, Address: pl.ip, Failures: pl.a.Failures, Ejections: pl.a.Ejections, Duration: pl.a.EjectedUntil.Sub(now)}
	h.mu.Unlock()
	if eject && p.onEject != nil {
		p.onEject(e)
	}
}
