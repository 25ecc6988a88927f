package transport

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/policy"
)

// memBase is an in-memory base transport: it consumes the request body and
// answers 200 with a small body, so that benchmarks measure the stack's
// own cost.
var memBase = Func(func(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), ContentLength: 2}, nil
})

func benchLayers() []struct {
	name string
	rt   http.RoundTripper
} {
	return []struct {
		name string
		rt   http.RoundTripper
	}{
		{"bare", memBase},
		{"Deadline", Chain(memBase, Deadline(time.Minute))},
		{"Retry", Chain(memBase, Retry(policy.Retry{}))},
		{"IdempotencyKey", Chain(memBase, IdempotencyKey(idempotency.Options{}))},
		{"Key+Deadline+Retry+Deadline", Chain(memBase,
			IdempotencyKey(idempotency.Options{}), Deadline(time.Minute), Retry(policy.Retry{}), Deadline(10*time.Second))},
	}
}

func BenchmarkLayers(b *testing.B) {
	for _, l := range benchLayers() {
		benchGetPost(b, l.name, l.rt, "http://api.test/v1/things")
	}
}

func BenchmarkNew(b *testing.B) {
	noop := Hooks{
		OnAttempt: func(policy.AttemptEvent) {},
		OnRetry:   func(policy.RetryEvent) {},
		OnGiveUp:  func(policy.GiveUpEvent) {},
	}
	stacks := []struct {
		name string
		rt   http.RoundTripper
	}{
		{"bare", memBase},
		{"New", New(Options{Base: memBase})},
		{"New+AttemptTimeout", New(Options{Base: memBase, AttemptTimeout: 10 * time.Second})},
		{"New+hooks", New(Options{Base: memBase, Hooks: noop})},
	}
	for _, s := range stacks {
		benchGetPost(b, s.name, s.rt, "http://api.test/v1/things")
	}
}

// BenchmarkNewWithout measures New with one layer switched off at a
// time, to show what each layer costs a request that succeeds: the
// difference between "all" and a row is that layer's share.
func BenchmarkNewWithout(b *testing.B) {
	for _, s := range []struct {
		name string
		d    Layer
	}{
		{"all", 0},
		{"-key", LayerIdempotencyKey},
		{"-timeout", LayerTimeout | LayerIdleTimeout},
		{"-retry", LayerRetry},
		{"-rate", LayerRateLimit},
		{"-breaker", LayerBreaker},
		{"-attempt", LayerAttemptTimeout},
		{"none", LayerIdempotencyKey | LayerTimeout | LayerIdleTimeout | LayerRetry | LayerRateLimit | LayerBreaker | LayerAttemptTimeout},
	} {
		benchGetPost(b, s.name, New(Options{Base: memBase, Disable: s.d}), "http://api.test/v1/things")
	}
}

// BenchmarkNewPipe measures the stack over a real http.Transport and
// http.Server on the in-memory network: HTTP/1.1 on net.Pipe, no kernel
// sockets.
func BenchmarkNewPipe(b *testing.B) {
	n := httptestutil.NewNetwork()
	srv := n.Serve("api.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	base := n.Transport()
	defer base.CloseIdleConnections()
	stacks := []struct {
		name string
		rt   http.RoundTripper
	}{
		{"bare", base},
		{"New", New(Options{Base: base})},
		{"Retry", Chain(base, Retry(policy.Retry{}))},
	}
	for _, s := range stacks {
		benchGetPost(b, s.name, s.rt, srv.URL+"/v1/things")
	}
}

// benchGetPost runs rt on a GET and on a POST of 1 KiB with GetBody, the
// response read and closed each time.
func benchGetPost(b *testing.B, name string, rt http.RoundTripper, url string) {
	run := func(b *testing.B, req *http.Request) {
		b.ReportAllocs()
		for b.Loop() {
			if req.GetBody != nil {
				req.Body, _ = req.GetBody()
			}
			resp, err := rt.RoundTrip(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	b.Run(name+"/GET", func(b *testing.B) {
		req, _ := http.NewRequest("GET", url, nil)
		run(b, req)
	})
	b.Run(name+"/POST-GetBody", func(b *testing.B) {
		req, _ := http.NewRequest("POST", url, strings.NewReader(strings.Repeat("p", 1024)))
		run(b, req)
	})
}

// BenchmarkEndpoints measures a GET and a POST over loopback sockets to
// one host name: New with its base dialing the name's address, New with
// Endpoints.PerAddress (a pool per address, the name resolved by
// LookupHost), and New with an alternate origin that a healthy origin
// never needs.
func BenchmarkEndpoints(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	dialer := &net.Dialer{}
	named := func() *http.Transport { // dials the name's one address, as a resolver would give it
		return &http.Transport{MaxIdleConnsPerHost: 100, DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
		}}
	}
	lookup := func(context.Context, string) ([]string, error) { return []string{"127.0.0.1"}, nil }
	url := "http://api.sturdy.test:" + port
	bare, plain, per, alt := named(), named(), &http.Transport{MaxIdleConnsPerHost: 100}, named()
	stacks := []struct {
		name string
		rt   http.RoundTripper
	}{
		{"bare", bare},
		{"New", New(Options{Base: plain})},
		{"New+PerAddress", New(Options{Base: per, Endpoints: Endpoints{PerAddress: true, LookupHost: lookup}})},
		{"New+Alternates", New(Options{Base: alt, Endpoints: Endpoints{Alternates: map[string][]string{url: {"http://alternate.sturdy.test"}}}})},
	}
	for _, s := range stacks {
		benchGetPost(b, s.name, s.rt, url+"/v1/things")
		closeIdle(s.rt)
	}
}
