package openai

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	openaisdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// streamed is what an application read from a chat completion stream.
type streamed struct {
	text  string
	err   error
	first time.Duration // when the first content came, from the call
}

// readStream streams a chat completion with client, as an application
// would, inside an hour (a bare client on a stream that never sends an
// event would otherwise wait for ever).
func readStream(client openaisdk.Client) streamed {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	start := time.Now()
	stream := client.Chat.Completions.NewStreaming(ctx, openaisdk.ChatCompletionNewParams{
		Model:    openaisdk.ChatModelGPT5_2,
		Messages: []openaisdk.ChatCompletionMessageParamUnion{openaisdk.UserMessage("hi")},
	})
	defer stream.Close()
	var s streamed
	for stream.Next() {
		if c := stream.Current(); len(c.Choices) > 0 {
			if s.text == "" {
				s.first = time.Since(start)
			}
			s.text += c.Choices[0].Delta.Content
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

// Streams commit at their first event, with the real openai-go streaming
// client (its retries off, sturdy beneath, the host vouched for) and the
// same SDK on a bare net/http client beside it: an error chunk before
// content is invisible to the application; one after content reaches it
// as the SDK reports it, with one request at the server; a stream of
// keepalives only is abandoned at FirstEventTimeout and its connection
// closed (then retried after a second's backoff); a slow first token is
// hedged and the slow copy canceled.
func TestStreamCommitsAtFirstEvent(t *testing.T) {
	errChunk := []httptestutil.SSEEvent{httptestutil.OpenAIErrorChunk("server_error", "The server had an error while processing your request.")}
	ok := sse(httptestutil.OpenAIChunks(0, 0, "Hello", " world"))
	tests := []struct {
		name     string
		opts     transport.Options
		steps    []httptestutil.Step
		want     streamed
		wantErr  bool // the application gets the bare client's error
		requests int
		gone     time.Duration // when the server saw the first request's client go away (0: it did not)
		bare     string        // what the bare client's application sees: its text, or its error's
	}{
		{name: "a server_error chunk before content is retried, invisible",
			steps: []httptestutil.Step{sse(errChunk), ok},
			want:  streamed{text: "Hello world"}, requests: 2, bare: "server had an error"},
		{name: "an error chunk after content reaches the application as the SDK reports it",
			steps: []httptestutil.Step{sse(httptestutil.OpenAIChunks(0, 0, "Hello")[:1], errChunk), ok},
			want:  streamed{text: "Hello"}, wantErr: true, requests: 1, bare: "server had an error"},
		{name: "keepalives only: abandoned at FirstEventTimeout, connection closed, retried",
			opts:  transport.Options{FirstEventTimeout: 5 * time.Second, Retry: policy.Retry{Backoff: policy.Exponential(time.Second, time.Second)}},
			steps: []httptestutil.Step{httptestutil.KeepaliveStall(100 * time.Millisecond), ok},
			want:  streamed{text: "Hello world", first: 6 * time.Second}, requests: 2, gone: 5 * time.Second,
			bare: "context deadline exceeded"},
		{name: "a slow first token is hedged, the slow copy canceled",
			opts: transport.Options{Hedge: &policy.Hedge{Delay: time.Second}},
			steps: []httptestutil.Step{
				sse(httptestutil.Keepalives(1, 0), httptestutil.OpenAIChunks(10*time.Second, 0, "slow")),
				sse(httptestutil.OpenAIChunks(300*time.Millisecond, 0, "fast"))},
			want: streamed{text: "fast", first: 1300 * time.Millisecond}, requests: 2, gone: 1300 * time.Millisecond, bare: "slow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := httptestutil.NewNetwork()
				bareSrv := n.Serve("bare.openai.test", httptestutil.Script(tt.steps...))
				defer bareSrv.Close()
				rec := httptestutil.NewRecorder(httptestutil.Script(tt.steps...))
				srv := n.Serve("api.openai.test", rec)
				defer srv.Close()
				base := n.Transport()
				defer base.CloseIdleConnections()

				bare := readStream(openaisdk.NewClient(option.WithBaseURL(bareSrv.URL+"/v1/"), option.WithAPIKey("sk-test"),
					option.WithHTTPClient(&http.Client{Transport: base}), option.WithMaxRetries(0)))
				if bare.err != nil && !strings.Contains(bare.err.Error(), tt.bare) || bare.err == nil && bare.text != tt.bare {
					t.Errorf("bare client: text %q, error %v; want %q", bare.text, bare.err, tt.bare)
				}

				o := tt.opts
				o.Base = base
				o.Idempotency.Hosts = []string{"api.openai.test"}
				got := readStream(NewClient(o, option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("sk-test")))
				synctest.Wait()
				if got.text != tt.want.text || got.first != tt.want.first && tt.want.first != 0 {
					t.Errorf("application read %q (first content after %v), want %q (after %v)", got.text, got.first, tt.want.text, tt.want.first)
				}
				switch {
				case !tt.wantErr && got.err != nil:
					t.Errorf("application got error %v, want none", got.err)
				case tt.wantErr && (got.err == nil || bare.err == nil || got.err.Error() != strings.ReplaceAll(bare.err.Error(), "bare.", "api.")):
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
