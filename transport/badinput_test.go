package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/policy"
)

// Bad input through the whole stack: what a broken, hostile or merely
// odd server sends must end in a clear result (a response or an error
// that says what happened), in bounded memory, and never in a panic.

// heapMeter measures how much the heap grows during a test: the peak of
// HeapInuse over the samples taken, above a baseline taken after a GC,
// and the bytes allocated in all (TotalAlloc), which bounds the growth
// whatever the GC does.
type heapMeter struct {
	base, peak uint64 // HeapInuse
	alloc0     uint64 // TotalAlloc at the start
	allocated  uint64 // bytes allocated since
}

func newHeapMeter() *heapMeter {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return &heapMeter{base: m.HeapInuse, peak: m.HeapInuse, alloc0: m.TotalAlloc}
}

func (h *heapMeter) sample() {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	h.peak = max(h.peak, m.HeapInuse)
	h.allocated = m.TotalAlloc - h.alloc0
}

// growth is the peak heap in use above the baseline.
func (h *heapMeter) growth() uint64 { return h.peak - h.base }

func (h *heapMeter) String() string {
	return fmt.Sprintf("peak heap %.1f MiB above baseline, %.1f MiB allocated in all", mib(h.growth()), mib(h.allocated))
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

// want fails t when the heap may have grown by limit or more: when the
// sampled peak, or the bytes allocated in all (which bound the growth
// between samples too), reach it.
func (h *heapMeter) want(t *testing.T, limit uint64) {
	t.Helper()
	h.sample()
	t.Log(h)
	if g := max(h.growth(), h.allocated); g >= limit {
		t.Errorf("heap grew by up to %.1f MiB (%v), want under %.1f MiB", mib(g), h, mib(limit))
	}
}

// meteredCopy reads src to its end (or error), checking every byte with
// check and sampling the heap every MiB. It returns the bytes read.
func meteredCopy(src io.Reader, check *streamCheck, h *heapMeter) (int64, error) {
	buf := make([]byte, 32<<10)
	var n, next int64
	for {
		k, err := src.Read(buf)
		if k > 0 {
			check.Write(buf[:k])
			n += int64(k)
			if n >= next {
				h.sample()
				next += 1 << 20
			}
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// bigBody is a response body made on the fly: prefix, then n copies of
// fill, then suffix; never held in memory whole.
type bigBody struct {
	prefix string
	fill   byte
	n      int64 // -1: never ends
	suffix string
}

func (b bigBody) size() int64 { return int64(len(b.prefix)) + b.n + int64(len(b.suffix)) }

// writeTo sends the body to w in 32 KiB writes; every, when set, waits
// between writes (virtual time in a bubble). It stops when the client
// goes away.
func (b bigBody) writeTo(w io.Writer, r *http.Request, every time.Duration) {
	if _, err := io.WriteString(w, b.prefix); err != nil {
		return
	}
	chunk := bytes.Repeat([]byte{b.fill}, 32<<10)
	for left := b.n; left != 0; {
		k := int64(len(chunk))
		if left > 0 {
			k = min(k, left)
			left -= k
		}
		if _, err := w.Write(chunk[:k]); err != nil {
			return
		}
		if every > 0 {
			select {
			case <-time.After(every):
			case <-r.Context().Done():
				return
			}
		}
	}
	io.WriteString(w, b.suffix)
}

// serve answers with status, the given headers and the body; with the
// Content-Length declared when withLength.
func (b bigBody) serve(status int, withLength bool, every time.Duration, headerKV ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(headerKV); i += 2 {
			w.Header().Add(headerKV[i], headerKV[i+1])
		}
		if withLength && b.n >= 0 {
			w.Header().Set("Content-Length", strconv.FormatInt(b.size(), 10))
		}
		w.WriteHeader(status)
		b.writeTo(w, r, every)
	}
}

// streamCheck checks that the bytes written to it are a bigBody's,
// a chunk at a time (a check byte by byte is slow under -race).
type streamCheck struct {
	want bigBody
	fill []byte
	off  int64
	bad  int64 // offset of the first wrong byte, -1 when none
}

func newStreamCheck(b bigBody) *streamCheck {
	return &streamCheck{want: b, fill: bytes.Repeat([]byte{b.fill}, 32<<10), bad: -1}
}

func (c *streamCheck) Write(p []byte) (int, error) {
	n, i := len(p), c.off
	defer func() { c.off += int64(n) }()
	pl := int64(len(c.want.prefix))
	for len(p) > 0 && c.bad < 0 {
		var want []byte
		switch {
		case i < pl:
			want = []byte(c.want.prefix[i:])
		case c.want.n < 0 || i < pl+c.want.n:
			want = c.fill
			if c.want.n >= 0 {
				want = want[:min(int64(len(want)), pl+c.want.n-i)]
			}
		default:
			want = []byte(c.want.suffix[min(i-pl-c.want.n, int64(len(c.want.suffix))):])
			if len(want) == 0 {
				c.bad = i // past the end
				return n, nil
			}
		}
		k := min(len(want), len(p))
		if !bytes.Equal(p[:k], want[:k]) {
			c.bad = i + int64(firstDiff(p[:k], want[:k]))
			return n, nil
		}
		p, i = p[k:], i+int64(k)
	}
	return n, nil
}

// counting counts the requests that reach h.
func counting(h http.Handler, n *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h.ServeHTTP(w, r)
	})
}

// Promise: a problem body is read only up to MaxProblemBody to decide,
// and the caller gets the whole body, byte for byte, in bounded memory,
// however long it is.
func TestBadInputHugeProblemBody(t *testing.T) {
	const size = 100 << 20
	tests := []struct {
		name         string
		body         bigBody
		withLength   bool
		wantAttempts int64
	}{
		// Not a JSON object within 64 KiB: the status decides (503, retried).
		{"unparsable prefix, chunked", bigBody{`{"title":"overloaded","detail":"`, 'x', size, `"}`}, false, 4},
		{"unparsable prefix, with length", bigBody{`{"title":"overloaded","detail":"`, 'x', size, `"}`}, true, 4},
		// A whole object in the first 64 KiB, then blanks: it decides.
		{"is_retriable=false up front", bigBody{`{"title":"bad","is_retriable":false}`, ' ', size, "\n"}, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var sent atomic.Int64
				env := newFakeEnv(t, counting(tt.body.serve(503, tt.withLength, 0, "Content-Type", "application/problem+json"), &sent))
				c := &http.Client{Transport: New(Options{Base: env.base, Retry: policy.Retry{Backoff: constant(time.Second)}})}
				h := newHeapMeter()
				resp, err := c.Get(env.url)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := resp.StatusCode, 503; got != want {
					t.Errorf("status = %d, want %d", got, want)
				}
				check := newStreamCheck(tt.body)
				n, err := meteredCopy(resp.Body, check, h)
				resp.Body.Close()
				if err != nil {
					t.Fatalf("reading the body: %v after %d bytes", err, n)
				}
				if n != tt.body.size() || check.bad >= 0 {
					t.Errorf("caller read %d bytes (first wrong byte at %d), want the %d sent intact", n, check.bad, tt.body.size())
				}
				if got := sent.Load(); got != tt.wantAttempts {
					t.Errorf("server got %d requests, want %d", got, tt.wantAttempts)
				}
				h.want(t, 8<<20)
			})
		})
	}
}

