package transport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// chunkBody is a response body that writes itself (an io.WriterTo, as
// strings.Reader and bytes.Reader are): a chunk after each wait, then, with
// stall, nothing until its request's context ends. Read serves the same
// chunks for callers that do not use WriteTo.
type chunkBody struct {
	ctx    context.Context
	every  time.Duration
	chunks []string
	stall  bool
}

func (b *chunkBody) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for _, c := range b.chunks {
		if err := b.wait(b.every); err != nil {
			return n, err
		}
		m, err := io.WriteString(w, c)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	if b.stall {
		<-b.ctx.Done()
		return n, context.Cause(b.ctx)
	}
	return n, nil
}

func (b *chunkBody) wait(d time.Duration) error {
	if !waitCtx(b.ctx, d) {
		return context.Cause(b.ctx)
	}
	return nil
}

func (b *chunkBody) Read(p []byte) (int, error) {
	if len(b.chunks) == 0 {
		if b.stall {
			<-b.ctx.Done()
			return 0, context.Cause(b.ctx)
		}
		return 0, io.EOF
	}
	if err := b.wait(b.every); err != nil {
		return 0, err
	}
	n := copy(p, b.chunks[0])
	if n == len(b.chunks[0]) {
		b.chunks = b.chunks[1:]
	} else {
		b.chunks[0] = b.chunks[0][n:]
	}
	return n, nil
}

func (b *chunkBody) Close() error { return nil }

// slowWriter takes each write after a pause: a caller that is slow to
// consume a body, not a server that is slow to send it.
type slowWriter struct {
	pause time.Duration
	buf   bytes.Buffer
}

func (w *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(w.pause)
	return w.buf.Write(p)
}

// io.Copy of a body under New's bounds keeps the fast path of a body that
// writes itself, and the bounds hold on it as they do on Read: progress
// keeps a stream alive, a stall is cut at IdleTimeout, a body that is not
// a stream is cut at Timeout, and the time the caller's writer takes is
// not the server's.
func TestBoundBodyWriteTo(t *testing.T) {
	tests := []struct {
		name        string
		o           Options
		contentType string
		every       time.Duration
		chunks      int
		stall       bool
		pause       time.Duration // the caller's writer takes this long per write
		plainReader bool          // hide WriteTo: io.Copy goes through Read
		wantChunks  int
		wantErr     string // the *DeadlineError's Bound; "" for the whole body
		wantLimit   time.Duration
		wantAt      time.Duration
		wantSlack   time.Duration
	}{
		{
			name: "a stream, a chunk every 30s for 5 minutes: copied whole", contentType: "text/event-stream",
			every: 30 * time.Second, chunks: 10, wantChunks: 10, wantAt: 5 * time.Minute,
		},
		{
			name: "a stream that stalls after 3 chunks is cut at IdleTimeout", contentType: "text/event-stream",
			o: Options{IdleTimeout: 30 * time.Second}, every: time.Second, chunks: 3, stall: true,
			wantChunks: 3, wantErr: boundIdle, wantLimit: 30 * time.Second,
			wantAt: 33 * time.Second, wantSlack: 30 * time.Second / 8,
		},
		{
			name: "a caller that takes a minute per write is not cut by a 30s IdleTimeout", contentType: "text/event-stream",
			o: Options{IdleTimeout: 30 * time.Second}, every: time.Second, chunks: 3, pause: time.Minute,
			wantChunks: 3, wantAt: 3*time.Second + 3*time.Minute,
		},
		{
			name: "a body that is not a stream is cut at Timeout", contentType: "application/json",
			o: Options{Timeout: 10500 * time.Millisecond}, every: time.Second, chunks: 100,
			wantChunks: 10, wantErr: boundTimeout, wantLimit: 10500 * time.Millisecond, wantAt: 10500 * time.Millisecond,
		},
		{
			name: "a body without WriteTo is copied through Read, and cut the same", contentType: "text/event-stream",
			o: Options{IdleTimeout: 30 * time.Second}, every: time.Second, chunks: 3, stall: true, plainReader: true,
			wantChunks: 3, wantErr: boundIdle, wantLimit: 30 * time.Second,
			wantAt: 33 * time.Second, wantSlack: 30 * time.Second / 8,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := Func(func(r *http.Request) (*http.Response, error) {
					b := &chunkBody{ctx: r.Context(), every: tt.every, stall: tt.stall}
					for range tt.chunks {
						b.chunks = append(b.chunks, "chunk\n")
					}
					var body io.ReadCloser = b
					if tt.plainReader {
						body = struct {
							io.Reader
							io.Closer
						}{b, b}
					}
					return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {tt.contentType}}, Body: body, Request: r}, nil
				})
				tt.o.Base = base
				rt := New(tt.o)
				req, _ := http.NewRequest("GET", "http://api.test/", nil)
				start := time.Now()
				resp, err := rt.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := resp.Body.(io.WriterTo); !ok {
					t.Fatalf("body %T is not an io.WriterTo", resp.Body)
				}
				w := &slowWriter{pause: tt.pause}
				n, err := io.Copy(w, resp.Body)
				took := time.Since(start)
				resp.Body.Close()
				if got, want := strings.Count(w.buf.String(), "chunk\n"), tt.wantChunks; got != want {
					t.Errorf("copied %d chunks, want %d", got, want)
				}
				if got, want := n, int64(w.buf.Len()); got != want {
					t.Errorf("io.Copy reported %d bytes, wrote %d", got, want)
				}
				if took < tt.wantAt || took > tt.wantAt+tt.wantSlack {
					t.Errorf("ended after %v, want %v (up to %v later)", took, tt.wantAt, tt.wantSlack)
				}
				checkCut(t, err, tt.wantErr, tt.wantLimit)
				if ctx := resp.Request.Context(); ctx.Err() == nil {
					t.Errorf("the attempt's context is not done after the copy: %v", ctx.Err())
				}
			})
		})
	}
}

// A body copied with io.Copy is released at its end: nothing is left
// running, and a later Close changes nothing.
func TestBoundBodyWriteToReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ctx context.Context
		base := Func(func(r *http.Request) (*http.Response, error) {
			ctx = r.Context()
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok\n"))}, nil
		})
		rt := New(Options{Base: base, Timeout: time.Second})
		req, _ := http.NewRequest("GET", "http://api.test/", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := io.Copy(&buf, resp.Body); err != nil || buf.String() != "ok\n" {
			t.Fatalf("io.Copy: got %q, %v; want %q, nil", buf.String(), err, "ok\n")
		}
		if got, want := ctx.Err(), context.Canceled; !errors.Is(got, want) {
			t.Errorf("context after the copy: got %v, want %v (released)", got, want)
		}
		time.Sleep(time.Hour)
		if err := resp.Body.Close(); err != nil {
			t.Errorf("Close after the copy: %v", err)
		}
		if got := context.Cause(ctx); !errors.Is(got, context.Canceled) {
			t.Errorf("cause an hour later: got %v, want context.Canceled (no cut)", got)
		}
	})
}
