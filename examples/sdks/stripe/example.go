// Package stripe shows sturdy under the official Stripe Go SDK
// (github.com/stripe/stripe-go/v85): the SDK's own network retries
// switched off, sturdy's stack underneath, and the SDK's Idempotency-Key
// kept on every attempt, so a response lost after Stripe acted is
// recovered by a retry that Stripe answers from its idempotency store:
// one payment, not two.
package stripe

import (
	"net/http"

	stripesdk "github.com/stripe/stripe-go/v85"

	"github.com/sturdyhttp/sturdy/transport"
)

// NewClient returns a Stripe client whose HTTP calls go through
// [transport.New] built from o. The SDK's network retries are switched
// off (MaxNetworkRetries 0), so that a failing call is attempted
// o.Retry.MaxAttempts times in all, not that many times the SDK's retry
// count. cfg sets the rest of the backend (URL, logger, ...); its
// HTTPClient and MaxNetworkRetries are replaced.
//
// The SDK puts an Idempotency-Key on every POST and DELETE, its own (a
// new key per call, NewIdempotencyKey) or the one set with
// Params.SetIdempotencyKey (stripe-go v85, stripe.go, NewRequest). That
// key vouches for the request: sturdy keeps it, every attempt carries it,
// and Stripe performs the operation at most once. So Stripe needs no
// Idempotency.Hosts line; the one line is:
//
//	stripesdk.NewClient(key, stripesdk.WithBackends(stripesdk.NewBackendsWithConfig(&stripesdk.BackendConfig{HTTPClient: &http.Client{Transport: transport.New(transport.Options{})}, MaxNetworkRetries: stripesdk.Int64(0)})))
func NewClient(key string, o transport.Options, cfg stripesdk.BackendConfig) *stripesdk.Client {
	cfg.HTTPClient = &http.Client{Transport: transport.New(o)}
	cfg.MaxNetworkRetries = stripesdk.Int64(0)
	return stripesdk.NewClient(key, stripesdk.WithBackends(stripesdk.NewBackendsWithConfig(&cfg)))
}
