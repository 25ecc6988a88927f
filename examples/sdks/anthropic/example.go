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

// NewClient returns an Anthropic client whose HTTP calls go through
// [transport.New] built from o. The SDK's own retries are switched off
// (option.WithMaxRetries(0)), so that a failing call is attempted
// o.Retry.MaxAttempts times in all, not that many times the SDK's retry
// count. opts (base URL, API key, ...) are applied first; the HTTP client
// and the retry count set here win over any in opts.
//
// Sturdy gives each message request (a POST) an Idempotency-Key, which
// makes it retriable under sturdy's policy; the API ignores the header.
func NewClient(o transport.Options, opts ...option.RequestOption) anthropicsdk.Client {
	opts = append(opts[:len(opts):len(opts)],
		option.WithHTTPClient(&http.Client{Transport: transport.New(o)}),
		option.WithMaxRetries(0),
	)
	return anthropicsdk.NewClient(opts...)
}
