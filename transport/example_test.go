package transport_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// The recommended stack in one line, here over an in-memory server that
// fails twice before it answers.
func ExampleNew() {
	api := httptestutil.Script(
		httptestutil.Status(http.StatusServiceUnavailable, "down").Times(2),
		httptestutil.Status(http.StatusOK, "hello"),
	)
	client := &http.Client{Transport: transport.New(transport.Options{
		Base:  httptestutil.NewHandlerTransport(api),
		Retry: policy.Retry{Backoff: policy.FullJitter(time.Millisecond, 10*time.Millisecond)},
	})}

	resp, err := client.Get("http://api.test/greeting")
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.Status, string(body), "after", api.Served(), "attempts")
	// Output: 200 OK hello after 3 attempts
}

// Every attempt of one operation carries the same idempotency key, so the
// server charges once however often the response is lost.
func ExampleIdempotencyKey() {
	payments := httptestutil.NewPayments(httptestutil.PaymentsConfig{})
	lost := httptestutil.Script(
		httptestutil.CutAfter(payments), // the charge is made, the response is lost
		httptestutil.Handler(payments).Forever(),
	)
	client := &http.Client{Transport: transport.Chain(httptestutil.NewHandlerTransport(lost),
		transport.IdempotencyKey(idempotency.Options{Hosts: []string{"pay.test"}}), // pay.test deduplicates by key
		transport.Retry(policy.Retry{Backoff: policy.Exponential(time.Millisecond, time.Millisecond)}),
	)}

	resp, err := client.Post("http://pay.test/charges", "application/json", strings.NewReader(`{"amount":1200,"currency":"eur"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.Status, "replayed:", resp.Header.Get("Idempotent-Replayed") == "true", "charges:", payments.Charges())
	// Output: 201 Created replayed: true charges: 1
}

// Deadline placed twice: a whole-operation budget and a per-attempt limit.
// The server hangs once; the attempt is cut off and retried in budget.
func ExampleDeadline() {
	api := httptestutil.Script(httptestutil.Hang(), httptestutil.Status(http.StatusOK, "ok"))
	client := &http.Client{Transport: transport.Chain(httptestutil.NewHandlerTransport(api),
		transport.Deadline(2*time.Second),
		transport.Retry(policy.Retry{Backoff: policy.Exponential(time.Millisecond, time.Millisecond)}),
		transport.Deadline(50*time.Millisecond),
	)}
	resp, err := client.Get("http://api.test/")
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.Status, "after", api.Served(), "attempts")
	// Output: 200 OK after 2 attempts
}

// Retry hands back the server's last answer when it says the error is
// final (RFC 9457 is_retriable), body intact.
func ExampleRetry() {
	api := httptestutil.Script(httptestutil.Problem(http.StatusServiceUnavailable, httptestutil.ProblemBody{
		Title:      "Account suspended",
		Extensions: map[string]any{"is_retriable": false},
	}))
	client := &http.Client{Transport: transport.Chain(httptestutil.NewHandlerTransport(api), transport.Retry(policy.Retry{}))}
	resp, err := client.Get("http://api.test/")
	if err != nil {
		fmt.Println(err)
		return
	}
	p, _ := policy.ParseProblem(resp.Header.Get("Content-Type"), mustRead(resp))
	fmt.Println(resp.StatusCode, p.Title, "after", api.Served(), "attempt")
	// Output: 503 Account suspended after 1 attempt
}

// SlogHooks logs what the stack does, with stable attribute names.
func ExampleSlogHooks() {
	api := httptestutil.Script(httptestutil.Status(http.StatusTooManyRequests, "", "Retry-After", "0"), httptestutil.Status(http.StatusOK, ""))
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "sturdy.wait" {
				return slog.Attr{} // vary from run to run
			}
			return a
		},
	}))
	client := &http.Client{Transport: transport.New(transport.Options{
		Base:  httptestutil.NewHandlerTransport(api),
		Hooks: transport.SlogHooks(logger),
		Retry: policy.Retry{Backoff: policy.Exponential(time.Millisecond, time.Millisecond)},
	})}
	resp, err := client.Get("http://api.test/v1/models?key=secret")
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	// Output: level=INFO msg="sturdy: retry" sturdy.attempt=2 sturdy.reason="status 429" http.response.status_code=429 http.request.method=GET server.address=api.test url.path=/v1/models
}

// A transport beneath Retry (here one that logs) reads which attempt it
// is sending from the request's context: the server fails twice with a
// 502, and the third attempt gets the 200.
func ExampleAttemptFromContext() {
	api := httptestutil.Script(httptestutil.Status(http.StatusBadGateway, "").Times(2), httptestutil.Status(http.StatusOK, ""))
	logging := transport.Func(func(r *http.Request) (*http.Response, error) {
		fmt.Println("sending attempt", transport.AttemptFromContext(r.Context()))
		return httptestutil.NewHandlerTransport(api).RoundTrip(r)
	})
	client := &http.Client{Transport: transport.Chain(logging, transport.Retry(policy.Retry{Backoff: policy.Exponential(time.Millisecond, time.Millisecond)}))}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test/", nil)
	resp, err := client.Do(req)
	if errors.Is(err, context.DeadlineExceeded) {
		fmt.Println("out of time")
		return
	}
	resp.Body.Close()
	fmt.Println(resp.Status)
	// Output:
	// sending attempt 1
	// sending attempt 2
	// sending attempt 3
	// 200 OK
}

func mustRead(resp *http.Response) []byte {
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return b
}

// When retries end on a status, the response comes back with a nil
// error, as a RoundTripper must; OperationOf says how the operation went.
func ExampleOperationOf() {
	api := httptestutil.Script(httptestutil.Status(http.StatusServiceUnavailable, "down").Times(3))
	client := &http.Client{Transport: transport.New(transport.Options{
		Base:  httptestutil.NewHandlerTransport(api),
		Retry: policy.Retry{MaxAttempts: 3, Backoff: policy.Exponential(time.Millisecond, time.Millisecond)},
	})}
	resp, err := client.Get("http://api.example.com/v1/things")
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	op, _ := transport.OperationOf(resp)
	fmt.Println(resp.StatusCode, op.Attempts, op.Reason)
	// Output: 503 3 attempts used
}

// Layers are New's layers, for a Chain: here with a RoundTripper of the
// caller's own between every two of them, as otelhttp or oauth2 would
// stand, the stack keeps New's promises. The open breaker is asked
// before Retry waits, so nothing waits only to be refused.
func ExampleLayers() {
	o := transport.Options{
		Base:    httptestutil.NewHandlerTransport(httptestutil.Script(httptestutil.Status(http.StatusServiceUnavailable, "down"))),
		Retry:   policy.Retry{Backoff: policy.Exponential(time.Second, time.Second)},
		Breaker: transport.BreakerSettings{ConsecutiveFailures: 1, Cooldown: time.Minute},
	}
	tagger := func(next http.RoundTripper) http.RoundTripper {
		return transport.Func(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			r.Header.Set("X-Team", "payments")
			return next.RoundTrip(r)
		})
	}
	var mws []transport.Middleware
	for _, mw := range transport.Layers(o) {
		mws = append(mws, mw, tagger)
	}
	client := &http.Client{Transport: transport.Chain(o.Base, mws...)}
	start := time.Now()
	resp, err := client.Get("http://api.example.com/v1/things")
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	op, _ := transport.OperationOf(resp)
	fmt.Println(resp.StatusCode, op.Reason, time.Since(start) < time.Minute)
	// Output: 503 next attempt refused true
}
