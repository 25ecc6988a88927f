// Package limiters runs transport.RateLimitAware against the rate
// limiters users run in front of their APIs, each started by the tests as
// a real process or a real library: HAProxy's stick-table
// http_req_rate, a Go server behind github.com/go-chi/httprate, a GCRA
// limiter in Redis answering with IETF RateLimit and RateLimit-Policy
// headers, and a fixed window with GitHub-style X-RateLimit-Reset. (nginx's
// limit_req is in the core module's transport tests.)
//
// It is a module of its own so that the core module depends on none of
// them. The package has no API; its tests are the point.
package limiters
