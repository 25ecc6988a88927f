// Package sturdy is a kit of composable net/http RoundTrippers that make
// outbound HTTP calls safe to retry, bounded in time, polite to
// rate-limited servers and free of double side effects.
//
// This package holds no code. Add the module and put the recommended
// stack under the http.Client you already have:
//
//	go get github.com/sturdyhttp/sturdy
//
//	import "github.com/sturdyhttp/sturdy/transport"
//
//	client := &http.Client{Transport: transport.New(transport.Options{})}
//
// The code lives in sub-packages: transport (the RoundTrippers and
// transport.New, the recommended stack), policy (retry decisions,
// backoff, Retry-After, RFC 9457 problem details), ratelimit (quota
// headers and per-host quota tracking), idempotency (client keys and a
// server-side deduplicating handler) and httptestutil (fault servers and
// an in-memory network for tests on virtual time). State shared by a
// fleet of processes on Redis is in a module of its own,
// github.com/sturdyhttp/sturdy/fleet, so that this one depends on
// nothing but go-cleanhttp, gobreaker and x/time/rate.
//
// Guides by topic are in the repository: README.md, then the pages under docs/.
package sturdy
