package bench

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/transport"
)

// sturdyVariants are transport.New with one layer switched off at a time,
// so that the cost of a layer is all's figure minus its "no-" figure.
var sturdyVariants = []struct {
	name    string
	disable transport.Layer
	timeout bool // Timeout: -1, no overall limit, instead of the 10 min default
}{
	{name: "all"},
	{name: "no-IdempotencyKey", disable: transport.LayerIdempotencyKey},
	{name: "no-Timeout", timeout: true},
	{name: "no-Retry", disable: transport.LayerRetry},
	{name: "no-RetryBudget", disable: transport.LayerRetryBudget},
	{name: "no-RateLimit", disable: transport.LayerRateLimit},
	{name: "no-Breaker", disable: transport.LayerBreaker},
	{name: "none", disable: transport.LayerIdempotencyKey | transport.LayerRetry |
		transport.LayerRateLimit | transport.LayerBreaker, timeout: true},
}

// BenchmarkSturdyLayers shows where the cost of transport.New goes: a
// successful GET and POST (1 KiB body with GetBody) over the in-memory
// base, with every layer, with each layer switched off in turn, and with
// none (an http.Client over the base, through New). bare is the base
// without New. ctx=background is a caller without a deadline, so New's
// Timeout makes a context per operation; ctx=deadline is a caller
// whose context has a deadline of its own (1 min, made outside the loop),
// which Timeout leaves alone.
func BenchmarkSturdyLayers(b *testing.B) {
	for _, o := range successOps("http://api.test/v1/things")[:2] {
		for _, withDeadline := range []bool{false, true} {
			name := "op=" + o.name + "/ctx=background"
			if withDeadline {
				name = "op=" + o.name + "/ctx=deadline"
			}
			b.Run(name, func(b *testing.B) {
				ctx := b.Context()
				if withDeadline {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, time.Minute)
					defer cancel()
				}
				b.Run("client=bare", func(b *testing.B) {
					runOpsCtx(b, ctx, stdClient("bare", memTransport{}), o.op)
				})
				for _, v := range sturdyVariants {
					b.Run("client="+v.name, func(b *testing.B) {
						opts := transport.Options{Base: memTransport{}, Disable: v.disable}
						if v.timeout {
							opts.Timeout = -1
						}
						runOpsCtx(b, ctx, stdClient(v.name, transport.New(opts)), o.op)
					})
				}
			})
		}
	}
}

// TestSturdyVariants checks that every variant of BenchmarkSturdyLayers
// works.
func TestSturdyVariants(t *testing.T) {
	for _, v := range sturdyVariants {
		opts := transport.Options{Base: memTransport{}, Disable: v.disable}
		if v.timeout {
			opts.Timeout = -1
		}
		c := stdClient(v.name, transport.New(opts))
		for _, o := range successOps("http://api.test/v1/things") {
			if status, err := c.do(t.Context(), o.op); err != nil || status != http.StatusOK {
				t.Errorf("%s %s: got %d, %v; want 200, nil", v.name, o.name, status, err)
			}
		}
	}
}
