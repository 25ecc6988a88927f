package bench

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// ttftScale is how much faster than life the time-to-first-token
// benchmark runs: its server's waits are divided by it, and the figures it
// reports are multiplied back, so that 10,000 streams take seconds.
const ttftScale = 20

// ttftShape draws one attempt's time to its first content event, at
// life scale: 5% take 5 to 20 s, the rest 200 to 400 ms.
func ttftShape() time.Duration {
	if rand.IntN(100) < 5 {
		return uniform(5*time.Second, 20*time.Second)
	}
	return uniform(200*time.Millisecond, 400*time.Millisecond)
}

// ttftHedgeDelay is the fixed hedge delay: 600 ms at life scale, half as
// long again as the slowest of the fast streams.
const ttftHedgeDelay = 600 * time.Millisecond / ttftScale

// streamEmulator is an LLM server that streams, as a RoundTripper: the
// headers and Anthropic's message_start come at once, the first content
// event after a time drawn from ttftShape (scaled), then the end.
type streamEmulator struct {
	requests atomic.Int64
	open     atomic.Int64 // bodies handed out and not closed
}

const (
	ttftPreamble = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}\n\n"
	ttftContent  = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

func (e *streamEmulator) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	e.requests.Add(1)
	e.open.Add(1)
	return &http.Response{
		StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"text/event-stream"}},
		Body:          &slowStream{ctx: r.Context(), wait: ttftShape() / ttftScale, e: e},
		ContentLength: -1,
		Request:       r,
	}, nil
}

// slowStream gives the preamble at once, then waits before the content;
// it ends early, with the context's cause, when the request is canceled.
type slowStream struct {
	ctx  context.Context
	wait time.Duration
	e    *streamEmulator
	step int
	rest *strings.Reader
	once sync.Once
}

func (s *slowStream) Read(p []byte) (int, error) {
	switch s.step {
	case 0:
		s.step++
		return copy(p, ttftPreamble), nil
	case 1:
		t := time.NewTimer(s.wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.ctx.Done():
			return 0, context.Cause(s.ctx)
		}
		s.step++
		s.rest = strings.NewReader(ttftContent)
	}
	return s.rest.Read(p)
}

func (s *slowStream) Close() error {
	s.once.Do(func() { s.e.open.Add(-1) })
	return nil
}

// BenchmarkTimeToFirstToken measures, for 10,000 streamed completions
// (64 at a time) against a server whose first content event takes 200 to
// 400 ms, but 5 to 20 s for 5% of attempts, the time to first token
// (from the call to the stream's first content event, read by the
// caller) at p50, p99 and p99.9, in seconds at life scale, and the extra
// requests each operation cost. The server runs 20 times faster than
// life (see ttftScale). Clients: none (the bare transport); sturdy's
// default stack with a hedge of 600 ms timed to the headers (streams
// handed back at their headers, FirstEventTimeout -1: no stream is ever
// hedged); the same timed to the first event, with one hedge and with
// two (a second 600 ms after the first); and the adaptive delay
// timed to the first event (the p90 of the host's times to first event:
// the default p95 sits on the edge of the 5% slow).
func BenchmarkTimeToFirstToken(b *testing.B) {
	const ops, workers = 10000, 64
	clients := []struct {
		name string
		new  func(base http.RoundTripper) http.RoundTripper
	}{
		{"none", func(base http.RoundTripper) http.RoundTripper { return base }},
		{"sturdy-hedge-at-headers", func(base http.RoundTripper) http.RoundTripper {
			return transport.New(transport.Options{Base: base, FirstEventTimeout: -1, Hedge: &policy.Hedge{Delay: ttftHedgeDelay}})
		}},
		{"sturdy-hedge-at-first-event", func(base http.RoundTripper) http.RoundTripper {
			return transport.New(transport.Options{Base: base, Hedge: &policy.Hedge{Delay: ttftHedgeDelay}})
		}},
		{"sturdy-first-event-2-hedges", func(base http.RoundTripper) http.RoundTripper {
			return transport.New(transport.Options{Base: base, Hedge: &policy.Hedge{Delay: ttftHedgeDelay, MaxHedges: 2}})
		}},
		{"sturdy-adaptive-p90", func(base http.RoundTripper) http.RoundTripper {
			return transport.New(transport.Options{Base: base, Hedge: &policy.Hedge{Quantile: 0.9}})
		}},
	}
	for _, c := range clients {
		b.Run("client="+c.name, func(b *testing.B) {
			var (
				lat      []time.Duration
				requests int64
				failed   int64
				open     int64
			)
			for b.Loop() {
				emu := &streamEmulator{}
				hc := &http.Client{Transport: c.new(emu)}
				lat = make([]time.Duration, ops)
				var n, fails atomic.Int64
				var wg sync.WaitGroup
				for range workers {
					wg.Go(func() {
						for i := int(n.Add(1) - 1); i < ops; i = int(n.Add(1) - 1) {
							start := time.Now()
							req, _ := http.NewRequest("GET", "http://llm.test/v1/messages", nil)
							resp, err := hc.Do(req)
							if err == nil {
								var body []byte
								body, err = io.ReadAll(resp.Body) // the stream ends right after its first token
								resp.Body.Close()
								if err == nil && !strings.Contains(string(body), "text_delta") {
									err = errors.New("no content")
								}
							}
							lat[i] = time.Since(start) * ttftScale
							if err != nil {
								fails.Add(1)
							}
						}
					})
				}
				wg.Wait()
				time.Sleep(50 * time.Millisecond) // let canceled copies close their bodies
				slices.Sort(lat)
				requests, failed, open = emu.requests.Load(), fails.Load(), emu.open.Load()
			}
			s := func(d time.Duration) float64 { return d.Seconds() }
			b.ReportMetric(s(quantile(lat, 0.50)), "p50-s")
			b.ReportMetric(s(quantile(lat, 0.99)), "p99-s")
			b.ReportMetric(s(quantile(lat, 0.999)), "p999-s")
			b.ReportMetric(float64(requests-ops)/ops, "extra-req/op")
			b.ReportMetric(float64(failed)/ops, "fail/op")
			b.ReportMetric(float64(open), "unclosed-bodies")
			b.ReportMetric(0, "ns/op")
		})
	}
}
