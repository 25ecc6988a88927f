package httptestutil

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func benchClient(b *testing.B, c *http.Client, url string) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Get(url)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

// BenchmarkHandlerTransport is the cost of one request through a
// HandlerTransport: the cheapest test bed.
func BenchmarkHandlerTransport(b *testing.B) {
	benchClient(b, &http.Client{Transport: NewHandlerTransport(Status(200, "ok").Forever())}, "http://api.test/")
}

// BenchmarkNetwork is the cost of one request over the in-memory network:
// a real server and transport over net.Pipe.
func BenchmarkNetwork(b *testing.B) {
	n := NewNetwork()
	srv := n.Serve("api.test", Status(200, "ok").Forever())
	defer srv.Close()
	tr := n.Transport()
	defer tr.CloseIdleConnections()
	benchClient(b, &http.Client{Transport: tr}, srv.URL)
}

// BenchmarkOutageServeHTTP is the emulator's own cost per request, from
// many goroutines at once (the outage demo's load).
func BenchmarkOutageServeHTTP(b *testing.B) {
	o := NewOutage(time.Now(), OutageConfig{Start: time.Hour, Duration: time.Hour})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		for pb.Next() {
			w.Body.Reset()
			o.ServeHTTP(w, r)
		}
	})
}

// BenchmarkRecorderServeHTTP is what a Recorder adds per request.
func BenchmarkRecorderServeHTTP(b *testing.B) {
	rec := NewRecorder(nil)
	r := httptest.NewRequest("GET", "/", nil)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		rec.ServeHTTP(w, r)
	}
}
