package httptestutil

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
)

// A request whose body does not match its ContentLength cannot be sent as
// written: a real http.Transport fails the request ("http: ContentLength=N
// with Body length M", or the body reader's error) and a server never
// reads more than the declared length. A test bed that served such a
// request whole would let a client's test pass where production fails.
//
// A body longer than its ContentLength is the one case where net/http
// races: the server may answer the declared bytes before the client finds
// the extra ones, so on a connection either outcome is real; the handler
// transport reports the error, as the client's own check does.
func TestRequestContentLengthMismatchFails(t *testing.T) {
	for _, tt := range []struct {
		name string
		body func() io.Reader
		cl   int64
		want string // in the error
		racy bool   // a real connection may answer instead
	}{
		{"shorter than the body", func() io.Reader { return strings.NewReader("abcdef") }, 2, "ContentLength=2 with Body length 6", true},
		{"longer than the body", func() io.Reader { return strings.NewReader("abcdef") }, 10, "ContentLength=10 with Body length 6", false},
		{"shorter than a bare reader's body", func() io.Reader { return io.MultiReader(strings.NewReader("abcdef")) }, 2, "ContentLength=2 with Body length 6", true},
		{"longer than a bare reader's body", func() io.Reader { return io.MultiReader(strings.NewReader("abcdef")) }, 10, "ContentLength=10 with Body length 6", false},
		{"with no body", func() io.Reader { return nil }, 5, "ContentLength=5 with nil Body", false},
		{"a body reader that fails", func() io.Reader { return io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(errBroken)) }, 0, "broken reader", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var read atomic.Int64 // bytes the server read
			h := func() http.Handler {
				read.Store(0)
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					n, err := io.Copy(io.Discard, r.Body)
					read.Store(n)
					if err != nil {
						w.WriteHeader(http.StatusBadRequest)
					}
				})
			}
			forEachBed(t, h, func(t *testing.T, b bed, c *http.Client, url string) {
				req, _ := http.NewRequest("PUT", url, tt.body())
				req.ContentLength = tt.cl
				resp, err := c.Do(req)
				if err == nil {
					resp.Body.Close()
					if !tt.racy || b.name == "handler" {
						t.Fatalf("got status %d, want an error that contains %q", resp.StatusCode, tt.want)
					}
				} else if b.name == "handler" && !strings.Contains(err.Error(), tt.want) {
					// On a connection, which error net/http reports first
					// (its own check, or the write or read the server's
					// close cut) depends on timing: only the handler
					// transport's is checked.
					t.Errorf("err = %q, want one that contains %q", err, tt.want)
				}
				if got := read.Load(); tt.cl > 0 && got > tt.cl {
					t.Errorf("server read %d body bytes, want at most the declared %d", got, tt.cl)
				}
			})
		})
	}
}

var errBroken = errors.New("broken reader")

// Header names are canonicalized on the wire: a server reads
// "idempotency-key: k" as Idempotency-Key, and a client reads
// "retry-after: 3" as Retry-After, whatever the case the other end wrote.
func TestHeaderNamesCanonicalOnTheWire(t *testing.T) {
	h := func() http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["retry-after"] = []string{"3"}
			w.Header().Set("X-Key", r.Header.Get("Idempotency-Key"))
			io.WriteString(w, "ok")
		})
	}
	forEachBed(t, h, func(t *testing.T, b bed, c *http.Client, url string) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header["idempotency-key"] = []string{"k"}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got, want := resp.Header.Get("X-Key"), "k"; got != want {
			t.Errorf("server read Idempotency-Key %q, want %q", got, want)
		}
		if got, want := resp.Header.Get("Retry-After"), "3"; got != want {
			t.Errorf("client read Retry-After %q, want %q", got, want)
		}
		if got, want := req.Header["idempotency-key"], []string{"k"}; len(got) != 1 || got[0] != want[0] {
			t.Errorf("caller's header = %v, want it unchanged", req.Header)
		}
	})
}

// An http.Server answers a HEAD whose handler wrote a short body and
// returned with the Content-Length the GET would have, as it does for the
// GET itself.
func TestHeadGetsContentLength(t *testing.T) {
	h := func() http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hidden") })
	}
	forEachBed(t, h, func(t *testing.T, b bed, c *http.Client, url string) {
		resp, err := c.Head(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got, want := resp.ContentLength, int64(6); got != want {
			t.Errorf("ContentLength = %d, want %d", got, want)
		}
		if got, want := resp.Header.Get("Content-Length"), "6"; got != want {
			t.Errorf("Content-Length header = %q, want %q", got, want)
		}
	})
}

// A server's request body may be closed by one goroutine while another
// reads it (a handler that stops a read by closing the body, as
// net/http's server allows: its body locks both): the handler transport's
// body must be as safe, or a user's test fails under -race where the
// server does not.
func TestRequestBodyCloseWhileReading(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			io.Copy(io.Discard, r.Body)
		}()
		r.Body.Close()
		<-done
	})
	c := &http.Client{Transport: NewHandlerTransport(h)}
	req, _ := http.NewRequest("POST", "http://svc/", io.MultiReader(strings.NewReader("abcdef")))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("got error %v, want a response", err)
	}
	resp.Body.Close()
	if got, want := resp.StatusCode, 200; got != want {
		t.Errorf("got status %d, want %d", got, want)
	}
}
