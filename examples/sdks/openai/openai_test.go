package openai

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	openaisdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/transport"
)

// The SDK's retry counter: "0" on the SDK's first attempt of a call.
const retryCountHeader = "X-Stainless-Retry-Count"

func TestChatCompletionThroughRateLimits(t *testing.T) {
	exhausted := httptestutil.Quota{Limit: 500, Remaining: 0, Reset: 2 * time.Second}
	tests := []struct {
		name string
		// quota is what successful answers report.
		quota httptestutil.Quota
		steps func(ok httptestutil.Step) []httptestutil.Step
		// sdkRetries >= 0 builds the client without NewClient, with the
		// SDK's own retries left at this count.
		sdkRetries int
		// disable switches layers of sturdy's stack off.
		disable transport.Layer
		calls   int
		// wantRequests is how many requests reach the emulator.
		wantRequests int
		// wantStatus is the status of the SDK's error; 0 means success.
		wantStatus int
		// The time from the first request to the last is in [minGap, maxGap].
		minGap, maxGap time.Duration
	}{{
		name:  "429 with retry-after-ms, then 200",
		quota: httptestutil.Quota{Limit: 500, Remaining: 499, Reset: 120 * time.Millisecond},
		steps: func(ok httptestutil.Step) []httptestutil.Step {
			return []httptestutil.Step{rateLimited(1500*time.Millisecond, httptestutil.Quota{Limit: 500, Remaining: 0, Reset: 1500 * time.Millisecond}), ok.Forever()}
		},
		sdkRetries: -1, calls: 1, wantRequests: 2,
		minGap: 1500 * time.Millisecond, maxGap: 2500 * time.Millisecond,
	}, {
		name:  "x-ratelimit-remaining-requests 0 on a success: the next call waits for the reset",
		quota: exhausted,
		steps: func(ok httptestutil.Step) []httptestutil.Step {
			return []httptestutil.Step{ok.Forever()}
		},
		sdkRetries: -1, calls: 2, wantRequests: 2,
		minGap: 2 * time.Second, maxGap: 3 * time.Second,
	}, {
		name: "429 on every attempt: sturdy gives up after 4 attempts, the SDK adds none",
		steps: func(ok httptestutil.Step) []httptestutil.Step {
			return []httptestutil.Step{rateLimited(time.Second, exhausted).Forever()}
		},
		sdkRetries: -1, calls: 1, wantRequests: 4, wantStatus: http.StatusTooManyRequests,
		minGap: 3 * time.Second, maxGap: 8 * time.Second,
	}, {
		// The breaker is off here: on, it opens after 5 failures in a
		// row and cuts the multiplication short.
		name: "SDK retries left on: 3 SDK attempts x 4 sturdy attempts",
		steps: func(ok httptestutil.Step) []httptestutil.Step {
			return []httptestutil.Step{rateLimited(time.Second, exhausted).Forever()}
		},
		sdkRetries: 2, disable: transport.LayerBreaker, calls: 1, wantRequests: 12, wantStatus: http.StatusTooManyRequests,
		minGap: 11 * time.Second, maxGap: 30 * time.Second,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				emu := &completions{quota: tt.quota}
				rec := httptestutil.NewRecorder(httptestutil.Script(tt.steps(httptestutil.Handler(emu))...))
				n := httptestutil.NewNetwork()
				srv := n.Serve(Host, rec)
				defer srv.Close()
				base := n.Transport()
				defer base.CloseIdleConnections()

				opts := []option.RequestOption{option.WithBaseURL(srv.URL + "/v1/"), option.WithAPIKey("sk-test")}
				var client openaisdk.Client
				if tt.sdkRetries < 0 {
					client = NewClient(transport.Options{Base: base, Disable: tt.disable}, opts...)
				} else {
					client = openaisdk.NewClient(append(opts,
						option.WithHTTPClient(&http.Client{Transport: transport.New(transport.Options{Base: base, Disable: tt.disable, Idempotency: idempotency.Options{Hosts: []string{Host}}})}),
						option.WithMaxRetries(tt.sdkRetries))...)
				}

				var err error
				for i := range tt.calls {
					var c *openaisdk.ChatCompletion
					c, err = client.Chat.Completions.New(context.Background(), openaisdk.ChatCompletionNewParams{
						Model:    openaisdk.ChatModelGPT5_2,
						Messages: []openaisdk.ChatCompletionMessageParamUnion{openaisdk.UserMessage("ping")},
					})
					if err != nil {
						break
					}
					if got, want := c.Choices[0].Message.Content, "echo: ping"; got != want {
						t.Errorf("call %d: content = %q, want %q", i+1, got, want)
					}
				}
				if tt.wantStatus == 0 && err != nil {
					t.Fatalf("got error %v, want none", err)
				}
				if tt.wantStatus != 0 {
					var apiErr *openaisdk.Error
					if !errors.As(err, &apiErr) {
						t.Fatalf("got error %v, want an *openai.Error", err)
					}
					if apiErr.StatusCode != tt.wantStatus {
						t.Errorf("got status %d, want %d", apiErr.StatusCode, tt.wantStatus)
					}
				}

				reqs := rec.Requests()
				if len(reqs) != tt.wantRequests {
					t.Fatalf("emulator got %d requests, want %d", len(reqs), tt.wantRequests)
				}
				if gap := reqs[len(reqs)-1].Arrived.Sub(reqs[0].Arrived); gap < tt.minGap || gap > tt.maxGap {
					t.Errorf("first to last request took %v, want within [%v, %v]", gap, tt.minGap, tt.maxGap)
				}
				if tt.calls == 1 && tt.sdkRetries < 0 {
					// One logical call: every attempt is sturdy's, with one key,
					// and the SDK sent it once.
					rec.WantSameHeader(t, "Idempotency-Key")
					for i, r := range reqs {
						if got := r.Header.Get(retryCountHeader); got != "0" {
							t.Errorf("request %d: %s = %q, want %q", i+1, retryCountHeader, got, "0")
						}
					}
				}
			})
		})
	}
}
