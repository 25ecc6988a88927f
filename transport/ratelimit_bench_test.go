package transport

import (
	"net/http"
	"testing"

	"github.com/sturdyhttp/sturdy/ratelimit"
)

// rlBenchBase answers every request with the same response, allocating
// nothing, so that the benchmarks measure RateLimitAware's own cost.
func rlBenchBase(h http.Header) http.RoundTripper {
	resp := &http.Response{StatusCode: 200, Header: h, Body: http.NoBody}
	return Func(func(*http.Request) (*http.Response, error) { return resp, nil })
}

// rlBenchHeaders are typical responses: no quota headers, and each
// family with plenty left (a limit large enough that the tracker's count
// of requests sent never reaches it during a benchmark).
func rlBenchHeaders() []struct {
	name string
	h    http.Header
} {
	common := func(kv ...string) http.Header {
		h := http.Header{
			"Content-Type": {"application/json"},
			"Date":         {"Mon, 01 Jul 2013 17:27:06 GMT"},
			"Server":       {"nginx"},
			"Vary":         {"Accept-Encoding"},
		}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	return []struct {
		name string
		h    http.Header
	}{
		{"absent", common()},
		{"x-ratelimit", common(
			"X-RateLimit-Limit", "1000000000", "X-RateLimit-Remaining", "999999999",
			"X-RateLimit-Used", "1", "X-RateLimit-Reset", "1372700873")},
		{"openai", common(
			"x-ratelimit-limit-requests", "1000000000", "x-ratelimit-remaining-requests", "999999999",
			"x-ratelimit-reset-requests", "6m0s",
			"x-ratelimit-limit-tokens", "1000000000", "x-ratelimit-remaining-tokens", "999999000",
			"x-ratelimit-reset-tokens", "2m59.56s")},
		{"ietf-structured", common(
			"RateLimit-Policy", `"default";q=1000000000;w=3600`,
			"RateLimit", `"default";r=999999999;t=1800`)},
	}
}

// BenchmarkRateLimitAware measures the per-request cost of the layer over
// an in-memory base: "bare" is the base alone; the others put
// RateLimitAware over it with responses carrying each header family, or
// none.
func BenchmarkRateLimitAware(b *testing.B) {
	for _, hc := range rlBenchHeaders() {
		for _, layer := range []string{"bare", "aware"} {
			if layer == "bare" && hc.name != "absent" {
				continue
			}
			name := layer
			if layer == "aware" {
				name += "/" + hc.name
			}
			b.Run(name+"/serial", func(b *testing.B) {
				rt := rlBenchBase(hc.h)
				if layer == "aware" {
					rt = RateLimitAware(ratelimit.Options{})(rt)
				}
				req, _ := http.NewRequest("GET", "https://api.example.com/v1/things", nil)
				b.ReportAllocs()
				for b.Loop() {
					if _, err := rt.RoundTrip(req); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(name+"/parallel", func(b *testing.B) {
				rt := rlBenchBase(hc.h)
				if layer == "aware" {
					rt = RateLimitAware(ratelimit.Options{})(rt)
				}
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					req, _ := http.NewRequest("GET", "https://api.example.com/v1/things", nil)
					for pb.Next() {
						if _, err := rt.RoundTrip(req); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
		}
	}
}
