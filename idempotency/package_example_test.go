package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/transport"
)

// Both halves: the server deduplicates by key with Handler, and the
// client sends one key per logical operation. Here the caller names the
// operation itself with WithKey (an order ID that survives a restart),
// and sends it twice, as a job queue that redelivers a job would: the
// charge is made once, and the second answer is the first one, replayed.
func Example() {
	var charges atomic.Int32
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, charges.Add(1))
	})
	server := idempotency.Handler(charge, idempotency.HandlerOptions{})
	client := &http.Client{Transport: transport.Chain(httptestutil.NewHandlerTransport(server),
		transport.IdempotencyKey(idempotency.Options{}),
	)}

	ctx := idempotency.WithKey(context.Background(), "order-1234")
	for range 2 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://pay.example.com/charges", strings.NewReader(`{"amount":1200}`))
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%s %s replayed=%q\n", resp.Status, body, resp.Header.Get(idempotency.ReplayedHeader))
	}
	fmt.Println("charges made:", charges.Load())
	// Output:
	// 201 Created {"charge":1} replayed=""
	// 201 Created {"charge":1} replayed="true"
	// charges made: 1
}
