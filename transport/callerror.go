package transport

import (
	"bytes"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/sturdyhttp/sturdy/policy"
)

// A request that cannot be sent as written is the caller's error, and
// must reach neither the server nor the host's accounting (breaker,
// budget, quota). net/http finds a ContentLength that does not match the
// body, or a body whose reader fails, only while it sends, and reports
// them with errors of no type ("http: ContentLength=10 with Body length
// 3", the reader's own error, or that error in a *net.OpError with Op
// "readfrom"). checkBody finds them first where it can, and makes the
// error a *policy.BodyError everywhere else.

// checkBody returns r ready to be sent, or the caller's error without
// sending anything: a positive ContentLength with no body, or an
// in-memory body (a *bytes.Reader, *strings.Reader or *bytes.Buffer, as
// http.NewRequest and Retry's own replay buffer make) whose length differs
// from ContentLength. Any other body is wrapped so that its reader's
// errors and a length that turns out wrong arrive as a *policy.BodyError.
// own says that r is a copy made by this package, whose Body may be
// replaced; otherwise r is copied. A request whose body needs no wrapper
// is returned as it is.
func checkBody(r *http.Request, own bool) (*http.Request, error) {
	if _, ok := r.Body.(*checkedBody); ok {
		return r, nil // checked already, by a layer above
	}
	if r.Body == nil || r.Body == http.NoBody {
		if r.ContentLength > 0 {
			return nil, &policy.BodyError{ContentLength: r.ContentLength}
		}
		return r, nil
	}
	if n, ok := inMemoryLen(r.Body); ok {
		if r.ContentLength > 0 && n != r.ContentLength {
			return nil, &policy.BodyError{ContentLength: r.ContentLength, Read: n}
		}
		return r, nil // it cannot fail, and net/http sends it with its headers in one write
	}
	if own {
		r.Body = &checkedBody{body: r.Body, length: r.ContentLength}
		return r, nil
	}
	c := &checkedRequest{req: *r}
	c.body = checkedBody{body: r.Body, length: r.ContentLength}
	c.req.Body = &c.body
	return &c.req, nil
}

// checkCaller is checkBody for the layers that count an outcome against
// its host (Breaker, RateLimitTracker, Throttle), and for Hedge's
// copies: a request that cannot be sent as written fails here, its body
// closed, and one whose body may still turn out wrong is sent with that
// body checked.
func checkCaller(req *http.Request, own bool) (*http.Request, error) {
	r, err := checkBody(req, own)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	return r, nil
}

var (
	nopCloserType         = reflect.TypeOf(io.NopCloser(nil))
	nopCloserWriterToType = reflect.TypeOf(io.NopCloser(struct {
		io.Reader
		io.WriterTo
	}{}))
)

// nopCloserReader returns the reader that body, an io.NopCloser, wraps,
// as net/http finds it: io.NopCloser's types are a struct of one field,
// that reader.
func nopCloserReader(body io.Reader) io.Reader {
	v := reflect.ValueOf(body)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct || v.NumField() != 1 {
		return nil
	}
	r, _ := v.Field(0).Interface().(io.Reader)
	return r
}

// inMemoryLen returns the unread length of a body that is an in-memory
// reader, alone or in io.NopCloser (as net/http recognises them).
func inMemoryLen(body io.Reader) (int64, bool) {
	switch t := reflect.TypeOf(body); t {
	case nopCloserType, nopCloserWriterToType:
		body = nopCloserReader(body)
	}
	switch r := body.(type) {
	case *bytes.Reader:
		return int64(r.Len()), true
	case *strings.Reader:
		return int64(r.Len()), true
	case *bytes.Buffer:
		return int64(r.Len()), true
	}
	return 0, false
}

// checkedBody is an attempt's request body that reports as a
// [*policy.BodyError] what net/http would report with errors of no type:
// a reader that fails, and a body longer or shorter than the request's
// ContentLength.
type checkedBody struct {
	body   io.ReadCloser
	length int64 // the declared ContentLength; 0 or less: not checked
	read   int64
	spare  [1]byte // where the byte past the declared end is read
}

func (b *checkedBody) Read(p []byte) (int, error) {
	if b.length > 0 {
		// Never hand net/http a byte past ContentLength: its HTTP/2
		// transport reports a body that gives more than declared with an
		// error of its own ("http2: request body larger than specified
		// content length") in place of the one returned with those
		// bytes. Past the declared end, one byte is read to learn whether
		// the body ends there.
		if left := b.length - b.read; left <= 0 {
			p = b.spare[:]
		} else if int64(len(p)) > left {
			p = p[:left]
		}
	}
	n, err := b.body.Read(p)
	b.read += int64(n)
	switch {
	case b.length > 0 && b.read > b.length:
		return 0, &policy.BodyError{ContentLength: b.length, Read: b.read}
	case err == io.EOF:
		if b.length > 0 && b.read < b.length {
			return n, &policy.BodyError{ContentLength: b.length, Read: b.read}
		}
		return n, io.EOF
	case err != nil:
		length := b.length
		if length <= 0 {
			length = -1
		}
		return n, &policy.BodyError{ContentLength: length, Read: b.read, Err: err}
	}
	return n, nil
}

func (b *checkedBody) Close() error { return b.body.Close() }

// checkedRequest holds a request copy and its checked body in one
// allocation.
type checkedRequest struct {
	req  http.Request
	body checkedBody
}
