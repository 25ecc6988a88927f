package policy

import (
	"errors"
	"strings"
)

// Unprocessed is one outcome of net/http known by its error text: a row
// of the one table of such texts, which [NotProcessed] and [LocalFinal]
// read. Most rows are outcomes in which the server provably did not
// process the request; a row of Kind [TextLocalFinal] is a failure of
// the client itself that no retry can fix.
type Unprocessed struct {
	// Name says what happened, in a few stable words for logs and hooks.
	Name string
	// Proto is the protocol the outcome belongs to: "HTTP/1.1" or "HTTP/2".
	Proto string
	// Text is net/http's error text, as its Error method returns it. The
	// parts that vary are marked: a '%d' stands for a stream ID, and a '%s'
	// at its end for the text of the error it wraps.
	Text string
	// Why says what in net/http's source makes the outcome a proof.
	Why string
	// Kind says what the outcome proves; its zero value is
	// [TextNotProcessed].
	Kind TextKind
}

// TextKind says what a row of net/http's error texts proves.
type TextKind uint8

const (
	// TextNotProcessed: the server provably did not process the request,
	// and net/http itself would have replayed it ([NotProcessed]).
	TextNotProcessed TextKind = iota
	// TextLocalFinal: the client failed in a way no retry can fix, the
	// same way on every attempt ([LocalFinal]). The server may have acted.
	TextLocalFinal
)

// h2NoReplay is net/http's HTTP/2 error for a stream it would have sent
// again but could not: the request had a body and no GetBody. The %s is
// the error that ended the stream (http2shouldRetryRequest in
// net/http/h2_bundle.go, formatted with %v, so nothing can be unwrapped).
const h2NoReplay = "http2: Transport: cannot retry err [%s] after Request.Body was written; define Request.GetBody to avoid this error"

// unprocessedTable lists net/http's outcomes that prove the server did
// not process the request, and that net/http itself would have replayed,
// and (Kind [TextLocalFinal]) the client's own failures that no retry can
// fix. It is the one place where sturdy reads net/http's error text.
//
// net/http exports no type for any of them (the HTTP/2 transport is
// bundled with unexported types, and the HTTP/1 errors are unexported
// variables), so each row is matched by its fixed text. Each row is
// pinned by a test in package transport that provokes it from real
// net/http on loopback: a Go release that changes a text fails CI.
//
// Left out on purpose: an HTTP/2 stream reset with PROTOCOL_ERROR, which
// net/http replays too but which proves nothing (a proxy resets a stream
// so when its upstream's answer was malformed, after acting on it).
var unprocessedTable = [...]Unprocessed{
	{
		Name:  "graceful GOAWAY",
		Proto: "HTTP/2",
		Text:  strings.Replace(h2NoReplay, "%s", "http2: Transport received Server's graceful shutdown GOAWAY", 1),
		Why:   "the stream's ID is above the GOAWAY's last stream ID, which the server did not process (RFC 9113 section 6.8)",
	},
	{
		Name:  "REFUSED_STREAM",
		Proto: "HTTP/2",
		Text:  strings.Replace(h2NoReplay, "%s", "stream error: stream ID %d; REFUSED_STREAM; received from peer", 1),
		Why:   "the server reset the stream with REFUSED_STREAM, which says it did no processing (RFC 9113 section 8.7)",
	},
	{
		Name:  "cannot rewind body",
		Proto: "HTTP/2",
		Text:  "net/http: cannot rewind body after connection loss",
		Why: "net/http rewinds a body without GetBody only after finding no usable HTTP/2 connection, " +
			"and goes on to do so only after steps that sent nothing (a connection found unusable before its stream opened)",
	},
	{
		Name:  "idle connection broken",
		Proto: "HTTP/1.1",
		Text:  "readLoopPeekFailLocked: %s",
		Why: "net/http read an error (a reset) on an idle connection, and closed it, before it queued the request: " +
			"no byte of the request can have been written",
	},
	{
		Name:  "server closed idle connection",
		Proto: "HTTP/1.1",
		Text:  "http: server closed idle connection",
		Why: "net/http read the server's close on an idle connection, and closed it, before it queued the request: " +
			"no byte of the request can have been written",
	},
	{
		Name:  "response headers too large",
		Proto: "HTTP/1.1",
		Text:  "net/http: server response headers exceeded %d bytes; aborted",
		Why: "the response's headers are longer than the transport's MaxResponseHeaderBytes: " +
			"the server sends the same headers to every attempt, and each fails the same way",
		Kind: TextLocalFinal,
	},
}

// UnprocessedOutcomes returns a copy of the table that [NotProcessed]
// reads. Each row is an outcome of net/http that proves the server did not
// process a request.
func UnprocessedOutcomes() []Unprocessed {
	return textsOf(TextNotProcessed)
}

// LocalFinalOutcomes returns a copy of the rows that [LocalFinal] reads:
// net/http's outcomes that are failures of the client no retry can fix.
func LocalFinalOutcomes() []Unprocessed {
	return textsOf(TextLocalFinal)
}

// textsOf returns a copy of the table's rows of kind k.
func textsOf(k TextKind) []Unprocessed {
	var rows []Unprocessed
	for _, row := range unprocessedTable {
		if row.Kind == k {
			rows = append(rows, row)
		}
	}
	return rows
}

// LocalFinal reports whether err, or an error it wraps, is one of
// net/http's outcomes in [LocalFinalOutcomes], a failure of the client
// that no retry can fix, and returns that row. [DefaultClassifier] does
// not retry it.
func LocalFinal(err error) (Unprocessed, bool) {
	return findText(err, TextLocalFinal)
}

// NotProcessed reports whether err, or an error it wraps, is one of
// net/http's outcomes in [UnprocessedOutcomes], and returns that row.
//
// Such a request may be sent again whoever vouched for it, since the server
// never processed it. net/http replays it by itself when it can. It returns
// one of these errors only when it did not.
func NotProcessed(err error) (Unprocessed, bool) {
	return findText(err, TextNotProcessed)
}

// findText finds the row of kind k whose text is err's, or that of an
// error err wraps.
func findText(err error, k TextKind) (Unprocessed, bool) {
	for err != nil {
		if row, ok := matchUnprocessed(err.Error(), k); ok {
			return row, true
		}
		switch e := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range e.Unwrap() {
				if row, ok := findText(e, k); ok {
					return row, true
				}
			}
			return Unprocessed{}, false
		default:
			err = errors.Unwrap(err)
		}
	}
	return Unprocessed{}, false
}

// matchUnprocessed finds the row of kind k whose text is s, where a
// row's '%d' stands for a decimal number.
func matchUnprocessed(s string, k TextKind) (Unprocessed, bool) {
	for _, row := range unprocessedTable {
		if row.Kind == k && matchText(row.Text, s) {
			return row, true
		}
	}
	return Unprocessed{}, false
}

// matchText reports whether s is pattern with its one '%d' (if any)
// replaced by a decimal number of 1 to 10 digits, or its trailing '%s'
// by any text.
func matchText(pattern, s string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "%s"); ok {
		return strings.HasPrefix(s, prefix)
	}
	before, after, ok := strings.Cut(pattern, "%d")
	if !ok {
		return s == pattern
	}
	rest, ok := strings.CutPrefix(s, before)
	if !ok {
		return false
	}
	digits, ok := strings.CutSuffix(rest, after)
	if !ok || len(digits) == 0 || len(digits) > 10 {
		return false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return false
		}
	}
	return true
}
