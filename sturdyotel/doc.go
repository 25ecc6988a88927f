// Package sturdyotel reports what a sturdy stack does to OpenTelemetry:
// a client span per attempt and per hedge copy, the HTTP client semantic
// conventions' request duration, and sturdy's own counters and span
// events (retries and their waits, quota waits, hedges, breaker and
// throttle refusals).
//
// One call gives what to put in [transport.Options]:
//
//	tel := sturdyotel.New(sturdyotel.Options{})
//	rt := transport.New(tel.Apply(transport.Options{}))
//
// Apply wraps Options.Base in [Telemetry.Middleware], which starts a span
// for each request actually sent, and joins [Telemetry.Hooks] to
// Options.Hooks, which add events to the caller's span and count what the
// stack decided. A request refused unsent (an open breaker, the throttle,
// a quota) has no attempt span: its refusal is an event on the caller's
// span.
//
// The recommended placement wraps the whole stack in otelhttp, whose span
// is then the operation, parent of the attempts:
//
//	client := &http.Client{Transport: otelhttp.NewTransport(rt)}
//
// docs/observability.md in the repository tells why, and what the other
// placements record.
package sturdyotel
