package sturdyotel

// The metrics that [Telemetry] records, besides the conventions'
// http.client.request.duration. Each carries http.request.method,
// server.address and server.port, and the attributes its comment lists.
const (
	// MetricAttemptDuration is the duration of each attempt when an
	// otelhttp Transport wraps the stack: that transport records
	// http.client.request.duration once per operation, so the attempts go
	// here rather than be counted in it twice. Seconds, a histogram.
	MetricAttemptDuration = "sturdy.client.attempt.duration"
	// MetricAttempts counts attempts that Retry made and a layer beneath
	// did not refuse unsent, by http.response.status_code or error.type.
	MetricAttempts = "sturdy.client.attempts"
	// MetricRetries counts retries about to be made, by sturdy.retry.reason.
	MetricRetries = "sturdy.client.retries"
	// MetricGiveUps counts operations that ended on a failure, by
	// sturdy.give_up.reason.
	MetricGiveUps = "sturdy.client.give_ups"
	// MetricBudgetExhausted counts operations that ended because their
	// host's retry budget was spent.
	MetricBudgetExhausted = "sturdy.client.retry_budget.exhausted"
	// MetricHedgesSent counts hedges sent: copies after the first.
	MetricHedgesSent = "sturdy.client.hedge.sent"
	// MetricHedgesWon counts hedges whose response won the race.
	MetricHedgesWon = "sturdy.client.hedge.won"
	// MetricHedgesCanceled counts copies canceled because another won.
	MetricHedgesCanceled = "sturdy.client.hedge.canceled"
	// MetricBreakerChanges counts breaker state changes, by
	// sturdy.breaker.key, sturdy.breaker.from and sturdy.breaker.to;
	// they carry no request attributes.
	MetricBreakerChanges = "sturdy.client.breaker.state_changes"
	// MetricBreakerRefusals counts attempts an open or half-open breaker
	// refused unsent, by sturdy.breaker.state.
	MetricBreakerRefusals = "sturdy.client.breaker.refusals"
	// MetricQuotaWaits counts requests that waited for a quota or the
	// client-side rate, by sturdy.wait.reason.
	MetricQuotaWaits = "sturdy.client.quota.waits"
	// MetricQuotaRejections counts requests failed fast because their
	// quota wait could not end in time, by sturdy.wait.reason.
	MetricQuotaRejections = "sturdy.client.quota.rejections"
	// MetricThrottleRejections counts requests the throttle shed unsent.
	MetricThrottleRejections = "sturdy.client.throttle.rejections"
	// MetricStreamReadAheads counts streams read ahead to their first
	// content event, by sturdy.stream.committed and the status an error
	// event stood for.
	MetricStreamReadAheads = "sturdy.client.stream.read_aheads"
	// MetricConcurrencyRefusals counts requests refused unsent because
	// their host's concurrency limit was full (Options.Concurrency).
	MetricConcurrencyRefusals = "sturdy.client.concurrency.refusals"
	// MetricConcurrencyLimit is a host's adaptive concurrency limit,
	// recorded when it changes, by sturdy.concurrency.key; it carries no
	// request attributes. A gauge.
	MetricConcurrencyLimit = "sturdy.client.concurrency.limit"
	// MetricEjections counts addresses that Endpoints.PerAddress ejected,
	// by server.address, server.port and network.peer.address; they carry
	// no request attributes.
	MetricEjections = "sturdy.client.endpoints.ejections"
	// MetricFailovers counts attempts sent to an alternate origin, by
	// sturdy.failover.to and sturdy.failover.reason.
	MetricFailovers = "sturdy.client.endpoints.failovers"
)

