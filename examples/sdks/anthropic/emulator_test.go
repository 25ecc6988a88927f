package anthropic

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
)

// messages emulates POST /v1/messages: it answers with a message that
// echoes the last user text, as Anthropic's JSON, with the
// anthropic-ratelimit-* headers of quota. It counts the messages it made.
type messages struct {
	quota httptestutil.Quota
	made  atomic.Int64
}

func (m *messages) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		anthropicError(w, http.StatusNotFound, "not_found_error", "Not found")
		return
	}
	if r.Header.Get("Anthropic-Version") == "" || (r.Header.Get("X-Api-Key") == "" && r.Header.Get("Authorization") == "") {
		anthropicError(w, http.StatusUnauthorized, "authentication_error", "anthropic-version and an API key (x-api-key or authorization) are required")
		return
	}
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"messages"`
	}
	err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req)
	if err != nil || len(req.Messages) == 0 || len(req.Messages[len(req.Messages)-1].Content) == 0 {
		anthropicError(w, http.StatusBadRequest, "invalid_request_error", "messages: at least one message with content is required")
		return
	}
	n := m.made.Add(1)
	httptestutil.QuotaHeaders(w.Header(), httptestutil.FamilyAnthropic, m.quota, time.Now())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_"+strconv.FormatInt(n, 10))
	last := req.Messages[len(req.Messages)-1].Content
	fmt.Fprintf(w, `{
  "id": "msg_%d",
  "type": "message",
  "role": "assistant",
  "model": %q,
  "content": [{"type": "text", "text": %q}],
  "stop_reason": "end_turn",
  "stop_sequence": null,
  "usage": {"input_tokens": 10, "output_tokens": 3}
}`, n, req.Model, "echo: "+last[len(last)-1].Text)
}

// overloaded is Anthropic's 529: the API is temporarily overloaded.
func overloaded() httptestutil.Step {
	return httptestutil.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		anthropicError(w, 529, "overloaded_error", "Overloaded")
	}))
}

// rateLimited is Anthropic's 429 with retry-after (whole seconds) and the
// anthropic-ratelimit-* headers of quota.
func rateLimited(retryAfter time.Duration, quota httptestutil.Quota) httptestutil.Step {
	return httptestutil.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httptestutil.QuotaHeaders(w.Header(), httptestutil.FamilyAnthropic, quota, time.Now())
		w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
		anthropicError(w, http.StatusTooManyRequests, "rate_limit_error",
			"This request would exceed the rate limit for your organization of "+strconv.Itoa(quota.Limit)+" requests per minute.")
	}))
}

// anthropicError writes Anthropic's error body.
func anthropicError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{
		"type":       "error",
		"error":      map[string]string{"type": typ, "message": msg},
		"request_id": "req_error",
	})
}
