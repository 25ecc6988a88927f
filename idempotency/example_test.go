package idempotency_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/idempotency"
)

// post sends a POST with an Idempotency-Key and prints the answer.
func post(c *http.Client, url, key, body string) {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		var p struct{ Detail string }
		json.Unmarshal(b, &p)
		fmt.Println(resp.StatusCode, p.Detail)
		return
	}
	fmt.Printf("%d %s replayed=%s\n", resp.StatusCode, b, resp.Header.Get(idempotency.ReplayedHeader))
}

// A payments handler wrapped in Handler books one charge per key,
// however often the client retries.
func ExampleHandler() {
	var booked atomic.Int64
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := booked.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"ch_%d"}`, n)
	})

	n := httptestutil.NewNetwork()
	srv := n.Serve("payments.test", idempotency.Handler(charge, idempotency.HandlerOptions{}))
	defer srv.Close()
	tr := n.Transport()
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}

	post(c, srv.URL+"/charges", "order-42", `{"amount":1000}`) // runs the handler
	post(c, srv.URL+"/charges", "order-42", `{"amount":1000}`) // a retry: replayed
	post(c, srv.URL+"/charges", "order-42", `{"amount":9999}`) // the key reused for another charge
	post(c, srv.URL+"/charges", "order-43", `{"amount":1000}`) // a new operation
	fmt.Println("charges booked:", booked.Load())
	// Output:
	// 201 {"id":"ch_1"} replayed=
	// 201 {"id":"ch_1"} replayed=true
	// 422 idempotency: this Idempotency-Key was already used for a different request
	// 201 {"id":"ch_2"} replayed=
	// charges booked: 2
}

// A handler that fails after its side effect has its answer kept: the
// retry gets the 500 again, marked as a replay and as not worth retrying.
// A handler that did nothing says so with NothingDone, and the retry runs
// it again.
func ExampleNothingDone() {
	var booked, runs atomic.Int64
	ledgerUp := false
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		if r.URL.Query().Get("amount") == "" {
			idempotency.NothingDone(r.Context()) // refused before acting
			http.Error(w, "amount missing", http.StatusBadRequest)
			return
		}
		n := booked.Add(1)
		if !ledgerUp {
			http.Error(w, "ledger timeout", http.StatusInternalServerError) // after the charge
			return
		}
		fmt.Fprintf(w, "ch_%d", n)
	})
	h := idempotency.Handler(charge, idempotency.HandlerOptions{})
	send := func(key, query string) {
		r := httptest.NewRequest("POST", "/charges?"+query, nil)
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%s: %d replayed=%q Stripe-Should-Retry=%q\n", key, w.Code,
			w.Header().Get(idempotency.ReplayedHeader), w.Header().Get("Stripe-Should-Retry"))
	}
	send("order-1", "amount=100")
	ledgerUp = true
	send("order-1", "amount=100") // the 500 is replayed: no second charge
	send("order-2", "")
	send("order-2", "") // nothing was done: runs again
	fmt.Println("handler runs:", runs.Load(), "charges booked:", booked.Load())
	// Output:
	// order-1: 500 replayed="" Stripe-Should-Retry="false"
	// order-1: 500 replayed="true" Stripe-Should-Retry="false"
	// order-2: 400 replayed="" Stripe-Should-Retry=""
	// order-2: 400 replayed="" Stripe-Should-Retry=""
	// handler runs: 3 charges booked: 1
}

// Scope keeps each client's keys apart: the same key sent by two accounts
// is two operations, and neither can read the other's response.
func ExampleHandler_scope() {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "created for %s", r.Header.Get("X-Account"))
	})
	h := idempotency.Handler(echo, idempotency.HandlerOptions{
		// In a real service: the principal your auth middleware put in
		// the request's context.
		Scope: func(r *http.Request) string { return r.Header.Get("X-Account") },
	})

	n := httptestutil.NewNetwork()
	srv := n.Serve("api.test", h)
	defer srv.Close()
	tr := n.Transport()
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}

	for _, acct := range []string{"alice", "bob", "alice"} {
		req, _ := http.NewRequest("POST", srv.URL+"/things", nil)
		req.Header.Set("Idempotency-Key", "1")
		req.Header.Set("X-Account", acct)
		resp, _ := c.Do(req)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%s: %s replayed=%s\n", acct, b, resp.Header.Get(idempotency.ReplayedHeader))
	}
	// Output:
	// alice: created for alice replayed=
	// bob: created for bob replayed=
	// alice: created for alice replayed=true
}

func ExampleParseKey() {
	for _, v := range []string{
		`8e03978e-40d5-43e8-bc93-6894a57f9324`,
		`"8e03978e-40d5-43e8-bc93-6894a57f9324"`,
		`"order \"42\""`,
		"bad\x01key",
		`"unterminated`,
	} {
		key, err := idempotency.ParseKey(v, 0)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%q\n", key)
	}
	// Output:
	// "8e03978e-40d5-43e8-bc93-6894a57f9324"
	// "8e03978e-40d5-43e8-bc93-6894a57f9324"
	// "order \"42\""
	// idempotency: invalid key: control character at byte 3
	// idempotency: invalid key: missing closing quote
}

// A server holds each handler to its caller's deadline, sent as the
// milliseconds it will wait in Request-Timeout (transport.New sends it
// with Options.PropagateDeadline): a request whose caller has given up is
// refused before the handler runs, and the handler's context ends when
// the caller stops waiting.
func ExampleDeadlineHandler() {
	h := idempotency.DeadlineHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d, ok := r.Context().Deadline(); ok {
			fmt.Printf("handler runs, its context ends within 1.5s: %v\n", time.Until(d) <= 1500*time.Millisecond)
			return
		}
		fmt.Println("handler runs, without a deadline")
	}), idempotency.DeadlineOptions{})
	for _, left := range []string{"1500", "0", "soon"} {
		r := httptest.NewRequest("POST", "/charges", strings.NewReader("{}"))
		r.Header.Set("Request-Timeout", left)
		w := httptest.NewRecorder()
		fmt.Printf("Request-Timeout: %s -> ", left)
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			fmt.Println(w.Code, w.Header().Get("Content-Type"))
		}
	}
	// Output:
	// Request-Timeout: 1500 -> handler runs, its context ends within 1.5s: true
	// Request-Timeout: 0 -> 504 application/problem+json
	// Request-Timeout: soon -> handler runs, without a deadline
}

// A route vouches for one path of a host and the paths beneath it: the
// completions, not the file uploads of the same API.
func ExampleOptions_Matches() {
	o := idempotency.Options{Hosts: []string{"api.openai.com/v1/chat/completions"}}
	fmt.Println(o.Matches("api.openai.com", "/v1/chat/completions"))
	fmt.Println(o.Matches("api.openai.com", "/v1/files"))
	// Output:
	// true
	// false
}
