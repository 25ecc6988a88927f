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

// Host is the OpenAI API's host, the SDK's default base URL's.
const Host = "api.openai.com"

// Route is the chat completions route on [Host]: the requests NewClient
// vouches for. A completion has no side effect beyond its cost; a file
// upload, a batch or a fine-tuning job on the same host does.
const Route = Host + "/v1/chat/completions"

// NewClient returns an OpenAI client whose HTTP calls go through
// [transport.New] built from o. The SDK's own retries are switched off
// (option.WithMaxRetries(0)), so that a failing call is attempted
// o.Retry.MaxAttempts times in all, not that many times the SDK's retry
// count. opts (base URL, API key, organization, ...) are applied first;
// the HTTP client and the retry count set here win over any in opts.
//
// A request to the OpenAI API has no side effect beyond its cost, so
// sending one twice is safe: NewClient lists [Route] in
// o.Idempotency.Hosts, which vouches for its POSTs (a chat completion is a POST),
// so that sturdy retries them after a 5xx, an overload or a timeout, each
// attempt with the same Idempotency-Key (the API ignores the header). The
// SDK sends no key of its own. Without Route in Hosts, sturdy would send
// each POST once unless the outcome proved the API did not act (a 429,
// x-should-retry: true, a connection never made). In one line, without
// NewClient:
//
//	openaisdk.NewClient(option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: transport.New(transport.Options{Idempotency: idempotency.Options{Hosts: []string{"api.openai.com/v1/chat/completions"}}})}))
func NewClient(o transport.Options, opts ...option.RequestOption) openaisdk.Client {
	o.Idempotency.Hosts = append(o.Idempotency.Hosts[:len(o.Idempotency.Hosts):len(o.Idempotency.Hosts)], Route)
	opts = append(opts[:len(opts):len(opts)],
		option.WithHTTPClient(&http.Client{Transport: transport.New(o)}),
		option.WithMaxRetries(0),
	)
	return openaisdk.NewClient(opts...)
}
