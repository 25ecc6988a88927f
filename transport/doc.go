// Package transport holds sturdy's RoundTrippers and the order they stack
// in. They wire the decisions of packages policy, ratelimit and idempotency
// onto [http.RoundTripper].
//
// Most users want [New], the recommended stack, in one line:
//
//	client := &http.Client{Transport: transport.New(transport.Options{})}
//
// Each layer is also a [Middleware] of its own, to compose with [Chain]:
// [IdempotencyKey], [Deadline], [Retry], [Hedge], [RateLimitAware],
// [Concurrency], [Breaker] and [FirstEvent]. Every RoundTripper of the package is safe for
// concurrent use and never modifies the caller's request. Each forwards
// CloseIdleConnections to its base, so [http.Client.CloseIdleConnections]
// works through the stack.
//
// # The order of the stack
//
// New stacks, outermost first:
//
//	[Endpoints], IdempotencyKey, Deadline(Timeout), Retry, [Hedge], Alternates, [Throttle],
//	RateLimitAware, [Concurrency], Breaker, FirstEvent, Deadline(AttemptTimeout), [PropagateDeadline],
//	[PerAddress] base
//
// Hedge, Throttle, Concurrency and PropagateDeadline are there only when
// Options.Hedge, Options.Throttle, Options.Concurrency and
// Options.PropagateDeadline turn them on; the Endpoints layers only when
// Options.Endpoints does. The layers do this:
//
//   - IdempotencyKey gives a key to each operation that is vouched for:
//     the caller's own key, or a host in Idempotency.Hosts. Every attempt
//     carries the same key. A POST without a key is sent once, unless the
//     outcome proves the server did not act on it.
//   - Deadline(Timeout) bounds the operation: every attempt, every wait,
//     and a body that is not a stream. A stream is released from it at its
//     headers. The stream is then cut only when it stalls for IdleTimeout,
//     which this layer watches for every body.
//   - Retry decides after each attempt whether to try again, and replays
//     the body byte for byte. It waits for the backoff or the server's
//     Retry-After, whichever is longer.
//   - Hedge sends another copy of a slow request that is safe to send
//     twice. Hedges draw on Retry's budget. A copy canceled because
//     another won is not a failure for the breaker.
//   - Throttle sheds load locally when a host accepts less than half of
//     what it is sent, with the default K of 2.
//   - RateLimitAware holds requests back for their host's quota. A 429's
//     Retry-After pauses every goroutine that talks to that host.
//   - Concurrency bounds the attempts in flight to each host, and learns
//     the bound from the host's latency and losses. A request that finds
//     it full waits while its time allows, else fails unsent with
//     [ErrConcurrencyLimit]. It sits beneath RateLimitAware, so that a
//     request waiting for a quota holds no slot, and above Breaker and
//     FirstEvent, so that its refusals are never judged by the breaker and
//     a stream holds its slot until its first event.
//   - Breaker fails fast with [ErrCircuitOpen] while a host is down. Retry
//     does not retry that error.
//   - FirstEvent hands a stream back at its first content event. An error
//     event, an end or a stall before it is a failed attempt. A negative
//     Options.FirstEventTimeout switches it off.
//   - Deadline(AttemptTimeout) cuts one hung attempt, which the breaker
//     counts as a failure. It ends at the response headers: a body is
//     never cut by it. With Options.ReadBody or [WithReadBody], it also
//     reads a body that is not a stream inside the attempt. A body cut
//     half way is then a failed attempt that Retry tries again.
//   - PropagateDeadline sends the server the attempt's time left: the
//     shortest of the caller's deadline, Timeout and AttemptTimeout.
//   - Endpoints (see [Endpoints]): the outermost layer keeps what an
//     operation's attempts share (the addresses tried, the origin to try
//     next); Alternates sends an attempt to an alternate origin while its
//     own fails, above the per-host layers so that each origin has its own
//     breaker and quotas; [PerAddress] keeps a connection pool per address
//     of each host and ejects a failing address.
//
// [Deadline] itself, used in a Chain, is a hard limit on everything beneath
// it, the body of a stream included.
//
// [Hooks] and [SlogHooks] observe attempts, retries, give-ups, breaker
// changes and rate-limit waits. [AttemptFromContext] tells a transport
// beneath Retry which attempt it is sending.
//
// See docs/design.md in the repository for why each layer sits where it
// does. The guides docs/deadlines.md and docs/observability.md show the
// layers at work.
package transport
