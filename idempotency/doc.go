// Package idempotency makes a request with side effects safe to send more
// than once, from both ends of the wire.
//
// The client side is a key: made once per logical operation ([NewKey], or
// the caller's own through [WithKey]) and carried by every attempt in the
// Idempotency-Key header. A key vouches that the server will not act twice,
// so it goes only on requests someone vouched for: the caller's own, and
// requests to [Options].Hosts. [Options] configures it for the transport's
// IdempotencyKey middleware, which sits outside the retry loop so that all
// attempts share the key.
//
// The server side is [Handler], an [http.Handler] middleware that
// deduplicates by that key after the IETF Idempotency-Key HTTP header
// draft and Stripe's practice: the first request with a key runs and its
// response is stored; a retry gets the stored response, byte for byte,
// with "Idempotent-Replayed: true"; a retry that arrives while the first
// still runs gets 409 Conflict with Retry-After; a key reused for a
// different request gets 422. A key runs the handler at most once: every
// outcome is kept, 5xx included, and a response too large to keep leaves
// the key spent. A handler that did nothing says so with [NothingDone],
// and only then is the key released for a retry. Responses live in a
// [Store]: [MemoryStore] for one process, or a shared store (Redis, a
// database) that implements the three-method interface, one round trip
// each.
//
// A server can also see how long its caller will wait: [DeadlineHandler]
// reads the caller's time left from the Request-Timeout header (which the
// transport's PropagateDeadline sends with each attempt), refuses with 504
// a request whose caller has already given up, and runs the handler with a
// context that ends when the caller stops waiting, so that work nobody
// waits for (a request that arrives late over a slow link) is not done.
//
// A client retry is only as safe as the server's deduplication: a POST
// retried after a lost response charges twice unless the server
// recognises the key. With both halves in place, every logical operation
// has its side effect once, however many times the network fails.
//
// A guide with examples is docs/idempotency.md in the repository.
package idempotency
