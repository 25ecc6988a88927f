// Package bench measures sturdy side by side with the libraries users
// choose between: hashicorp/go-retryablehttp, failsafe-go's failsafehttp,
// go-resty and a hand-written retry loop, on the same machine in the same
// run.
//
// It is a module of its own so that the peers never enter the core's
// go.mod. Everything lives in the test files:
//
//   - BenchmarkSuccess: the cost of a successful GET, a POST whose body has
//     GetBody and a POST whose body is a plain io.Reader, over an in-memory
//     base transport (the stack's own cost) and over loopback (what a user
//     feels).
//   - BenchmarkFailure: every 4th request answers 503, with 3 KiB and
//     64 KiB error bodies; time, allocations, and new connections per
//     1,000 operations.
//   - BenchmarkParallel: b.RunParallel over one host and over 1,000 hosts.
//   - BenchmarkOutage: the outage workload of examples/outage, rewritten
//     here (package main cannot be imported) over httptestutil's Outage
//     emulator: server load during the outage and at recovery.
//   - BenchmarkCancel: from the caller's deadline to the server seeing the
//     connection close, p50 and p99 over 1,000 operations.
//
// cmd/report runs them all and prints the tables of BENCHMARKS.md:
//
//	cd bench && go run ./cmd/report
package bench
