package anthropic

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	anthropicsdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// streamed is what an application read from a message stream.
type streamed struct {
	text  string
	err   error
	first time.Duration // when the first text delta came, from the call
}

// readStream streams a message with client, as an application would,
// inside an hour (a bare client on a stream that never sends an event
// would otherwise wait for ever).
func readStream(client anthropicsdk.Client) streamed {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	start := time.Now()
	stream := client.Messages.NewStreaming(ctx, anthropicsdk.MessageNewParams{
		Model:     anthropicsdk.ModelClaudeSonnet5_5,
		MaxTokens: 1024,
		Messages:  []anthropicsdk.MessageParam{anthropicsdk.NewUserMessage(anthropicsdk.NewTextBlock("hi"))},
	})
	defer stream.Close()
	var s streamed
	for stream.Next() {
		if ev, ok := stream.Current().AsAny().(anthropicsdk.ContentBlockDeltaEvent); ok {
			if s.text == "" {
				s.first = time.Since(start)
			}
			s.text += ev.Delta.Text
		}
	}
	s.err = stream.Err()
	return s
}

func sse(lists ...[]httptestutil.SSEEvent) httptestutil.Step {
	var all []httptestutil.SSEEvent
	for _, l := range lists {
		all = append(all, l...)
	}
	return httptestutil.SSE(all...)
}

// Streams commit at their first event, with the real anthropic-sdk-go
// streaming client (its retries off, sturdy beneath, the host vouched
// for) and the same SDK on a bare net/http client beside it: an
// overloaded_error before content is invisible to the application; one
// after content reaches it as the SDK reports it, with one request at the
// server; a stream of keepalives only is abandoned at FirstEventTimeout
// and its connection closed (then retried after a second's backoff); a slow first token is hedged and the slow
// copy canceled.
func TestStreamCommitsAtFirstEvent(t *testing.T) {
	start := httptestutil.AnthropicStart()
	ok := sse(start, httptestutil.AnthropicText(0, 0, "Hello", " world"))
	tests := []struct {
		name     string
		opts     transport.Options
		steps    []httptestutil.Step
		want     streamed // the application's text, its error's text (nil: none), when its first text came
		wantErr  string
		requests int
		gone     time.Duration // when the server saw the first request's client go away (0: it did not)
		bare     string        // what the bare client's application sees: its text, or its error's
	}{
		{name: "an overloaded_error after message_start is retried, invisible",
			steps: []httptestutil.Step{httptestutil.AnthropicErrorAfterStart("overloaded_error"), ok},
			want:  streamed{text: "Hello world"}, requests: 2, bare: "overloaded_error"},
		{name: "an error after content reaches the application as the SDK reports it",
			steps: []httptestutil.Step{sse(start, httptestutil.AnthropicText(0, 0, "Hello")[:2],
				[]httptestutil.SSEEvent{httptestutil.AnthropicError("overloaded_error", "Overloaded")}), ok},
			want: streamed{text: "Hello"}, wantErr: "overloaded_error", requests: 1, bare: "overloaded_error"},
		{name: "keepalives only: abandoned at FirstEventTimeout, connection closed, retried",
			opts:  transport.Options{FirstEventTimeout: 5 * time.Second, Retry: policy.Retry{Backoff: policy.Exponential(time.Second, time.Second)}},
			steps: []httptestutil.Step{httptestutil.KeepaliveStall(100 * time.Millisecond), ok},
			want:  streamed{text: "Hello world", first: 6 * time.Second}, requests: 2, gone: 5 * time.Second,
			bare: "context deadline exceeded"},
		{name: "a slow first token is hedged, the slow copy canceled",
			opts: transport.Options{Hedge: &policy.Hedge{Delay: time.Second}},
			steps: []httptestutil.Step{
				sse(start, httptestutil.AnthropicText(10*time.Second, 0, "slow")),
				sse(start, httptestutil.AnthropicText(300*time.Millisecond, 0, "fast"))},
			want: streamed{text: "fast", first: 1300 * time.Millisecond}, requests: 2, gone: 1300 * time.Millisecond, bare: "slow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := httptestutil.NewNetwork()
				bareSrv := n.Serve("bare.anthropic.test", httptestutil.Script(tt.steps...))
				defer bareSrv.Close()
				rec := httptestutil.NewRecorder(httptestutil.Script(tt.steps...))
				srv := n.Serve("api.anthropic.test", rec)
				defer srv.Close()
				base := n.Transport()
				defer base.CloseIdleConnections()

				bare := readStream(anthropicsdk.NewClient(option.WithBaseURL(bareSrv.URL), option.WithAPIKey("sk-ant-test"),
					option.WithHTTPClient(&http.Client{Transport: base}), option.WithMaxRetries(0)))
				if bare.err != nil && !strings.Contains(bare.err.Error(), tt.bare) || bare.err == nil && bare.text != tt.bare {
					t.Errorf("bare client: text %q, error %v; want %q", bare.text, bare.err, tt.bare)
				}

				o := tt.opts
				o.Base = base
				o.Idempotency.Hosts = []string{"api.anthropic.test"}
				got := readStream(NewClient(o, option.WithBaseURL(srv.URL), option.WithAPIKey("sk-ant-test")))
				synctest.Wait()
				if got.text != tt.want.text || got.first != tt.want.first && tt.want.first != 0 {
					t.Errorf("application read %q (first text after %v), want %q (after %v)", got.text, got.first, tt.want.text, tt.want.first)
				}
				switch {
				case tt.wantErr == "" && got.err != nil:
					t.Errorf("application got error %v, want none", got.err)
				case tt.wantErr != "" && (got.err == nil || bare.err == nil || got.err.Error() != strings.ReplaceAll(bare.err.Error(), "bare.", "api.")):
					t.Errorf("application got error %v, want the bare client's %v", got.err, bare.err)
				}
				rec.WantCount(t, tt.requests)
				reqs := rec.Requests()
				if len(reqs) == 0 {
					return
				}
				switch d := reqs[0].Disconnected; {
				case tt.gone == 0 && !d.IsZero():
					t.Errorf("the server saw the client go away after %v, want never", d.Sub(reqs[0].Arrived))
				case tt.gone != 0 && (d.IsZero() || d.Sub(reqs[0].Arrived) != tt.gone):
					t.Errorf("the server saw the client go away after %v, want %v", d.Sub(reqs[0].Arrived), tt.gone)
				}
			})
		})
	}
}
