package httptestutil_test

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// The common use, in a test of an HTTP client: a Script that fails on
// cue, a Recorder in front of it, and the client under test on a
// HandlerTransport (or a Network, for real connections). Here the client
// is sturdy's stack and the first connection drops. In a test, run the
// same code inside synctest.Test so that every wait (a 30 s backoff, a
// Retry-After) takes no real time.
func Example() {
	script := httptestutil.Script(
		httptestutil.Reset(), // the connection drops before any response
		httptestutil.Status(http.StatusOK, "ok"),
	)
	rec := httptestutil.NewRecorder(script)
	client := &http.Client{Transport: transport.New(transport.Options{
		Base:  httptestutil.NewHandlerTransport(rec),
		Retry: policy.Retry{Backoff: policy.Exponential(time.Millisecond, time.Millisecond)},
	})}

	resp, err := client.Get("http://api.test/v1/items")
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.Status, string(body))
	for i, r := range rec.Requests() {
		fmt.Println("request", i+1, r.Method, r.URL.Path)
	}
	// Output:
	// 200 OK ok
	// request 1 GET /v1/items
	// request 2 GET /v1/items
}
