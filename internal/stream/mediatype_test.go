package stream

import (
	"net/http"
	"testing"
)

func TestIsStream(t *testing.T) {
	tests := []struct {
		contentType string
		want        bool
	}{
		{"", false},
		{"application/json", false},
		{"application/json; charset=utf-8", false},
		{"text/plain", false},
		{"text/event-stream", true},
		{"Text/Event-Stream; charset=utf-8", true},
		{"  text/event-stream  ", true},
		{"application/x-ndjson", true},
		{"application/jsonl", true},
		{"application/json-seq", true},
		{"application/grpc", true},
		{"application/grpc+proto", true},
		{"application/grpc-web-text", true},
		{"application/grpc-web", true},
		{"application/grpc-web; charset=utf-8", true},
		{"application/grpc-web+proto", true},
		{"application/connect+json", true},
		{"application/connect+", false},
		{"application/grpcx", false},
		{"application/vnd.amazon.eventstream", true},
		{"multipart/x-mixed-replace; boundary=x", true},
		{"multipart/form-data", false},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.contentType != "" {
			h.Set("Content-Type", tt.contentType)
		}
		if got := Is(&http.Response{Header: h}); got != tt.want {
			t.Errorf("Is(%q) = %v, want %v", tt.contentType, got, tt.want)
		}
	}
}
