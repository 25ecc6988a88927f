package transport

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/policy"
)

// vouched makes every host one where a POST is safe to send again: its
// requests get a key.
var vouched = idempotency.Options{Hosts: []string{"*"}}

// The protocols the loopback tests run over.
var protocols = []struct {
	name  string
	major int
}{{"HTTP/1.1", 1}, {"HTTP/2", 2}}

// loopback starts h on a real loopback server speaking HTTP/1.1, or
// HTTP/2 over TLS when major is 2, and returns its URL and a pooled
// transport that speaks the same protocol to it (trusting the server's
// certificate). Both are shut down when the test ends.
func loopback(t *testing.T, major int, h http.Handler) (string, *http.Transport) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	tr := &http.Transport{MaxIdleConnsPerHost: 10}
	if major == 2 {
		srv.EnableHTTP2 = true
		srv.StartTLS()
		pool := x509.NewCertPool()
		pool.AddCert(srv.Certificate())
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
		tr.ForceAttemptHTTP2 = true
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetHTTP2(true)
	} else {
		srv.Start()
	}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL, tr
}

func wantProto(t *testing.T, resp *http.Response, major int) {
	t.Helper()
	if resp.ProtoMajor != major {
		t.Fatalf("response over %s, want HTTP/%d", resp.Proto, major)
	}
}

// The cheaper bound context keeps errors.Is(err,
// context.DeadlineExceeded) and url.Error.Timeout() true through
// http.Client and net/http's HTTP/1 and HTTP/2 paths, for each bound, and
// the server sees the disconnect.
func TestBoundErrorsOverLoopback(t *testing.T) {
	const limit = 300 * time.Millisecond
	cases := []struct {
		name      string
		o         Options
		handler   string // hang: no headers; trickle: a JSON body that never ends; stall: one SSE event, then silence
		wantBound string
	}{
		{"Timeout, waiting for headers", Options{Timeout: limit}, "hang", boundTimeout},
		{"Timeout, reading a body that is not a stream", Options{Timeout: limit}, "trickle", boundTimeout},
		{"AttemptTimeout, waiting for headers", Options{AttemptTimeout: limit, Retry: policy.Retry{MaxAttempts: 1}}, "hang", boundAttempt},
		{"IdleTimeout, a stalled stream", Options{IdleTimeout: limit}, "stall", boundIdle},
		{"Deadline", Options{Disable: LayerTimeout | LayerIdleTimeout}, "hang", ""},
	}
	for _, p := range protocols {
		for _, tc := range cases {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				disconnected := make(chan struct{})
				u, base := loopback(t, p.major, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/warm" {
						return
					}
					defer close(disconnected)
					rc := http.NewResponseController(w)
					switch tc.handler {
					case "trickle":
						w.Header().Set("Content-Type", "application/json")
						io.WriteString(w, "[")
						for {
							rc.Flush()
							select {
							case <-r.Context().Done():
								return
							case <-time.After(10 * time.Millisecond):
							}
							io.WriteString(w, "1,")
						}
					case "stall":
						w.Header().Set("Content-Type", "text/event-stream")
						io.WriteString(w, "data: 1\n\n")
						rc.Flush()
					}
					<-r.Context().Done()
				}))
				o := tc.o
				o.Base = base
				var rt http.RoundTripper = New(o)
				if tc.wantBound == "" {
					rt = Chain(base, Deadline(limit))
				}
				c := &http.Client{Transport: rt}
				// The connection is made first: a handshake that a loaded
				// machine stretches past the limit would be cut before the
				// request reached the handler, which would then never see
				// the client go away.
				if resp, err := (&http.Client{Transport: base}).Get(u + "/warm"); err != nil {
					t.Fatal(err)
				} else {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				start := time.Now()
				resp, err := c.Get(u)
				if err == nil {
					wantProto(t, resp, p.major)
					_, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				elapsed := time.Since(start)
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("err = %v, want it to match context.DeadlineExceeded", err)
				}
				var de *DeadlineError
				if !errors.As(err, &de) || de.Bound != tc.wantBound || de.Limit != limit {
					t.Errorf("err = %v, want a *DeadlineError of %q %v", err, tc.wantBound, limit)
				}
				if tc.handler == "hang" {
					var ue *url.Error
					if !errors.As(err, &ue) || !ue.Timeout() {
						t.Errorf("err = %#v, want a *url.Error whose Timeout() is true", err)
					}
				}
				if elapsed < limit {
					t.Errorf("cut after %v, before the limit %v", elapsed, limit)
				}
				select {
				case <-disconnected:
				case <-time.After(10 * time.Second):
					t.Fatal("the server did not see the client go away")
				}
			})
		}
	}
}

