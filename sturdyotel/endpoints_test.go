package sturdyotel

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"

	"go.opentelemetry.io/otel/attribute"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// spanAttr returns the value of key among kvs, "" when absent.
func spanAttr(kvs []attribute.KeyValue, key string) string {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// TestEndpointsTelemetry: with Endpoints, each attempt span carries the
// origin it went to (server.address) and the address (network.peer.address);
// an ejection and a failover are counted.
func TestEndpointsTelemetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := httptestutil.NewNetwork()
		ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
		var srvs []*httptestutil.Server
		for _, a := range []string{"10.0.0.1:80", "10.0.0.3:80", "10.0.1.1:80"} {
			srvs = append(srvs, n.Serve(a, ok))
		}
		srvs = append(srvs, n.Serve("10.0.0.2:80", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
		})))
		n.RefuseWhen("10.0.9.9:80", func() bool { return true }) // the down origin's one address
		base := n.Transport()
		t.Cleanup(func() {
			base.CloseIdleConnections()
			for _, s := range srvs {
				s.Close()
			}
		})
		lookup := func(_ context.Context, host string) ([]string, error) {
			switch host {
			case "api.test":
				return []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}, nil
			case "alt.test":
				return []string{"10.0.1.1"}, nil
			}
			return []string{"10.0.9.9"}, nil
		}
		p := newPipeline(t)
		rt := transport.New(p.telemetry().Apply(transport.Options{
			Base: base,
			Endpoints: transport.Endpoints{
				PerAddress: true,
				LookupHost: lookup,
				Outlier:    policy.Outlier{ConsecutiveFailures: 1},
				Alternates: map[string][]string{"http://down.test": {"http://alt.test"}},
			},
		}))
		c := &http.Client{Transport: rt}
		defer c.CloseIdleConnections()
		for i := range 6 {
			resp, err := c.Get("http://api.test/x")
			if err != nil {
				t.Fatalf("GET %d: %v", i, err)
			}
			resp.Body.Close()
		}
		resp, err := c.Get("http://down.test/x")
		if err != nil {
			t.Fatalf("GET down.test: %v", err)
		}
		resp.Body.Close()

		peers := map[string]int{}
		var downSeen, altSeen bool
		for _, s := range p.spans.Ended() {
			attrs := s.Attributes()
			host, peer := spanAttr(attrs, "server.address"), spanAttr(attrs, "network.peer.address")
			peers[host+" "+peer]++
			switch host {
			case "down.test":
				downSeen = peer == "10.0.9.9"
			case "alt.test":
				altSeen = peer == "10.0.1.1"
			case "api.test":
				if !strings.HasPrefix(peer, "10.0.0.") {
					t.Errorf("span to api.test with network.peer.address %q", peer)
				}
			}
		}
		if !downSeen || !altSeen || peers["api.test 10.0.0.2"] != 1 {
			t.Errorf("spans by server.address and network.peer.address: %v; want the refused origin's, the alternate's, and one to the ejected address", peers)
		}
		m := p.metrics(t)
		for _, want := range []string{
			"sturdy.client.endpoints.ejections{network.peer.address=10.0.0.2 server.address=api.test server.port=80 sturdy.endpoints.ejections=1} = 1",
			"sturdy.client.endpoints.failovers{http.request.method=GET server.address=down.test server.port=80 sturdy.failover.reason=attempt failed sturdy.failover.to=http://alt.test} = 1",
		} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %s:\n%s", want, m)
			}
		}
	})
}
