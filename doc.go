// Package sturdy is a kit of composable net/http RoundTrippers that make
// outbound HTTP calls safe to retry, bounded in time, polite to
// rate-limited servers and free of double side effects.
//
// The code lives in sub-packages: transport (the RoundTrippers and
// [transport.New], the recommended stack), policy (retry decisions,
// backoff, Retry-After, RFC 9457 problem details), ratelimit (quota
// headers and per-host quota tracking), idempotency (client keys and a
// server-side deduplicating handler) and httptestutil (fault servers and
// an in-memory network for tests on virtual time).
package sturdy
