package sturdyotel

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// call sends a GET of url through c under a caller's span named name,
// reads the body and closes it, and returns the status or the error.
func call(p *pipeline, c *http.Client, ctx context.Context, name, url string) (int, error) {
	ctx, span := p.tp.Tracer("test").Start(ctx, name)
	defer span.End()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// errUserLeft is the cause a caller cancels its call with.
var errUserLeft = errors.New("user left")

func TestScenarios(t *testing.T) {
	type result struct {
		status int
		err    error
	}
	tests := []struct {
		name    string
		steps   []httptestutil.Step
		options transport.Options
		calls   int
		cancel  time.Duration // cancel the last call's context after this long
		cause   error         // with this cause (context.WithCancelCause); nil: none
		want    []result
		tree    string
		metrics string
	}{{
		name:  "success",
		steps: []httptestutil.Step{httptestutil.Delay(100*time.Millisecond, httptestutil.Status(200, "ok"))},
		want:  []result{{status: 200}},
		tree: `
call 1 internal +0s 100ms
  GET client +0s 100ms {http.request.method=GET http.response.status_code=200 network.protocol.version=1.1 server.address=api.test server.port=80 sturdy.attempt=1 sturdy.idempotency_key.present=false url.full=http://api.test/things}`,
		metrics: `
http.client.request.duration{http.request.method=GET http.response.status_code=200 network.protocol.version=1.1 server.address=api.test server.port=80} count=1 sum=0.1
sturdy.client.attempts{http.request.method=GET http.response.status_code=200 server.address=api.test server.port=80} = 1`,
	}, {
		name: "503, 503, then 200 with backoffs",
		steps: []httptestutil.Step{
			httptestutil.Delay(10*time.Millisecond, httptestutil.Status(503, "busy")).Times(2),
			httptestutil.Delay(10*time.Millisecond, httptestutil.Status(200, "ok")),
		},
		options: transport.Options{Retry: policy.Retry{Backoff: policy.Exponential(100*time.Millisecond, time.Second)}},
		want:    []result{{status: 200}},
		// Attempts at 0, 10ms + 100ms of backoff, 120ms + 200ms of backoff.
		tree: `
call 1 internal +0s 330ms
  event sturdy.retry +10ms {http.response.status_code=503 sturdy.attempt=2 sturdy.retry.reason=status 503 sturdy.wait.duration=0.1 sturdy.wait.reason=backoff}
  event sturdy.retry +120ms {http.response.status_code=503 sturdy.attempt=3 sturdy.retry.reason=status 503 sturdy.wait.duration=0.2 sturdy.wait.reason=backoff}
  GET client +0s 10ms status=Error {error.type=503 http.request.method=GET http.response.status_code=503 network.protocol.version=1.1 server.address=api.test server.port=80 sturdy.attempt=1 sturdy.idempotency_key.present=false url.full=http://api.test/things}
  GET client +110ms 10ms status=Error {error.type=503 http.request.method=GET http.request.resend_count=1 http.response.status_code=503 network.protocol.version=1.1 server.address=api.test server.port=80 sturdy.attempt=2 sturdy.idempotency_key.present=false url.full=http://api.test/things}
  GET client +320ms 10ms {http.request.method=GET http.request.resend_count=2 http.response.status_code=200 network.protocol.version=1.1 server.address=api.test server.port=80 sturdy.attempt=3 sturdy.idempotency_key.present=false url.full=http://api.test/things}`,
		metrics: `
http.client.request.duration{error.type=503 http.request.method=GET http.response.status_code=503 network.protocol.version=1.1 server.address=api.test server.port=80} count=2 sum=0.02
http.client.request.duration{http.request.method=GET http.response.status_code=200 network.protocol.version=1.1 server.address=api.test server.port=80} count=1 sum=0.01
sturdy.client.attempts{http.request.method=GET http.response.status_code=200 server.address=api.test server.port=80} = 1
sturdy.client.attempts{http.request.method=GET http.response.status_code=503 server.address=api.test server.port=80} = 2
sturdy.client.retries{http.request.method=GET server.address=api.test server.port=80 sturdy.retry.reason=status 503} = 2`,
	}, {
		name: "503 with Retry-After, then 200",
		steps: []httptestutil.Step{
			httptestutil.RetryAfterSeconds(503, 2),
			httptestutil.Status(200, "ok"),
		},
		options: transport.Options{Retry: policy.Retry{Backoff: policy.Exponential(100*time.Millisecond, time.Second)}},
		want:    []result{{status: 200}},
		// The server's 2s, longer than the 100ms backoff, is the wait.
		tree: `
call 1 internal +0s 2s
  event sturdy.retry +0s {http.response.status_code=503 sturdy.attempt=2 sturdy.retry.reason=status 503 sturdy.wait.duration=2 sturdy.wait.reason=retry-after}
  GET client +0s 0s status=Error {error.type=503 http.request.method=GET http.response.status_code=503 network.protocol.version=1.1 server.address=api.test server.port=80 sturdy.attempt=1 sturdy.idempotency_key.present=false url.full=http://api.test/things}
  GET client +2s 0s {http.request.method=GET http.request.resend_count=1 http.response.status_code=200 network.protocol.version=1.1 server.address=api.test server.port=80 sturdy.attempt=2 sturdy.idempotency_key.present=false url.full=http://api.test/things}`,
		metrics: `
http.client.request.duration{error.type=503 http.request.method=GET http.response.status_code=503 network.protocol.version=1.1 server.address=api.test server.port=80} count=1 sum=0
http.client.request.duration{http.request.method=GET http.response.status_code=200 network.protocol.version=1.1 server.address=api.test server.port=80} count=1 sum=0
sturdy.client.attempts{http.request.method=GET http.response.status_code=200 server.address=api.test server.port=80} = 1
sturdy.client.attempts{http.request.method=GET http.response.status_code=503 server.address=api.test server.port=80} = 1
sturdy.client.retries{http.request.method=GET server.address=api.test server.port=80 sturdy.retry.reason=status 503} = 1`,
	}, {
		name:  "breaker refusal",
		steps: []httptestutil.Step{httptestutil.Status(500, "down").Forever()},
		options: transport.Options{
			Retry:   policy.Retry{MaxAttempts: 1},
			Breaker: transport.BreakerSettings{ConsecutiveFailures: 1, Cooldown: time.Minute},
		},
		calls: 2,
		want:  []result{{status: 500}, {err: transport.ErrCircuitOpen}},
		// The refused call has no attempt span: nothing was sent.
		tree: `
call 1 internal +0s 0s
  event sturdy.give_up +0s {http.response.status_code=500 sturdy.attempts=1 sturdy.give_up.reason=attempts used}
  GET client +0s 0s status=Error {error.type=500 http.request.method=GET http.response.status_code=500 network.protocol.version=1.1 server.address=api.test server.port=80 sturdy.attempt=1 sturdy.idempotency_key.present=false url.full=http://api.test/things}
call 2 internal +0s 0s
  event sturdy.breaker.refused +0s {sturdy.attempt=1 sturdy.breaker.key=http://api.test sturdy.breaker.retry_in.within_a_minute=true sturdy.breaker.state=open}
  event sturdy.give_up +0s {error.type=circuit_open sturdy.attempts=0 sturdy.give_up.reason=circuit open}`,
		metrics: `
http.client.request.duration{error.type=500 http.request.method=GET http.response.status_code=500 network.protocol.version=1.1 server.address=api.test server.port=80} count=1 sum=0
sturdy.client.attempts{http.request.method=GET http.response.status_code=500 server.address=api.test server.port=80} = 1
sturdy.client.breaker.refusals{http.request.method=GET server.address=api.test server.port=80 sturdy.breaker.state=open} = 1
sturdy.client.breaker.state_changes{sturdy.breaker.from=closed sturdy.breaker.key=http://api.test sturdy.breaker.to=open} = 1
sturdy.client.give_ups{http.request.method=GET server.address=api.test server.port=80 sturdy.give_up.reason=attempts used} = 1
sturdy.client.give_ups{http.request.method=GET server.address=api.test server.port=80 sturdy.give_up.reason=circuit open} = 1`,
	}, {
		name: "hedge that wins",
		steps: []httptestutil.Step{
			httptestutil.Delay(10*time.Second, httptestutil.Status(200, "slow")),
			httptestutil.Delay(10*time.Millisecond, httptestutil.Status(200, "fast")),
		},
		options: transport.Options{Hedge: &policy.Hedge{Delay: 50 * time.Millisecond}},
		want:    []result{{status: 200}},
		// A span per copy: the first, canceled when the hedge won.
		tree: `
call 1 internal +0s 60ms
  event sturdy.hedge.sent +50ms {sturdy.hedge.copy=2 sturdy.hedge.elapsed=0.05}
  event sturdy.hedge.canceled +60ms {sturdy.hedge.copy=1 sturdy.hedge.elapsed=0.06}
  event sturdy.hedge.won +60ms {http.response.status_code=200 sturdy.hedge.copy=2 sturdy.hedge.elapsed=0.06}
  GET client +0s 60ms status=Error {error.type=canceled http.request.method=GET server.address=api.test server.port=80 sturdy.attempt=1 sturdy.hedge.copy=1 sturdy.idempotency_key.present=false url.full=http://api.test/things}
  GET client +50ms 10ms {http.request.method=GET http.request.resend_count=1 http.response.status_code=200 network.protocol.version=1.1 server.address=api.test server.port=80 sturdy.attempt=1 sturdy.hedge.copy=2 sturdy.idempotency_key.present=false url.full=http://api.test/things}`,
		metrics: `
http.client.request.duration{error.type=canceled http.request.method=GET server.address=api.test server.port=80} count=1 sum=0.06
http.client.request.duration{http.request.method=GET http.response.status_code=200 network.protocol.version=1.1 server.address=api.test server.port=80} count=1 sum=0.01
sturdy.client.attempts{http.request.method=GET http.response.status_code=200 server.address=api.test server.port=80} = 1
sturdy.client.hedge.canceled{http.request.method=GET server.address=api.test server.port=80} = 1
sturdy.client.hedge.sent{http.request.method=GET server.address=api.test server.port=80} = 1
sturdy.client.hedge.won{http.request.method=GET server.address=api.test server.port=80} = 1`,
	}, {
		name: "quota wait",
		steps: []httptestutil.Step{
			httptestutil.RateLimitHeaders(200, "ok", httptestutil.Quota{Limit: 1, Remaining: 0, Reset: 10 * time.Second}, httptestutil.FamilyIETF),
			httptestutil.Status(200, "ok"),
		},
		calls: 2,
		want:  []result{{status: 200}, {status: 200}},
		// The second call waits the 10s the first response's quota asked.
		tree: `
call 1 internal +0s 0s
  GET client +0s 0s {http.request.method=GET http.response.status_code=200 network.protocol.version=1.1 server.address=api.test server.port=80 sturdy.attempt=1 sturdy.idempotency_key.present=false url.full=http://api.test/things}
call 2 internal +0s 10s
  event sturdy.quota.wait +0s {sturdy.quota.key=http://api.test sturdy.wait.duration=10 sturdy.wait.reason=quota}
  GET client +10s 0s {http.request.method=GET http.response.status_code=200 network.protocol.version=1.1 server.address=api.test server.port=80 sturdy.attempt=1 sturdy.idempotency_key.present=false url.full=http://api.test/things}`,
		metrics: `
http.client.request.duration{http.request.method=GET http.response.status_code=200 network.protocol.version=1.1 server.address=api.test server.port=80} count=2 sum=0
sturdy.client.attempts{http.request.method=GET http.response.status_code=200 server.address=api.test server.port=80} = 2
sturdy.client.quota.waits{http.request.method=GET server.address=api.test server.port=80 sturdy.wait.reason=quota} = 1`,
	}, {
		name:   "canceled call",
		steps:  []httptestutil.Step{httptestutil.Hang()},
		cancel: time.Second,
		want:   []result{{err: context.Canceled}},
		tree: `
call 1 internal +0s 1s
  event sturdy.give_up +1s {error.type=canceled sturdy.attempts=1 sturdy.give_up.reason=canceled}
  GET client +0s 1s status=Error {error.type=canceled http.request.method=GET server.address=api.test server.port=80 sturdy.attempt=1 sturdy.idempotency_key.present=false url.full=http://api.test/things}`,
		metrics: `
http.client.request.duration{error.type=canceled http.request.method=GET server.address=api.test server.port=80} count=1 sum=1
sturdy.client.attempts{error.type=canceled http.request.method=GET server.address=api.test server.port=80} = 1
sturdy.client.give_ups{http.request.method=GET server.address=api.test server.port=80 sturdy.give_up.reason=canceled} = 1`,
	}, {
		// net/http returns the cause of a cancel(cause), not
		// context.Canceled: the call is still a cancel.
		name:   "call canceled with a cause",
		steps:  []httptestutil.Step{httptestutil.Hang()},
		cancel: time.Second,
		cause:  errUserLeft,
		want:   []result{{err: errUserLeft}},
		tree: `
call 1 internal +0s 1s
  event sturdy.give_up +1s {error.type=canceled sturdy.attempts=1 sturdy.give_up.reason=canceled}
  GET client +0s 1s status=Error {error.type=canceled http.request.method=GET server.address=api.test server.port=80 sturdy.attempt=1 sturdy.idempotency_key.present=false url.full=http://api.test/things}`,
		metrics: `
http.client.request.duration{error.type=canceled http.request.method=GET server.address=api.test server.port=80} count=1 sum=1
sturdy.client.attempts{error.type=canceled http.request.method=GET server.address=api.test server.port=80} = 1
sturdy.client.give_ups{http.request.method=GET server.address=api.test server.port=80 sturdy.give_up.reason=canceled} = 1`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The same calls through the same stack, with and without
			// the telemetry: an observer changes no outcome and sends no
			// request more or less.
			var sent [2]int
			for run, instrumented := range []bool{true, false} {
				synctest.Test(t, func(t *testing.T) {
					p := newPipeline(t)
					o := tt.options
					rec := httptestutil.NewRecorder(httptestutil.Script(tt.steps...))
					o.Base = httptestutil.NewHandlerTransport(rec)
					if instrumented {
						o = p.telemetry().Apply(o)
					}
					c := &http.Client{Transport: transport.New(o)}
					calls := max(tt.calls, 1)
					for i := range calls {
						ctx := context.Background()
						if tt.cancel > 0 && i == calls-1 {
							var cancel context.CancelCauseFunc
							ctx, cancel = context.WithCancelCause(ctx)
							stop := time.AfterFunc(tt.cancel, func() { cancel(tt.cause) })
							defer stop.Stop()
						}
						status, err := call(p, c, ctx, "call "+strconv.Itoa(i+1), "http://api.test/things")
						w := tt.want[i]
						if status != w.status || w.err == nil && err != nil || w.err != nil && !errors.Is(err, w.err) {
							t.Errorf("instrumented %v, call %d: got %d, %v; want %d, %v", instrumented, i+1, status, err, w.status, w.err)
						}
					}
					synctest.Wait()
					sent[run] = rec.Count()
					if instrumented {
						diff(t, "span tree", p.tree(), tt.tree)
						diff(t, "metrics", p.metrics(t), tt.metrics)
					}
				})
			}
			if sent[0] != sent[1] {
				t.Errorf("server got %d requests with the telemetry, %d without", sent[0], sent[1])
			}
		})
	}
}
