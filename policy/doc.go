// Package policy holds sturdy's pure decisions. It answers these questions:
//
//   - Which outcomes are worth another attempt? [DefaultClassifier].
//   - How long to wait before it? The [Backoff] curves and
//     [ParseRetryAfter].
//   - What did the server say about the error? [ParseProblem], for RFC
//     9457.
//   - Which requests are safe to send twice? [SafeToResend].
//   - Which outcomes prove the server did not act? [Decision].DidNotAct.
//   - Which errors are the caller's own? [IsCallerError].
//   - What follows an attempt, and why? [Retry.Next] and [Reason].
//   - How many retries can a host take? [Budget].
//   - How many requests may be in flight to a host at once?
//     [Concurrency].
//
// Nothing here does I/O or reads the clock. Functions that need the time
// take a now argument, so every decision is tested without a network.
// Package transport applies these decisions to requests.
//
// [Retry] gathers a policy in one struct whose zero value is the
// recommended default. It makes 4 attempts, with full-jitter backoff from
// 200ms capped at 30s. It honours server waits up to 60s, and keeps bodies
// up to 1 MiB for replay.
//
// See docs/design.md in the repository for the reasons behind these
// decisions, and docs/idempotency.md for when a request is sent twice.
package policy
