package stream

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/internal/lex"
	"github.com/sturdyhttp/sturdy/internal/timecut"
	"github.com/sturdyhttp/sturdy/policy"
)

// ReadAhead commits a stream at its first content event, judges one that
// fails before it as the status its error event or early end stands for,
// and, not judging, commits at any first event.
func TestReadAhead(t *testing.T) {
	overloaded := `event: error` + "\n" + `data: {"type":"error","error":{"type":"overloaded_error"}}` + "\n\n"
	for _, tc := range []struct {
		name       string
		f          lex.EventFormat
		body       string
		judge      bool
		wantStatus int // 0: committed
		wantRead   int // bytes read ahead
	}{
		{"content", lex.SSE, "data: {\"x\":1}\n\nrest", true, 0, len("data: {\"x\":1}\n\nrest")},
		{"ping, then content", lex.SSE, "event: ping\ndata: {}\n\ndata: hi\n\n", true, 0, len("event: ping\ndata: {}\n\ndata: hi\n\n")},
		{"error event", lex.SSE, overloaded, true, 529, len(overloaded)},
		{"error event, not judged", lex.SSE, overloaded, false, 0, len(overloaded)},
		{"ended after a ping", lex.SSE, "event: ping\ndata: {}\n\n", true, http.StatusBadGateway, len("event: ping\ndata: {}\n\n")},
		{"empty", lex.SSE, "", true, 0, 0},
		{"NDJSON record at the end, no newline", lex.NDJSON, `{"x":1}`, true, 0, len(`{"x":1}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := io.NopCloser(strings.NewReader(tc.body))
			l := timecut.NewLimits(0, 0, "FirstEventTimeout",
				func(time.Duration) error { return errors.New("deadline") },
				func(time.Duration) error { return errors.New("idle") })
			w := Watch(&l, body)
			a := ReadAhead(body, tc.f, policy.Stream{}, tc.judge, w)
			w.Release()
			if a.Err != nil || a.Status != tc.wantStatus || len(a.Buf) != tc.wantRead {
				t.Errorf("ReadAhead = status %d, %d bytes, %v; want status %d, %d bytes, nil", a.Status, len(a.Buf), a.Err, tc.wantStatus, tc.wantRead)
			}
		})
	}
}

// A stream that stalls before its first event is cut by its watch: the
// read fails with the watch's error, and the body is closed.
func TestReadAheadStallIsCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pr, pw := io.Pipe()
		defer pw.Close()
		cut := errors.New("deadline")
		l := timecut.NewLimits(time.Second, 0, "FirstEventTimeout",
			func(time.Duration) error { return cut },
			func(time.Duration) error { return errors.New("idle") })
		go pw.Write([]byte("event: ping\ndata: {}\n\n"))
		start := time.Now()
		w := Watch(&l, pr)
		a := ReadAhead(pr, lex.SSE, policy.Stream{}, true, w)
		if a.Err != cut || time.Since(start) != time.Second {
			t.Errorf("ReadAhead = %v after %v; want the cut after 1s", a.Err, time.Since(start))
		}
	})
}

// Held gives back, in place of the judged response, the stream as it
// came: its status, and every byte, the rest of the stream included.
func TestHeldRestore(t *testing.T) {
	orig := &http.Response{StatusCode: 200, Status: "200 OK", ContentLength: -1,
		Body: io.NopCloser(strings.NewReader("data: b\n\n"))}
	j, h := Judged(orig, []byte("data: a\n\n"), 529, "stream error event overloaded_error")
	if j.StatusCode != 529 || j.Status != "529 stream error event overloaded_error" {
		t.Fatalf("judged = %d %q; want 529 with why", j.StatusCode, j.Status)
	}
	if h.Restore(&http.Response{StatusCode: 503}) {
		t.Errorf("Restore of another status: true; want false")
	}
	if !h.Restore(j) || j.StatusCode != 200 || j.Status != "200 OK" {
		t.Fatalf("restored = %d %q; want 200 OK", j.StatusCode, j.Status)
	}
	if got, _ := io.ReadAll(j.Body); string(got) != "data: a\n\ndata: b\n\n" {
		t.Errorf("body = %q; want every byte", got)
	}
	if h.Restore(j) {
		t.Errorf("second Restore: true; want false")
	}
}
