package httptestutil

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

func TestHandlerTransportStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "first")
			w.(http.Flusher).Flush()
			time.Sleep(time.Second)
			io.WriteString(w, "second")
		})
		c := &http.Client{Transport: NewHandlerTransport(h)}
		start := time.Now()
		resp, err := c.Get("http://api.test/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if got := time.Since(start); got != 0 {
			t.Errorf("RoundTrip returned after %v, want 0 (headers were flushed)", got)
		}
		if got, want := resp.ContentLength, int64(-1); got != want {
			t.Errorf("ContentLength = %d, want %d (streamed)", got, want)
		}
		buf := make([]byte, 64)
		n, _ := resp.Body.Read(buf)
		if got, want := string(buf[:n]), "first"; got != want {
			t.Errorf("first read = %q, want %q", got, want)
		}
		n, _ = resp.Body.Read(buf)
		if got, want := string(buf[:n]), "second"; got != want {
			t.Errorf("second read = %q, want %q", got, want)
		}
		if got, want := time.Since(start), time.Second; got != want {
			t.Errorf("second chunk after %v, want %v", got, want)
		}
		if _, err := resp.Body.Read(buf); err != io.EOF {
			t.Errorf("last read error = %v, want io.EOF", err)
		}
	})
}

func TestHandlerTransportResponseShape(t *testing.T) {
	big := strings.Repeat("b", 3000)
	tests := []struct {
		name       string
		method     string
		handler    http.HandlerFunc
		wantStatus string
		wantCL     int64
		wantType   string
		wantBody   string
		wantErr    error // from the handler's Write, reported in the body
	}{
		{"small body gets a length", "GET", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<html>hi") },
			"200 OK", 8, "text/html; charset=utf-8", "<html>hi", nil},
		{"big body is streamed", "GET", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big) },
			"200 OK", -1, "text/plain; charset=utf-8", big, nil},
		{"no write", "GET", func(w http.ResponseWriter, r *http.Request) {}, "200 OK", 0, "", "", nil},
		{"unknown status", "GET", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(599) },
			"599 status code 599", 0, "", "", nil},
		{"head has no body but the length of one", "HEAD", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hidden") },
			"200 OK", 6, "", "", nil},
		{"no content refuses a body", "GET", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(204)
			_, err := io.WriteString(w, "x")
			w.Header().Set("X-Err", err.Error()) // too late to be sent
		}, "204 No Content", 0, "", "", nil},
		{"declared length is enforced", "GET", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "2")
			if _, err := io.WriteString(w, "abc"); errors.Is(err, http.ErrContentLength) {
				io.WriteString(w, "ok")
			}
		}, "200 OK", 2, "text/plain; charset=utf-8", "ok", nil},
		{"informational status is skipped", "GET", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(103)
			w.WriteHeader(202)
		}, "202 Accepted", 0, "", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := &http.Client{Transport: NewHandlerTransport(tt.handler)}
				req, _ := http.NewRequest(tt.method, "http://api.test/", nil)
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				if resp.Status != tt.wantStatus {
					t.Errorf("Status = %q, want %q", resp.Status, tt.wantStatus)
				}
				if resp.ContentLength != tt.wantCL {
					t.Errorf("ContentLength = %d, want %d", resp.ContentLength, tt.wantCL)
				}
				if got := resp.Header.Get("Content-Type"); got != tt.wantType {
					t.Errorf("Content-Type = %q, want %q", got, tt.wantType)
				}
				if string(b) != tt.wantBody {
					t.Errorf("body = %.40q (%d bytes), want %.40q (%d bytes)", b, len(b), tt.wantBody, len(tt.wantBody))
				}
				if resp.Header.Get("Date") == "" {
					t.Errorf("no Date header, want one")
				}
				if resp.Header.Get("X-Err") != "" {
					t.Errorf("a header set after the commit was sent")
				}
			})
		})
	}
}

func TestHandlerTransportBigBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		body := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB, beyond the pipe buffer
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) })
		resp, err := (&http.Client{Transport: NewHandlerTransport(h)}).Get("http://api.test/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if err != nil || !bytes.Equal(got, body) {
			t.Errorf("read %d bytes, err %v; want %d bytes, nil", len(got), err, len(body))
		}
	})
}

func TestHandlerTransportCancelDuringBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		handlerSaw := make(chan error, 1)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "partial")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			handlerSaw <- r.Context().Err()
		})
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test/", nil)
		resp, err := (&http.Client{Transport: NewHandlerTransport(h)}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		time.AfterFunc(time.Second, cancel)
		start := time.Now()
		b, err := io.ReadAll(resp.Body)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("read error = %v, want context.Canceled", err)
		}
		if got := time.Since(start); got != time.Second {
			t.Errorf("read failed after %v, want 1s", got)
		}
		if string(b) != "partial" {
			t.Errorf("read %q before the cancel, want %q", b, "partial")
		}
		if err := <-handlerSaw; !errors.Is(err, context.Canceled) {
			t.Errorf("handler saw %v, want context.Canceled", err)
		}
	})
}

func TestHandlerTransportEarlyCloseStopsHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var writes atomic.Int64
		done := make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer close(done)
			chunk := make([]byte, 4096)
			for {
				if _, err := w.Write(chunk); err != nil {
					return // the client went away
				}
				writes.Add(1)
			}
		})
		resp, err := (&http.Client{Transport: NewHandlerTransport(h)}).Get("http://api.test/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Read(make([]byte, 10))
		resp.Body.Close()
		<-done
		// 2 KiB buffered before the commit, then the pipe holds 64 KiB.
		if got, max := writes.Load(), int64(pipeBuffer/4096+2); got > max {
			t.Errorf("handler wrote %d chunks into a closed body, want at most %d", got, max)
		}
	})
}

func TestHandlerTransportAbort(t *testing.T) {
	tests := []struct {
		name      string
		handler   http.HandlerFunc
		wantRTErr string // substring of the RoundTrip error; "" for a response
		wantBody  string // substring of the body read error
	}{
		{"reset before headers", Reset().h.(http.HandlerFunc), "handler reset the connection", ""},
		{"panic before headers", func(w http.ResponseWriter, r *http.Request) { panic("kaboom") }, "handler panicked: kaboom", ""},
		{"invalid status", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(42) }, "invalid WriteHeader code 42", ""},
		{"panic after headers", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "x")
			w.(http.Flusher).Flush()
			panic("late")
		}, "", "handler panicked: late"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				resp, err := (&http.Client{Transport: NewHandlerTransport(tt.handler)}).Get("http://api.test/")
				if tt.wantRTErr != "" {
					if err == nil {
						resp.Body.Close()
						t.Fatalf("got a response, want an error containing %q", tt.wantRTErr)
					}
					if !strings.Contains(err.Error(), tt.wantRTErr) || !errors.Is(err, syscall.ECONNRESET) {
						t.Errorf("err = %v, want one containing %q and wrapping ECONNRESET", err, tt.wantRTErr)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				_, err = io.ReadAll(resp.Body)
				if err == nil || !strings.Contains(err.Error(), tt.wantBody) || !errors.Is(err, syscall.ECONNRESET) {
					t.Errorf("read error = %v, want one containing %q and wrapping ECONNRESET", err, tt.wantBody)
				}
			})
		})
	}
}

// trackBody is a request body that reports when it is closed.
type trackBody struct {
	io.Reader
	closed atomic.Bool
}

func (b *trackBody) Close() error { b.closed.Store(true); return nil }

func TestHandlerTransportRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got *http.Request
		var gotBody []byte
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got = r
			gotBody, _ = io.ReadAll(r.Body)
		})
		body := &trackBody{Reader: strings.NewReader("payload")}
		req, _ := http.NewRequest("POST", "http://user@api.test:8080/a/b?q=1", body)
		req.Header.Set("X-Trace", "t1")
		resp, err := (&http.Client{Transport: NewHandlerTransport(h)}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		synctest.Wait()
		if got.RequestURI != "/a/b?q=1" || got.URL.Path != "/a/b" || got.URL.Host != "" {
			t.Errorf("server saw RequestURI %q URL %q, want /a/b?q=1 with no host", got.RequestURI, got.URL)
		}
		if got.Host != "api.test:8080" {
			t.Errorf("Host = %q, want api.test:8080", got.Host)
		}
		if got.Header.Get("X-Trace") != "t1" || string(gotBody) != "payload" {
			t.Errorf("server saw X-Trace %q body %q, want t1, payload", got.Header.Get("X-Trace"), gotBody)
		}
		if got.Context().Err() == nil {
			t.Errorf("server request context still live after the handler returned, want it ended")
		}
		if !body.closed.Load() {
			t.Errorf("request body not closed, want closed")
		}
		if req.Header.Get("X-Trace") != "t1" || len(req.Header) != 1 {
			t.Errorf("caller's request header changed to %v", req.Header)
		}
	})
}

func TestHandlerTransportCanceledBeforeSend(t *testing.T) {
	var ran atomic.Bool
	tr := NewHandlerTransport(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran.Store(true) }))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	body := &trackBody{Reader: strings.NewReader("x")}
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://api.test/", body)
	if _, err := tr.RoundTrip(req); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if ran.Load() {
		t.Errorf("handler ran for a canceled request")
	}
	if !body.closed.Load() {
		t.Errorf("request body not closed, want closed")
	}
}

// TestHandlerTransportBodyLength checks that the handler sees a request
// body's length as a server reads it off the wire: a client body of
// unknown length (ContentLength 0 with a Body) is sent chunked, so the
// server sees -1, not 0 with bytes after it.
func TestHandlerTransportBodyLength(t *testing.T) {
	for _, tt := range []struct {
		name   string
		body   func() io.Reader
		wantCL int64
		want   string
	}{
		{"unknown length", func() io.Reader { return io.MultiReader(strings.NewReader("payload")) }, -1, "payload"},
		{"known length", func() io.Reader { return strings.NewReader("payload") }, 7, "payload"},
		{"no body", func() io.Reader { return nil }, 0, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var gotCL int64
				var gotBody []byte
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					gotCL = r.ContentLength
					gotBody, _ = io.ReadAll(r.Body)
				})
				req, _ := http.NewRequest("POST", "http://api.test/", tt.body())
				resp, err := (&http.Client{Transport: NewHandlerTransport(h)}).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				synctest.Wait()
				if gotCL != tt.wantCL || string(gotBody) != tt.want {
					t.Errorf("server saw ContentLength %d body %q, want %d %q", gotCL, gotBody, tt.wantCL, tt.want)
				}
			})
		})
	}
}
