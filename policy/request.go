package policy

import (
	"errors"
	"net/http"
	"strconv"
)

// ErrInvalidRequest is matched by the errors of [CheckRequest].
var ErrInvalidRequest = errors.New("policy: invalid request")

// CheckRequest reports why net/http would refuse to send r, or nil: a
// missing URL or host, a scheme other than http and https, a method or a
// header field name that is not a token, or a header value with control
// characters. Such a request fails every time it is tried, so
// [DefaultClassifier] never retries it, and a circuit breaker should not
// count it against the host. net/http reports these cases with errors of
// no particular type; checking the request is more reliable than
// matching their text.
func CheckRequest(r *http.Request) error {
	switch {
	case r.URL == nil:
		return invalid("no URL")
	case r.URL.Scheme != "http" && r.URL.Scheme != "https":
		return invalid("unsupported scheme " + strconv.Quote(r.URL.Scheme))
	case r.URL.Host == "" && r.Host == "":
		return invalid("no host")
	case r.Method != "" && !isToken(r.Method):
		return invalid("method " + strconv.Quote(r.Method) + " is not a token")
	}
	for name, values := range r.Header {
		if !isToken(name) {
			return invalid("header field name " + strconv.Quote(name) + " is not a token")
		}
		for _, v := range values {
			if !validFieldValue(v) {
				return invalid("header " + strconv.Quote(name) + " has control characters")
			}
		}
	}
	return nil
}

func invalid(why string) error {
	return &invalidRequestError{why}
}

type invalidRequestError struct{ why string }

func (e *invalidRequestError) Error() string { return "policy: invalid request: " + e.why }
func (e *invalidRequestError) Is(target error) bool {
	return target == ErrInvalidRequest
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '!', c == '#', c == '$', c == '%', c == '&', c == '\'', c == '*',
			c == '+', c == '-', c == '.', c == '^', c == '_', c == '`', c == '|', c == '~':
		default:
			return false
		}
	}
	return true
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
