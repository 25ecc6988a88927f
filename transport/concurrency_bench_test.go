package transport

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/sturdyhttp/sturdy/policy"
)

// BenchmarkConcurrencySuccess measures what Options.Concurrency adds to a
// request that succeeds: New with and without it, and the layer alone
// above a base that costs nothing, beside one uncontended atomic add
// measured in the same run.
func BenchmarkConcurrencySuccess(b *testing.B) {
	b.Run("atomic-add", func(b *testing.B) {
		var n atomic.Int64
		for b.Loop() {
			n.Add(1)
		}
	})
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}
	free := Func(func(*http.Request) (*http.Response, error) { return resp, nil })
	req, _ := http.NewRequest("GET", "http://api.test/v1/things", nil)
	for _, s := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"free-base", free},
		{"Concurrency-layer", Chain(free, Concurrency(&policy.Concurrency{}))},
	} {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.rt.RoundTrip(req)
			}
		})
	}
	benchGetPost(b, "New", New(Options{Base: memBase}), "http://api.test/v1/things")
	benchGetPost(b, "New+Concurrency", New(Options{Base: memBase, Concurrency: &policy.Concurrency{}}), "http://api.test/v1/things")
}
