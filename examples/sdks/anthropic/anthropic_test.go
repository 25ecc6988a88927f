package anthropic

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	anthropicsdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/transport"
)

// The SDK's retry counter: "0" on the SDK's first attempt of a call.
const retryCountHeader = "X-Stainless-Retry-Count"

func TestMessageThroughOverloadAndRateLimits(t *testing.T) {
	plenty := httptestutil.Quota{Limit: 50, Remaining: 49, Reset: time.Second}
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
		name:  "529 overloaded_error twice, then the message",
		quota: plenty,
		steps: func(ok httptestutil.Step) []httptestutil.Step {
			return []httptestutil.Step{overloaded().Times(2), ok.Forever()}
		},
		sdkRetries: -1, calls: 1, wantRequests: 3,
		minGap: 0, maxGap: 2 * time.Second, // two full-jitter backoffs: < 400ms + < 800ms
	}, {
		name:  "429 with retry-after 3, then the message",
		quota: plenty,
		steps: func(ok httptestutil.Step) []httptestutil.Step {
			return []httptestutil.Step{rateLimited(3*time.Second, httptestutil.Quota{Limit: 50, Remaining: 0, Reset: 3 * time.Second}), ok.Forever()}
		},
		sdkRetries: -1, calls: 1, wantRequests: 2,
		minGap: 3 * time.Second, maxGap: 4 * time.Second,
	}, {
		name:  "anthropic-ratelimit-requests-remaining 0 on a success: the next call waits for the reset",
		quota: httptestutil.Quota{Limit: 50, Remaining: 0, Reset: 5 * time.Second},
		steps: func(ok httptestutil.Step) []httptestutil.Step {
			return []httptestutil.Step{ok.Forever()}
		},
		sdkRetries: -1, calls: 2, wantRequests: 2,
		// The reset is an RFC 3339 time, to the second.
		minGap: 4 * time.Second, maxGap: 6 * time.Second,
	}, {
		name: "529 on every attempt: sturdy gives up after 4 attempts, the SDK adds none",
		steps: func(ok httptestutil.Step) []httptestutil.Step {
			return []httptestutil.Step{overloaded().Forever()}
		},
		sdkRetries: -1, calls: 1, wantRequests: 4, wantStatus: 529,
		minGap: 0, maxGap: 4 * time.Second,
	}, {
		// The breaker is off here: on, it opens after 5 failures in a
		// row and cuts the multiplication short.
		name: "SDK retries left on: 3 SDK attempts x 4 sturdy attempts",
		steps: func(ok httptestutil.Step) []httptestutil.Step {
			return []httptestutil.Step{overloaded().Forever()}
		},
		sdkRetries: 2, disable: transport.LayerBreaker, calls: 1, wantRequests: 12, wantStatus: 529,
		minGap: 0, maxGap: 30 * time.Second,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				emu := &messages{quota: tt.quota}
				rec := httptestutil.NewRecorder(httptestutil.Script(tt.steps(httptestutil.Handler(emu))...))
				n := httptestutil.NewNetwork()
				srv := n.Serve(Host, rec)
				defer srv.Close()
				base := n.Transport()
				defer base.CloseIdleConnections()

				opts := []option.RequestOption{option.WithBaseURL(srv.URL), option.WithAPIKey("sk-ant-test")}
				var client anthropicsdk.Client
				if tt.sdkRetries < 0 {
					client = NewClient(transport.Options{Base: base, Disable: tt.disable}, opts...)
				} else {
					client = anthropicsdk.NewClient(append(opts,
						option.WithHTTPClient(&http.Client{Transport: transport.New(transport.Options{Base: base, Disable: tt.disable, Idempotency: idempotency.Options{Hosts: []string{Host}}})}),
						option.WithMaxRetries(tt.sdkRetries))...)
				}

				var err error
				for i := range tt.calls {
					var m *anthropicsdk.Message
					m, err = client.Messages.New(context.Background(), anthropicsdk.MessageNewParams{
						Model:     anthropicsdk.ModelClaudeSonnet5_5,
						MaxTokens: 64,
						Messages:  []anthropicsdk.MessageParam{anthropicsdk.NewUserMessage(anthropicsdk.NewTextBlock("ping"))},
					})
					if err != nil {
						break
					}
					if len(m.Content) != 1 || m.Content[0].Text != "echo: ping" {
						t.Errorf("call %d: content = %+v, want one text block %q", i+1, m.Content, "echo: ping")
					}
				}
				if tt.wantStatus == 0 && err != nil {
					t.Fatalf("got error %v, want none", err)
				}
				if tt.wantStatus != 0 {
					var apiErr *anthropicsdk.Error
					if !errors.As(err, &apiErr) {
						t.Fatalf("got error %v, want an *anthropic.Error", err)
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
				if got, want := emu.made.Load(), int64(tt.calls); tt.wantStatus == 0 && got != want {
					t.Errorf("emulator made %d messages, want %d", got, want)
				}
			})
		})
	}
}