// A full-duplex exchange through New over HTTP/2: the request body is an
// io.Pipe written while the response is read. Nothing is read ahead of
// the wire, so the server's echo of the first line arrives while the
// pipe is still open.
func TestNewFullDuplexHTTP2(t *testing.T) {
	u, base := loopback(t, 2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(200)
		rc := http.NewResponseController(w)
		rc.Flush()
		sc := bufio.NewScanner(r.Body)
		for sc.Scan() {
			io.WriteString(w, "echo "+sc.Text()+"\n")
			rc.Flush()
		}
	}))
	c := &http.Client{Transport: New(Options{Base: base})}
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest("POST", u, onlyReader{pr})
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	wantProto(t, resp, 2)
	lines := bufio.NewReader(resp.Body)
	for i := range 3 {
		line := "line " + strconv.Itoa(i)
		got := make(chan string, 1)
		sent := time.Now()
		go func() {
			s, _ := lines.ReadString('\n')
			got <- s
		}()
		if _, err := io.WriteString(pw, line+"\n"); err != nil {
			t.Fatal(err)
		}
		select {
		case s := <-got:
			if s != "echo "+line+"\n" {
				t.Fatalf("got %q, want the echo of %q", s, line)
			}
			t.Logf("%s echoed after %v", line, time.Since(sent))
		case <-time.After(10 * time.Second):
			t.Fatalf("no echo of %q while the body is open: the body is read ahead", line)
		}
	}
	pw.Close()
	if rest, _ := io.ReadAll(resp.Body); len(rest) != 0 {
		t.Errorf("trailing body %q, want none", rest)
	}
}

// A POST with a plain io.Reader body (no GetBody) that the server fails
// after reading 10 KiB of its 100 KiB is retried, and the retry carries
// the same bytes.
func TestNewRetriesTeedBodyByteForByte(t *testing.T) {
	payload := make([]byte, 100<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range payload {
		payload[i] = byte(rng.Uint32())
	}
	want := sha256.Sum256(payload)
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sums [][32]byte
				lens []int
				keys []string
			)
			u, base := loopback(t, p.major, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				n := len(lens)
				keys = append(keys, r.Header.Get("Idempotency-Key"))
				mu.Unlock()
				if n == 0 {
					got, _ := io.ReadFull(r.Body, make([]byte, 10<<10))
					mu.Lock()
					lens, sums = append(lens, got), append(sums, [32]byte{})
					mu.Unlock()
					w.Header().Set("Connection", "close")
					w.WriteHeader(503)
					return
				}
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				lens, sums = append(lens, len(b)), append(sums, sha256.Sum256(b))
				mu.Unlock()
				io.WriteString(w, "ok")
			}))
			c := &http.Client{Transport: New(Options{Base: base, Idempotency: vouched, Retry: policy.Retry{Backoff: constant(time.Millisecond)}})}
			req, _ := http.NewRequest("POST", u, onlyReader{bytes.NewReader(payload)})
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			wantProto(t, resp, p.major)
			if got := readAll(t, resp); got != "ok" || resp.StatusCode != 200 {
				t.Fatalf("got %d %q, want 200 ok", resp.StatusCode, got)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(lens) != 2 || lens[0] != 10<<10 || lens[1] != len(payload) {
				t.Fatalf("server read %v bytes per attempt, want [10240 %d]", lens, len(payload))
			}
			if sums[1] != want {
				t.Error("the retried body differs from the one sent")
			}
			if keys[0] == "" || keys[0] != keys[1] {
				t.Errorf("keys %q, want the same key on both attempts", keys)
			}
		})
	}
}

