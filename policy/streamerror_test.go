package policy

import (
	"net/http"
	"testing"
)

func TestStreamJudge(t *testing.T) {
	tests := []struct {
		name  string
		s     Stream
		event string
		data  string
		want  EventVerdict
	}{
		{"Anthropic ping", Stream{}, "ping", `{"type": "ping"}`, EventVerdict{Kind: EventKeepalive}},
		{"Anthropic message_start", Stream{}, "message_start", `{"type":"message_start","message":{}}`, EventVerdict{Kind: EventKeepalive}},
		{"Anthropic content_block_delta", Stream{}, "content_block_delta", `{"type":"content_block_delta"}`, EventVerdict{Kind: EventContent}},
		{"Anthropic overloaded_error", Stream{}, "error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
			EventVerdict{Kind: EventError, Type: "overloaded_error", Status: 529}},
		{"Anthropic rate_limit_error", Stream{}, "error", `{"type":"error","error":{"type":"rate_limit_error","message":"x"}}`,
			EventVerdict{Kind: EventError, Type: "rate_limit_error", Status: 429}},
		{"Anthropic api_error", Stream{}, "error", `{"type":"error","error":{"type":"api_error","message":"x"}}`,
			EventVerdict{Kind: EventError, Type: "api_error", Status: 500}},
		{"Anthropic invalid_request_error is final", Stream{}, "error", `{"type":"error","error":{"type":"invalid_request_error","message":"x"}}`,
			EventVerdict{Kind: EventError, Type: "invalid_request_error", Status: 400, Final: true}},
		{"OpenAI server_error chunk", Stream{}, "", `{"error":{"message":"x","type":"server_error","param":null,"code":null}}`,
			EventVerdict{Kind: EventError, Type: "server_error", Status: 500}},
		{"OpenAI rate limit by its code", Stream{}, "", `{"error":{"message":"x","type":"requests","code":"rate_limit_exceeded"}}`,
			EventVerdict{Kind: EventError, Type: "rate_limit_exceeded", Status: 429}},
		{"OpenAI insufficient_quota is final", Stream{}, "", `{"error":{"type":"insufficient_quota","code":"insufficient_quota"}}`,
			EventVerdict{Kind: EventError, Type: "insufficient_quota", Status: 429, Final: true}},
		{"OpenAI chat chunk", Stream{}, "", `{"id":"c","object":"chat.completion.chunk","choices":[]}`, EventVerdict{Kind: EventContent}},
		{"OpenAI [DONE]", Stream{}, "", `[DONE]`, EventVerdict{Kind: EventContent}},
		{"OpenAI Responses response.created", Stream{}, "response.created", `{"type":"response.created"}`, EventVerdict{Kind: EventKeepalive}},
		{"OpenAI Responses preamble by its type alone", Stream{}, "", `{"type":"response.in_progress"}`, EventVerdict{Kind: EventKeepalive}},
		{"OpenAI Responses error event", Stream{}, "error", `{"type":"error","code":"server_error","message":"x"}`,
			EventVerdict{Kind: EventError, Type: "server_error", Status: 500}},
		{"OpenAI Responses response.failed", Stream{}, "response.failed", `{"type":"response.failed","response":{"error":{"code":"server_error"}}}`,
			EventVerdict{Kind: EventError, Type: "server_error", Status: 500}},
		{"an error member that is null is no error", Stream{}, "", `{"error":null,"text":"hi"}`, EventVerdict{Kind: EventContent}},
		{"an NDJSON error string", Stream{}, "", `{"error":"model not found"}`, EventVerdict{Kind: EventError, Status: 500}},
		{"an unknown error type stands for 500", Stream{}, "error", `{"type":"error","error":{"type":"brand_new_error"}}`,
			EventVerdict{Kind: EventError, Type: "brand_new_error", Status: 500}},
		{"an error event that is not JSON", Stream{}, "error", `oops`, EventVerdict{Kind: EventError, Status: 500}},
		{"no preambles: message_start is content", Stream{Preambles: []string{}}, "message_start", `{"type":"message_start"}`, EventVerdict{Kind: EventContent}},
		{"a preamble of one's own", Stream{Preambles: []string{"status"}}, "status", `{"type":"status"}`, EventVerdict{Kind: EventKeepalive}},
		{"invalid JSON is content", Stream{}, "", `{"choices":`, EventVerdict{Kind: EventContent}},
	}
	for _, tt := range tests {
		if got := tt.s.Judge([]byte(tt.event), []byte(tt.data)); got != tt.want {
			t.Errorf("%s: Judge(%q, %s) = %+v, want %+v", tt.name, tt.event, tt.data, got, tt.want)
		}
	}
}

func TestStreamErrorStatus(t *testing.T) {
	tests := []struct {
		typ    string
		status int
		final  bool
	}{
		{"overloaded_error", 529, false},
		{"rate_limit_error", http.StatusTooManyRequests, false},
		{"api_error", http.StatusInternalServerError, false},
		{"server_error", http.StatusInternalServerError, false},
		{"invalid_request_error", http.StatusBadRequest, true},
		{"authentication_error", http.StatusUnauthorized, true},
		{"", http.StatusInternalServerError, false},
	}
	for _, tt := range tests {
		if status, final := StreamErrorStatus(tt.typ); status != tt.status || final != tt.final {
			t.Errorf("StreamErrorStatus(%q) = %d, %v; want %d, %v", tt.typ, status, final, tt.status, tt.final)
		}
	}
}
