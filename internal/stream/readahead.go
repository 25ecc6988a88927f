package stream

import (
	"io"
	"net/http"
	"strconv"

	"github.com/sturdyhttp/sturdy/internal/lex"
	"github.com/sturdyhttp/sturdy/internal/timecut"
	"github.com/sturdyhttp/sturdy/policy"
)

// MaxAhead is how much of a stream is read, at most, while no content
// event has come: past it the stream is handed back as it is.
const MaxAhead = 1 << 20

// aheadChunk is the first read buffer's size: an opening envelope and a
// first event fit in it.
const aheadChunk = 4 << 10

// Read is how a read ahead to a stream's first content event ended.
type Read struct {
	// Buf is every byte read.
	Buf []byte
	// Status is, for a stream judged a failed attempt, the status it
	// stands for; 0 for a stream that commits.
	Status int
	// Why says why it failed, for the judged response's Status line.
	Why string
	// Err is the error of a Read that failed before the first event
	// (the watch's cut when it cut the read); the body is then closed.
	Err error
}

// ReadAhead reads body, whose events are framed as f, until its first
// content event as s judges it, under w (whose cut closes body). With
// judge unset, the first event of any kind commits the stream, and its
// end too.
func ReadAhead(body io.ReadCloser, f lex.EventFormat, s policy.Stream, judge bool, w *timecut.Watch) Read {
	a := Read{Buf: make([]byte, 0, aheadChunk)}
	sc := lex.EventScanner{Format: f}
	for {
		if len(a.Buf) == cap(a.Buf) {
			a.Buf = append(a.Buf, 0)[:len(a.Buf)] // grow
		}
		w.Enter()
		n, rerr := body.Read(a.Buf[len(a.Buf):cap(a.Buf)])
		w.Leave()
		a.Buf = a.Buf[:len(a.Buf)+n]
		for {
			ev, ok := sc.Next(a.Buf)
			switch {
			case !ok:
			case ev.Comment:
				continue
			case ev.Other: // not SSE after all: handed back as it is
				return a
			default:
				v := s.Judge(ev.Name, ev.Data)
				switch {
				case v.Kind == policy.EventKeepalive:
					continue
				case v.Kind == policy.EventContent || v.Final || !judge:
					return a
				}
				return a.fail(v.Status, "stream error event "+v.Type)
			}
			break
		}
		if rerr == io.EOF && judge {
			// The end of the stream: an NDJSON record at EOF needs no
			// line end; a stream that carried nothing at all is a
			// complete empty result, handed back as a success; one that
			// opened and ended before its content is a failed attempt.
			if ev, ok := sc.Finish(a.Buf); ok {
				v := s.Judge(ev.Name, ev.Data)
				switch {
				case v.Kind == policy.EventContent || v.Final:
					return a
				case v.Kind == policy.EventError:
					return a.fail(v.Status, "stream error event "+v.Type)
				}
			}
			if sc.Blank() {
				return a
			}
			return a.fail(http.StatusBadGateway, "stream ended before its first event")
		}
		switch {
		case rerr == io.EOF, len(a.Buf) >= MaxAhead:
			return a
		case rerr != nil:
			if cut := w.Release(); cut != nil {
				rerr = cut
			}
			body.Close()
			a.Err = rerr
			return a
		}
	}
}

func (a Read) fail(status int, why string) Read {
	a.Status, a.Why = status, why
	return a
}

// Watch returns a watch over a read ahead of body, with the limits l:
// its cut closes the body, which ends a Read blocked on it.
func Watch(l *timecut.Limits, body io.Closer) *timecut.Watch {
	w := &timecut.Watch{}
	w.Start(l, timecut.Now(), func(err error) {
		if err != nil {
			body.Close()
		}
	})
	w.BodyStarts(true, true)
	return w
}

// Held is a stream judged a failed attempt, kept so that it can be
// handed back as it came when no attempt follows.
type Held struct {
	orig   *http.Response
	status int // the status it was judged as
	body   *Ahead
}

// Judged returns the failed attempt that resp's opening events make: a
// copy of resp with the status they stand for, whose body gives the
// bytes read, buf, and then ends; and the stream held, for Restore to
// hand back whole. The copy's Request is resp's.
func Judged(resp *http.Response, buf []byte, status int, why string) (*http.Response, *Held) {
	h := &Held{orig: resp, status: status, body: NewAhead(buf, resp.Body, false)}
	j := *resp
	j.StatusCode = status
	j.Status = strconv.Itoa(status) + " " + why
	j.Body = h.body
	j.ContentLength = -1
	return &j, h
}

// Restore turns resp, the judged response of h or one made from it by
// layers between, back into the stream as it came: its status, and a
// body that reads every byte (the one resp has, which may be wrapped by
// layers between, now reads on past the bytes read ahead). It reports
// false, and leaves resp as it is, when resp is not h's failure or h was
// restored already.
func (h *Held) Restore(resp *http.Response) bool {
	if h == nil || h.status != resp.StatusCode || h.body.IsOpen() {
		return false
	}
	h.body.Open()
	resp.StatusCode, resp.Status = h.orig.StatusCode, h.orig.Status
	resp.ContentLength, resp.Request = h.orig.ContentLength, h.orig.Request
	return true
}
