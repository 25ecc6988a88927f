package transport

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// A RoundTripper sturdy did not write, between a bound and FirstEvent,
// that sends a shadow copy of each request (same context) on a goroutine:
// judgedMedia writes the bound's context from two goroutines.
func TestJudgedMediaConcurrentWrites(t *testing.T) {
	base := Func(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
	})
	var wg sync.WaitGroup
	mirror := func(next http.RoundTripper) http.RoundTripper {
		return Func(func(r *http.Request) (*http.Response, error) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if resp, err := next.RoundTrip(r.Clone(r.Context())); err == nil {
					resp.Body.Close()
				}
			}()
			return next.RoundTrip(r)
		})
	}
	rt := Chain(base, Deadline(time.Minute), mirror, FirstEvent(0, policy.Stream{}))
	for range 50 {
		req, _ := http.NewRequest("GET", "http://api.test/x", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	wg.Wait()
}
