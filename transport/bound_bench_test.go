package transport

import (
	"github.com/sturdyhttp/sturdy/internal/timecut"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	sinkTime     time.Time
	sinkDuration time.Duration
)

// BenchmarkClock compares the bounds' clock read (clockNow: the
// monotonic clock alone) with time.Now (the wall clock and the monotonic
// one).
func BenchmarkClock(b *testing.B) {
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			sinkTime = time.Now()
		}
	})
	b.Run("clockNow", func(b *testing.B) {
		for b.Loop() {
			sinkDuration = timecut.Now()
		}
	})
}

// zeros is a response body of n zero bytes that costs next to nothing to
// read, so that a benchmark measures what the stack adds to each Read.
type zeros struct{ n int }

func (z *zeros) Read(p []byte) (int, error) {
	if z.n == 0 {
		return 0, io.EOF
	}
	n := min(len(p), z.n)
	clear(p[:n])
	z.n -= n
	return n, nil
}

func (z *zeros) Close() error { return nil }

// BenchmarkBodyRead reads a 10 MiB body in 4 KiB reads, bare and through
// New (Timeout and IdleTimeout watch the body): the idle bound must not
// show.
func BenchmarkBodyRead(b *testing.B) {
	const size = 10 << 20
	base := Func(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/octet-stream"}},
			Body: &zeros{n: size}, ContentLength: size}, nil
	})
	for _, s := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"bare", base},
		{"New", New(Options{Base: base})},
	} {
		b.Run(s.name, func(b *testing.B) {
			req, _ := http.NewRequest("GET", "http://api.test/big", nil)
			buf := make([]byte, 4<<10)
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := s.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				for {
					_, err := resp.Body.Read(buf)
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				resp.Body.Close()
			}
		})
	}
}

// BenchmarkPostPlainReader sends a POST whose body is a plain io.Reader
// (no GetBody, unknown length), bare and through New, which keeps its
// bytes as they are sent in case it must be replayed.
func BenchmarkPostPlainReader(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10} {
		payload := strings.Repeat("p", size)
		for _, s := range []struct {
			name string
			rt   http.RoundTripper
		}{
			{"bare", memBase},
			{"New", New(Options{Base: memBase})},
		} {
			b.Run(s.name+"/"+sizeName(size), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(size))
				for b.Loop() {
					req, _ := http.NewRequest("POST", "http://api.test/v1/things", onlyReader{strings.NewReader(payload)})
					resp, err := s.rt.RoundTrip(req)
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
	}
}

func sizeName(n int) string { return strconv.Itoa(n>>10) + "KiB" }
