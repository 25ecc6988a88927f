// Package httptestutil is a test bed for HTTP clients: servers that
// misbehave on cue, a recorder of what reached them, provider emulators
// with real state, and transports that run it all on the virtual clock of
// a [testing/synctest] bubble.
//
// The pieces:
//
//   - [Script] answers each request with the next [Step]: a status
//     ([Status], [Problem], [RetryAfterSeconds], [RateLimitHeaders]), or a
//     fault ([Hang], [Reset], [ResetAfterRead], [CutAfter], [Delay],
//     [SlowBody], [Truncated]).
//   - [Recorder] keeps every request that reached the server, with arrival
//     and disconnect times, and counts requests in flight and connections.
//   - [Network] is an in-memory network of net.Pipe connections that a real
//     [net/http.Server] serves and a real [net/http.Transport] dials;
//     [HandlerTransport] calls a handler directly, with no connection.
//   - Emulators: [RateLimitedAPI] (a token bucket per client that sends
//     quota headers of a chosen [Family]), [Payments] (an idempotent
//     POST /charges as the IETF Idempotency-Key draft describes) and
//     [Outage] (healthy, down, healthy again, counting load per time
//     bucket; with a finite capacity, a retry storm keeps it down).
//   - Streams: [SSE] sends server-sent events on a schedule, made from
//     [AnthropicStart], [AnthropicText], [AnthropicError],
//     [OpenAIChunks], [OpenAIErrorChunk] and [Keepalives];
//     [AnthropicErrorAfterStart] and [KeepaliveStall] are the failures
//     that come after a stream's headers.
//
// Everything here is a [net/http.Handler] or a [net/http.RoundTripper],
// so it works alike on loopback with [net/http/httptest.NewServer], on a
// [Network], and under a [HandlerTransport]. Waits use timers, never
// busy loops, so inside a synctest bubble a 60 s outage takes
// microseconds. The package imports only the standard library.
//
// A guide with examples is docs/testkit.md in the repository.
package httptestutil
