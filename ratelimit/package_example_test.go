package ratelimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/ratelimit"
	"github.com/sturdyhttp/sturdy/transport"
)

// The most common use is not to call this package at all but to let
// transport.New (or transport.RateLimitAware) read the server's quota
// headers. Here an API allows 3 requests an hour: the fourth request is
// not sent, since its wait for the reset is longer than
// Options.MaxWait, and the server never has to answer 429.
func Example() {
	api := httptestutil.NewRateLimitedAPI(httptestutil.RateLimitConfig{
		Limit: 3, Window: time.Hour, Family: httptestutil.FamilyGitHub,
	})
	client := &http.Client{Transport: transport.Chain(httptestutil.NewHandlerTransport(api),
		transport.RateLimitAware(ratelimit.Options{MaxWait: time.Minute}),
	)}

	for i := 1; i <= 4; i++ {
		resp, err := client.Get("https://api.example.com/v1/items")
		if errors.Is(err, ratelimit.ErrQuotaExhausted) {
			fmt.Printf("request %d: not sent, quota exhausted\n", i)
			continue
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Printf("request %d: %s, %s left\n", i, resp.Status, resp.Header.Get("X-RateLimit-Remaining"))
	}
	fmt.Printf("the server accepted %d and rejected %d\n", api.Accepted(), api.Rejected())
	// Output:
	// request 1: 200 OK, 2 left
	// request 2: 200 OK, 1 left
	// request 3: 200 OK, 0 left
	// request 4: not sent, quota exhausted
	// the server accepted 3 and rejected 0
}
