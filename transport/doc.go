// Package transport holds sturdy's RoundTrippers and the order they stack
// in: thin wiring of the decisions in packages policy, ratelimit and
// idempotency onto [http.RoundTripper].
//
// Most users want [New], the recommended stack, in one line:
//
//	client := &http.Client{Transport: transport.New(transport.Options{})}
//
// Each layer is also a [Middleware] of its own, to compose with [Chain]:
// [IdempotencyKey], [Deadline], [Retry], [RateLimitAware] and [Breaker].
// Every RoundTripper of the package is safe for concurrent use, never
// modifies the caller's request, and forwards CloseIdleConnections to its
// base so that [http.Client.CloseIdleConnections] works through the stack.
//
// # The order of the stack
//
// New stacks, outermost first:
//
//		IdempotencyKey, Deadline(Timeout), Retry, RateLimitAware, Breaker, Deadline(AttemptTimeout), base
//
//	  - IdempotencyKey is outermost so that the key is made once per logical
//	    operation: every attempt Retry makes is a copy of a request that
//	    already carries it, and the server performs the operation at most
//	    once. Retry sees the key and knows the POST is safe to retry.
//	  - Deadline(Timeout) is outside Retry so that one budget covers every
//	    attempt and every wait: Retry reads its deadline and never starts a
//	    wait that cannot end inside it. Its context is the parent of every
//	    attempt, so canceling the caller's context, or running out of
//	    budget, closes the connection and wakes every sleep at once.
//	  - Retry decides, per attempt outcome, whether to try again, replays
//	    the body byte for byte, and waits (backoff or the server's
//	    Retry-After, whichever is longer).
//	  - RateLimitAware is inside Retry because each attempt is a request the
//	    server counts against the quota: a retry waits for the quota like
//	    any request, and a 429's Retry-After pauses every goroutine that
//	    talks to that host, not just the one that got it.
//	  - Breaker is inside RateLimitAware so that a request held back by the
//	    quota does not occupy a half-open probe slot, and inside Retry so
//	    that each attempt counts: an open breaker fails fast with
//	    [ErrCircuitOpen], which Retry does not retry.
//	  - Deadline(AttemptTimeout) is innermost so that one hung attempt is
//	    cut off, counts as a failure for the breaker, and leaves budget for
//	    a retry.
//
// Hooks ([Hooks], [SlogHooks]) observe attempts, retries, give-ups,
// breaker changes and rate-limit waits; [AttemptFromContext] tells a
// transport beneath Retry which attempt it is sending.
package transport
