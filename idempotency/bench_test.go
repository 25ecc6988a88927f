package idempotency_test

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sturdyhttp/sturdy/idempotency"
)

// sink is a ResponseWriter that keeps nothing, so that the benchmarks
// measure the middleware rather than a recorder.
type sink struct {
	h      http.Header
	status int
}

func (s *sink) Header() http.Header         { return s.h }
func (s *sink) WriteHeader(code int)        { s.status = code }
func (s *sink) Write(p []byte) (int, error) { return len(p), nil }

var (
	chargeBody = []byte(`{"amount":1000,"currency":"eur","customer":"cus_9s6XKzkNRiz8i3","description":"order 42"}`)
	chargeResp = []byte(`{"id":"ch_3MmlLrLkdIwHu7ix0snN0B15","amount":1000,"currency":"eur","status":"succeeded"}`)
)

// charge reads the request and answers a small JSON body, like a typical
// create endpoint, without the work such an endpoint does.
var charge = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	w.Write(chargeResp)
})

// benchServe sends b.N POSTs through h; key(i) gives the i-th request's
// key. The harness's own cost (request body reset, key formatting, a
// cleared header map) is the same for every case, so the difference from
// the "none" case is the middleware's overhead.
func benchServe(b *testing.B, h http.Handler, key func(i int, buf []byte) string) {
	body := bytes.NewReader(chargeBody)
	r, _ := http.NewRequest("POST", "http://api.test/v1/charges", io.NopCloser(body))
	r.ContentLength = int64(len(chargeBody))
	hv := []string{""}
	r.Header["Idempotency-Key"] = hv
	r.Header["Content-Type"] = []string{"application/json"}
	w := &sink{h: make(http.Header)}
	buf := make([]byte, 0, 64)
	b.SetBytes(int64(len(chargeBody)))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		body.Reset(chargeBody)
		hv[0] = key(i, buf)
		clear(w.h)
		h.ServeHTTP(w, r)
		if w.status != http.StatusCreated {
			b.Fatalf("status %d, want 201", w.status)
		}
		i++
	}
}

func uniqueKey(i int, buf []byte) string {
	return string(strconv.AppendInt(append(buf[:0], "8e03978e-40d5-43e8-bc93-"...), int64(i), 10))
}

func sameKey(i int, buf []byte) string {
	return string(append(buf[:0], "8e03978e-40d5-43e8-bc93-6894a57f9324"...))
}

// BenchmarkHandler measures the cost per request of idempotency.Handler
// with its default MemoryStore: "first" is a new key each time (fingerprint,
// lock, run, capture, store; past 100 000 keys the store also evicts),
// "replay" the same key each time (fingerprint, look-up, replay), "none"
// the bare handler for comparison.
func BenchmarkHandler(b *testing.B) {
	b.Run("none", func(b *testing.B) { benchServe(b, charge, uniqueKey) })
	b.Run("first", func(b *testing.B) {
		benchServe(b, idempotency.Handler(charge, idempotency.HandlerOptions{}), uniqueKey)
	})
	b.Run("replay", func(b *testing.B) {
		benchServe(b, idempotency.Handler(charge, idempotency.HandlerOptions{}), sameKey)
	})
}

// BenchmarkHandlerParallel is BenchmarkHandler's "first" and "replay" from
// GOMAXPROCS goroutines, to show the cost of the store's one lock.
func BenchmarkHandlerParallel(b *testing.B) {
	for _, tc := range []struct {
		name   string
		unique bool
	}{{"first", true}, {"replay", false}} {
		b.Run(tc.name, func(b *testing.B) {
			h := idempotency.Handler(charge, idempotency.HandlerOptions{})
			var seq atomicCounter
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				body := bytes.NewReader(chargeBody)
				r, _ := http.NewRequest("POST", "http://api.test/v1/charges", io.NopCloser(body))
				r.ContentLength = int64(len(chargeBody))
				hv := []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}
				r.Header["Idempotency-Key"] = hv
				w := &sink{h: make(http.Header)}
				buf := make([]byte, 0, 64)
				for pb.Next() {
					body.Reset(chargeBody)
					if tc.unique {
						hv[0] = uniqueKey(seq.next(), buf)
					}
					clear(w.h)
					h.ServeHTTP(w, r)
				}
			})
		})
	}
}

func BenchmarkParseKey(b *testing.B) {
	for _, v := range []string{"8e03978e-40d5-43e8-bc93-6894a57f9324", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`} {
		b.Run(strconv.Itoa(len(v)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				idempotency.ParseKey(v, 0)
			}
		})
	}
}

type atomicCounter struct{ n atomic.Int64 }

func (c *atomicCounter) next() int { return int(c.n.Add(1)) }
