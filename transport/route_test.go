package transport

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/policy"
)

// Promise: vouching for a route (host and path prefix) makes the POSTs
// to that route safe to send again, and no other POST to its host. The
// bare client beside the stack gets the same answers.
func TestVouchedRoute(t *testing.T) {
	tests := []struct {
		path string
		want int // requests the server gets for one call that meets 503s
	}{
		{"/v1/chat/completions", 4},
		{"/v1/files", 1},
		{"/v1/batches", 1},
		{"/v1/chat/completions/../../files", 1},
	}
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		got := map[string]int{}
		keyed := map[string]int{} // requests that carried a key
		env := newFakeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got[r.URL.Path]++
			if r.Header.Get("Idempotency-Key") != "" {
				keyed[r.URL.Path]++
			}
			mu.Unlock()
			http.Error(w, "overloaded", 503)
		}))
		c := newStack(env, Options{
			Disable:     LayerBreaker,
			Retry:       policy.Retry{Backoff: constant(10 * time.Millisecond)},
			Idempotency: idempotency.Options{Hosts: []string{"api.test/v1/chat/completions"}},
		})
		bare := &http.Client{Transport: env.base}
		for _, tt := range tests {
			for _, client := range []*http.Client{c, bare} {
				req, _ := http.NewRequest("POST", env.url+tt.path, strings.NewReader(`{"model":"m"}`))
				req.URL.Path = tt.path // kept as written, not cleaned by the URL parser
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("POST %s: %v", tt.path, err)
				}
				readAll(t, resp)
				if resp.StatusCode != 503 {
					t.Errorf("POST %s: status %d, want 503", tt.path, resp.StatusCode)
				}
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, tt := range tests {
			// The server sees the path as sent; the bare client sent it once.
			p := tt.path
			if n := got[p] - 1; n != tt.want {
				t.Errorf("POST %s: the server got %d requests from the stack, want %d", p, n, tt.want)
			}
		}
		if n := keyed["/v1/chat/completions"]; n != 4 {
			t.Errorf("%d POSTs to /v1/chat/completions carried an Idempotency-Key, want the stack's 4", n)
		}
		if n := keyed["/v1/files"]; n != 0 {
			t.Errorf("%d POSTs to /v1/files carried an Idempotency-Key, want none", n)
		}
	})
}
