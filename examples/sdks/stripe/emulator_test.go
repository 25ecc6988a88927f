package stripe

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sturdyhttp/sturdy/idempotency"
)

// paymentIntents emulates POST /v1/payment_intents: each request that
// reaches it creates a payment intent, the side effect it counts. It
// answers Stripe's JSON.
type paymentIntents struct {
	created atomic.Int64
}

func (p *paymentIntents) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/payment_intents" {
		stripeError(w, http.StatusNotFound, "invalid_request_error", "Unrecognized request URL ("+r.Method+": "+r.URL.Path+").")
		return
	}
	if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer sk_test_") {
		stripeError(w, http.StatusUnauthorized, "invalid_request_error", "Invalid API Key provided.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	if err := r.ParseForm(); err != nil {
		stripeError(w, http.StatusBadRequest, "invalid_request_error", "Invalid request body.")
		return
	}
	amount, err := strconv.ParseInt(r.PostForm.Get("amount"), 10, 64)
	if err != nil || amount <= 0 {
		stripeError(w, http.StatusBadRequest, "invalid_request_error", "Missing required param: amount.")
		return
	}
	currency := r.PostForm.Get("currency")
	if currency == "" {
		stripeError(w, http.StatusBadRequest, "invalid_request_error", "Missing required param: currency.")
		return
	}
	n := p.created.Add(1)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", fmt.Sprintf("req_%d", n))
	w.Header().Set("Idempotency-Key", r.Header.Get("Idempotency-Key"))
	json.NewEncoder(w).Encode(map[string]any{
		"id":                   fmt.Sprintf("pi_emulator%d", n),
		"object":               "payment_intent",
		"amount":               amount,
		"currency":             currency,
		"status":               "requires_payment_method",
		"created":              time.Now().Unix(),
		"livemode":             false,
		"client_secret":        fmt.Sprintf("pi_emulator%d_secret_x", n),
		"capture_method":       "automatic",
		"confirmation_method":  "automatic",
		"payment_method_types": []string{"card"},
		"metadata":             map[string]string{},
	})
}

// stripeAPI is the emulator as Stripe serves it: a keyed POST is done at
// most once; a retry with the same key gets the first response again,
// marked Idempotent-Replayed: true. It is sturdy's own server-side
// idempotency handler in front of the payment intents.
func stripeAPI(p *paymentIntents) http.Handler {
	return idempotency.Handler(p, idempotency.HandlerOptions{Optional: true})
}

// stripeError writes Stripe's error body.
func stripeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"type": typ, "message": msg}})
}
