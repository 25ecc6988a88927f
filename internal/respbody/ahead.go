package respbody

import (
	"bytes"
	"io"
	"net/http"

	"github.com/sturdyhttp/sturdy/internal/timecut"
	"github.com/sturdyhttp/sturdy/policy"
)

// DrainLimit is how much of a failed attempt's body is read before it is
// closed, so that the connection goes back to the pool: a few KiB of JSON
// or HTML error page always fit, and so do 64 KiB error bodies. A longer
// body is closed unread, which costs a new connection.
const DrainLimit = 256 << 10

// Drain reads what is left of a body, up to DrainLimit, and closes it, so
// that its connection can be reused.
func Drain(body io.ReadCloser) {
	if body == nil {
		return
	}
	io.CopyN(io.Discard, body, DrainLimit)
	body.Close()
}

// ReadProblem reads up to limit bytes of an RFC 9457 problem body and
// parses them. The body is put back so the caller reads it whole; with
// idleCut, it is read, here and after, with that stall cut.
func ReadProblem(resp *http.Response, limit int64, idleCut *timecut.Watch) *policy.Problem {
	if limit < 0 || resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	ct := resp.Header.Get("Content-Type")
	if !policy.IsProblem(ct) {
		return nil
	}
	// Preallocate what will be read, but no more than the default limit:
	// a huge limit (or a huge Content-Length under it) must not be
	// allocated up front.
	size := min(limit, policy.DefaultMaxProblemBody)
	if resp.ContentLength >= 0 && resp.ContentLength < size {
		size = resp.ContentLength
	}
	var buf bytes.Buffer
	buf.Grow(int(size) + bytes.MinRead)
	body := WatchIdle(resp.Body, idleCut)
	_, rerr := buf.ReadFrom(io.LimitReader(body, limit))
	data := buf.Bytes()
	resp.Body = &Prefixed{Reader: io.MultiReader(bytes.NewReader(data), body), body: body}
	if rerr != nil {
		return nil
	}
	p, err := policy.ParseProblem(ct, data)
	if err != nil {
		return nil
	}
	return p
}

// Prefixed gives back a body whose first bytes were read already.
type Prefixed struct {
	io.Reader
	body io.ReadCloser
}

// Close closes the body.
func (b *Prefixed) Close() error { return b.body.Close() }

// ReadInAttempt reads resp's body (under its bound, b) up to limit bytes
// before resp is handed back, so that a body cut or stalled half way is
// a failed attempt that Retry may try again: its error is fail's, given
// the status, the bytes read and why. A body longer than limit is
// handed back as it is: what was read, then the rest as it streams.
func ReadInAttempt(resp *http.Response, b *Body, limit int64, fail func(status int, read int64, err error) error) (*http.Response, error) {
	var buf bytes.Buffer
	if resp.ContentLength > 0 && resp.ContentLength <= limit {
		// The declared length is the server's word, and may be wrong: no
		// more than the default replay limit is allocated before bytes
		// arrive.
		buf.Grow(int(min(resp.ContentLength, policy.DefaultMaxBufferedBody)) + 1)
	}
	n := limit + 1 // one more, to learn whether the body is longer
	if n < 0 {
		n = limit
	}
	_, err := buf.ReadFrom(io.LimitReader(b, n))
	if err != nil {
		b.Close()
		return nil, fail(resp.StatusCode, int64(buf.Len()), err)
	}
	if int64(buf.Len()) > limit {
		resp.Body = &Prefixed{Reader: io.MultiReader(bytes.NewReader(buf.Bytes()), b), body: b}
		return resp, nil
	}
	b.Close()
	resp.Body = io.NopCloser(bytes.NewReader(buf.Bytes()))
	resp.ContentLength = int64(buf.Len())
	return resp, nil
}
