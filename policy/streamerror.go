package policy

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// DefaultStreamPreambles are the events that open a stream without
// committing it, when [Stream].Preambles is nil. They are Anthropic's
// keepalive and opening envelope, and OpenAI Responses' opening events.
var DefaultStreamPreambles = []string{
	"ping",
	"message_start",
	"response.created",
	"response.in_progress",
}

// Stream says how the events that open a streamed response are judged
// before the response is handed back (see [Stream.Judge]). The zero value
// judges with the defaults of its field.
type Stream struct {
	// Preambles names the events that commit nothing: an SSE event field,
	// or an event's top-level "type". Nil means [DefaultStreamPreambles].
	// An empty non-nil slice means none.
	Preambles []string
}

// EventKind is what one event of a stream is, as [Stream.Judge] sees it.
type EventKind uint8

// The kinds of [Stream.Judge].
const (
	// EventKeepalive commits nothing: a comment, a ping, a preamble.
	EventKeepalive EventKind = iota
	// EventContent commits the stream: it is handed back from here.
	EventContent
	// EventError is an error the server sent in place of content.
	EventError
)

// EventVerdict is the verdict of [Stream.Judge] on one event.
type EventVerdict struct {
	Kind EventKind
	// Type is the provider's error type or code ("overloaded_error",
	// "server_error", "rate_limit_exceeded"); set for EventError only.
	Type string
	// Status is the HTTP status the error stands for (see
	// [StreamErrorStatus]); set for EventError only.
	Status int
	// Final reports that trying again cannot help (a malformed request,
	// a missing key): the stream is handed back as it is.
	Final bool
}

// streamEnvelope is the part of an event's JSON that a verdict reads.
type streamEnvelope struct {
	Type     string          `json:"type"`
	Code     json.RawMessage `json:"code"`
	Error    json.RawMessage `json:"error"`
	Response *struct {
		Error *streamErrorBody `json:"error"`
	} `json:"response"`
}

type streamErrorBody struct {
	Type string          `json:"type"`
	Code json.RawMessage `json:"code"`
}

// Judge decides what one event of a stream is. name is the SSE event field,
// empty for NDJSON and for unnamed events. data is the event's data. Judge
// checks, in order:
//
//   - an event named "error", or "response.failed", is an error;
//   - an event named in Preambles is a keepalive, and any other named
//     event is content: a name says what an event is, without its data;
//   - data that is not a JSON object is content;
//   - an object with a top-level "error" member (not null) is an error,
//     and so is one whose "type" is "error" or "response.failed";
//   - an object whose "type" is in Preambles is a keepalive;
//   - anything else is content.
//
// An error's type is the first of these that [StreamErrorStatus] knows:
// error.code, error.type, a top-level code, or response.error.code.
// StreamErrorStatus judges it.
func (s Stream) Judge(name, data []byte) EventVerdict {
	isError := string(name) == "error" || string(name) == "response.failed"
	if !isError && len(name) > 0 {
		if s.preamble(name) {
			return EventVerdict{Kind: EventKeepalive}
		}
		return EventVerdict{Kind: EventContent}
	}
	d := bytes.TrimLeft(data, " \t\r\n")
	if !isError && len(d) > 0 && !bytes.Contains(d, []byte(`"error"`)) && !bytes.Contains(d, []byte(`"type"`)) {
		return EventVerdict{Kind: EventContent} // nothing to look up: no JSON decoding
	}
	if len(d) == 0 || d[0] != '{' {
		if isError {
			return errorVerdict(nil)
		}
		if len(d) == 0 {
			return EventVerdict{Kind: EventKeepalive}
		}
		return EventVerdict{Kind: EventContent}
	}
	var env streamEnvelope
	if err := json.Unmarshal(d, &env); err != nil {
		if isError {
			return errorVerdict(nil)
		}
		return EventVerdict{Kind: EventContent}
	}
	hasError := len(env.Error) > 0 && string(env.Error) != "null"
	if !isError && !hasError && env.Type != "error" && env.Type != "response.failed" {
		if env.Type != "" && s.preamble([]byte(env.Type)) {
			return EventVerdict{Kind: EventKeepalive}
		}
		return EventVerdict{Kind: EventContent}
	}
	var types []string
	if hasError {
		var eb streamErrorBody
		if json.Unmarshal(env.Error, &eb) == nil {
			types = append(types, jsonString(eb.Code), eb.Type)
		}
	}
	types = append(types, jsonString(env.Code))
	if env.Response != nil && env.Response.Error != nil {
		types = append(types, jsonString(env.Response.Error.Code), env.Response.Error.Type)
	}
	return errorVerdict(types)
}