// Promise: a 200 whose body never ends is bounded by the deadline, in
// bounded memory; closing it early releases everything.
func TestBadInputEndlessBody(t *testing.T) {
	endless := bigBody{prefix: "data: ", fill: 'z', n: -1}
	t.Run("deadline cuts it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// One write every 300ms: the last at 9.9s, none at the deadline.
			env := newFakeEnv(t, endless.serve(200, false, 300*time.Millisecond))
			c := &http.Client{Transport: New(Options{Base: env.base, Timeout: 10 * time.Second})}
			h := newHeapMeter()
			start := time.Now()
			resp, err := c.Get(env.url)
			if err != nil {
				t.Fatal(err)
			}
			check := newStreamCheck(endless)
			n, err := meteredCopy(resp.Body, check, h)
			resp.Body.Close()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("reading ended with %v, want context.DeadlineExceeded", err)
			}
			if got, want := time.Since(start), 10*time.Second; got != want {
				t.Errorf("reading ended after %v, want %v", got, want)
			}
			if want := int64(len(endless.prefix) + 34*32<<10); n != want || check.bad >= 0 {
				t.Errorf("read %d bytes (first wrong byte at %d), want %d intact", n, check.bad, want)
			}
			h.want(t, 8<<20)
		})
	})
	t.Run("caller closes it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			env := newFakeEnv(t, endless.serve(200, false, 0))
			c := &http.Client{Transport: New(Options{Base: env.base})}
			h := newHeapMeter()
			resp, err := c.Get(env.url)
			if err != nil {
				t.Fatal(err)
			}
			check := newStreamCheck(endless)
			n, err := meteredCopy(io.LimitReader(resp.Body, 64<<20), check, h)
			if err != nil || n != 64<<20 || check.bad >= 0 {
				t.Errorf("read %d bytes, %v (first wrong byte at %d), want 64 MiB intact", n, err, check.bad)
			}
			if err := resp.Body.Close(); err != nil {
				t.Errorf("Close = %v, want nil", err)
			}
			synctest.Wait() // the server's handler must end: its writes fail
			h.want(t, 8<<20)
		})
	})
	t.Run("503 with an endless body is drained a little and retried", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var sent atomic.Int64
			env := newFakeEnv(t, counting(endless.serve(503, false, 0), &sent))
			c := &http.Client{Transport: New(Options{Base: env.base, Retry: policy.Retry{Backoff: constant(time.Second)}})}
			h := newHeapMeter()
			start := time.Now()
			resp, err := c.Get(env.url)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := resp.StatusCode, 503; got != want {
				t.Errorf("status = %d, want %d", got, want)
			}
			if got, want := time.Since(start), 3*time.Second; got != want {
				t.Errorf("gave up after %v, want %v (3 waits of 1s)", got, want)
			}
			check := newStreamCheck(endless)
			n, err := meteredCopy(io.LimitReader(resp.Body, 1<<20), check, h)
			resp.Body.Close()
			if err != nil || n != 1<<20 || check.bad >= 0 {
				t.Errorf("read %d bytes, %v (first wrong byte at %d), want 1 MiB intact", n, err, check.bad)
			}
			if got, want := sent.Load(), int64(4); got != want {
				t.Errorf("server got %d requests, want %d", got, want)
			}
			h.want(t, 8<<20)
		})
	})
}

