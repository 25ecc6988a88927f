package anthropic_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	anthropicsdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/sturdyhttp/sturdy/examples/sdks/anthropic"
	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/transport"
)

// A message through sturdy: the first attempt gets a 529
// overloaded_error, sturdy backs off and tries again, and the SDK sees
// one successful call.
func ExampleNewClient() {
	n := httptestutil.NewNetwork()
	srv := n.Serve(anthropic.Host, httptestutil.Script(
		httptestutil.JSON(529, map[string]any{"type": "error",
			"error": map[string]string{"type": "overloaded_error", "message": "Overloaded"}}),
		httptestutil.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{
				"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-5-5",
				"content":     []any{map[string]string{"type": "text", "text": "pong"}},
				"stop_reason": "end_turn", "usage": map[string]int{"input_tokens": 1, "output_tokens": 1},
			})
		})),
	))
	defer srv.Close()
	base := n.Transport()
	defer base.CloseIdleConnections()

	client := anthropic.NewClient(transport.Options{Base: base},
		option.WithBaseURL(srv.URL), option.WithAPIKey("sk-ant-test"))
	m, err := client.Messages.New(context.Background(), anthropicsdk.MessageNewParams{
		Model:     anthropicsdk.ModelClaudeSonnet5_5,
		MaxTokens: 64,
		Messages:  []anthropicsdk.MessageParam{anthropicsdk.NewUserMessage(anthropicsdk.NewTextBlock("ping"))},
	})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(m.Content[0].Text)
	// Output: pong
}
