// Package ratelimit reads the rate-limit quota servers report in response
// headers and holds requests back so that a client slows down before it
// hits the limit instead of after.
//
// [ParseHeaders] is pure: it turns one response's headers (X-RateLimit-*,
// x-rate-limit-*, OpenAI's x-ratelimit-*-requests/-tokens, Anthropic's
// anthropic-ratelimit-*, and both generations of the IETF RateLimit
// draft) into a [Quota]. A [Tracker] keeps a Quota per host, counts the
// requests it lets through, and makes requests wait for a quota reset or
// a server-asked pause, all goroutines of a host together, never longer
// than their deadline allows: a wait that cannot finish in time fails at
// once with [ErrQuotaExhausted].
//
// Most users do not call this package directly: transport.RateLimitAware
// puts a Tracker in front of every attempt of a request, inside
// transport.Retry, since each attempt is a request the server counts.
//
// This package imports only the standard library and
// golang.org/x/time/rate.
package ratelimit