// Promise: huge and repeated headers are parsed in bounded memory, and
// garbage in them is ignored with the documented fallback.
func TestBadInputHugeHeaders(t *testing.T) {
	big := func(b byte) string { return strings.Repeat(string(b), 1<<20) }
	many := func(key string, n int, vals ...string) []string {
		var kv []string
		for i := range n {
			kv = append(kv, key, vals[i%len(vals)])
		}
		return kv
	}
	tests := []struct {
		name     string
		steps    []httptestutil.Step
		base     func(*http.Transport)
		want     int           // status; 0 when an error is wanted
		wantErr  string        // in the error
		wantTook time.Duration // from the request to the response
		wantReqs int
	}{
		{
			name:     "1 MiB header on a 200",
			steps:    []httptestutil.Step{httptestutil.Status(200, "ok", "X-Junk", big('a'))},
			want:     200,
			wantReqs: 1,
		},
		{
			// 1 MiB of digits saturates at 292 years: longer than
			// MaxRetryAfter, so the 503 comes back at once.
			name:     "1 MiB Retry-After of digits",
			steps:    []httptestutil.Step{httptestutil.Status(503, "busy", "Retry-After", big('9')).Forever()},
			want:     503,
			wantReqs: 1,
		},
		{
			// Garbage is ignored: the backoff (1s) decides.
			name:     "1 MiB Retry-After of garbage",
			steps:    []httptestutil.Step{httptestutil.Status(503, "busy", "Retry-After", big('?')), httptestutil.Status(200, "ok")},
			want:     200,
			wantTook: time.Second,
			wantReqs: 2,
		},
		{
			name: "1 MiB quota headers",
			steps: []httptestutil.Step{httptestutil.Status(200, "ok",
				"X-RateLimit-Remaining", big('0'), "X-RateLimit-Reset", big('1'),
				"RateLimit", strings.Repeat(`"a";r=0;t=5, `, 80_000)+`"a";r=0;t=5`, "RateLimit-Policy", strings.Repeat(`"a";q=1;w=9, `, 80_000)+`"a";q=1;w=9`),
				httptestutil.Status(200, "ok")},
			want:     200,
			wantReqs: 1,
		},
		{
			// The first valid line wins: 5000 bad ones, then 2s.
			name: "5000 Retry-After lines, the last one valid",
			steps: []httptestutil.Step{
				httptestutil.Status(503, "busy", append(many("Retry-After", 5000, "soon", "-1", "1e3", "\xff\xfe", "Fri, 31 Feb 2026 25:00:00 GMT"), "Retry-After", "2")...),
				httptestutil.Status(200, "ok")},
			want:     200,
			wantTook: 2 * time.Second,
			wantReqs: 2,
		},
		{
			name: "5000 Retry-After lines, 429, all garbage",
			steps: []httptestutil.Step{
				httptestutil.Status(429, "slow down", many("Retry-After", 5000, "soon", "NaN", "\x00")...),
				httptestutil.Status(200, "ok")},
			want:     200,
			wantTook: time.Second,
			wantReqs: 2,
		},
		{
			name: "5000 quota header lines",
			steps: []httptestutil.Step{
				httptestutil.Status(200, "ok", append(many("RateLimit", 5000, `"a";r=5;t=1`, `garbage;;`, "\xff"), many("X-RateLimit-Remaining", 5000, "1", "x")...)...),
				httptestutil.Status(200, "ok")},
			want:     200,
			wantReqs: 1,
		},
		{
			name:     "headers over the transport's limit",
			steps:    []httptestutil.Step{httptestutil.Status(200, "ok", "X-Junk", big('a')).Forever()},
			base:     func(tr *http.Transport) { tr.MaxResponseHeaderBytes = 64 << 10 },
			wantErr:  "server response headers exceeded 65536 bytes",
			wantReqs: 1, // final: every attempt would get the same headers
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := httptestutil.NewRecorder(httptestutil.Script(tt.steps...))
				env := newFakeEnv(t, rec)
				if tt.base != nil {
					tt.base(env.base)
				}
				c := &http.Client{Transport: New(Options{Base: env.base, Retry: policy.Retry{Backoff: constant(time.Second)}})}
				h := newHeapMeter()
				start := time.Now()
				resp, err := c.Get(env.url)
				took := time.Since(start)
				switch {
				case tt.wantErr != "":
					if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
						t.Errorf("err = %v, want one that says %q", err, tt.wantErr)
					}
					if err == nil {
						resp.Body.Close()
					}
				case err != nil:
					t.Fatalf("err = %v, want status %d", err, tt.want)
				default:
					body := readAll(t, resp)
					if resp.StatusCode != tt.want {
						t.Errorf("status = %d (%q), want %d", resp.StatusCode, body, tt.want)
					}
				}
				if took != tt.wantTook {
					t.Errorf("took %v, want %v", took, tt.wantTook)
				}
				rec.WantCount(t, tt.wantReqs)
				// The server's copies of the headers are counted too.
				h.want(t, 32<<20)
			})
		})
	}
}

