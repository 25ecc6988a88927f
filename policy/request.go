package policy

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/sturdyhttp/sturdy/internal/lex"
)

// ErrInvalidRequest is matched by every error that says a request cannot be
// sent as written: the errors of [CheckRequest], and a [*BodyError]. Such a
// request fails however often it is tried. It says nothing about the host
// it was meant for.
var ErrInvalidRequest = errors.New("policy: invalid request")

// CheckRequest reports why net/http would refuse to send r, or nil. It
// returns an error matching [ErrInvalidRequest] for:
//
//   - a missing URL or host, or a scheme other than http and https;
//   - a method, header or trailer field name that is not a token;
//   - a header or trailer value with control characters;
//   - a positive ContentLength with no body.
//
// Such a request fails every time it is tried. It is never retried, and a
// circuit breaker does not count it against the host (see [IsCallerError]).
// A body that holds more or fewer bytes than ContentLength, or whose reader
// fails, is only found out while it is sent: see [BodyError].
func CheckRequest(r *http.Request) error {
	switch {
	case r.URL == nil:
		return invalid("no URL")
	case r.URL.Scheme != "http" && r.URL.Scheme != "https":
		return invalid("unsupported scheme " + strconv.Quote(r.URL.Scheme))
	case r.URL.Host == "": // net/http dials the URL's host, whatever r.Host says
		return invalid("no host")
	case r.Method != "" && !lex.IsToken(r.Method):
		return invalid("method " + strconv.Quote(r.Method) + " is not a token")
	case r.ContentLength > 0 && (r.Body == nil || r.Body == http.NoBody):
		return invalid("ContentLength " + strconv.FormatInt(r.ContentLength, 10) + " with no body")
	}
	if err := checkFields("header", r.Header); err != nil {
		return err
	}
	return checkFields("trailer", r.Trailer)
}

// checkFields reports a field of h (r.Header or r.Trailer, which
// net/http validates alike) that net/http would refuse to send.
func checkFields(kind string, h http.Header) error {
	for name, values := range h {
		if !lex.IsToken(name) {
			return invalid(kind + " field name " + strconv.Quote(name) + " is not a token")
		}
		for _, v := range values {
			if !validFieldValue(v) {
				return invalid(kind + " " + strconv.Quote(name) + " has control characters")
			}
		}
	}
	return nil
}

// IsCallerError reports whether err, the outcome of sending req, is the
// caller's own error rather than the host's. It is when req cannot be sent
// as written ([CheckRequest]), or when err matches [ErrInvalidRequest], as
// a [*BodyError] does. Such an outcome is returned at once and never
// retried. It never counts against the host, in a circuit breaker or a
// retry budget.
func IsCallerError(req *http.Request, err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrInvalidRequest) {
		return true
	}
	return req != nil && CheckRequest(req) != nil
}

// BodyError says that a request body could not be sent as written. Its
// reader failed, or it held more or fewer bytes than the request's
// ContentLength. It matches [ErrInvalidRequest]. Package transport wraps
// each attempt's body so that both cases arrive as a *BodyError.
type BodyError struct {
	ContentLength int64 // the length the request declared; -1 when unknown
	Read          int64 // the bytes the body gave before the error
	Err           error // the reader's error; nil when the length is wrong
}

// Error says what was wrong with the body: its reader's error, or its
// length against ContentLength.
func (e *BodyError) Error() string {
	if e.Err != nil {
		return "policy: invalid request: reading the body: " + e.Err.Error()
	}
	return "policy: invalid request: ContentLength " + strconv.FormatInt(e.ContentLength, 10) +
		" but the body holds " + e.held()
}

func (e *BodyError) held() string {
	if e.Read > e.ContentLength {
		return "more"
	}
	return strconv.FormatInt(e.Read, 10) + " bytes"
}

// Is reports whether target is [ErrInvalidRequest].
func (e *BodyError) Is(target error) bool { return target == ErrInvalidRequest }

// Unwrap returns the reader's error, if any.
func (e *BodyError) Unwrap() error { return e.Err }

func invalid(why string) error {
	return &invalidRequestError{why}
}

type invalidRequestError struct{ why string }

func (e *invalidRequestError) Error() string { return "policy: invalid request: " + e.why }
func (e *invalidRequestError) Is(target error) bool {
	return target == ErrInvalidRequest
}

// validFieldValue reports whether v has no control characters but space
// and tab, as net/http requires of header values.
func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
