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

// events joins SSE event lists.
func events(lists ...[]httptestutil.SSEEvent) []httptestutil.SSEEvent {
	var all []httptestutil.SSEEvent
	for _, l := range lists {
		all = append(all, l...)
	}
	return all
}

func one(e httptestutil.SSEEvent) []httptestutil.SSEEvent { return []httptestutil.SSEEvent{e} }

// fetchStream sends one request with rt and returns the status, the body
// read whole, and the error of the round trip or of the read.
func fetchStream(t *testing.T, rt http.RoundTripper, method, url string) (int, string, error) {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"stream":true}`)
	}
	// A bound, so that a bare client on a stream that never sends an
	// event gives up (after an hour of the bubble's time) instead of hanging.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, url, body)
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return 0, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b), err
}

// ok is a stream that succeeds at once, in Anthropic's shape.
var okStream = events(httptestutil.AnthropicStart(), httptestutil.AnthropicText(0, 0, "hello", " world"))

// Each rule of "streams commit at their first event", through New, with
// the bare net/http client beside it on the same script: the stack never
// fails what the bare client delivers, never sends an unvouched request
// twice unless the event proves the server did not act, and hands back
// the last stream byte for byte when no attempt is left.
func TestFirstEventRules(t *testing.T) {
	overloaded := httptestutil.AnthropicErrorAfterStart("overloaded_error")
	tests := []struct {
		name     string
		method   string
		vouched  bool
		opts     func(*Options)
		steps    []httptestutil.Step
		want     []httptestutil.SSEEvent // the stream the caller reads; nil: the first step's, as the bare client reads it
		wantBody string // the body the caller reads, when not SSE
		requests int
		wantErr  string // the error's text has this, when the stack fails
	}{
		{name: "overloaded_error after message_start, vouched POST: retried, invisible",
			method: "POST", vouched: true,
			steps:    []httptestutil.Step{overloaded, httptestutil.SSE(okStream...)},
			want:     okStream, requests: 2},
		{name: "OpenAI server_error chunk, GET: retried, invisible",
			method: "GET",
			steps: []httptestutil.Step{
				httptestutil.SSE(httptestutil.OpenAIErrorChunk("server_error", "The server had an error")),
				httptestutil.SSE(httptestutil.OpenAIChunks(0, 0, "hi")...)},
			want: httptestutil.OpenAIChunks(0, 0, "hi"), requests: 2},
		{name: "rate_limit_error, unvouched POST: the server did not act, retried",
			method: "POST",
			steps:  []httptestutil.Step{httptestutil.AnthropicErrorAfterStart("rate_limit_error"), httptestutil.SSE(okStream...)},
			want:   okStream, requests: 2},
		{name: "overloaded_error, unvouched POST: sent once, the stream handed back as it came",
			method: "POST",
			steps:  []httptestutil.Step{overloaded, httptestutil.SSE(okStream...)}, requests: 1},
		{name: "invalid_request_error is final: handed back at once",
			method: "POST", vouched: true,
			steps: []httptestutil.Step{httptestutil.AnthropicErrorAfterStart("invalid_request_error"), httptestutil.SSE(okStream...)}, requests: 1},
		{name: "an error after the first content event is the caller's: sent once",
			method: "POST", vouched: true,
			steps: []httptestutil.Step{
				httptestutil.SSE(events(httptestutil.AnthropicStart(), httptestutil.AnthropicText(0, 0, "partial")[:2], one(httptestutil.AnthropicError("overloaded_error", "Overloaded")))...),
				httptestutil.SSE(okStream...)}, requests: 1},
		{name: "every attempt overloaded: the last stream handed back byte for byte",
			method: "POST", vouched: true,
			opts:  func(o *Options) { o.Retry.MaxAttempts = 3 },
			steps: []httptestutil.Step{overloaded.Times(3)}, requests: 3},
		{name: "a stream that ends before its first event, GET: retried",
			method: "GET",
			steps:  []httptestutil.Step{httptestutil.SSE(httptestutil.AnthropicStart()...), httptestutil.SSE(okStream...)},
			want:   okStream, requests: 2},
		{name: "keepalives only past FirstEventTimeout, GET: cut and retried",
			method: "GET",
			opts:   func(o *Options) { o.FirstEventTimeout = 5 * time.Second },
			steps:  []httptestutil.Step{httptestutil.KeepaliveStall(100 * time.Millisecond), httptestutil.SSE(okStream...)},
			want:   okStream, requests: 2},
		{name: "keepalives only past FirstEventTimeout, unvouched POST: cut, not sent again",
			method: "POST",
			opts:   func(o *Options) { o.FirstEventTimeout = 5 * time.Second },
			steps:  []httptestutil.Step{httptestutil.KeepaliveStall(100 * time.Millisecond), httptestutil.SSE(okStream...)},
			requests: 1, wantErr: "FirstEventTimeout of 5s exceeded"},
		{name: "a slow first token within FirstEventTimeout is waited for",
			method: "GET",
			opts:   func(o *Options) { o.FirstEventTimeout = 5 * time.Second },
			steps: []httptestutil.Step{httptestutil.SSE(events(httptestutil.AnthropicStart(), httptestutil.Keepalives(40, 100*time.Millisecond),
				httptestutil.AnthropicText(0, 0, "late"))...)}, requests: 1},
		{name: "FirstEventTimeout negative: handed back at the headers, as before",
			method: "POST", vouched: true,
			opts:  func(o *Options) { o.FirstEventTimeout = -1 },
			steps: []httptestutil.Step{overloaded, httptestutil.SSE(okStream...)}, requests: 1},
		{name: "no preambles: message_start commits the stream",
			method: "POST", vouched: true,
			opts:  func(o *Options) { o.Stream.Preambles = []string{} },
			steps: []httptestutil.Step{overloaded, httptestutil.SSE(okStream...)}, requests: 1},
		{name: "NDJSON whose first line is an error, GET: retried",
			method: "GET",
			steps: []httptestutil.Step{
				httptestutil.Status(200, `{"error":{"type":"server_error","message":"boom"}}`+"\n", "Content-Type", "application/x-ndjson"),
				httptestutil.Status(200, `{"response":"hi","done":true}`+"\n", "Content-Type", "application/x-ndjson")},
			wantBody: `{"response":"hi","done":true}` + "\n", requests: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The bare client, on the same script.
				bareRec := httptestutil.NewRecorder(httptestutil.Script(tt.steps...))
				bare := newFakeEnv(t, bareRec)
				bareStatus, bareBody, bareErr := fetchStream(t, bare.base, tt.method, bare.url)
				bareRec.WantCount(t, 1)

				rec := httptestutil.NewRecorder(httptestutil.Script(tt.steps...))
				env := newFakeEnv(t, rec)
				o := Options{Base: env.base, Retry: policy.Retry{Backoff: constant(time.Second)}}
				if tt.vouched {
					o.Idempotency = idempotency.Options{Hosts: []string{"api.test"}}
				}
				if tt.opts != nil {
					tt.opts(&o)
				}
				status, body, err := fetchStream(t, New(o), tt.method, env.url)
				synctest.Wait()
				rec.WantCount(t, tt.requests)
				if tt.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
						t.Fatalf("got error %v, want one that says %q", err, tt.wantErr)
					}
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("errors.Is(%v, context.DeadlineExceeded) = false, want true", err)
					}
					// The abandoned stream's connection was closed: the
					// server saw the client go away.
					if r := rec.Requests()[0]; r.Disconnected.IsZero() {
						t.Error("the server did not see the stalled stream's client go away")
					}
					if bareErr == nil {
						t.Errorf("the bare client delivered %d %q where the stack failed", bareStatus, bareBody)
					}
					return
				}
				if err != nil {
					t.Fatalf("stack: %v; the bare client got %d %q, %v", err, bareStatus, bareBody, bareErr)
				}
				want := bareBody
				if tt.want != nil {
					want = render(tt.want)
				} else if tt.wantBody != "" {
					want = tt.wantBody
				} else if bareErr != nil {
					t.Fatalf("bare client: %v", bareErr)
				}
				if status != http.StatusOK || body != want {
					t.Errorf("got %d %q\nwant 200 %q", status, body, want)
				}
			})
		})
	}
}

// render writes events as httptestutil.SSE sends them.
func render(evs []httptestutil.SSEEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Name == "" && ev.Data == "" {
			b.WriteString(": " + ev.Comment + "\n\n")
			continue
		}
		if ev.Name != "" {
			b.WriteString("event: " + ev.Name + "\n")
		}
		b.WriteString("data: " + ev.Data + "\n\n")
	}
	return b.String()
}
