package stream

import (
	"net/http"
	"strings"

	"github.com/sturdyhttp/sturdy/internal/lex"
)

// Is reports whether resp's body is a stream: read for as long as
// it makes progress rather than inside a deadline. Streams are server-sent
// events, newline-delimited JSON in its several names, JSON text
// sequences, multipart replace streams, gRPC, Connect streaming and AWS
// event streams (Bedrock's streaming responses).
func Is(resp *http.Response) bool { return isType(MediaType(resp)) }

// isType reports whether ct, a MediaType, names a stream.
func isType(ct string) bool {
	_, ok := lookup(ct)
	return ok
}

// lookup looks ct, a MediaType, up in the one list of
// stream media types: ok reports a stream, and f how its events are
// framed when its first event can be told (0 otherwise).
func lookup(ct string) (f lex.EventFormat, ok bool) {
	if ct == "" {
		return 0, false // text/plain, application/json: no compare needed
	}
	for _, s := range types {
		if len(ct) == len(s.ct) && strings.EqualFold(ct, s.ct) {
			return s.f, true
		}
	}
	for _, p := range prefixes {
		if len(ct) > len(p) && strings.EqualFold(ct[:len(p)], p) {
			return 0, true
		}
	}
	return 0, false
}

// MediaType returns resp's media type (its Content-Type without
// parameters), or "" when it is too short to name a stream: text/plain
// and application/json cost a header lookup and a few compares.
func MediaType(resp *http.Response) string {
	v := resp.Header["Content-Type"]
	if len(v) == 0 {
		return ""
	}
	ct := v[0]
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	const shortest = len("application/grpc") // the shortest stream type
	if len(ct) < shortest {
		return "" // no trimming needed
	}
	if ct = strings.TrimSpace(ct); len(ct) < shortest {
		return ""
	}
	return ct
}

// types are the media types of streams, with how the events of
// those whose first event transport.FirstEvent can tell are framed.
var types = [...]struct {
	ct string
	f  lex.EventFormat
}{
	{"text/event-stream", lex.SSE},
	{"application/x-ndjson", lex.NDJSON},
	{"application/ndjson", lex.NDJSON},
	{"application/jsonl", lex.NDJSON},
	{"application/x-jsonl", lex.NDJSON},
	{"application/jsonlines", lex.NDJSON},
	{"application/x-jsonlines", lex.NDJSON},
	{"application/json-seq", 0},
	{"application/stream+json", 0},
	{"application/x-json-stream", 0},
	{"multipart/x-mixed-replace", 0},
	{"application/grpc", 0},
	{"application/grpc-web", 0},
	{"application/vnd.amazon.eventstream", 0},
}

// prefixes begin the media types of more streams, whose first event
// is not told.
var prefixes = [...]string{
	"application/grpc+",    // application/grpc+proto, +json
	"application/grpc-web", // grpc-web+proto, grpc-web-text, grpc-web-text+proto
	"application/connect+", // Connect's streaming protocol
}

// Format returns how resp frames its events when it is a stream whose
// first event can be told: server-sent events or NDJSON (JSON Lines
// included); 0 for any other response.
func Format(resp *http.Response) lex.EventFormat {
	f, _ := lookup(MediaType(resp))
	return f
}
