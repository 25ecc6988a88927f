package fleet_test

import (
	"log"
	"net/http"
	"time"

	"github.com/redis/rueidis"

	"github.com/sturdyhttp/sturdy/fleet"
	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// Servers behind a load balancer deduplicate keyed requests together: a
// retry that lands on another server replays the first response instead
// of charging twice.
func ExampleNewIdempotencyStore() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"localhost:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store := fleet.NewIdempotencyStore(client, fleet.IdempotencyOptions{})

	charges := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated) // book the charge
	})
	srv := &http.Server{
		Addr:              ":8080",
		Handler:           idempotency.Handler(charges, idempotency.HandlerOptions{Store: store}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	log.Fatal(srv.ListenAndServe())
}

// Every process of a fleet draws its retries to a host from one budget:
// 10 + 20% of the fleet's operations over the last 10 seconds, however
// many processes there are.
func ExampleFleet_Budgets() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"localhost:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	f, err := fleet.New(client, fleet.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()

	var o transport.Options
	o.Retry.Budget = &policy.Budget{Store: f.Budgets()}
	o.Breaker.Store = f.Breakers()
	httpClient := &http.Client{Transport: transport.New(o)}
	resp, err := httpClient.Get("https://api.example.com/v1/models")
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
}

// Servers whose Redis fails over to a replica keep each key's lock:
// the handler runs only once a replica has it, or the request is refused
// with 503 and Retry-After. Through Sentinel that is the default (one
// replica); Replicas says how many.
func ExampleIdempotencyOptions_replicas() {
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{"localhost:26379"}, // the sentinels
		Sentinel:    rueidis.SentinelOption{MasterSet: "mymaster"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store := fleet.NewIdempotencyStore(client, fleet.IdempotencyOptions{})
	charges := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})
	log.Fatal(http.ListenAndServe(":8080", idempotency.Handler(charges, idempotency.HandlerOptions{Store: store})))
}
