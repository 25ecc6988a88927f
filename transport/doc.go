// Package transport holds sturdy's RoundTrippers and the order they stack
// in: thin wiring of the decisions in packages policy, ratelimit and
// idempotency onto [http.RoundTripper].
//
// Most users want [New], the recommended stack, in one line:
//
//	client := &http.Client{Transport: transport.New(transport.Options{})}
//
// Each layer is also a [Middleware] of its own, to compose with [Chain]:
// [IdempotencyKey], [Deadline], [Retry], [Hedge], [RateLimitAware],
// [Breaker] and [FirstEvent].
// Every RoundTripper of the package is safe for concurrent use, never
// modifies the caller's request, and forwards CloseIdleConnections to its
// base so that [http.Client.CloseIdleConnections] works through the stack.
//
// # The order of the stack
//
// New stacks, outermost first:
//
//	IdempotencyKey, Deadline(Timeout), Retry, [Hedge], [Throttle], RateLimitAware, Breaker,
//	FirstEvent, Deadline(AttemptTimeout), [PropagateDeadline], base
//
// Hedge, Throttle and PropagateDeadline are there only when Options.Hedge,
// Options.Throttle and Options.PropagateDeadline turn them on.
//
// Each layer sits where it does for a reason:
//
//   - IdempotencyKey is outermost so that the key is made once per logical
//     operation: every attempt Retry makes is a copy of a request that
//     already carries it, and the server performs the operation at most
//     once. It keys only requests that are vouched for (the caller's own
//     key, or a host in Idempotency.Hosts); Retry sees the key and knows
//     the POST is safe to send again. A POST without a key is sent once,
//     unless the outcome proves the server did not act on it.
//   - Deadline(Timeout) is outside Retry so that one budget covers every
//     attempt and every wait: Retry reads its deadline and never starts a
//     wait that cannot end inside it. Its context is the parent of every
//     attempt, so canceling the caller's context, or running out of
//     budget, closes the connection and wakes every sleep at once. It is
//     shaped for what is read: Timeout bounds getting the final response
//     and reading a body that is not a stream; a stream (server-sent
//     events, NDJSON, ...) is released from it at its headers and is then
//     cut only when it stalls for IdleTimeout, which this layer watches
//     for every body.
//   - Retry decides, per attempt outcome, whether to try again, replays
//     the body byte for byte, and waits (backoff or the server's
//     Retry-After, whichever is longer).
//   - Hedge, when Options.Hedge sets it, is inside Retry, so that each
//     attempt may be hedged and a response every copy failed on is
//     retried with backoff, and so that Deadline(Timeout) bounds every
//     copy; it is outside RateLimitAware and Breaker because a hedge is a
//     request the server counts and the breaker judges. Hedges draw on
//     Retry's budget: together they stay within one bound per host. A copy
//     canceled because another won is not a failure for the breaker.
//   - Throttle, when Options.Throttle sets it, is beneath Retry and Hedge
//     (every attempt and copy is a request the server counts) and above
//     RateLimitAware and Breaker, so that a request it sheds uses no
//     quota and is never judged by the breaker. It sheds load when a host
//     accepts less than half of what it is sent (with the default K of 2).
//   - RateLimitAware is inside Retry because each attempt is a request the
//     server counts against the quota: a retry waits for the quota like
//     any request, and a 429's Retry-After pauses every goroutine that
//     talks to that host, not just the one that got it.
//   - Breaker is inside RateLimitAware so that a request held back by the
//     quota does not occupy a half-open probe slot, and inside Retry so
//     that each attempt counts: an open breaker fails fast with
//     [ErrCircuitOpen], which Retry does not retry.
//   - FirstEvent (off with a negative Options.FirstEventTimeout) hands a
//     stream back at its first content event; an error event, an end or a
//     stall before it is a failed attempt. It is beneath Breaker, so that
//     the breaker judges the status an error event stands for, and beneath
//     Hedge, so that a stream's hedge is timed to its first event.
//   - Deadline(AttemptTimeout) is innermost so that one hung attempt is
//     cut off, counts as a failure for the breaker, and leaves budget for
//     a retry. It ends at the response headers: a body is never cut by
//     it. With Options.ReadBody (or [WithReadBody]) it also reads a body
//     that is not a stream inside the attempt, so that a body cut half
//     way is a failed attempt that Retry tries again.
//   - PropagateDeadline, opt-in (Options.PropagateDeadline), sits
//     beneath every Deadline, so that the time left it sends the server
//     is the attempt's own: the shortest of the caller's deadline,
//     Timeout and AttemptTimeout.
//
// [Deadline] itself, used in a Chain, is a hard limit on everything
// beneath it, the body of a stream included.
//
// Hooks ([Hooks], [SlogHooks]) observe attempts, retries, give-ups,
// breaker changes and rate-limit waits; [AttemptFromContext] tells a
// transport beneath Retry which attempt it is sending.
//
// Guides in the repository: docs/design.md (why this order), docs/deadlines.md, docs/observability.md.
package transport