// errorVerdict judges an error event by the first of types that
// [StreamErrorStatus] knows, or by the first non-empty one.
func errorVerdict(types []string) EventVerdict {
	v := EventVerdict{Kind: EventError}
	for _, t := range types {
		if t == "" {
			continue
		}
		if _, _, known := streamError(t); known {
			v.Type = t
			break
		}
		if v.Type == "" {
			v.Type = t
		}
	}
	v.Status, v.Final = StreamErrorStatus(v.Type)
	return v
}

// jsonString returns raw as a string when it is a JSON string, else "".
func jsonString(raw json.RawMessage) string {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

func (s Stream) preamble(name []byte) bool {
	p := s.Preambles
	if p == nil {
		p = DefaultStreamPreambles
	}
	for _, x := range p {
		if x == string(name) {
			return true
		}
	}
	return false
}

// streamErrors is the table of [StreamErrorStatus]: the error types and
// codes that Anthropic and OpenAI send inside a stream, with the status
// each one stands for when the same error comes before a stream starts.
var streamErrors = map[string]struct {
	status int
	final  bool
}{
	// Anthropic (docs.anthropic.com, "Errors").
	"invalid_request_error": {http.StatusBadRequest, true},
	"authentication_error":  {http.StatusUnauthorized, true},
	"billing_error":         {http.StatusPaymentRequired, true},
	"permission_error":      {http.StatusForbidden, true},
	"not_found_error":       {http.StatusNotFound, true},
	"request_too_large":     {http.StatusRequestEntityTooLarge, true},
	"rate_limit_error":      {http.StatusTooManyRequests, false},
	"api_error":             {http.StatusInternalServerError, false},
	"timeout_error":         {http.StatusGatewayTimeout, false},
	"overloaded_error":      {529, false},
	// OpenAI: error.type, or error.code where the type is generic
	// ("requests", "tokens").
	"server_error":            {http.StatusInternalServerError, false},
	"rate_limit_exceeded":     {http.StatusTooManyRequests, false},
	"insufficient_quota":      {http.StatusTooManyRequests, true},
	"invalid_api_key":         {http.StatusUnauthorized, true},
	"model_not_found":         {http.StatusNotFound, true},
	"context_length_exceeded": {http.StatusBadRequest, true},
	"invalid_prompt":          {http.StatusBadRequest, true},
}

// StreamErrorStatus returns the HTTP status that an error sent inside a
// stream stands for, by its type or code. It also reports whether the error
// is final, when no attempt can do better:
//
//   - Anthropic's overloaded_error is 529, and its rate_limit_error 429.
//   - api_error and OpenAI's server_error are 500.
//   - invalid_request_error, authentication and permission errors are
//     final.
//   - An unknown type stands for 500, which is retried only when the
//     request is safe to send again.
func StreamErrorStatus(typ string) (status int, final bool) {
	status, final, _ = streamError(typ)
	return status, final
}

func streamError(typ string) (status int, final, known bool) {
	if e, ok := streamErrors[typ]; ok {
		return e.status, e.final, true
	}
	return http.StatusInternalServerError, false, false
}