// The events that [Telemetry] adds to the caller's span (the span of the
// request's context: otelhttp's when it wraps the stack).
const (
	// EventRetry: a failed attempt will be retried after sturdy.wait.duration,
	// for sturdy.retry.reason; sturdy.wait.reason says whether the wait is
	// the backoff or the server's Retry-After.
	EventRetry = "sturdy.retry"
	// EventGiveUp: the operation ended on a failure after sturdy.attempts.
	EventGiveUp = "sturdy.give_up"
	// EventQuotaWait: a request waits sturdy.wait.duration for a quota.
	EventQuotaWait = "sturdy.quota.wait"
	// EventQuotaReject: a request failed fast, its quota wait too long.
	EventQuotaReject = "sturdy.quota.reject"
	// EventHedgeSent: copy sturdy.hedge.copy was sent after sturdy.hedge.elapsed.
	EventHedgeSent = "sturdy.hedge.sent"
	// EventHedgeWon: copy sturdy.hedge.copy won the race.
	EventHedgeWon = "sturdy.hedge.won"
	// EventHedgeCanceled: copy sturdy.hedge.copy was canceled.
	EventHedgeCanceled = "sturdy.hedge.canceled"
	// EventBreakerRefused: a breaker refused an attempt unsent.
	EventBreakerRefused = "sturdy.breaker.refused"
	// EventThrottled: the throttle shed a request unsent.
	EventThrottled = "sturdy.throttle.rejected"
	// EventStream: a stream's read ahead ended after sturdy.wait.duration:
	// committed at its first content event, or failed before it.
	EventStream = "sturdy.stream.first_event"
	// EventConcurrencyRefused: a host's concurrency limit refused a
	// request unsent, with sturdy.concurrency.limit and
	// sturdy.concurrency.in_flight then and the sturdy.wait.duration it
	// waited for a slot.
	EventConcurrencyRefused = "sturdy.concurrency.refused"
	// EventFailover: an attempt went to the alternate origin
	// sturdy.failover.to, for sturdy.failover.reason.
	EventFailover = "sturdy.failover"
)

// sturdy's attribute keys, all under the sturdy namespace.
const (
	attrAttempt      = "sturdy.attempt"                 // int: 1 for the first attempt
	attrAttempts     = "sturdy.attempts"                // int: attempts made
	attrCopy         = "sturdy.hedge.copy"              // int: 1 for the first copy of a race
	attrElapsed      = "sturdy.hedge.elapsed"           // seconds since the race's first copy
	attrKeyPresent   = "sturdy.idempotency_key.present" // bool: the attempt carries an idempotency key
	attrRetryReason  = "sturdy.retry.reason"            // the classifier's words: "status 503"
	attrGiveUp       = "sturdy.give_up.reason"          // policy.Reason
	attrWait         = "sturdy.wait.duration"           // seconds
	attrWaitReason   = "sturdy.wait.reason"             // ratelimit's Reason constants
	attrQuotaKey     = "sturdy.quota.key"               // the quota's key
	attrBreakerKey   = "sturdy.breaker.key"             // the breaker's key
	attrBreakerFrom  = "sturdy.breaker.from"            // closed, open, half-open
	attrBreakerTo    = "sturdy.breaker.to"              // closed, open, half-open
	attrBreakerSt    = "sturdy.breaker.state"           // the refusing breaker's state
	attrRetryIn      = "sturdy.breaker.retry_in"        // seconds until an open breaker probes
	attrProb         = "sturdy.throttle.probability"    // the throttle's rejection probability
	attrCommitted    = "sturdy.stream.committed"        // bool: a content event came, the stream was handed back
	attrFailoverTo   = "sturdy.failover.to"             // the alternate origin an attempt went to
	attrFailoverWhy  = "sturdy.failover.reason"         // "circuit open", "attempt failed"
	attrEjections    = "sturdy.endpoints.ejections"     // int: times the address was ejected
	attrConcKey      = "sturdy.concurrency.key"         // the host key of a concurrency limit
	attrConcLimit    = "sturdy.concurrency.limit"       // int: the limit
	attrConcInFlight = "sturdy.concurrency.in_flight"   // int: requests in flight to the host
)
