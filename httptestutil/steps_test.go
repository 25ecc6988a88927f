package httptestutil

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// get sends a GET and returns the response with its body read.
func get(t *testing.T, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return resp, string(b)
}

func TestStepResponses(t *testing.T) {
	date := time.Date(2000, 1, 1, 0, 1, 0, 0, time.UTC)
	tests := []struct {
		name       string
		step       Step
		wantStatus int
		wantBody   string
		wantHeader map[string]string
	}{
		{"status", Status(503, "busy", "Retry-After", "2", "x-odd"), 503, "busy",
			map[string]string{"Retry-After": "2", "X-Odd": "", "Content-Type": "text/plain; charset=utf-8"}},
		{"status no body", Status(204, ""), 204, "", map[string]string{"Content-Type": ""}},
		{"bad status", Status(42, "oops"), 500, "oops", nil},
		{"json", JSON(201, map[string]int{"id": 7}), 201, `{"id":7}`, map[string]string{"Content-Type": "application/json"}},
		{"json unencodable", JSON(200, func() {}), 500, "httptestutil: JSON step: json: unsupported type: func()\n", nil},
		{"retry after seconds", RetryAfterSeconds(429, 30), 429, "Too Many Requests", map[string]string{"Retry-After": "30"}},
		{"retry after ms", RetryAfterMS(503, 1500), 503, "Service Unavailable",
			map[string]string{"Retry-After-Ms": "1500", "Retry-After": ""}},
		{"retry after date", RetryAfterDate(503, date), 503, "Service Unavailable",
			map[string]string{"Retry-After": "Sat, 01 Jan 2000 00:01:00 GMT"}},
		{"handler", Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Path", r.URL.Path)
			io.WriteString(w, "hi")
		})), 200, "hi", map[string]string{"X-Path": "/p"}},
		{"nil handler", Handler(nil), 404, "404 page not found\n", nil},
		{"delay", Delay(10*time.Millisecond, Status(202, "late")), 202, "late", nil},
		{"slow body", SlowBody(200, "abcdefg", 3, 10*time.Millisecond), 200, "abcdefg", map[string]string{"Content-Length": "7"}},
		{"rate limit headers", RateLimitHeaders(429, "slow down", Quota{Limit: 100, Remaining: 0, Reset: 2500 * time.Millisecond, Window: time.Minute},
			FamilyIETFStructured, FamilyOpenAI), 429, "slow down",
			map[string]string{"RateLimit": `"default";r=0;t=3`, "RateLimit-Policy": `"default";q=100;w=60`,
				"X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "2.5s", "X-Ratelimit-Limit": ""}},
		{"zero step", Step{}, StatusScriptExhausted, "httptestutil: script exhausted (request 0: GET /p)\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachBed(t, func() http.Handler { return tt.step }, func(t *testing.T, b bed, c *http.Client, url string) {
				resp, body := get(t, c, url+"/p")
				if resp.StatusCode != tt.wantStatus {
					t.Errorf("status = %d, want %d", resp.StatusCode, tt.wantStatus)
				}
				if body != tt.wantBody {
					t.Errorf("body = %q, want %q", body, tt.wantBody)
				}
				for k, want := range tt.wantHeader {
					if got := resp.Header.Get(k); got != want {
						t.Errorf("header %s = %q, want %q", k, got, want)
					}
				}
			})
		})
	}
}

func TestProblemStep(t *testing.T) {
	step := Problem(429, ProblemBody{
		Type:       "https://example.com/probs/rate",
		Title:      "Too many requests",
		Detail:     "slow down",
		Extensions: map[string]any{"is_retriable": true, "retry_after": 3, "title": "ignored"},
	}, "Retry-After", "3")
	forEachBed(t, func() http.Handler { return step }, func(t *testing.T, b bed, c *http.Client, url string) {
		resp, body := get(t, c, url)
		if got, want := resp.StatusCode, 429; got != want {
			t.Errorf("status = %d, want %d", got, want)
		}
		if got, want := resp.Header.Get("Content-Type"), "application/problem+json"; got != want {
			t.Errorf("Content-Type = %q, want %q", got, want)
		}
		if got, want := resp.Header.Get("Retry-After"), "3"; got != want {
			t.Errorf("Retry-After = %q, want %q", got, want)
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
		want := map[string]any{
			"type": "https://example.com/probs/rate", "title": "Too many requests", "detail": "slow down",
			"status": 429.0, "is_retriable": true, "retry_after": 3.0,
		}
		if len(got) != len(want) {
			t.Errorf("members = %v, want %v", got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("member %q = %v, want %v", k, got[k], v)
			}
		}
	})
}

func TestHangWaitsForClient(t *testing.T) {
	forEachBed(t, func() http.Handler { return Hang() }, func(t *testing.T, b bed, c *http.Client, url string) {
		timeout := 3 * time.Second
		if !b.virtual {
			timeout = 50 * time.Millisecond
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		start := time.Now()
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("Hang answered %d, want an error", resp.StatusCode)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want DeadlineExceeded", err)
		}
		if got := time.Since(start); b.virtual && got != timeout {
			t.Errorf("elapsed = %v, want %v", got, timeout)
		}
	})
}

func TestDelayElapsedAndCancel(t *testing.T) {
	var ran atomic.Int32
	next := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran.Add(1) }))
	for _, b := range beds {
		if !b.virtual {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			ran.Store(0)
			b.run(t, Delay(time.Minute, next), func(t *testing.T, c *http.Client, url string) {
				start := time.Now()
				resp, _ := get(t, c, url)
				if got, want := time.Since(start), time.Minute; got != want {
					t.Errorf("elapsed = %v, want %v", got, want)
				}
				if resp.StatusCode != 200 {
					t.Errorf("status = %d, want 200", resp.StatusCode)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
				if _, err := c.Do(req); !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("err = %v, want DeadlineExceeded", err)
				}
				time.Sleep(2 * time.Minute) // a Delay whose client left must not go on
				if got, want := ran.Load(), int32(1); got != want {
					t.Errorf("next ran %d times, want %d", got, want)
				}
			})
		})
	}
}

