package sturdyotel

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// A stream that opens with overloaded_error, then one that commits: each
// read ahead is counted, by whether it committed and the status the
// error event stood for, and is an event on the caller's span.
func TestStreamReadAheads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPipeline(t)
		o := transport.Options{
			Base: httptestutil.NewHandlerTransport(httptestutil.Script(
				httptestutil.AnthropicErrorAfterStart("overloaded_error"),
				httptestutil.SSE(append(httptestutil.AnthropicStart(), httptestutil.AnthropicText(0, 0, "hi")...)...),
			)),
			Retry: policy.Retry{Backoff: policy.Exponential(time.Second, time.Second)},
		}
		c := &http.Client{Transport: transport.New(p.telemetry().Apply(o))}
		if _, err := call(p, c, context.Background(), "stream", "http://api.test/v1/messages"); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, line := range strings.Split(p.metrics(t), "\n") {
			if strings.HasPrefix(line, MetricStreamReadAheads+"{") {
				got = append(got, line)
			}
		}
		want := []string{
			MetricStreamReadAheads + "{http.request.method=GET http.response.status_code=200 server.address=api.test server.port=80 sturdy.stream.committed=true} = 1",
			MetricStreamReadAheads + "{http.request.method=GET http.response.status_code=529 server.address=api.test server.port=80 sturdy.stream.committed=false} = 1",
		}
		diff(t, "stream read-ahead points", strings.Join(got, "\n"), strings.Join(want, "\n"))
		events := 0
		for _, s := range p.spans.Ended() {
			for _, e := range s.Events() {
				if e.Name == EventStream {
					events++
				}
			}
		}
		if events != 2 {
			t.Errorf("%s events: got %d, want 2", EventStream, events)
		}
	})
}
