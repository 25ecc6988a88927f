package endpoint

import (
	"context"
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
)

// send sends req to a pool of its host picked by p, or through the base
// when the host has none, as transport.PerAddress does.
func send(p *Pools, req *http.Request) (*http.Response, error) {
	h := p.Host(req)
	if h.Direct() {
		return p.Base().RoundTrip(req)
	}
	pl, err := p.Pick(req.Context(), h, nil)
	if err != nil {
		return nil, err
	}
	resp, err := pl.RoundTrip(req)
	p.Record(h, pl, policy.JudgeHost(req, resp, err, false), err) // used alone: the pools judge the attempt themselves
	return resp, err
}

// TestPoolsForgetIdleHosts: past their bound of hosts, Pools forget the
// hosts idle for two refresh intervals; when none is, a new host is
// served by the base.
func TestPoolsForgetIdleHosts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := httptestutil.NewNetwork()
		srv := n.Serve("10.0.0.1:80", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
		base := n.Transport()
		t.Cleanup(func() {
			base.CloseIdleConnections()
			srv.Close()
		})
		// The base dials host names itself on the in-memory network:
		// a.test and b.test listen nowhere, so only a per-address pool
		// reaches 10.0.0.1.
		p := New(base, Config{Refresh: time.Second,
			LookupHost: func(context.Context, string) ([]string, error) { return []string{"10.0.0.1"}, nil }})
		p.maxHosts = 1
		get := func(host string) error {
			req, _ := http.NewRequest(http.MethodGet, "http://"+host+"/", nil)
			resp, err := send(p, req)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			return err
		}
		if err := get("a.test"); err != nil {
			t.Fatalf("first host: %v", err)
		}
		if err := get("b.test"); err == nil {
			t.Fatal("second host, the bound full: served through a pool, want the base (which cannot reach it)")
		}
		time.Sleep(3 * time.Second)
		if err := get("b.test"); err != nil {
			t.Fatalf("second host, the first idle: %v", err)
		}
		if got := len(p.hosts); got != 1 {
			t.Errorf("%d hosts kept, want 1", got)
		}
		p.CloseIdleConnections()
	})
}
