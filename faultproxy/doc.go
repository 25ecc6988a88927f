// Package faultproxy is sturdy's fault-proxy suite: faults between the
// processes, on real sockets, through Shopify's toxiproxy (v2.5.0, run as
// its own server process on a loopback port).
//
// A client sends POSTs of 1-64 KiB through a toxiproxy proxy to a real
// upstream ([Upstream]) that records each request (method, key, body
// hash, arrival time against its caller's deadline) and performs a side
// effect: once per key when it deduplicates (behind
// idempotency.Handler), once per request when it does not. Each phase
// ([Phases]) is one toxic: latency with jitter, reset_peer (at once and
// after 100 ms, on the request and on the response), timeout (a hang),
// slicer, limit_data (a response cut) and bandwidth (a slow uplink). Each
// runs a bounded count of operations for the default stack
// (transport.New), for a bare client with a retry loop ([Bare]) and for
// plain net/http ([NetHTTP]) side by side. sturdy fails no more
// operations than plain net/http, within the noise [Allowed] states, and
// the suite checks sturdy exactly ([Result.Check]): at most
// one side effect per operation, exactly one for each operation the
// client saw succeed, every body byte-identical per key, no operation
// past its deadline by more than a stated margin, connections reused
// where nothing breaks them, and no goroutine left once everything is
// closed.
//
// The breaker comparison (TestFaultProxyBreaker) runs the default stack
// and the same stack with its breaker switched off
// (Disable: transport.LayerBreaker) side by side against toxiproxy
// hanging or resetting 1%, 10% and 50% of connections ([BreakerFaults],
// [BreakerShort], [BreakerLong]): the breaker must not open for a host
// that only drops a share of its requests. TestFaultProxyBreakerTripsOnADownHost
// takes the host down (the proxy disabled, or the upstream killed) and
// checks that the breaker opens within a second.
//
// TestFaultProxyPerAddress serves one host name from three toxiproxy
// proxies on 127.0.0.1, 127.0.0.2 and 127.0.0.3 (one port), one of which
// hangs or refuses every connection: sturdy with Endpoints.PerAddress
// must eject it within a second and fail at most 0.5% of operations,
// beside sturdy without it and plain net/http dialing the three in turn.
//
// The tests are named TestFaultProxy..., so that
//
//	go test -run TestFaultProxy ./...
//
// in this module runs exactly them. The short run is part of ./test.sh;
// FAULTPROXY=long selects the long one, which .ci/run runs and whose
// table is in BENCHMARKS.md.
//
// The server binary is found by [FindServer]: $TOXIPROXY_SERVER (set by
// .ci/run, which installs it with go install from the module proxy), or
// a copy installed on first use into the user's cache directory. With
// CI=true the tests fail, rather than skip, when it is missing.
package faultproxy
