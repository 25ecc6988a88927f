package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
)

// completions emulates POST /v1/chat/completions: it answers with a chat
// completion that echoes the last message, as OpenAI's JSON, with the
// x-ratelimit-* headers of quota. It counts the completions it made.
type completions struct {
	quota httptestutil.Quota
	made  atomic.Int64
}

func (c *completions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		openAIError(w, http.StatusNotFound, "Invalid URL ("+r.Method+" "+r.URL.Path+")", "invalid_request_error", "")
		return
	}
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil || len(req.Messages) == 0 {
		openAIError(w, http.StatusBadRequest, "We could not parse the JSON body of your request.", "invalid_request_error", "")
		return
	}
	n := c.made.Add(1)
	httptestutil.QuotaHeaders(w.Header(), httptestutil.FamilyOpenAI, c.quota, time.Now())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-Id", "req_"+strconv.FormatInt(n, 10))
	fmt.Fprintf(w, `{
  "id": "chatcmpl-%d",
  "object": "chat.completion",
  "created": %d,
  "model": %q,
  "choices": [{
    "index": 0,
    "message": {"role": "assistant", "content": %q, "refusal": null, "annotations": []},
    "logprobs": null,
    "finish_reason": "stop"
  }],
  "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
  "service_tier": "default",
  "system_fingerprint": "fp_emulator"
}`, n, time.Now().Unix(), req.Model, "echo: "+req.Messages[len(req.Messages)-1].Content)
}

// rateLimited is OpenAI's 429 for an exhausted request quota: the error
// JSON, retry-after-ms, and the x-ratelimit-* headers of quota.
func rateLimited(retryAfter time.Duration, quota httptestutil.Quota) httptestutil.Step {
	return httptestutil.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httptestutil.QuotaHeaders(w.Header(), httptestutil.FamilyOpenAI, quota, time.Now())
		w.Header().Set("Retry-After-Ms", strconv.FormatInt(retryAfter.Milliseconds(), 10))
		openAIError(w, http.StatusTooManyRequests,
			fmt.Sprintf("Rate limit reached for gpt-5.2 in organization org-emulator on requests per min (RPM): Limit %d, Used %d, Requested 1. Please try again in %v.",
				quota.Limit, quota.Limit, retryAfter),
			"requests", "rate_limit_exceeded")
	}))
}

// openAIError writes OpenAI's error body.
func openAIError(w http.ResponseWriter, status int, msg, typ, code string) {
	body := map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}}
	if code != "" {
		body["error"].(map[string]any)["code"] = code
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}
