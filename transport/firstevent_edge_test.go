package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/policy"
)

// rawStream is a handler that answers 200 with the given media type and
// writes body in the pieces given, each after its pause, flushing each.
func rawStream(ct string, pieces ...any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		rc.Flush()
		for _, p := range pieces {
			switch p := p.(type) {
			case time.Duration:
				select {
				case <-time.After(p):
				case <-r.Context().Done():
					return
				}
			case string:
				io.WriteString(w, p)
				rc.Flush()
			}
		}
	})
}

// A stream whose last record ends at EOF without its newline, an empty
// stream, and an SSE stream that starts with a byte-order mark: the bare
// client delivers each, once; so must the stack, sending each once and
// counting nothing against the host (three such calls in a row must not
// open its breaker). An SSE event without its blank line is incomplete
// (the server may have died half way), and an NDJSON stream that opened
// with a preamble and ended before its content is still a failure.
func TestFirstEventStreamEnds(t *testing.T) {
	const record = `{"id":1,"text":"hello"}`
	tests := []struct {
		name     string
		ct       string
		body     string
		method   string
		requests int  // how many the stack sends for one call
		fails    bool // the stack judges it a failed attempt (and the bare client still gets it: it is handed back)
	}{
		{"NDJSON, one record without a final newline", "application/x-ndjson", record, "POST", 1, false},
		{"JSON Lines, one record without a final newline", "application/jsonl", record, "POST", 1, false},
		{"NDJSON, two records, the last without a newline", "application/x-ndjson", `{"a":1}` + "\n" + record, "GET", 1, false},
		{"NDJSON, one record and trailing blanks", "application/x-ndjson", record + " \t", "POST", 1, false},
		{"NDJSON, empty", "application/x-ndjson", "", "POST", 1, false},
		{"NDJSON, only blank lines", "application/x-ndjson", "\n\r\n\n", "POST", 1, false},
		{"SSE, empty", "text/event-stream", "", "POST", 1, false},
		{"SSE, only blank lines", "text/event-stream", "\n\n", "POST", 1, false},
		{"SSE, starting with a byte-order mark", "text/event-stream", "\ufeffevent: content_block_delta\ndata: {\"text\":\"hi\"}\n\n", "POST", 1, false},
		{"SSE, a byte-order mark then an error event", "text/event-stream", "\ufeffevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n", "GET", 4, true},
		{"SSE, an event without its blank line", "text/event-stream", "data: {\"text\":\"hi\"}\n", "GET", 4, true},
		{"SSE, a preamble then the end", "text/event-stream", "event: message_start\ndata: {\"type\":\"message_start\"}\n\n", "GET", 4, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := rawStream(tt.ct, tt.body)
				bareRec := httptestutil.NewRecorder(h)
				bare := newFakeEnv(t, bareRec)
				bareStatus, bareBody, bareErr := fetchStream(t, bare.base, tt.method, bare.url)
				if bareErr != nil || bareStatus != 200 || bareBody != tt.body {
					t.Fatalf("bare client: %d %q, %v", bareStatus, bareBody, bareErr)
				}

				rec := httptestutil.NewRecorder(h)
				env := newFakeEnv(t, rec)
				var opens int
				rt := New(Options{
					Base:        env.base,
					Retry:       policy.Retry{Backoff: constant(time.Second)},
					Idempotency: idempotency.Options{Hosts: []string{"api.test"}}, // a vouched POST may be sent again
					Breaker:     BreakerSettings{ConsecutiveFailures: 3},
					Hooks: Hooks{OnBreakerStateChange: func(_ string, _, to BreakerState) {
						if to == BreakerOpen {
							opens++
						}
					}},
				})
				calls := 1
				if !tt.fails {
					calls = 3 // three in a row: a breaker that counted them would open
				}
				for range calls {
					status, body, err := fetchStream(t, rt, tt.method, env.url)
					if err != nil || status != bareStatus || body != bareBody {
						t.Fatalf("stack: %d %q, %v; bare client: %d %q", status, body, err, bareStatus, bareBody)
					}
				}
				synctest.Wait()
				rec.WantCount(t, calls*tt.requests)
				if opens != 0 && !tt.fails {
					t.Errorf("the breaker opened %d times on complete streams", opens)
				}
			})
		})
	}
}

// With Options.Hedge set, Timeout still does not bound a stream's wait
// for its first event: a stream that pings past Timeout, then sends its
// content, is handed back, as it is without Hedge and by the bare client.
// A body that is not a stream stays bounded by Timeout under Hedge.
func TestFirstEventHoldUnderHedge(t *testing.T) {
	stream := httptestutil.SSE(events(httptestutil.AnthropicStart(), httptestutil.Keepalives(6, 100*time.Millisecond),
		httptestutil.AnthropicText(0, 0, "hello"))...)
	tests := []struct {
		name  string
		hedge *policy.Hedge
		sent  int
	}{
		{"no hedge", nil, 1},
		{"a hedge that sends no copy", &policy.Hedge{Delay: 10 * time.Second}, 1},
		{"a hedge that sends a copy", &policy.Hedge{Delay: 200 * time.Millisecond}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				bare := newFakeEnv(t, stream)
				bareStatus, bareBody, bareErr := fetchStream(t, bare.base, "GET", bare.url)
				if bareErr != nil || bareStatus != 200 || !strings.Contains(bareBody, "hello") {
					t.Fatalf("bare client: %d %q, %v", bareStatus, bareBody, bareErr)
				}

				rec := httptestutil.NewRecorder(stream)
				env := newFakeEnv(t, rec)
				rt := New(Options{Base: env.base, Timeout: 300 * time.Millisecond, Hedge: tt.hedge})
				start := time.Now()
				status, body, err := fetchStream(t, rt, "GET", env.url)
				if err != nil || status != bareStatus || body != bareBody {
					t.Fatalf("stack after %v: %d %q, %v; bare client: %d %q", time.Since(start), status, body, err, bareStatus, bareBody)
				}
				if got, want := time.Since(start), 600*time.Millisecond; got != want {
					t.Errorf("got the stream after %v, want %v", got, want)
				}
				synctest.Wait()
				rec.WantCount(t, tt.sent)

				// A body that is not a stream, slower than Timeout, is
				// still cut by it under Hedge.
				slow := newFakeEnv(t, rawStream("application/json", `{"a":`, 600*time.Millisecond, `1}`))
				rt = New(Options{Base: slow.base, Timeout: 300 * time.Millisecond, Hedge: tt.hedge})
				_, _, err = fetchStream(t, rt, "GET", slow.url)
				var de *DeadlineError
				if !errors.As(err, &de) || de.Bound != "Timeout" || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("a slow JSON body under Timeout: got %v, want a Timeout DeadlineError", err)
				}
			})
		})
	}
}
