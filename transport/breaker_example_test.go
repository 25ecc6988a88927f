package transport_test

import (
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/transport"
)

// A host that fails opens its breaker: further requests fail fast without
// being sent, until the cooldown lets a probe through.
func ExampleBreaker() {
	n := httptestutil.NewNetwork()
	var down atomic.Bool
	down.Store(true)
	var hits atomic.Int32
	srv := n.Serve("api.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	base := n.Transport()
	defer base.CloseIdleConnections()

	client := &http.Client{Transport: transport.Chain(base, transport.Breaker(transport.BreakerSettings{
		ConsecutiveFailures: 2,
		Cooldown:            50 * time.Millisecond,
		OnStateChange: func(key string, from, to transport.BreakerState) {
			fmt.Printf("breaker %s: %v -> %v\n", key, from, to)
		},
	}))}
	get := func() {
		resp, err := client.Get(srv.URL + "/v1/models")
		if err != nil {
			fmt.Println("error, circuit open:", errors.Is(err, transport.ErrCircuitOpen))
			return
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
	}

	get()
	get()
	get()
	fmt.Println("requests that reached the server:", hits.Load())

	down.Store(false)
	time.Sleep(60 * time.Millisecond) // the cooldown
	get()
	get()
	// Output:
	// 503 Service Unavailable
	// breaker http://api.test: closed -> open
	// 503 Service Unavailable
	// error, circuit open: true
	// requests that reached the server: 2
	// breaker http://api.test: open -> half-open
	// breaker http://api.test: half-open -> closed
	// 200 OK
	// 200 OK
}

// A refusal says which breaker refused and when it will let a request
// through again.
func ExampleCircuitOpenError() {
	n := httptestutil.NewNetwork()
	srv := n.Serve("payments.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer srv.Close()
	base := n.Transport()
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: transport.Breaker(transport.BreakerSettings{
		ConsecutiveFailures: 1,
		Cooldown:            time.Minute,
	})(base)}

	resp, _ := client.Get(srv.URL)
	resp.Body.Close()
	_, err := client.Get(srv.URL)

	var ce *transport.CircuitOpenError
	if errors.As(err, &ce) {
		fmt.Println("key:", ce.Key)
		fmt.Println("state:", ce.State)
		fmt.Println("retry in about:", ce.RetryIn.Round(time.Minute))
	}
	// Output:
	// key: http://payments.test
	// state: open
	// retry in about: 1m0s
}
