// Package openai shows sturdy under the official OpenAI Go SDK
// (github.com/openai/openai-go/v3): the SDK's own retries switched off,
// sturdy's stack underneath, so a 429 with retry-after-ms, an exhausted
// x-ratelimit-* quota or a 5xx is handled once, in one place.
package openai

import (
	"net/http"

	openaisdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sturdyhttp/sturdy/transport"
)

// NewClient returns an OpenAI client whose HTTP calls go through
// [transport.New] built from o. The SDK's own retries are switched off
// (option.WithMaxRetries(0)), so that a failing call is attempted
// o.Retry.MaxAttempts times in all, not that many times the SDK's retry
// count. opts (base URL, API key, organization, ...) are applied first;
// the HTTP client and the retry count set here win over any in opts.
//
// Sturdy gives each chat completion (a POST) an Idempotency-Key, which
// makes it retriable under sturdy's policy; OpenAI ignores the header.
func NewClient(o transport.Options, opts ...option.RequestOption) openaisdk.Client {
	opts = append(opts[:len(opts):len(opts)],
		option.WithHTTPClient(&http.Client{Transport: transport.New(o)}),
		option.WithMaxRetries(0),
	)
	return openaisdk.NewClient(opts...)
}
