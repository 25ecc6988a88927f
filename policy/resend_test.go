package policy

import (
	"net/http"
	"testing"
)

func TestSafeToResend(t *testing.T) {
	tests := []struct {
		name   string
		method string
		header http.Header
		keyHdr string
		want   bool
	}{
		{"GET is idempotent", "GET", nil, "", true},
		{"empty method is GET", "", nil, "", true},
		{"HEAD is idempotent", "HEAD", nil, "", true},
		{"OPTIONS is idempotent", "OPTIONS", nil, "", true},
		{"TRACE is idempotent", "TRACE", nil, "", true},
		{"PUT is idempotent", "PUT", nil, "", true},
		{"DELETE is idempotent", "DELETE", nil, "", true},
		{"POST alone is not", "POST", nil, "", false},
		{"PATCH alone is not", "PATCH", nil, "", false},
		{"CONNECT is not", "CONNECT", nil, "", false},
		{"POST with a key is vouched", "POST", http.Header{"Idempotency-Key": {"k1"}}, "", true},
		{"PATCH with a key is vouched", "PATCH", http.Header{"Idempotency-Key": {"k1"}}, "", true},
		{"POST with a key in the configured header", "POST", http.Header{"X-Request-Key": {"k1"}}, "X-Request-Key", true},
		{"POST with a key in an unconfigured header", "POST", http.Header{"X-Request-Key": {"k1"}}, "", false},
		{"net/http replays Idempotency-Key whatever the configured header", "POST", http.Header{"Idempotency-Key": {"k1"}}, "X-Request-Key", true},
		{"net/http replays X-Idempotency-Key", "POST", http.Header{"X-Idempotency-Key": {"k1"}}, "", true},
		{"net/http replays a nil Idempotency-Key", "POST", http.Header{"Idempotency-Key": nil}, "", true},
		{"an empty key in another header is no key", "POST", http.Header{"X-Request-Key": {""}}, "X-Request-Key", false},
	}
	for _, tt := range tests {
		r, _ := http.NewRequest(tt.method, "http://x.test/", nil)
		if tt.header != nil {
			r.Header = tt.header
		}
		if got := SafeToResend(r, tt.keyHdr); got != tt.want {
			t.Errorf("%s: SafeToResend = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestHasKey(t *testing.T) {
	tests := []struct {
		header http.Header
		keyHdr string
		want   bool
	}{
		{http.Header{"Idempotency-Key": {"k"}}, "", true},
		{http.Header{"Idempotency-Key": {""}}, "", false},
		{http.Header{"Idempotency-Key": nil}, "", false},
		{http.Header{"X-Request-Key": {"k"}}, "X-Request-Key", true},
		{http.Header{"X-Request-Key": {"k"}}, "", false},
		{nil, "", false},
	}
	for i, tt := range tests {
		r := &http.Request{Method: "POST", Header: tt.header}
		if got := HasKey(r, tt.keyHdr); got != tt.want {
			t.Errorf("step %d: HasKey(%v, %q) = %v, want %v", i, tt.header, tt.keyHdr, got, tt.want)
		}
	}
}
