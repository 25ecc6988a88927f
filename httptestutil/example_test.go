package httptestutil_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
)

// A scripted server behind a recorder, on the in-memory network: the first
// request gets 503 with Retry-After, the second 200, and the recorder
// shows what reached the server.
func ExampleScript() {
	script := httptestutil.Script(
		httptestutil.RetryAfterSeconds(503, 2),
		httptestutil.Status(200, "hello", "Content-Type", "text/plain"),
	)
	rec := httptestutil.NewRecorder(script)

	n := httptestutil.NewNetwork()
	srv := n.Start("api.test", &http.Server{Handler: rec, ConnState: rec.ConnState})
	defer srv.Close()
	tr := n.Transport()
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	for range 3 {
		resp, err := client.Get(srv.URL + "/v1/items")
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d Retry-After=%q %q\n", resp.StatusCode, resp.Header.Get("Retry-After"), strings.TrimSpace(string(body)))
	}
	fmt.Println("requests:", rec.Count(), "connections:", rec.NewConns(), "exhausted:", script.Exhausted())
	// Output:
	// 503 Retry-After="2" "Service Unavailable"
	// 200 Retry-After="" "hello"
	// 599 Retry-After="" "httptestutil: script exhausted (request 3: GET /v1/items)"
	// requests: 3 connections: 1 exhausted: 1
}

// The payments emulator answers a retried charge from its store: one
// charge, however many attempts.
func ExampleNewPayments() {
	payments := httptestutil.NewPayments(httptestutil.PaymentsConfig{})
	client := &http.Client{Transport: httptestutil.NewHandlerTransport(payments)}

	charge := func(key, body string) {
		req, _ := http.NewRequest("POST", "http://payments.test/charges", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d replayed=%q %s\n", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), strings.TrimSpace(string(b)))
	}
	charge("order-42", `{"amount":1000,"currency":"eur"}`)
	charge("order-42", `{"amount":1000,"currency":"eur"}`)
	charge("order-42", `{"amount":9999,"currency":"eur"}`)
	fmt.Println("charges made:", payments.Charges())
	// Output:
	// 201 replayed="" {"amount":1000,"currency":"eur","id":"ch_1","status":"succeeded"}
	// 201 replayed="true" {"amount":1000,"currency":"eur","id":"ch_1","status":"succeeded"}
	// 422 replayed="" {"detail":"this key was used with a different payload","status":422,"title":"Idempotency-Key is already used"}
	// charges made: 1
}

// A rate-limited API with the IETF structured headers: two requests a
// minute, the third is refused with Retry-After.
func ExampleNewRateLimitedAPI() {
	api := httptestutil.NewRateLimitedAPI(httptestutil.RateLimitConfig{
		Limit:  2,
		Window: time.Minute,
		Family: httptestutil.FamilyIETFStructured,
	})
	client := &http.Client{Transport: httptestutil.NewHandlerTransport(api)}
	for range 3 {
		resp, err := client.Get("http://api.test/v1/models")
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Printf("%d RateLimit=%s Retry-After=%q\n", resp.StatusCode, resp.Header.Get("RateLimit"), resp.Header.Get("Retry-After"))
	}
	fmt.Println("accepted:", api.Accepted(), "rejected:", api.Rejected())
	// Output:
	// 200 RateLimit="default";r=1;t=30 Retry-After=""
	// 200 RateLimit="default";r=0;t=60 Retry-After=""
	// 429 RateLimit="default";r=0;t=60 Retry-After="30"
	// accepted: 2 rejected: 1
}

// An outage emulator whose clock started 90 s ago: the outage runs from
// 60 s to 120 s, so it is down now, and counts the load it gets.
func ExampleNewOutage() {
	start := time.Now().Add(-90 * time.Second)
	outage := httptestutil.NewOutage(start, httptestutil.OutageConfig{
		Start:      time.Minute,
		Duration:   time.Minute,
		RetryAfter: 30 * time.Second,
	})
	client := &http.Client{Transport: httptestutil.NewHandlerTransport(outage)}
	for range 3 {
		resp, err := client.Get("http://api.test/")
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, "Retry-After:", resp.Header.Get("Retry-After"))
	}
	during := outage.Between(time.Minute, 2*time.Minute)
	fmt.Println("down now:", outage.Down(time.Now()), "requests:", during.Requests, "failed:", during.Failed)
	// Output:
	// 503 Retry-After: 30
	// 503 Retry-After: 30
	// 503 Retry-After: 30
	// down now: true requests: 3 failed: 3
}
