// Package policy holds sturdy's pure decisions: which outcomes are worth
// another attempt ([DefaultClassifier]), how long to wait before it
// ([Backoff] curves, [ParseRetryAfter]), what the server said about the
// error ([ParseProblem], RFC 9457), which requests are safe to send twice
// ([SafeToResend]), which outcomes prove the server did not act
// ([Decision].DidNotAct), which errors are the caller's own
// ([IsCallerError]), what follows an attempt and why ([Retry.Next],
// [Reason]), and how many retries a host can take ([Budget]).
//
// Nothing here does I/O or reads the clock: functions that need the time
// take a now argument, so every decision is tested without a network.
// Package transport applies these decisions to requests; a reader looking
// for why a request was retried finds it here, and how in transport.
//
// [Retry] gathers a policy in one struct whose zero value is the
// recommended default: 4 attempts, full-jitter backoff from 200ms capped
// at 30s, server waits honoured up to 60s, bodies buffered up to 1 MiB for
// replay.
//
// When a request is sent twice, and why: docs/idempotency.md and docs/design.md in the repository.
package policy
