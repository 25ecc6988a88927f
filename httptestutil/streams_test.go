package httptestutil

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// Each stream emulator sends what the providers send, on the bubble's
// clock: the bytes, and when the last of them arrives.
func TestStreamEmulators(t *testing.T) {
	tests := []struct {
		name     string
		step     Step
		want     []string // substrings of the body, in order
		wantTime time.Duration
	}{
		{"an Anthropic error after message_start", AnthropicErrorAfterStart("overloaded_error"),
			[]string{"event: message_start\n", "event: ping\n", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\""}, 0},
		{"an OpenAI error chunk", SSE(OpenAIErrorChunk("server_error", "boom")),
			[]string{"data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\""}, 0},
		{"a slow first token", SSE(append(AnthropicStart(), AnthropicText(3*time.Second, time.Second, "a", "b")...)...),
			[]string{"message_start", "content_block_start", "\"text\":\"a\"", "\"text\":\"b\"", "message_stop"}, 4 * time.Second},
		{"OpenAI chunks, then [DONE]", SSE(OpenAIChunks(time.Second, time.Second, "x", "y")...),
			[]string{"chat.completion.chunk", "\"content\":\"x\"", "\"content\":\"y\"", "data: [DONE]\n\n"}, 2 * time.Second},
		{"keepalives", SSE(Keepalives(3, time.Second)...), []string{": keepalive\n\n: keepalive\n\n: keepalive\n\n"}, 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := &http.Client{Transport: NewHandlerTransport(tt.step)}
				start := time.Now()
				resp, body := get(t, c, "http://api.test/")
				if got, want := resp.Header.Get("Content-Type"), "text/event-stream; charset=utf-8"; got != want {
					t.Errorf("Content-Type %q, want %q", got, want)
				}
				rest := body
				for _, w := range tt.want {
					i := strings.Index(rest, w)
					if i < 0 {
						t.Fatalf("body %q lacks %q (in order)", body, w)
					}
					rest = rest[i+len(w):]
				}
				if got := time.Since(start); got != tt.wantTime {
					t.Errorf("body ended after %v, want %v", got, tt.wantTime)
				}
			})
		})
	}
}

// A keepalive-only stall sends a comment every period until the client
// goes away, and never an event.
func TestKeepaliveStallUntilClientLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := NewRecorder(KeepaliveStall(100 * time.Millisecond))
		c := &http.Client{Transport: NewHandlerTransport(rec)}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test/", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Fatal("the stall ended by itself, want it to last until the client left")
		}
		if n, want := strings.Count(string(b), ": keepalive\n\n"), 49; n < want || strings.Contains(string(b), "data:") {
			t.Errorf("got %d keepalives (and no event: %v), want at least %d and no event", n, !strings.Contains(string(b), "data:"), want)
		}
		synctest.Wait()
		if d := rec.Requests()[0].Disconnected; d.Sub(rec.Requests()[0].Arrived) != 5*time.Second {
			t.Errorf("the server saw the client leave after %v, want 5s", d.Sub(rec.Requests()[0].Arrived))
		}
	})
}
