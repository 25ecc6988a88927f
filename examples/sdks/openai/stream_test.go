package openai

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	openaisdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/transport"
)

// streamingCompletions emulates a streamed chat completion (stream:
// true): chunks chat.completion.chunk events, one every every, then
// "data: [DONE]". With stall set it stops after the chunks and keeps
// the connection open, sending nothing, until the client goes away.
type streamingCompletions struct {
	chunks int
	every  time.Duration
	stall  bool
	gone   chan time.Time // when the client went away, if it did
}

func (s *streamingCompletions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		openAIError(w, http.StatusNotFound, "Invalid URL ("+r.Method+" "+r.URL.Path+")", "invalid_request_error", "")
		return
	}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	rc.Flush()
	for i := range s.chunks {
		if i > 0 {
			select {
			case <-time.After(s.every):
			case <-r.Context().Done():
				s.gone <- time.Now()
				return
			}
		}
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"gpt-5.2\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"},\"finish_reason\":null}]}\n\n", i)
		rc.Flush()
	}
	if s.stall {
		<-r.Context().Done()
		s.gone <- time.Now()
		return
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// A streamed chat completion through sturdy's default stack, on virtual
// time: a 20-minute stream (longer than Timeout) is read whole, and a
// stream that stalls is cut after IdleTimeout, with an error that says
// so and a disconnect the server sees.
func TestStreamingChatCompletion(t *testing.T) {
	tests := []struct {
		name       string
		emu        streamingCompletions
		wantChunks int
		wantCut    bool
	}{
		{"a 20-minute stream, a chunk every 30s, read whole", streamingCompletions{chunks: 41, every: 30 * time.Second}, 41, false},
		{"a stream that stalls after 3 chunks is cut after IdleTimeout", streamingCompletions{chunks: 3, every: time.Minute, stall: true}, 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				emu := tt.emu
				emu.gone = make(chan time.Time, 1)
				n := httptestutil.NewNetwork()
				srv := n.Serve("api.openai.test", &emu)
				defer srv.Close()
				base := n.Transport()
				defer base.CloseIdleConnections()
				client := NewClient(transport.Options{Base: base}, option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("sk-test"))

				start := time.Now()
				stream := client.Chat.Completions.NewStreaming(context.Background(), openaisdk.ChatCompletionNewParams{
					Model:    openaisdk.ChatModelGPT5_2,
					Messages: []openaisdk.ChatCompletionMessageParamUnion{openaisdk.UserMessage("tell me a long story")},
				})
				var text strings.Builder
				chunks := 0
				var last time.Time
				for stream.Next() {
					chunks++
					last = time.Now()
					text.WriteString(stream.Current().Choices[0].Delta.Content)
				}
				err := stream.Err()
				stream.Close()
				if chunks != tt.wantChunks {
					t.Errorf("got %d chunks (%q), want %d", chunks, text.String(), tt.wantChunks)
				}
				if !tt.wantCut {
					if err != nil {
						t.Errorf("stream ended with %v, want none", err)
					}
					if got, want := time.Since(start), time.Duration(tt.wantChunks-1)*tt.emu.every; got != want {
						t.Errorf("stream took %v, want %v", got, want)
					}
					return
				}
				var de *transport.DeadlineError
				if !errors.As(err, &de) || de.Bound != "IdleTimeout" || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("stream ended with %v, want the IdleTimeout's *transport.DeadlineError", err)
				}
				idle := time.Since(last)
				if idle < transport.DefaultIdleTimeout || idle > transport.DefaultIdleTimeout*9/8 {
					t.Errorf("cut %v after the last chunk, want %v (up to 1/8 more)", idle, transport.DefaultIdleTimeout)
				}
				synctest.Wait()
				select {
				case at := <-emu.gone:
					if at.Sub(last) != idle {
						t.Errorf("the server saw the disconnect %v after the last chunk, want %v", at.Sub(last), idle)
					}
				default:
					t.Error("the server did not see the client go away")
				}
			})
		})
	}
}
