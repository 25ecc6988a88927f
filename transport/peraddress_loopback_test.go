package transport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// loopbackIPs are three addresses of one host. Linux routes all of
// 127.0.0.0/8 to the loopback interface, so each can be listened on.
var loopbackIPs = []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}

// listenThree listens on each of loopbackIPs on one port, and returns the
// listeners and the port.
func listenThree(t *testing.T) ([]net.Listener, string) {
	t.Helper()
	for try := 0; try < 20; try++ {
		l0, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(l0.Addr().String())
		ls := []net.Listener{l0}
		for _, ip := range loopbackIPs[1:] {
			l, err := net.Listen("tcp", net.JoinHostPort(ip, port))
			if err != nil {
				break
			}
			ls = append(ls, l)
		}
		if len(ls) == len(loopbackIPs) {
			return ls, port
		}
		for _, l := range ls {
			l.Close()
		}
	}
	t.Skip("cannot listen on 127.0.0.1-3 on one port")
	return nil, ""
}

// lookupThree resolves every name to loopbackIPs.
func lookupThree(context.Context, string) ([]string, error) {
	return append([]string(nil), loopbackIPs...), nil
}

// roundRobinDial is how a bare client meets a host with three addresses:
// each new connection goes to one of them, as DNS round robin gives them.
func roundRobinDial(port string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, net.JoinHostPort(loopbackIPs[mrand.IntN(len(loopbackIPs))], port))
	}
}

// addrCounts counts the requests each address got, per client, before
// and after a time.
type addrCounts struct {
	mu     sync.Mutex
	after  time.Time
	counts map[string]map[string][2]int // client -> address -> before, after
}

func (c *addrCounts) add(client, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.counts[client]
	if m == nil {
		m = map[string][2]int{}
		c.counts[client] = m
	}
	v := m[addr]
	if !c.after.IsZero() && time.Now().After(c.after) {
		v[1]++
	} else {
		v[0]++
	}
	m[addr] = v
}

// share returns the share of client's requests after the mark that went
// to addr, and how many there were.
func (c *addrCounts) share(client, addr string) (float64, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	total := 0
	for _, v := range c.counts[client] {
		total += v[1]
	}
	if total == 0 {
		return 0, 0
	}
	return float64(c.counts[client][addr][1]) / float64(total), total
}

// TestPerAddressEjectsABadAddress: one address of three answers 503, or
// accepts and never answers. With PerAddress, callers' failures stay
// under 0.5% and, after the first second, the bad address gets under 5%
// of attempts. The bare client and the stack without PerAddress run
// beside it, on the same servers, for comparison.
func TestPerAddressEjectsABadAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for seconds")
	}
	tests := []struct {
		name string
		hang bool
	}{
		{"503", false},
		{"hang", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ls, port := listenThree(t)
			bad := loopbackIPs[1]
			counts := &addrCounts{counts: map[string]map[string][2]int{}}
			stop := make(chan struct{})
			var srvs []*http.Server
			for _, l := range ls {
				ip, _, _ := net.SplitHostPort(l.Addr().String())
				srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					counts.add(r.Header.Get("X-Client"), ip)
					if ip != bad {
						io.WriteString(w, "ok")
						return
					}
					if tt.hang {
						select {
						case <-r.Context().Done():
						case <-stop:
						}
						return
					}
					w.WriteHeader(http.StatusServiceUnavailable)
				})}
				srvs = append(srvs, srv)
				go srv.Serve(l)
			}
			defer func() {
				close(stop)
				for _, s := range srvs {
					s.Close()
				}
			}()

			url := "http://api.sturdy.test:" + port + "/v1/thing"
			rrBase := func() *http.Transport {
				return &http.Transport{DialContext: roundRobinDial(port), MaxIdleConnsPerHost: 100}
			}
			attempt := 200 * time.Millisecond
			bareRT := rrBase()
			plainRT := New(Options{Base: rrBase(), AttemptTimeout: attempt})
			var opened atomic.Int64 // the PerAddress stack's breaker opening: its host is not down
			perRT := New(Options{Base: &http.Transport{MaxIdleConnsPerHost: 100}, AttemptTimeout: attempt,
				Endpoints: Endpoints{PerAddress: true, LookupHost: lookupThree},
				Hooks: Hooks{OnBreakerStateChange: func(_ string, _, to BreakerState) {
					if to == BreakerOpen {
						opened.Add(1)
					}
				}}})
			clients := []struct {
				name string
				c    *http.Client
			}{
				{"bare", &http.Client{Transport: bareRT, Timeout: time.Second}},
				{"sturdy", &http.Client{Transport: plainRT}},
				{"sturdy+PerAddress", &http.Client{Transport: perRT}},
			}
			defer func() {
				for _, c := range clients {
					c.c.CloseIdleConnections()
				}
			}()

			const workers = 6
			run := 3 * time.Second
			start := time.Now()
			counts.mu.Lock()
			counts.after = start.Add(time.Second)
			counts.mu.Unlock()
			ops := make([]atomic.Int64, len(clients))
			fails := make([]atomic.Int64, len(clients))
			var wg sync.WaitGroup
			for ci, c := range clients {
				for range workers {
					wg.Go(func() {
						for time.Since(start) < run {
							req, _ := http.NewRequest(http.MethodGet, url, nil)
							req.Header.Set("X-Client", c.name)
							resp, err := c.c.Do(req)
							ops[ci].Add(1)
							if err != nil {
								fails[ci].Add(1)
								continue
							}
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
							if resp.StatusCode != http.StatusOK {
								fails[ci].Add(1)
							}
						}
					})
				}
			}
			wg.Wait()
			for ci, c := range clients {
				share, n := counts.share(c.name, bad)
				t.Logf("%-18s operations %5d, failed %5d (%.2f%%); after 1s the bad address got %.2f%% of %d attempts",
					c.name, ops[ci].Load(), fails[ci].Load(), 100*float64(fails[ci].Load())/float64(max(ops[ci].Load(), 1)), 100*share, n)
			}
			per := len(clients) - 1
			if got, n := fails[per].Load(), ops[per].Load(); n < 100 || float64(got) > 0.005*float64(n) {
				t.Errorf("PerAddress: %d of %d operations failed, want at most 0.5%% (and 100 operations at least)", got, n)
			}
			if got, n := counts.share(clients[per].name, bad); n == 0 || got >= 0.05 {
				t.Errorf("PerAddress: the bad address got %.2f%% of %d attempts after the first second, want under 5%%", 100*got, n)
			}
			if n := opened.Load(); n != 0 {
				t.Errorf("PerAddress: the host's breaker opened %d times, want never: one bad address of three is not the host's failure", n)
			}
			// Never worse than the bare client, beyond the noise of a
			// fault that a few operations may meet before the ejection.
			if p, b := float64(fails[per].Load())/float64(max(ops[per].Load(), 1)), float64(fails[0].Load())/float64(max(ops[0].Load(), 1)); p > b+0.005 {
				t.Errorf("PerAddress failed %.2f%% of operations, the bare client %.2f%%", 100*p, 100*b)
			}
		})
	}
}

