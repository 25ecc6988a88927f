// Package ratelimit reads the rate-limit quota servers report in response
// headers and holds requests back so that a client slows down before it
// hits the limit instead of after.
//
// [ParseHeaders] and [ParseAll] are pure: they turn one response's headers
// (X-RateLimit-*, x-rate-limit-*, OpenAI's x-ratelimit-*-requests/-tokens,
// Anthropic's anthropic-ratelimit-*, and both generations of the IETF
// RateLimit draft) into quotas. [ResponseVerdict] decides what a response
// asks of its host: a pause (429 or 503 with Retry-After), a slower pace
// (a 429 with no hint), or nothing.
//
// A [Tracker] keeps the quotas of each host per resource, and each
// request takes a [Reservation] before it is sent: Reserve waits for a
// quota reset, a server-asked pause or the host's learned pace, all
// goroutines of a host together, never longer than the request's deadline
// allows (a wait that cannot finish in time fails at once with
// [ErrQuotaExhausted]); Settle records the response; Cancel gives the
// reservation back when the request never reached the server.
//
// The files, one concept each: quota.go (the Quota type and families),
// headers.go (ParseHeaders, ParseAll), families.go (each header family),
// reset.go (resets to times), tightest.go (choosing among quotas),
// status.go (what a status asks of a host), throttle.go (the pace learned
// from 429s), resource.go (which quotas count a request),
// host.go (a host's state and its transitions), reservation.go,
// wait.go, tracker.go, quotastore.go (sharing with a fleet).
//
// Most users do not call this package directly: transport.RateLimitAware
// puts a Tracker in front of every attempt of a request, inside
// transport.Retry, since each attempt is a request the server counts.
//
// This package imports only the standard library, golang.org/x/time/rate
// and the module's internal packages.
//
// A guide with examples is docs/rate-limits.md in the repository.
package ratelimit
