package openai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	openaisdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sturdyhttp/sturdy/examples/sdks/openai"
	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/transport"
)

// A chat completion through sturdy: the first attempt gets a 429 with
// retry-after-ms, sturdy waits 20ms and tries again, and the SDK sees
// one successful call.
func ExampleNewClient() {
	n := httptestutil.NewNetwork()
	srv := n.Serve(openai.Host, httptestutil.Script(
		httptestutil.RetryAfterMS(http.StatusTooManyRequests, 20),
		httptestutil.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{
				"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-5.2",
				"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
					"message": map[string]any{"role": "assistant", "content": "pong"}}},
			})
		})),
	))
	defer srv.Close()
	base := n.Transport()
	defer base.CloseIdleConnections()

	client := openai.NewClient(transport.Options{Base: base},
		option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("sk-test"))
	c, err := client.Chat.Completions.New(context.Background(), openaisdk.ChatCompletionNewParams{
		Model:    openaisdk.ChatModelGPT5_2,
		Messages: []openaisdk.ChatCompletionMessageParamUnion{openaisdk.UserMessage("ping")},
	})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(c.Choices[0].Message.Content)
	// Output: pong
}
