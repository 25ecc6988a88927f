package faultproxy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"

	"github.com/sturdyhttp/sturdy/transport"
)

// perAddressIPs are the three addresses of the host in
// TestFaultProxyPerAddress: Linux routes all of 127.0.0.0/8 to loopback.
var perAddressIPs = []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}

// freePortOnAll returns a port free on every one of ips.
func freePortOnAll(ips []string) (string, error) {
	for range 20 {
		l, err := net.Listen("tcp", ips[0]+":0")
		if err != nil {
			return "", err
		}
		_, port, _ := net.SplitHostPort(l.Addr().String())
		ls := []net.Listener{l}
		for _, ip := range ips[1:] {
			if l, err := net.Listen("tcp", net.JoinHostPort(ip, port)); err == nil {
				ls = append(ls, l)
			}
		}
		for _, l := range ls {
			l.Close()
		}
		if len(ls) == len(ips) {
			return port, nil
		}
	}
	return "", fmt.Errorf("faultproxy: no port free on all of %v", ips)
}

// TestFaultProxyPerAddress: one host name, three addresses, each a
// toxiproxy proxy to the same upstream; one of them hangs every
// connection, or refuses them. sturdy with Endpoints.PerAddress ejects it
// within a second and fails at most 0.5% of operations; sturdy without
// it, and plain net/http, spread over the three addresses as DNS round
// robin would, run beside it.
func TestFaultProxyPerAddress(t *testing.T) {
	tp := server(t)
	verifyNoLeaks(t)
	s := Settings{Workers: 16, Pace: 20 * time.Millisecond, Ops: 800, Deadline: 2 * time.Second, Attempt: 250 * time.Millisecond,
		MinBody: 512, MaxBody: 2048, Vouched: true}
	tests := []struct {
		name  string
		fault func(px *toxiproxy.Proxy) error
	}{
		{"one address hangs", func(px *toxiproxy.Proxy) error {
			_, err := px.AddToxic("hang", "timeout", "downstream", 1, toxiproxy.Attributes{"timeout": 0})
			return err
		}},
		{"one address refuses", (*toxiproxy.Proxy).Disable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := NewUpstream(UpstreamOptions{Dedup: s.Vouched})
			defer up.Close()
			port, err := freePortOnAll(perAddressIPs)
			if err != nil {
				t.Skip(err)
			}
			var pxs []*toxiproxy.Proxy
			for i, ip := range perAddressIPs {
				px, err := tp.Client.CreateProxy(fmt.Sprintf("peraddress-%d-%d", time.Now().UnixNano(), i), net.JoinHostPort(ip, port), up.Addr)
				if err != nil {
					t.Fatal(err)
				}
				defer px.Delete()
				pxs = append(pxs, px)
			}
			if err := tt.fault(pxs[1]); err != nil {
				t.Fatal(err)
			}
			url := "http://api.faultproxy.test:" + port + "/charges"
			var d net.Dialer
			roundRobin := func() *http.Transport {
				t := http.DefaultTransport.(*http.Transport).Clone()
				t.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
					return d.DialContext(ctx, network, net.JoinHostPort(perAddressIPs[rand.IntN(len(perAddressIPs))], port))
				}
				return t
			}
			var ejected atomic.Int64 // Unix nanoseconds of the first ejection of the bad address
			start := time.Now()
			clients := []Client{
				SturdyWith("sturdy+PerAddress", transport.Options{Endpoints: transport.Endpoints{
					PerAddress: true,
					LookupHost: func(context.Context, string) ([]string, error) { return perAddressIPs, nil },
					OnEject: func(e transport.EjectionEvent) {
						if e.Address == perAddressIPs[1] {
							ejected.CompareAndSwap(0, time.Now().UnixNano())
						}
					},
				}}),
				SturdyWith("sturdy", transport.Options{Base: roundRobin()}),
				{Name: "net/http", Bare: true, New: func(s Settings) (Doer, func()) {
					c := &http.Client{Timeout: s.Attempt, Transport: roundRobin()}
					return c.Do, c.CloseIdleConnections
				}},
			}
			type row struct{ ops, ok, dup int }
			rows := make([]row, len(clients))
			var wg sync.WaitGroup
			for ci, c := range clients {
				wg.Go(func() {
					do, release := c.New(s)
					defer release()
					ops := makeOps("peraddress/"+tt.name+"/"+c.Name, s)
					work := make(chan *Op)
					var inner sync.WaitGroup
					for range s.Workers {
						inner.Go(func() {
							for op := range work {
								next := time.Now().Add(s.Pace)
								runOp(t.Context(), do, url, op, s)
								time.Sleep(time.Until(next))
							}
						})
					}
					for _, op := range ops {
						work <- op
					}
					close(work)
					inner.Wait()
					for _, op := range ops {
						rows[ci].ops++
						if op.OK {
							rows[ci].ok++
						}
						if n := up.Effects(op.ID); n > 1 {
							rows[ci].dup += n - 1
						}
					}
				})
			}
			wg.Wait()
			for ci, c := range clients {
				r := rows[ci]
				t.Logf("%-18s %4d operations, %4d failed (%.2f%%), %d duplicate side effects", c.Name, r.ops, r.ops-r.ok, 100*float64(r.ops-r.ok)/float64(r.ops), r.dup)
				if r.dup > 0 && !c.Bare {
					t.Errorf("%s: %d duplicate side effects, want none", c.Name, r.dup)
				}
			}
			per := rows[0]
			if failed := per.ops - per.ok; float64(failed) > 0.005*float64(per.ops) {
				t.Errorf("sturdy+PerAddress failed %d of %d operations, want at most 0.5%%", failed, per.ops)
			}
			if at := ejected.Load(); at == 0 {
				t.Errorf("the bad address was never ejected")
			} else if took := time.Unix(0, at).Sub(start); took > time.Second {
				t.Errorf("the bad address was ejected %v after the start, want within 1s", took)
			} else {
				t.Logf("the bad address was ejected %v after the start", took.Round(time.Millisecond))
			}
			if bare := rows[2]; per.ok < bare.ok-int(Allowed(0, per.ops, bare.ops-bare.ok, bare.ops)) {
				t.Errorf("sturdy+PerAddress delivered %d, plain net/http %d", per.ok, bare.ok)
			}
		})
	}
}
