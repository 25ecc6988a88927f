package transport_test

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// Put the recommended stack under the http.Client you already have, or
// under an SDK's option for one (WithHTTPClient and the like); nothing
// else changes. Here the server is briefly overloaded and asks for a
// 20 ms pause: the stack waits as asked and tries again. Base and
// Backoff are set only to run the example in memory and quickly; leave
// them zero for a pooled transport and jittered backoff.
func Example() {
	api := httptestutil.Script(
		httptestutil.RetryAfterMS(http.StatusServiceUnavailable, 20),
		httptestutil.Status(http.StatusOK, "hello"),
	)
	client := &http.Client{Timeout: 30 * time.Second} // the client you have
	client.Transport = transport.New(transport.Options{
		Base:  httptestutil.NewHandlerTransport(api),
		Retry: policy.Retry{Backoff: policy.Exponential(time.Millisecond, time.Millisecond)},
		Hooks: transport.Hooks{OnRetry: func(e policy.RetryEvent) {
			fmt.Printf("attempt %d after %v (%s)\n", e.Attempt, e.Wait, e.Reason)
		}},
	})

	resp, err := client.Get("http://api.test/greeting")
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.Status, string(body))
	// Output:
	// attempt 2 after 20ms (status 503)
	// 200 OK hello
}