// Promise: bytes that are not UTF-8 pass through untouched where they
// are data, and are ignored where they are garbage.
func TestBadInputNotUTF8(t *testing.T) {
	junk := "\xff\xfe\xc3\x28\xa0\xa1\xe2\x28\xa1\xf0\x28\x8c\xbc"
	tests := []struct {
		name     string
		steps    []httptestutil.Step
		ctx      func(context.Context) context.Context
		want     int
		wantBody string
		wantReqs int
	}{
		{
			name:     "response body",
			steps:    []httptestutil.Step{httptestutil.Status(200, junk, "Content-Type", "text/plain; charset=utf-8")},
			want:     200,
			wantBody: junk,
			wantReqs: 1,
		},
		{
			name: "quota and Retry-After headers",
			steps: []httptestutil.Step{
				httptestutil.Status(503, junk, "Retry-After", junk, "Retry-After-Ms", junk, "RateLimit", junk+`;r=0;t=5`, "X-RateLimit-Remaining", junk, "X-Should-Retry", junk),
				httptestutil.Status(200, "ok")},
			want:     200,
			wantBody: "ok",
			wantReqs: 2,
		},
		{
			// Invalid UTF-8 inside the JSON strings does not hide
			// is_retriable; the caller gets the body byte for byte.
			name: "problem body",
			steps: []httptestutil.Step{httptestutil.Status(503, `{"title":"`+junk+`","is_retriable":false,"detail":"`+junk+`"}`,
				"Content-Type", "application/problem+json")},
			want:     503,
			wantBody: `{"title":"` + junk + `","is_retriable":false,"detail":"` + junk + `"}`,
			wantReqs: 1,
		},
		{
			name:     "problem content type",
			steps:    []httptestutil.Step{httptestutil.Status(503, junk, "Content-Type", "application/problem+json; charset="+junk), httptestutil.Status(200, "ok")},
			want:     200,
			wantBody: "ok",
			wantReqs: 2,
		},
		{
			// obs-text is a valid field value: the key is sent as is.
			name:     "the caller's idempotency key",
			steps:    []httptestutil.Step{httptestutil.Status(503, "").Times(2), httptestutil.Status(201, "created")},
			ctx:      func(ctx context.Context) context.Context { return idempotency.WithKey(ctx, junk) },
			want:     201,
			wantBody: "created",
			wantReqs: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := httptestutil.NewRecorder(httptestutil.Script(tt.steps...))
				env := newFakeEnv(t, rec)
				c := &http.Client{Transport: New(Options{Base: env.base, Retry: policy.Retry{Backoff: constant(time.Second)}})}
				ctx := context.Background()
				method := "GET"
				if tt.ctx != nil {
					ctx, method = tt.ctx(ctx), "POST"
				}
				req, _ := http.NewRequestWithContext(ctx, method, env.url, strings.NewReader(junk))
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				if got := readAll(t, resp); resp.StatusCode != tt.want || got != tt.wantBody {
					t.Errorf("got %d %q, want %d %q", resp.StatusCode, got, tt.want, tt.wantBody)
				}
				rec.WantCount(t, tt.wantReqs)
				for i, r := range rec.Requests() {
					if string(r.Body) != junk {
						t.Errorf("request %d body = %q, want %q", i+1, r.Body, junk)
					}
					if tt.ctx != nil && r.Header.Get("Idempotency-Key") != junk {
						t.Errorf("request %d key = %q, want %q", i+1, r.Header.Get("Idempotency-Key"), junk)
					}
				}
			})
		})
	}
}

