package transport

import (
	"io"
	"net/http"
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
	payload := strings.Repeat("p", 1024)
	for _, l := range benchLayers() {
		b.Run(l.name+"/GET", func(b *testing.B) {
			req, _ := http.NewRequest("GET", "http://api.test/v1/things", nil)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := l.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
		b.Run(l.name+"/POST-GetBody", func(b *testing.B) {
			req, _ := http.NewRequest("POST", "http://api.test/v1/things", strings.NewReader(payload))
			b.ReportAllocs()
			for b.Loop() {
				req.Body, _ = req.GetBody()
				resp, err := l.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
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
	payload := strings.Repeat("p", 1024)
	for _, s := range stacks {
		b.Run(s.name+"/GET", func(b *testing.B) {
			req, _ := http.NewRequest("GET", "http://api.test/v1/things", nil)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := s.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
		b.Run(s.name+"/POST-GetBody", func(b *testing.B) {
			req, _ := http.NewRequest("POST", "http://api.test/v1/things", strings.NewReader(payload))
			b.ReportAllocs()
			for b.Loop() {
				req.Body, _ = req.GetBody()
				resp, err := s.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
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
	payload := strings.Repeat("p", 1024)
	for _, s := range stacks {
		b.Run(s.name+"/GET", func(b *testing.B) {
			req, _ := http.NewRequest("GET", srv.URL+"/v1/things", nil)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := s.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
		b.Run(s.name+"/POST-GetBody", func(b *testing.B) {
			req, _ := http.NewRequest("POST", srv.URL+"/v1/things", strings.NewReader(payload))
			b.ReportAllocs()
			for b.Loop() {
				req.Body, _ = req.GetBody()
				resp, err := s.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