// TestPerAddressRetriesGoToUntriedAddresses: with all three addresses
// answering 503 and no ejection, each operation's three attempts go to
// three different addresses, even with operations running at once.
func TestPerAddressRetriesGoToUntriedAddresses(t *testing.T) {
	ls, port := listenThree(t)
	var mu sync.Mutex
	seen := map[string][]string{} // operation -> addresses
	var srvs []*http.Server
	for _, l := range ls {
		ip, _, _ := net.SplitHostPort(l.Addr().String())
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[r.Header.Get("X-Op")] = append(seen[r.Header.Get("X-Op")], ip)
			mu.Unlock()
			w.WriteHeader(http.StatusServiceUnavailable)
		})}
		srvs = append(srvs, srv)
		go srv.Serve(l)
	}
	defer func() {
		for _, s := range srvs {
			s.Close()
		}
	}()
	rt := New(Options{
		Retry:     policy.Retry{MaxAttempts: 3, Backoff: constant(time.Millisecond)},
		Disable:   LayerBreaker | LayerRetryBudget,
		Endpoints: Endpoints{PerAddress: true, LookupHost: lookupThree, Outlier: policy.Outlier{ConsecutiveFailures: -1}},
	})
	c := &http.Client{Transport: rt}
	defer c.CloseIdleConnections()
	const ops = 24
	var wg sync.WaitGroup
	for i := range ops {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, "http://api.sturdy.test:"+port+"/", nil)
			req.Header.Set("X-Op", strconv.Itoa(i))
			resp, err := c.Do(req)
			if err != nil {
				t.Errorf("op %d: %v", i, err)
				return
			}
			resp.Body.Close()
		})
	}
	wg.Wait()
	for op, addrs := range seen {
		distinct := map[string]bool{}
		for _, a := range addrs {
			distinct[a] = true
		}
		if len(addrs) != 3 || len(distinct) != 3 {
			t.Errorf("op %s went to %v, want three attempts to three addresses", op, addrs)
		}
	}
	if len(seen) != ops {
		t.Errorf("saw %d operations, want %d", len(seen), ops)
	}
}

