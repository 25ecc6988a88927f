package transport_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/sturdyhttp/sturdy/transport"
)

// One POST sent once, whatever the stack's retry policy: the server
// answers 503, and the call gets that answer after one attempt.
func ExampleWithAttempts() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	client := &http.Client{Transport: transport.New(transport.Options{})}

	ctx := transport.WithAttempts(context.Background(), 1) // this call only: no retry
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	op, _ := transport.OperationOf(resp)
	fmt.Println(resp.StatusCode, op.Attempts)
	// Output: 503 1
}

// gobreaker's own settings, for each host's circuit, in place of the
// default circuits.
func ExampleGoBreaker() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	}))
	defer srv.Close()
	client := &http.Client{Transport: transport.New(transport.Options{
		GoBreaker: &transport.GoBreakerSettings{Settings: gobreaker.Settings{
			Interval:    time.Minute,
			Timeout:     10 * time.Second,
			ReadyToTrip: func(c gobreaker.Counts) bool { return c.Requests >= 20 && c.TotalFailures*2 >= c.Requests },
		}},
	})}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.Status)
	// Output: 200 OK
}