func TestResetSteps(t *testing.T) {
	tests := []struct {
		name     string
		step     func(inner http.Handler) Step
		wantRead bool // the server read the whole request body
		wantRan  bool // the inner handler ran
	}{
		{"reset", func(http.Handler) Step { return Reset() }, false, false},
		{"reset after read", func(http.Handler) Step { return ResetAfterRead() }, true, false},
		{"cut after", func(h http.Handler) Step { return CutAfter(h) }, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ran atomic.Int32
			var read atomic.Int64
			inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ran.Add(1)
				io.Copy(io.Discard, r.Body)
				w.WriteHeader(201)
				io.WriteString(w, "charged")
			})
			h := func() http.Handler {
				ran.Store(0)
				read.Store(0)
				step := tt.step(inner)
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					r.Body = readCloser{countReader{r.Body, &read}, r.Body}
					step.ServeHTTP(w, r)
				})
			}
			forEachBed(t, h, func(t *testing.T, b bed, c *http.Client, url string) {
				body := strings.Repeat("x", 100)
				resp, err := c.Post(url+"/charges", "text/plain", strings.NewReader(body))
				if err == nil {
					resp.Body.Close()
					t.Fatalf("got status %d, want a connection error", resp.StatusCode)
				}
				if got, want := ran.Load() == 1, tt.wantRan; got != want {
					t.Errorf("inner handler ran = %v, want %v", got, want)
				}
				if tt.wantRead {
					if got, want := read.Load(), int64(len(body)); got != want {
						t.Errorf("server read %d body bytes, want %d", got, want)
					}
				}
			})
		})
	}
}

type countReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func TestTruncatedBody(t *testing.T) {
	forEachBed(t, func() http.Handler { return Truncated(200, 100, "partial") }, func(t *testing.T, b bed, c *http.Client, url string) {
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if got, want := resp.ContentLength, int64(100); got != want {
			t.Errorf("ContentLength = %d, want %d", got, want)
		}
		got, err := io.ReadAll(resp.Body)
		if string(got) != "partial" {
			t.Errorf("body = %q, want %q", got, "partial")
		}
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("read error = %v, want io.ErrUnexpectedEOF", err)
		}
	})
}

func TestSlowBodyTiming(t *testing.T) {
	for _, b := range beds {
		if !b.virtual {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			b.run(t, SlowBody(200, "abcdefgh", 3, time.Second), func(t *testing.T, c *http.Client, url string) {
				start := time.Now()
				resp, err := c.Get(url)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				type arrival struct {
					at   time.Duration
					data string
				}
				var got []arrival
				buf := make([]byte, 16)
				for {
					n, err := resp.Body.Read(buf)
					if n > 0 {
						got = append(got, arrival{time.Since(start), string(buf[:n])})
					}
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				want := []arrival{{0, "abc"}, {time.Second, "def"}, {2 * time.Second, "gh"}}
				if len(got) != len(want) {
					t.Fatalf("arrivals = %v, want %v", got, want)
				}
				for i := range want {
					if got[i] != want[i] {
						t.Errorf("arrival %d = %v, want %v", i, got[i], want[i])
					}
				}
			})
		})
	}
}

func TestSlowBodyStopsWhenClientLeaves(t *testing.T) {
	for _, b := range beds {
		if !b.virtual {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			var finished atomic.Int64
			step := SlowBody(200, strings.Repeat("z", 1000), 1, time.Second)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				start := time.Now()
				step.ServeHTTP(w, r)
				finished.Store(int64(time.Since(start)))
			})
			b.run(t, h, func(t *testing.T, c *http.Client, url string) {
				resp, err := c.Get(url)
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(5500 * time.Millisecond)
				resp.Body.Close()
				time.Sleep(time.Hour)
				if got, want := time.Duration(finished.Load()), 5500*time.Millisecond; got != want {
					t.Errorf("handler returned after %v, want %v (when the client left)", got, want)
				}
			})
		})
	}
}
