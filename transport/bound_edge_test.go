package transport

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// A server's Content-Length is its word, and may be wrong: with ReadBody
// at "no limit" (math.MaxInt64, as MaxBufferedBody and MaxProblemBody
// allow), a response declaring 1<<50 bytes that sends two must not make
// the attempt allocate the declared length up front (which panics).
func TestReadBodyHugeContentLength(t *testing.T) {
	base := Func(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{}, ContentLength: 1 << 50,
			Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
	})
	rt := New(Options{Base: base, ReadBody: math.MaxInt64})
	req, _ := http.NewRequest("GET", "http://api.test/x", nil)
	var (
		resp *http.Response
		err  error
	)
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("RoundTrip panicked: %v", p)
			}
		}()
		resp, err = rt.RoundTrip(req)
	}()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := readAll(t, resp), "ok"; got != want {
		t.Errorf("body = %q, want %q", got, want)
	}
}

// A bound of the longest Duration (math.MaxInt64, Go's usual "no
// limit") is one that never runs out: a request under it is sent and
// answered, not cut at once.
func TestBoundLongestDuration(t *testing.T) {
	base := Func(func(r *http.Request) (*http.Response, error) {
		select {
		case <-r.Context().Done():
			return nil, context.Cause(r.Context())
		default:
		}
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
	})
	for _, tc := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"Deadline", Chain(base, Deadline(math.MaxInt64))},
		{"New Timeout", New(Options{Base: base, Timeout: math.MaxInt64})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", "http://api.test/x", nil)
			resp, err := tc.rt.RoundTrip(req)
			if err != nil {
				t.Fatalf("err = %v, want a response", err)
			}
			if got, want := readAll(t, resp), "ok"; got != want {
				t.Errorf("body = %q, want %q", got, want)
			}
		})
	}
}

// Only a 101's body is an upgraded connection. A base whose body for an
// ordinary response happens to be writable too (an *os.File from a disk
// cache or os.Pipe, a net.Conn from a socket transport), and that closes
// it when the request's context ends, as net/http does, gets its body
// bounded as any other: a JSON body that stalls is cut at Timeout, a
// stream that stalls at IdleTimeout.
func TestWritableBodyOfOrdinaryResponseIsBounded(t *testing.T) {
	for _, tc := range []struct {
		contentType string
		wantBound   string
	}{
		{"application/json", boundTimeout},
		{"text/event-stream", boundIdle},
	} {
		t.Run(tc.contentType, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := Func(func(r *http.Request) (*http.Response, error) {
					client, server := net.Pipe()
					context.AfterFunc(r.Context(), func() { client.Close() })
					go func() {
						defer server.Close()
						io.WriteString(server, "[")
						io.Copy(io.Discard, server) // then nothing more, until the client goes away
					}()
					h := http.Header{"Content-Type": {tc.contentType}}
					return &http.Response{StatusCode: 200, Header: h, ContentLength: -1, Body: client, Request: r}, nil
				})
				// Streams handed back at their headers: the body's bound is
				// what is tested, not the wait for a first event.
				rt := New(Options{Base: base, Timeout: time.Second, IdleTimeout: 2 * time.Second, FirstEventTimeout: -1})
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test/x", nil)
				start := time.Now()
				resp, err := rt.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				var de *DeadlineError
				if !errors.As(err, &de) || de.Bound != tc.wantBound {
					t.Errorf("read error after %v: got %v, want the %s's *DeadlineError", time.Since(start), err, tc.wantBound)
				}
				if got, want := time.Since(start), 2*time.Second+2*time.Second/8; got > want {
					t.Errorf("body cut after %v, want within %v", got, want)
				}
			})
		})
	}
}