// testCert returns a self-signed certificate for name, and a pool that
// trusts it.
func testCert(t *testing.T, name string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		DNSNames:              []string{name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// TestPerAddressTLSAndHTTP2: per-address pools verify the certificate
// for the host name, not the address, and speak HTTP/2 as the base
// negotiates it, one connection per address.
func TestPerAddressTLSAndHTTP2(t *testing.T) {
	const name = "api.sturdy.test"
	cert, pool := testCert(t, name)
	ls, port := listenThree(t)
	var mu sync.Mutex
	byAddr := map[string]int{}
	conns := map[string]bool{}
	var srvs []*http.Server
	for _, l := range ls {
		ip, _, _ := net.SplitHostPort(l.Addr().String())
		srv := &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				byAddr[ip]++
				conns[r.RemoteAddr+"->"+ip] = true
				mu.Unlock()
				fmt.Fprintf(w, "%s %s", r.Proto, r.TLS.ServerName)
			}),
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}},
			ErrorLog:  log.New(io.Discard, "", 0), // the other name's failed handshakes
		}
		srvs = append(srvs, srv)
		go srv.ServeTLS(l, "", "")
	}
	defer func() {
		for _, s := range srvs {
			s.Close()
		}
	}()
	base := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	rt := New(Options{Base: base, Endpoints: Endpoints{PerAddress: true, LookupHost: lookupThree}})
	c := &http.Client{Transport: rt}
	defer c.CloseIdleConnections()
	for i := range 30 {
		resp, err := c.Get("https://" + name + ":" + port + "/")
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body := readAll(t, resp)
		if resp.ProtoMajor != 2 || body != "HTTP/2.0 "+name {
			t.Fatalf("request %d: proto %s, body %q; want HTTP/2 and SNI %s", i, resp.Proto, body, name)
		}
		op, ok := OperationOf(resp)
		if !ok || op.Address == "" || op.Address != AddressOf(resp) || op.Origin != "https://"+name+":"+port {
			t.Fatalf("OperationOf = %+v, %v, AddressOf = %q; want the address and origin https://%s:%s", op, ok, AddressOf(resp), name, port)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, ip := range loopbackIPs {
		if byAddr[ip] < 5 {
			t.Errorf("address %s served %d of 30 requests, want them spread (%v)", ip, byAddr[ip], byAddr)
		}
	}
	if len(conns) != len(loopbackIPs) {
		t.Errorf("%d connections, want one HTTP/2 connection per address: %v", len(conns), conns)
	}

	// The certificate is checked against the host name: another name
	// that resolves to the same addresses fails verification.
	other := New(Options{Base: base.Clone(), Retry: policy.Retry{MaxAttempts: 1}, Endpoints: Endpoints{PerAddress: true, LookupHost: lookupThree}})
	oc := &http.Client{Transport: other}
	defer oc.CloseIdleConnections()
	_, err := oc.Get("https://other.sturdy.test:" + port + "/")
	var herr x509.HostnameError
	if !errors.As(err, &herr) {
		t.Errorf("another name: err = %v, want an x509.HostnameError", err)
	}
}

// TestPerAddressHedgesGoToUntriedAddresses: every address answers
// slowly; each operation's first copy and its hedges (one or two, as the
// retry budget allows) go to different addresses.
func TestPerAddressHedgesGoToUntriedAddresses(t *testing.T) {
	ls, port := listenThree(t)
	var mu sync.Mutex
	seen := map[string][]string{} // operation -> addresses
	stop := make(chan struct{})
	var srvs []*http.Server
	for _, l := range ls {
		ip, _, _ := net.SplitHostPort(l.Addr().String())
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[r.Header.Get("X-Op")] = append(seen[r.Header.Get("X-Op")], ip)
			mu.Unlock()
			select {
			case <-time.After(300 * time.Millisecond):
			case <-r.Context().Done():
			case <-stop:
			}
		})}
		srvs = append(srvs, srv)
		go srv.Serve(l)
	}
	defer func() {
		close(stop)
		for _, s := range srvs {
			s.Close()
		}
	}()
	rt := New(Options{
		Hedge:     &policy.Hedge{Delay: 20 * time.Millisecond, MaxHedges: 2},
		Endpoints: Endpoints{PerAddress: true, LookupHost: lookupThree},
	})
	c := &http.Client{Transport: rt}
	defer c.CloseIdleConnections()
	const ops = 8
	var wg sync.WaitGroup
	for i := range ops {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, "http://api.sturdy.test:"+port+"/", nil)
			req.Header.Set("X-Op", strconv.Itoa(i))
			resp, err := c.Do(req)
			if err != nil {
				t.Errorf("op %d: %v", i, err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for op, addrs := range seen {
		distinct := map[string]bool{}
		for _, a := range addrs {
			distinct[a] = true
		}
		if len(addrs) < 2 || len(distinct) != len(addrs) {
			t.Errorf("op %s went to %v, want hedges, each to an address of its own", op, addrs)
		}
	}
	if len(seen) != ops {
		t.Errorf("saw %d operations, want %d", len(seen), ops)
	}
}
