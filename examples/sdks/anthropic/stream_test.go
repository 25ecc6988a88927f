package anthropic

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	anthropicsdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/transport"
)

// streamingMessages emulates a streamed message (stream: true), as
// Anthropic sends it: message_start, content_block_start, then deltas
// text deltas, one every every, with a ping every pingEvery between them
// (Anthropic's keep-alive), then content_block_stop, message_delta and
// message_stop. With stall set it stops after the deltas and keeps the
// connection open, sending nothing (no pings either), until the client
// goes away.
type streamingMessages struct {
	deltas    int
	every     time.Duration
	pingEvery time.Duration
	stall     bool
	gone      chan time.Time // when the client went away, if it did
}

func (s *streamingMessages) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		anthropicError(w, http.StatusNotFound, "not_found_error", "Not found")
		return
	}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	event := func(name, data string) {
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data)
		rc.Flush()
	}
	// sleep waits d, sending pings; it reports false when the client left.
	sleep := func(d time.Duration) bool {
		for d > 0 {
			step := d
			if s.pingEvery > 0 {
				step = min(d, s.pingEvery)
			}
			select {
			case <-time.After(step):
			case <-r.Context().Done():
				s.gone <- time.Now()
				return false
			}
			d -= step
			if d > 0 {
				event("ping", `{"type": "ping"}`)
			}
		}
		return true
	}
	event("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-5-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}}`)
	event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
	for i := range s.deltas {
		if i > 0 && !sleep(s.every) {
			return
		}
		event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"t%d "}}`, i))
	}
	if s.stall {
		<-r.Context().Done()
		s.gone <- time.Now()
		return
	}
	event("content_block_stop", `{"type":"content_block_stop","index":0}`)
	event("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":%d}}`, s.deltas))
	event("message_stop", `{"type":"message_stop"}`)
}

// A streamed message through sturdy's default stack, on virtual time: a
// 30-minute stream (longer than Timeout) with pings is read whole, and a
// stream that stalls is cut after IdleTimeout, with an error that says so
// and a disconnect the server sees.
func TestStreamingMessage(t *testing.T) {
	tests := []struct {
		name       string
		emu        streamingMessages
		wantDeltas int
		wantCut    bool
	}{
		{"a 30-minute stream, a delta a minute and pings between, read whole",
			streamingMessages{deltas: 31, every: time.Minute, pingEvery: 15 * time.Second}, 31, false},
		{"12 minutes of thinking with pings only, then the answer, read whole",
			streamingMessages{deltas: 2, every: 12 * time.Minute, pingEvery: 15 * time.Second}, 2, false},
		{"a stream that stalls after 3 deltas is cut after IdleTimeout",
			streamingMessages{deltas: 3, every: time.Minute, pingEvery: 15 * time.Second, stall: true}, 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				emu := tt.emu
				emu.gone = make(chan time.Time, 1)
				n := httptestutil.NewNetwork()
				srv := n.Serve("api.anthropic.test", &emu)
				defer srv.Close()
				base := n.Transport()
				defer base.CloseIdleConnections()
				client := NewClient(transport.Options{Base: base}, option.WithBaseURL(srv.URL), option.WithAPIKey("sk-ant-test"))

				start := time.Now()
				stream := client.Messages.NewStreaming(context.Background(), anthropicsdk.MessageNewParams{
					Model:     anthropicsdk.ModelClaudeSonnet5_5,
					MaxTokens: 64000,
					Messages:  []anthropicsdk.MessageParam{anthropicsdk.NewUserMessage(anthropicsdk.NewTextBlock("tell me a long story"))},
				})
				var text strings.Builder
				deltas, stopped := 0, false
				var last time.Time
				for stream.Next() {
					switch ev := stream.Current().AsAny().(type) {
					case anthropicsdk.ContentBlockDeltaEvent:
						deltas++
						last = time.Now()
						text.WriteString(ev.Delta.Text)
					case anthropicsdk.MessageStopEvent:
						stopped = true
					}
				}
				err := stream.Err()
				stream.Close()
				if deltas != tt.wantDeltas {
					t.Errorf("got %d deltas (%q), want %d", deltas, text.String(), tt.wantDeltas)
				}
				if !tt.wantCut {
					if err != nil || !stopped {
						t.Errorf("stream ended with %v, message_stop seen %v; want no error and message_stop", err, stopped)
					}
					if got, want := time.Since(start), time.Duration(tt.wantDeltas-1)*tt.emu.every; got != want {
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
					t.Errorf("cut %v after the last delta, want %v (up to 1/8 more)", idle, transport.DefaultIdleTimeout)
				}
				synctest.Wait()
				select {
				case at := <-emu.gone:
					if at.Sub(last) != idle {
						t.Errorf("the server saw the disconnect %v after the last delta, want %v", at.Sub(last), idle)
					}
				default:
					t.Error("the server did not see the client go away")
				}
			})
		})
	}
}
