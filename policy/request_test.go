package policy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
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

// net/http validates a request's trailers as it validates its headers,
// and refuses to send one with a bad trailer ("net/http: invalid
// trailer"): that is the caller's error too.
func TestCheckRequestTrailer(t *testing.T) {
	tests := []struct {
		name    string
		trailer http.Header
		wantErr bool
	}{
		{"none", nil, false},
		{"announced", http.Header{"X-Checksum": nil}, false},
		{"with a value", http.Header{"X-Checksum": {"abc"}}, false},
		{"newline in value", http.Header{"X-Checksum": {"a\r\nInjected: 1"}}, true},
		{"space in name", http.Header{"X Checksum": nil}, true},
		{"empty name", http.Header{"": {"a"}}, true},
	}
	for _, tt := range tests {
		r := &http.Request{Method: "PUT", URL: &url.URL{Scheme: "https", Host: "api.test"}, Header: http.Header{}, Trailer: tt.trailer}
		err := CheckRequest(r)
		if got := err != nil; got != tt.wantErr {
			t.Errorf("%s: CheckRequest = %v, want error: %v", tt.name, err, tt.wantErr)
		}
		if err != nil && !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: errors.Is(%v, ErrInvalidRequest) = false", tt.name, err)
		}
	}
}

// net/http's Transport dials the URL's host, and refuses a request whose
// URL has none ("http: no Host in request URL") even when r.Host is set.
func TestCheckRequestHostWithoutURLHost(t *testing.T) {
	r := &http.Request{Method: "GET", URL: &url.URL{Scheme: "http", Path: "/v1"}, Host: "api.test", Header: http.Header{}}
	if err := CheckRequest(r); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("CheckRequest(Host %q, URL %q) = %v, want ErrInvalidRequest", r.Host, r.URL, err)
	}
}

func TestCheckRequestContentLengthWithoutBody(t *testing.T) {
	for _, body := range []io.ReadCloser{nil, http.NoBody} {
		r := &http.Request{Method: "POST", URL: &url.URL{Scheme: "https", Host: "api.test"}, ContentLength: 3, Body: body}
		if err := CheckRequest(r); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("CheckRequest(ContentLength 3, body %v) = %v, want ErrInvalidRequest", body, err)
		}
	}
}

func TestIsCallerError(t *testing.T) {
	good, _ := http.NewRequest("POST", "https://api.test/", strings.NewReader("abc"))
	bad := good.Clone(good.Context())
	bad.URL.Scheme = "ftp"
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	tests := []struct {
		name string
		req  *http.Request
		err  error
		want bool
	}{
		{"no error", good, nil, false},
		{"no error on a bad request", bad, nil, false},
		{"network error", good, reset, false},
		{"request net/http refuses", bad, errors.New(`unsupported protocol scheme "ftp"`), true},
		{"body too short", good, &BodyError{ContentLength: 5, Read: 3}, true},
		{"body reader failed, copied by readfrom", good, &net.OpError{Op: "readfrom", Err: &BodyError{ContentLength: -1, Err: io.ErrClosedPipe}}, true},
		{"wrapped by url.Error", nil, &url.Error{Op: "Post", URL: "https://api.test/", Err: &BodyError{ContentLength: 3, Read: 4}}, true},
	}
	for _, tt := range tests {
		if got := IsCallerError(tt.req, tt.err); got != tt.want {
			t.Errorf("%s: IsCallerError = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestBodyErrorMessage(t *testing.T) {
	tests := []struct {
		err  *BodyError
		want string
	}{
		{&BodyError{ContentLength: 10, Read: 3}, "policy: invalid request: ContentLength 10 but the body holds 3 bytes"},
		{&BodyError{ContentLength: 3, Read: 4}, "policy: invalid request: ContentLength 3 but the body holds more"},
		{&BodyError{ContentLength: -1, Read: 7, Err: io.ErrClosedPipe}, "policy: invalid request: reading the body: io: read/write on closed pipe"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
	if !errors.Is((&BodyError{Err: io.ErrClosedPipe}), io.ErrClosedPipe) {
		t.Error("errors.Is(BodyError, its reader's error) = false, want true")
	}
}
