package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
)

// ProblemMediaType is the media type of RFC 9457 problem details in JSON.
const ProblemMediaType = "application/problem+json"

// Errors of [ParseProblem], for errors.Is.
var (
	// ErrNotProblem: the content type is not application/problem+json.
	ErrNotProblem = errors.New("policy: content type is not " + ProblemMediaType)
	// ErrProblemBody: the body is not a JSON object.
	ErrProblemBody = errors.New("policy: problem body is not a JSON object")
)

// retriableMembers are the members read into [Problem.Retriable], in the
// order they are tried: RFC 9457 leaves the name to each API, and these
// are the spellings seen in real ones.
var retriableMembers = [...]string{"is_retriable", "is_retryable", "retriable", "retryable"}

// Problem is an RFC 9457 problem details object: a machine-readable
// description of an error, sent as application/problem+json.
//
// As the RFC asks, a member whose value has the wrong type is ignored, as
// if it were absent.
type Problem struct {
	// Type is a URI reference that identifies the problem type.
	// "about:blank" when the body has no string "type" (RFC 9457 §3.1.1).
	Type string
	// Title is a short summary of the problem type; "" when absent.
	Title string
	// Detail explains this occurrence of the problem; "" when absent.
	Detail string
	// Instance is a URI reference that identifies this occurrence; ""
	// when absent.
	Instance string
	// Status is the HTTP status code the server generated for this
	// occurrence: an integer in 100..599, or 0 when absent or not one. It
	// is advisory: the response's own status code is the one to act on.
	Status int
	// Retriable is the server's word on whether the request may succeed if
	// sent again. It is the first boolean among the members "is_retriable",
	// "is_retryable", "retriable" and "retryable", in that order. Nil when
	// none of them is a boolean.
	Retriable *bool
	// Extensions holds every other member, decoded as encoding/json decodes
	// into an any. Numbers are float64 and objects map[string]any; a number
	// beyond float64's range is nil. The five standard members and the four
	// retriable spellings are never in it, whatever their type. Nil when
	// there are no other members.
	Extensions map[string]any
}

// IsProblem reports whether contentType is application/problem+json. The
// media type is compared case-insensitively, and surrounding spaces are
// ignored. Parameters are ignored too: RFC 9457 defines none, and a charset
// other than UTF-8 is not decoded.
func IsProblem(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.Trim(mt, " \t"), ProblemMediaType)
}

// ParseProblem parses an RFC 9457 problem details body. contentType is the
// response's Content-Type. body is the body, or as much of it as the caller
// read; a truncated body is not valid JSON and fails.
//
// It fails with an error matching [ErrNotProblem] when contentType is not
// application/problem+json (see [IsProblem]). It fails with one matching
// [ErrProblemBody] when the body is not a JSON object: invalid JSON, null,
// an array, a string. Members of the wrong type are not errors: they are
// ignored, as the RFC asks. Of duplicate members the last wins.
func ParseProblem(contentType string, body []byte) (*Problem, error) {
	if !IsProblem(contentType) {
		return nil, fmt.Errorf("%w (got %q)", ErrNotProblem, contentType)
	}
	if !startsObject(body) {
		return nil, ErrProblemBody
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		// The body is valid JSON and an object (Unmarshal checks the
		// syntax first), so a type error can only be a number out of
		// float64's range: it decodes as nil, like any wrong-typed value.
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) || m == nil {
			return nil, fmt.Errorf("%w: %w", ErrProblemBody, err)
		}
	}
	p := &Problem{Type: "about:blank"}
	if s, ok := m["type"].(string); ok {
		p.Type = s
	}
	p.Title, _ = m["title"].(string)
	p.Detail, _ = m["detail"].(string)
	p.Instance, _ = m["instance"].(string)
	if f, ok := m["status"].(float64); ok && f >= 100 && f <= 599 && f == math.Trunc(f) {
		p.Status = int(f)
	}
	for _, k := range retriableMembers {
		if b, ok := m[k].(bool); ok && p.Retriable == nil {
			p.Retriable = &b
		}
		delete(m, k)
	}
	for _, k := range [...]string{"type", "title", "detail", "instance", "status"} {
		delete(m, k)
	}
	if len(m) > 0 {
		p.Extensions = m
	}
	return p, nil
}

// startsObject reports whether the first non-space byte of b opens a JSON
// object.
func startsObject(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '{':
			return true
		}
		return false
	}
	return false
}