// A server that cuts a response body after 4,000 bytes on the first
// attempt. With ReadBody (per stack or per request), the cut is a failed
// attempt: the POST, keyed, is retried and the caller reads the whole
// body. Without it, the caller gets the cut, as before, and the key the
// operation used is in resp.Request.Header; when the operation ends in an
// error, KeyFromError gives it.
func TestNewReadBodyRetriesACutBody(t *testing.T) {
	full := strings.Repeat("x", 8000)
	tests := []struct {
		name     string
		stack    int64 // Options.ReadBody
		request  int64 // WithReadBody
		wantBody string
		wantErr  bool
		wantReqs int
	}{
		{"ReadBody on the stack", 1 << 20, 0, full, false, 2},
		{"WithReadBody on the request", 0, 1 << 20, full, false, 2},
		{"WithReadBody off on the request", 1 << 20, -1, full[:4000], true, 1},
		{"off", 0, 0, full[:4000], true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptestutil.NewRecorder(httptestutil.Script(
				httptestutil.Truncated(200, len(full), full[:4000]),
				httptestutil.Status(200, full),
			))
			u, base := loopback(t, 1, rec)
			c := &http.Client{Transport: New(Options{Base: base, Idempotency: vouched, ReadBody: tt.stack, Retry: policy.Retry{Backoff: constant(time.Millisecond)}})}
			req, _ := http.NewRequestWithContext(WithReadBody(context.Background(), tt.request), "POST", u, strings.NewReader("{}"))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != tt.wantBody || (err != nil) != tt.wantErr {
				t.Errorf("read %d bytes, %v; want %d bytes, error %v", len(b), err, len(tt.wantBody), tt.wantErr)
			}
			rec.WantCount(t, tt.wantReqs)
			sent := rec.Requests()[0].Header.Get("Idempotency-Key")
			if got := resp.Request.Header.Get("Idempotency-Key"); got == "" || got != sent {
				t.Errorf("resp.Request carries key %q, want the one sent, %q", got, sent)
			}
		})
	}
	t.Run("every attempt cut: the error carries the key", func(t *testing.T) {
		rec := httptestutil.NewRecorder(httptestutil.Truncated(200, len(full), full[:4000]).Forever())
		u, base := loopback(t, 1, rec)
		c := &http.Client{Transport: New(Options{Base: base, Idempotency: vouched, ReadBody: 1 << 20, Retry: policy.Retry{MaxAttempts: 2, Backoff: constant(time.Millisecond)}})}
		_, err := c.Post(u, "application/json", strings.NewReader("{}"))
		var be *ResponseBodyError
		if !errors.As(err, &be) || be.Read != 4000 || be.Status != 200 {
			t.Fatalf("err = %v, want a *ResponseBodyError after 4000 bytes of a 200", err)
		}
		rec.WantCount(t, 2)
		key, ok := KeyFromError(err)
		if sent := rec.Requests()[0].Header.Get("Idempotency-Key"); !ok || key != sent {
			t.Errorf("KeyFromError = %q, %v; want the key sent, %q", key, ok, sent)
		}
		// The caller retries by hand with that key.
		ctx := idempotency.WithKey(context.Background(), key)
		req, _ := http.NewRequestWithContext(ctx, "POST", u, strings.NewReader("{}"))
		c.Do(req) // cut again; only the key matters here
		if got := rec.Requests()[2].Header.Get("Idempotency-Key"); got != key {
			t.Errorf("the caller's retry carried %q, want %q", got, key)
		}
	})
}
