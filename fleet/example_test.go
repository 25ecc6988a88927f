package fleet_test

import (
	"log"
	"net/http"
	"time"

	"github.com/redis/rueidis"

	"github.com/sturdyhttp/sturdy/fleet"
	"github.com/sturdyhttp/sturdy/idempotency"
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
