package idempotency

import (
	"errors"
	"strconv"

	"github.com/sturdyhttp/sturdy/internal/lex"
)

// DefaultMaxKeyLength is the longest key [ParseKey] accepts when given no
// limit, and the default of [HandlerOptions.MaxKeyLength].
const DefaultMaxKeyLength = 255

// ErrInvalidKey is wrapped by every error of [ParseKey]: errors.Is(err,
// ErrInvalidKey) tells a bad key from other failures.
var ErrInvalidKey = errors.New("idempotency: invalid key")

// KeyError says why an Idempotency-Key header value was refused.
type KeyError struct {
	// Reason is a short description: "empty", "too long (300 > 255
	// bytes)", "control character at byte 3", ...
	Reason string
}

// Error returns "idempotency: invalid key: " and the reason.
func (e *KeyError) Error() string { return "idempotency: invalid key: " + e.Reason }

// Unwrap returns [ErrInvalidKey].
func (e *KeyError) Unwrap() error { return ErrInvalidKey }

// ParseKey reads an idempotency key from the value of an Idempotency-Key
// header, in either of the forms clients send:
//
//   - a Structured Field string (RFC 8941 §3.3.3), as the IETF draft
//     specifies: `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, where `\"` and
//     `\\` stand for `"` and `\`, and every other character is printable
//     ASCII (0x20 to 0x7E);
//   - a plain token, as most clients send it: one or more visible ASCII
//     characters (0x21 to 0x7E) other than `"` and `\`, such as a UUID or
//     base64 text.
//
// Spaces and tabs around the value are ignored. The key returned is the
// string's content (unescaped) or the token. It is refused, with an error
// that wraps [ErrInvalidKey], when it is empty, longer than maxLen bytes
// (maxLen ≤ 0 means [DefaultMaxKeyLength]), or holds a control character,
// a non-ASCII byte, an unknown escape, or anything else after a closing
// quote (Structured Field parameters are not accepted).
func ParseKey(v string, maxLen int) (string, error) {
	if maxLen <= 0 {
		maxLen = DefaultMaxKeyLength
	}
	v = lex.TrimOWS(v)
	if v == "" {
		return "", &KeyError{Reason: "empty"}
	}
	if v[0] != '"' {
		for i := 0; i < len(v); i++ {
			c := v[i]
			switch {
			case c < 0x20 || c == 0x7f:
				return "", &KeyError{Reason: "control character at byte " + strconv.Itoa(i)}
			case c > 0x7f:
				return "", &KeyError{Reason: "non-ASCII byte at byte " + strconv.Itoa(i)}
			case c == ' ' || c == '"' || c == '\\':
				return "", &KeyError{Reason: "character " + strconv.QuoteRune(rune(c)) + " at byte " + strconv.Itoa(i) + " outside a quoted string"}
			}
		}
		if len(v) > maxLen {
			return "", tooLong(len(v), maxLen)
		}
		return v, nil
	}
	// A Structured Field string.
	raw, end, ok := lex.ScanString(v)
	switch {
	case !ok && end == len(v):
		return "", &KeyError{Reason: "missing closing quote"}
	case !ok && v[end] == '\\':
		return "", &KeyError{Reason: "bad escape at byte " + strconv.Itoa(end)}
	case !ok && v[end] > 0x7f:
		return "", &KeyError{Reason: "non-ASCII byte at byte " + strconv.Itoa(end)}
	case !ok:
		return "", &KeyError{Reason: "control character at byte " + strconv.Itoa(end)}
	case end != len(v):
		return "", &KeyError{Reason: "text after closing quote at byte " + strconv.Itoa(end)}
	}
	key := lex.Unescape(raw)
	if key == "" {
		return "", &KeyError{Reason: "empty"}
	}
	if len(key) > maxLen {
		return "", tooLong(len(key), maxLen)
	}
	return key, nil
}

func tooLong(n, maxLen int) error {
	return &KeyError{Reason: "too long (" + strconv.Itoa(n) + " > " + strconv.Itoa(maxLen) + " bytes)"}
}
