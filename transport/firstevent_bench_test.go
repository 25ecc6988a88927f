package transport

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// BenchmarkFirstEvent measures what the commit at the first event costs
// a stream that succeeds, in Anthropic's shape (message_start and a ping
// before the first content event, 896 bytes in all), read whole, on an
// in-memory base: New with streams handed back at their headers, at the
// first event (the default), and with a FirstEventTimeout (its timer).
func BenchmarkFirstEvent(b *testing.B) {
	stream := render(okStream)
	base := Func(func(r *http.Request) (*http.Response, error) {
		h := http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}}
		return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(stream)), ContentLength: -1, Request: r}, nil
	})
	stacks := []struct {
		name string
		rt   http.RoundTripper
	}{
		{"bare", base},
		{"New-headers", New(Options{Base: base, FirstEventTimeout: -1})},
		{"New-first-event", New(Options{Base: base})},
		{"New-first-event-timeout", New(Options{Base: base, FirstEventTimeout: 30 * time.Second})},
	}
	for _, s := range stacks {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			req, _ := http.NewRequest("GET", "http://api.test/v1/messages", nil)
			for b.Loop() {
				resp, err := s.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if n != int64(len(stream)) {
					b.Fatalf("read %d bytes, want %d", n, len(stream))
				}
			}
		})
	}
}
