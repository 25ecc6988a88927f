package transport_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// A GET whose first copy stalls is sent again after 20ms, and the copy
// that is answered wins; the stalled one is canceled. (The server stalls
// whichever request reaches it first, so the example does not depend on
// which copy the network delivers first.)
func ExampleHedge() {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			<-r.Context().Done() // the first to arrive stalls until canceled
			return
		}
		io.WriteString(w, "answered the second request to arrive")
	}))
	defer srv.Close()

	client := &http.Client{Transport: transport.Chain(nil,
		transport.Hedge(policy.Hedge{
			Delay:   20 * time.Millisecond,
			OnHedge: func(e policy.HedgeEvent) { fmt.Println("copy", e.Copy, "sent") },
		}))}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body))
	// Output:
	// copy 2 sent
	// 200 answered the second request to arrive
}

// A server that fails everything: once 20 requests have failed, the
// throttle sheds most requests locally, unsent, with ErrThrottled.
func ExampleThrottle() {
	var served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	client := &http.Client{Transport: transport.Chain(nil, transport.Throttle(&policy.Throttle{}))}
	shed := 0
	for range 200 {
		resp, err := client.Get(srv.URL)
		if errors.Is(err, transport.ErrThrottled) {
			shed++
			continue
		}
		if err == nil {
			resp.Body.Close()
		}
	}
	fmt.Println("most shed:", shed > 150, "served + shed:", int(served.Load())+shed)
	// Output:
	// most shed: true served + shed: 200
}
