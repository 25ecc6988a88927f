// Package anthropic shows sturdy under the official Anthropic Go SDK
// (github.com/anthropics/anthropic-sdk-go/v2): the SDK's own retries
// switched off, sturdy's stack underneath, so a 529 overloaded_error, a
// 429 with retry-after or an exhausted anthropic-ratelimit-* quota is
// handled once, in one place.
package anthropic

import (
	"net/http"

	anthropicsdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/sturdyhttp/sturdy/transport"
)

// Host is the Anthropic API's host, the SDK's default base URL's.
const Host = "api.anthropic.com"

// NewClient returns an Anthropic client whose HTTP calls go through
// [transport.New] built from o. The SDK's own retries are switched off
// (option.WithMaxRetries(0)), so that a failing call is attempted
// o.Retry.MaxAttempts times in all, not that many times the SDK's retry
// count. opts (base URL, API key, ...) are applied first; the HTTP client
// and the retry count set here win over any in opts.
//
// A request to the Anthropic API has no side effect beyond its cost, so
// sending one twice is safe: NewClient lists [Host] in
// o.Idempotency.Hosts, which vouches for its POSTs (a message is a POST),
// so that sturdy retries them after a 5xx, an overload or a timeout, each
// attempt with the same Idempotency-Key (the API ignores the header). The
// SDK sends no key of its own. Without Host in Hosts, sturdy would send
// each POST once unless the outcome proved the API did not act (a 429,
// x-should-retry: true, a connection never made). In one line, without
// NewClient:
//
//	anthropicsdk.NewClient(option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: transport.New(transport.Options{Idempotency: idempotency.Options{Hosts: []string{"api.anthropic.com"}}})}))
func NewClient(o transport.Options, opts ...option.RequestOption) anthropicsdk.Client {
	o.Idempotency.Hosts = append(o.Idempotency.Hosts[:len(o.Idempotency.Hosts):len(o.Idempotency.Hosts)], Host)
	opts = append(opts[:len(opts):len(opts)],
		option.WithHTTPClient(&http.Client{Transport: transport.New(o)}),
		option.WithMaxRetries(0),
	)
	return anthropicsdk.NewClient(opts...)
}
