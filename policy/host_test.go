package policy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
)

func TestJudgeHost(t *testing.T) {
	good, _ := http.NewRequest("GET", "https://api.example.com/v1", nil)
	bad, _ := http.NewRequest("GET", "https://api.example.com/v1", nil)
	bad.Header.Set("X-Bad", "a\x00b")
	refused := errors.New("dial tcp: connection refused")
	resp := func(code int) *http.Response { return &http.Response{StatusCode: code} }
	tests := []struct {
		name        string
		req         *http.Request
		resp        *http.Response
		err         error
		callerEnded bool
		want        HostVerdict
	}{
		{"200", good, resp(200), nil, false, HostHealthy},
		{"404", good, resp(404), nil, false, HostHealthy},
		{"429 is for rate limiting", good, resp(429), nil, false, HostHealthy},
		{"500", good, resp(500), nil, false, HostFailing},
		{"503", good, resp(503), nil, false, HostFailing},
		{"connection refused", good, nil, refused, false, HostFailing},
		{"no response and no error", good, nil, nil, false, HostFailing},
		{"stack's own deadline", good, nil, context.DeadlineExceeded, false, HostFailing},
		{"caller's deadline", good, nil, context.DeadlineExceeded, true, HostIgnored},
		{"caller canceled", good, nil, context.Canceled, true, HostIgnored},
		{"canceled, wrapped", good, nil, fmt.Errorf("read: %w", context.Canceled), false, HostIgnored},
		{"invalid request", bad, nil, errors.New("net/http: invalid header field value"), false, HostIgnored},
		{"invalid request, nil req", nil, nil, refused, false, HostFailing},
		{"a body that fails to read", good, nil, &BodyError{ContentLength: 5, Err: errors.New("read failed")}, false, HostIgnored},
		{"a 503 after the caller ended is still the host's", good, resp(503), nil, true, HostFailing},
	}
	for _, tt := range tests {
		if got := JudgeHost(tt.req, tt.resp, tt.err, tt.callerEnded); got != tt.want {
			t.Errorf("%s: JudgeHost = %d, want %d", tt.name, got, tt.want)
		}
	}
}
