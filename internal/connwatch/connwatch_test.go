package connwatch

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestNotConnected: on real loopback sockets, an attempt refused its
// connection is known not to have connected; one served is not; a
// transport that reports nothing proves nothing.
func TestNotConnected(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String()
	l.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	fake := roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, net.ErrClosed })
	tests := []struct {
		name string
		rt   http.RoundTripper
		url  string
		want bool
	}{
		{"refused", tr, refused, true},
		{"served", tr, srv.URL, false},
		{"silent transport", fake, refused, false},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(http.MethodPost, tt.url, nil)
		w, r := New(req)
		w.Reset()
		if resp, err := tt.rt.RoundTrip(r); err == nil {
			resp.Body.Close()
		}
		if got := w.NotConnected(); got != tt.want {
			t.Errorf("%s: NotConnected() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestShared: a watch made by NewShared is found in the request's
// context, and reports its attempt as New's does; one made by New is
// not found.
func TestShared(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String()
	l.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, refused, nil)
	w, r := NewShared(req)
	if got := Of(r.Context()); got != w {
		t.Fatalf("Of = %p, want the shared watch %p", got, w)
	}
	if _, err := tr.RoundTrip(r); err == nil {
		t.Fatal("a refused connection was served")
	}
	if !Of(r.Context()).NotConnected() {
		t.Error("the shared watch: NotConnected() = false after a refused dial, want true")
	}
	if _, r2 := New(req); Of(r2.Context()) != nil {
		t.Error("New's watch is found in the context; want only NewShared's")
	}
	if Of(req.Context()) != nil {
		t.Error("a request with no watch has one")
	}
}
