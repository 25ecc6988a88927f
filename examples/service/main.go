// Command service shows sturdy in an existing service, from both ends of
// the wire.
//
// The service takes orders: POST /orders, behind [idempotency.Handler], so
// a caller that retries an order (its response was lost, it timed out)
// gets the first answer again instead of a second order. For each order
// it charges a payments API through its outbound client, with an
// Idempotency-Key derived from the order's own key, so the same order can
// never make two charges.
//
// Adopting sturdy changed one line, the outbound client:
//
//	before: &http.Client{Timeout: 10 * time.Second}
//	after:  &http.Client{Transport: transport.New(transport.Options{Timeout: 10 * time.Second, PropagateDeadline: true})}
//
// and deadlines now cross both hops. The service's inbound side runs
// behind [idempotency.DeadlineHandler]: a caller that says how long it
// will wait (Request-Timeout, in milliseconds, as sturdy's
// PropagateDeadline sends it) is refused with 504 if that time is up
// before the order is handled, and otherwise the order's context ends
// when its caller stops waiting. That context is the parent of the
// outbound charge, so the charge's attempts fit in what the caller has
// left, and PropagateDeadline tells payments how much that is.
//
// Run it with
//
//	go run ./examples/service
//
// It starts a flaky payments API and the service on loopback ports, sends
// an order through the service twice, with the client as it was and with
// sturdy, prints what happened on each hop and exits.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/transport"
)

// outboundTimeout bounds each call the service makes to payments.
const outboundTimeout = 10 * time.Second

// legacyClient is the service's outbound client before sturdy.
func legacyClient() *http.Client {
	return &http.Client{Timeout: outboundTimeout}
}

// sturdyClient is the same client after the one-line change: same
// timeout, now covering every attempt and wait; retries with backoff,
// a retry budget, a breaker, quota awareness and idempotency keys; and
// each attempt tells the server how long it has left.
func sturdyClient() *http.Client {
	return &http.Client{Transport: transport.New(transport.Options{Timeout: outboundTimeout, PropagateDeadline: true})}
}

// maxOrderBody bounds the order JSON the service reads.
const maxOrderBody = 64 << 10

// order is what a caller posts, and what the service keeps.
type order struct {
	ID       string `json:"id,omitempty"`
	Item     string `json:"item"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Charge   string `json:"charge,omitempty"`
}

// orders is the service: it keeps orders in memory and charges them
// through payments.
type orders struct {
	client      *http.Client // the outbound client
	paymentsURL string       // the payments API's base URL

	runs atomic.Int64 // times the order handler ran

	mu     sync.Mutex
	orders []order
}

func newOrders(client *http.Client, paymentsURL string) *orders {
	return &orders{client: client, paymentsURL: paymentsURL}
}

// handler routes the service's API. POST /orders runs behind
// idempotency.Handler with its defaults: a key is required, and a
// repeated key replays the stored answer. In front of it,
// idempotency.DeadlineHandler holds the order to its caller's deadline,
// when the caller sends one: a late order is refused before its key is
// locked.
func (s *orders) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /orders", idempotency.DeadlineHandler(
		idempotency.Handler(http.HandlerFunc(s.create), idempotency.HandlerOptions{}),
		idempotency.DeadlineOptions{}))
	return mux
}

// created returns how many orders the service made.
func (s *orders) created() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.orders)
}

// create takes an order and charges it.
func (s *orders) create(w http.ResponseWriter, r *http.Request) {
	s.runs.Add(1)
	var o order
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxOrderBody))
	if err := dec.Decode(&o); err != nil || o.Item == "" || o.Amount <= 0 || o.Currency == "" {
		problem(w, http.StatusBadRequest, `service: want {"item": "...", "amount": positive, "currency": "..."}`)
		return
	}
	// idempotency.Handler let the request through, so it has a key; the
	// charge's key follows from it, so that a retried order, even one
	// that runs this handler again, charges once.
	chargeKey := "charge-" + r.Header.Get(idempotency.DefaultHeader)
	charge, err := s.charge(r, o, chargeKey)
	if err != nil {
		// No order was made, and payments replays any charge it made
		// under chargeKey: a retry repeats nothing, so release the key.
		idempotency.NothingDone(r.Context())
		problem(w, http.StatusBadGateway, err.Error())
		return
	}
	s.mu.Lock()
	o.ID = "ord_" + strconv.Itoa(len(s.orders)+1)
	o.Charge = charge
	s.orders = append(s.orders, o)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(o)
}

// charge asks payments to charge o under key and returns the charge's ID.
func (s *orders) charge(r *http.Request, o order, key string) (string, error) {
	body, _ := json.Marshal(map[string]any{"amount": o.Amount, "currency": o.Currency})
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, s.paymentsURL+"/charges", bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("service: payments: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idempotency.DefaultHeader, key)
	resp, err := s.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("service: payments unreachable: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", fmt.Errorf("service: payments: reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("service: payments answered %s", resp.Status)
	}
	var ch struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(data, &ch); err != nil || ch.ID == "" {
		return "", errors.New("service: payments answered without a charge ID")
	}
	return ch.ID, nil
}

// problem answers an RFC 9457 problem.
func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(map[string]any{"title": http.StatusText(status), "status": status, "detail": detail})
}

func main() {
	if err := demo(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
