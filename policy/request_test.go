package policy

import (
	"errors"
	"net/http"
	"net/url"
	"testing"
)

func TestCheckRequest(t *testing.T) {
	tests := []struct {
		name    string
		method  string
		url     string
		header  http.Header
		wantErr bool
	}{
		{"plain GET", "GET", "https://api.test/v1", nil, false},
		{"headers", "POST", "http://api.test/", http.Header{"Idempotency-Key": {"k 1\tx"}, "X-Json": {`{"a":"b"}`}}, false},
		{"utf-8 value", "GET", "http://api.test/", http.Header{"X-Name": {"Zoë"}}, false},
		{"ftp", "GET", "ftp://api.test/", nil, true},
		{"no scheme", "GET", "//api.test/", nil, true},
		{"no host", "GET", "http:///path", nil, true},
		{"newline in value", "GET", "http://api.test/", http.Header{"X-A": {"a\r\nInjected: 1"}}, true},
		{"NUL in value", "GET", "http://api.test/", http.Header{"X-A": {"a\x00"}}, true},
		{"DEL in value", "GET", "http://api.test/", http.Header{"X-A": {"a\x7f"}}, true},
		{"space in name", "GET", "http://api.test/", http.Header{"X A": {"a"}}, true},
		{"empty name", "GET", "http://api.test/", http.Header{"": {"a"}}, true},
		{"bad method", "GE T", "http://api.test/", nil, true},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		r := &http.Request{Method: tt.method, URL: u, Header: tt.header}
		err = CheckRequest(r)
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: CheckRequest = %v, want error: %v", tt.name, err, tt.wantErr)
		}
		if err != nil && !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: errors.Is(%v, ErrInvalidRequest) = false", tt.name, err)
		}
	}
	if err := CheckRequest(&http.Request{Method: "GET"}); err == nil {
		t.Error("CheckRequest(no URL) = nil, want an error")
	}
}