// raw answers every request with the bytes of resp on the bare
// connection, then closes it.
func raw(resp string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		io.WriteString(conn, resp)
		conn.Close()
	}
}

// Promise: a response that breaks HTTP ends in an error that says so,
// after the retries an idempotent request is owed, or in a body that
// fails to read; never in a panic or a hang.
func TestBadInputMalformedResponses(t *testing.T) {
	tests := []struct {
		name    string
		resp    string
		wantErr string // in the error of RoundTrip; "" when a response comes back
		bodyErr string // in the error of reading its body
	}{
		{"not HTTP", "garbage\r\n\r\n", "malformed HTTP response", ""},
		{"status code of 4 digits", "HTTP/1.1 2000 OK\r\n\r\n", "malformed HTTP status code", ""},
		{"negative Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", "bad Content-Length", ""},
		{"Content-Length not a number", "HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n", "bad Content-Length", ""},
		{"two Content-Lengths", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", "multiple Content-Length", ""},
		{"NUL in a header name", "HTTP/1.1 200 OK\r\nX-\x00: 1\r\n\r\n", "malformed MIME header", ""},
		{"header line without a colon", "HTTP/1.1 503 Busy\r\nRetry-After 5\r\n\r\n", "malformed MIME header", ""},
		{"closed before the headers end", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n", "unexpected EOF", ""},
		{"1 MiB status line", "HTTP/1.1 200 " + strings.Repeat("K", 1<<20) + "\r\nContent-Length: 2\r\n\r\nok", "", ""},
		{"body shorter than its length", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "", "unexpected EOF"},
		{"bad chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc", "", "invalid byte in chunk length"},
		{"problem body cut short", "HTTP/1.1 503 Busy\r\nContent-Type: application/problem+json\r\nContent-Length: 100\r\n\r\n{\"is_retri", "", "unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var sent atomic.Int64
				env := newFakeEnv(t, counting(raw(tt.resp), &sent))
				c := &http.Client{Transport: New(Options{Base: env.base, Retry: policy.Retry{Backoff: constant(time.Second)}})}
				resp, err := c.Get(env.url)
				if tt.wantErr != "" {
					if err == nil {
						resp.Body.Close()
						t.Fatalf("got %d, want an error that says %q", resp.StatusCode, tt.wantErr)
					}
					if !strings.Contains(err.Error(), tt.wantErr) {
						t.Errorf("err = %v, want one that says %q", err, tt.wantErr)
					}
					var re *RetryError
					if !errors.As(err, &re) || re.Attempts != 4 || sent.Load() != 4 {
						t.Errorf("err = %v after %d requests, want a *RetryError after 4", err, sent.Load())
					}
					return
				}
				if err != nil {
					t.Fatalf("err = %v, want a response", err)
				}
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case tt.bodyErr == "" && err != nil:
					t.Errorf("reading the body: %v, want no error", err)
				case tt.bodyErr != "" && (err == nil || !strings.Contains(err.Error(), tt.bodyErr)):
					t.Errorf("reading the body: %v, want an error that says %q", err, tt.bodyErr)
				}
			})
		})
	}
}

