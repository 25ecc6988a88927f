package httptestutil

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// SSEEvent is one event of an [SSE] step: a wait, then an event, a
// comment, or a hang.
type SSEEvent struct {
	// After is how long the server waits before sending it.
	After time.Duration
	// Name is the SSE event field; empty sends none.
	Name string
	// Data is the event's data, sent as one data line.
	Data string
	// Comment, when Name and Data are empty, is sent as a comment line
	// (": keepalive"), which carries no event.
	Comment string
	// Hang, when set, sends nothing more: the server holds the
	// connection open until the client goes away.
	Hang bool
}

// SSE is a step that answers 200 with a text/event-stream and sends
// events one by one, each after its wait, flushing each but the last,
// which goes out with the end of the response. It stops when
// the client goes away. The waits use timers, so a stream whose first
// token takes seconds runs in microseconds in a synctest bubble.
func SSE(events ...SSEEvent) Step {
	return newStep(fmt.Sprintf("SSE(%d events)", len(events)), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		rc.Flush()
		for i, ev := range events {
			if !sleep(r, ev.After) {
				return
			}
			if ev.Hang {
				<-r.Context().Done()
				return
			}
			var b strings.Builder
			if ev.Name == "" && ev.Data == "" {
				b.WriteString(": " + ev.Comment + "\n\n")
			} else {
				if ev.Name != "" {
					b.WriteString("event: " + ev.Name + "\n")
				}
				b.WriteString("data: " + ev.Data + "\n\n")
			}
			if _, err := w.Write([]byte(b.String())); err != nil {
				return
			}
			// The last event goes out as the handler returns, with the
			// end of the response, as a server that is done sends it: a
			// client that reads it and hangs up cannot race the handler's
			// return and look like a client that left early.
			if i < len(events)-1 {
				rc.Flush()
			}
		}
	})
}

// Keepalives returns n SSE comments (": keepalive"), one every every:
// bytes that say the connection lives and carry no event.
func Keepalives(n int, every time.Duration) []SSEEvent {
	evs := make([]SSEEvent, n)
	for i := range evs {
		evs[i] = SSEEvent{After: every, Comment: "keepalive"}
	}
	return evs
}

// KeepaliveStall is a stream that sends its headers, then a keepalive
// comment every every and no event, until the client goes away.
func KeepaliveStall(every time.Duration) Step {
	return newStep("KeepaliveStall", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		rc.Flush()
		for sleep(r, every) {
			if _, err := w.Write([]byte(": keepalive\n\n")); err != nil {
				return
			}
			rc.Flush()
		}
	})
}

// AnthropicStart returns the events that open an Anthropic message
// stream: message_start and a ping, which commit nothing.
func AnthropicStart() []SSEEvent {
	return []SSEEvent{
		{Name: "message_start", Data: `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-5-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}}`},
		{Name: "ping", Data: `{"type": "ping"}`},
	}
}

// AnthropicText returns the events of an Anthropic message's text after
// its start: a content block with one delta per text, the first after
// first and each next after every, then the message's end.
func AnthropicText(first, every time.Duration, texts ...string) []SSEEvent {
	evs := []SSEEvent{{After: first, Name: "content_block_start", Data: `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`}}
	for i, s := range texts {
		var after time.Duration
		if i > 0 {
			after = every
		}
		evs = append(evs, SSEEvent{After: after, Name: "content_block_delta", Data: `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":` + strconv.Quote(s) + `}}`})
	}
	return append(evs,
		SSEEvent{Name: "content_block_stop", Data: `{"type":"content_block_stop","index":0}`},
		SSEEvent{Name: "message_delta", Data: `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":` + strconv.Itoa(len(texts)) + `}}`},
		SSEEvent{Name: "message_stop", Data: `{"type":"message_stop"}`},
	)
}

// AnthropicError returns the error event Anthropic sends inside a stream,
// as in event: error, data: {"type":"error","error":{"type":"overloaded_error",...}}.
func AnthropicError(typ, message string) SSEEvent {
	return SSEEvent{Name: "error", Data: `{"type":"error","error":{"type":` + strconv.Quote(typ) + `,"message":` + strconv.Quote(message) + `}}`}
}

// AnthropicErrorAfterStart is a stream that opens as Anthropic's do
// (message_start, ping), then sends an error event of type typ and ends:
// an overloaded_error under load.
func AnthropicErrorAfterStart(typ string) Step {
	return SSE(append(AnthropicStart(), AnthropicError(typ, "Overloaded"))...)
}

// OpenAIChunks returns the events of a streamed OpenAI chat completion:
// one chat.completion.chunk per text, the first after first and each next
// after every, then data: [DONE].
func OpenAIChunks(first, every time.Duration, texts ...string) []SSEEvent {
	var evs []SSEEvent
	for i, s := range texts {
		after := every
		if i == 0 {
			after = first
		}
		evs = append(evs, SSEEvent{After: after, Data: `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":0,"model":"gpt-5.2","choices":[{"index":0,"delta":{"content":` + strconv.Quote(s) + `},"finish_reason":null}]}`})
	}
	return append(evs, SSEEvent{Data: "[DONE]"})
}

// OpenAIErrorChunk returns the chunk OpenAI sends in place of content
// when a stream fails: data: {"error":{"type":"server_error",...}}.
func OpenAIErrorChunk(typ, message string) SSEEvent {
	return SSEEvent{Data: `{"error":{"message":` + strconv.Quote(message) + `,"type":` + strconv.Quote(typ) + `,"param":null,"code":null}}`}
}
