package openai

import (
	"context"
	"net/http"
	"testing"

	openaisdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/transport"
)

// BenchmarkChatCompletion measures one successful chat completion through
// the SDK, with the emulator called in process (no connection), bare and
// with sturdy underneath: sturdy's cost on the happy path.
func BenchmarkChatCompletion(b *testing.B) {
	base := httptestutil.NewHandlerTransport(&completions{quota: httptestutil.Quota{Limit: 1 << 30, Remaining: 1 << 30, Reset: 1}})
	params := openaisdk.ChatCompletionNewParams{
		Model:    openaisdk.ChatModelGPT5_2,
		Messages: []openaisdk.ChatCompletionMessageParamUnion{openaisdk.UserMessage("ping")},
	}
	opts := []option.RequestOption{option.WithBaseURL("http://" + Host + "/v1/"), option.WithAPIKey("sk-test")}
	for _, bc := range []struct {
		name   string
		client openaisdk.Client
	}{
		{"bare", openaisdk.NewClient(append(opts, option.WithHTTPClient(&http.Client{Transport: base}), option.WithMaxRetries(0))...)},
		{"sturdy", NewClient(transport.Options{Base: base}, opts...)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.client.Chat.Completions.New(context.Background(), params); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