// Promise: a request that net/http refuses to send fails with the reason,
// at once: it can never succeed, so it is not retried; and it says
// nothing about the host, so it does not open the host's circuit for
// the requests that are fine.
//
// Regression test: before policy.CheckRequest, DefaultClassifier retried
// these errors as network errors (4 attempts, backoff between them) and
// the breaker counted each attempt against the host, so two malformed
// requests opened a healthy host's circuit for everyone.
func TestBadInputInvalidRequests(t *testing.T) {
	tests := []struct {
		name    string
		req     func(url string) *http.Request
		wantErr string
	}{
		{"control bytes in the caller's key", func(url string) *http.Request {
			ctx := idempotency.WithKey(context.Background(), "key\x00\r\nX-Injected: 1")
			req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader("{}"))
			return req
		}, "invalid header field value"},
		{"newline in a header", func(url string) *http.Request {
			req, _ := http.NewRequest("GET", url, nil)
			req.Header.Set("X-Trace", "a\r\nX-Injected: 1")
			return req
		}, "invalid header field value"},
		{"unsupported scheme", func(url string) *http.Request {
			req, _ := http.NewRequest("GET", "ftp"+strings.TrimPrefix(url, "http"), nil)
			return req
		}, "unsupported protocol scheme"},
		{"newline in a trailer", func(url string) *http.Request {
			req, _ := http.NewRequest("PUT", url, strings.NewReader("{}"))
			req.Trailer = http.Header{"X-Checksum": {"a\r\nX-Injected: 1"}}
			return req
		}, "invalid trailer"},
		{"a Host but no host in the URL", func(url string) *http.Request {
			req, _ := http.NewRequest("GET", "http:///v1", nil)
			req.Host = strings.TrimPrefix(url, "http://")
			return req
		}, "no Host in request URL"},
		{"space in a trailer's name", func(url string) *http.Request {
			req, _ := http.NewRequest("GET", url, nil)
			req.Trailer = http.Header{"X Checksum": nil}
			return req
		}, "invalid trailer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var sent atomic.Int64
				env := newFakeEnv(t, counting(httptestutil.Status(200, "ok").Forever(), &sent))
				var attempts int
				c := &http.Client{Transport: New(Options{Base: env.base, Hooks: Hooks{OnAttempt: func(policy.AttemptEvent) { attempts++ }}})}
				for i := range 3 {
					attempts = 0
					start := time.Now()
					resp, err := c.Do(tt.req(env.url))
					if err == nil {
						resp.Body.Close()
						t.Fatalf("got %d, want an error that says %q", resp.StatusCode, tt.wantErr)
					}
					if !strings.Contains(err.Error(), tt.wantErr) {
						t.Errorf("request %d: err = %v, want one that says %q", i+1, err, tt.wantErr)
					}
					if took := time.Since(start); attempts != 1 || took != 0 {
						t.Errorf("request %d: %d attempts in %v, want 1 at once", i+1, attempts, took)
					}
				}
				if sent.Load() != 0 {
					t.Errorf("server got %d requests, want 0", sent.Load())
				}
				resp, err := c.Get(env.url)
				if err != nil {
					t.Fatalf("a valid request after them: %v, want 200", err)
				}
				if got := readAll(t, resp); resp.StatusCode != 200 || got != "ok" {
					t.Errorf("a valid request after them: %d %q, want 200 %q", resp.StatusCode, got, "ok")
				}
			})
		})
	}
}

