package bench

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/go-cleanhttp"
)

// payload is the 1 KiB request body of the POST operations.
var payload = bytes.Repeat([]byte("p"), 1024)

// successOps are the operations of the overhead tables.
func successOps(url string) []struct {
	name string
	op   op
} {
	return []struct {
		name string
		op   op
	}{
		{"GET", op{method: http.MethodGet, url: url}},
		{"POST-GetBody", op{method: http.MethodPost, url: url, body: getBody, payload: payload}},
		{"POST-Reader", op{method: http.MethodPost, url: url, body: plainReader, payload: payload}},
	}
}

// BenchmarkSuccess is the cost of an operation that succeeds at once: a
// GET, a POST with a 1 KiB body that has GetBody, and the same body as a
// plain io.Reader, for every client, over the in-memory base transport
// (base=mem: the stack's own cost) and over loopback (base=loopback: a
// real server on 127.0.0.1, what a user feels). Each client has its own
// base (a fresh cleanhttp pooled transport on loopback).
func BenchmarkSuccess(b *testing.B) {
	b.Run("base=mem", func(b *testing.B) {
		for _, o := range successOps("http://api.test/v1/things") {
			b.Run("op="+o.name, func(b *testing.B) {
				for _, k := range allKinds {
					b.Run("client="+k.name, func(b *testing.B) {
						runOps(b, k.new(clientConfig{base: memTransport{}}), o.op)
					})
				}
			})
		}
	})
	b.Run("base=loopback", func(b *testing.B) {
		srv := newLoopback(b, http.HandlerFunc(okHandler))
		for _, o := range successOps(srv.URL + "/v1/things") {
			b.Run("op="+o.name, func(b *testing.B) {
				for _, k := range allKinds {
					b.Run("client="+k.name, func(b *testing.B) {
						base := cleanhttp.DefaultPooledTransport()
						defer base.CloseIdleConnections()
						runOps(b, k.new(clientConfig{base: base}), o.op)
					})
				}
			})
		}
	})
}

// runOps runs o with c until b.Loop ends; every operation must succeed.
func runOps(b *testing.B, c client, o op) { runOpsCtx(b, context.Background(), c, o) }

// runOpsCtx is runOps with the caller's context ctx.
func runOpsCtx(b *testing.B, ctx context.Context, c client, o op) {
	b.ReportAllocs()
	cpu0, ops := cpuTime(), 0
	for b.Loop() {
		ops++
		status, err := c.do(ctx, o)
		if err != nil || status != http.StatusOK {
			b.Fatalf("%s %s: got %d, %v; want 200, nil", c.name, o.method, status, err)
		}
	}
	reportCPU(b, cpu0, ops)
}

// reportCPU reports cpu-ns/op: the CPU time the process used since cpu0
// (every goroutine's, the GC's and, on loopback, the server's), per
// operation. Unlike ns/op, it does not grow when other processes on a
// shared machine take the CPUs.
func reportCPU(b *testing.B, cpu0 time.Duration, ops int) {
	if cpu0 == 0 || ops == 0 {
		return
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(ops), "cpu-ns/op")
}