// A RoundTripper beneath that breaks its contract by returning a
// response without a body and an error: Retry gives back the error (as
// http.Client would, "ignoring response") and does not panic on closing
// a nil body.
func TestBadInputResponseAndErrorWithoutBody(t *testing.T) {
	base := Func(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 502, Header: http.Header{}, Request: r}, errors.New("broken")
	})
	for i, pol := range []policy.Retry{
		{Backoff: constant(0)},
		{MaxAttempts: 1, OnGiveUp: func(policy.GiveUpEvent) {}},
	} {
		req, _ := http.NewRequest("POST", "http://api.test/x", nil)
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("policy %d: RoundTrip panicked: %v", i, p)
				}
			}()
			_, err := Chain(base, Retry(pol)).RoundTrip(req)
			if err == nil {
				t.Error("err = nil, want an error")
			}
		}()
	}
}

// A ContentLength far beyond the body, with MaxBufferedBody at "no limit"
// (math.MaxInt64, as TestRetryHugeLimits has it): the replay buffer is
// not allocated at the declared length up front (which panicked in
// make), and the wrong length is the caller's error.
func TestBadInputHugeContentLength(t *testing.T) {
	base := Func(func(r *http.Request) (*http.Response, error) {
		_, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
	})
	req, _ := http.NewRequest("PUT", "http://api.test/x", onlyReader{strings.NewReader("abc")})
	req.ContentLength = 1 << 50
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
		resp, err = Chain(base, Retry(policy.Retry{MaxBufferedBody: math.MaxInt64, Backoff: constant(0)})).RoundTrip(req)
	}()
	if err == nil {
		resp.Body.Close()
		t.Fatal("got a response, want the caller's error")
	}
	if !errors.Is(err, policy.ErrInvalidRequest) {
		t.Errorf("err = %v, want one matching policy.ErrInvalidRequest", err)
	}
}
