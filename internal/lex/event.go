package lex

// EventFormat is how a stream frames its events.
type EventFormat uint8

// The formats an [EventScanner] reads.
const (
	// SSE is server-sent events (text/event-stream): "field: value" lines,
	// an event ended by a blank line, comments starting with a colon.
	SSE EventFormat = iota + 1
	// NDJSON is newline-delimited JSON and JSON Lines: one event a line.
	NDJSON
)

// Event is one event of a stream, as an [EventScanner] finds it.
type Event struct {
	// Comment is set for an SSE comment line (": keepalive"), which
	// carries no event; Name and Data are then empty.
	Comment bool
	// Other is set for a line that is no SSE field (event, data, id,
	// retry) and no comment: a stream labelled SSE that may not be SSE at
	// all. Name and Data are then empty.
	Other bool
	// Name is the SSE event field ("message_start", "error"); empty
	// when the event has none, and always for NDJSON. It aliases the
	// scanned bytes, as Data does.
	Name []byte
	// Data is the event's data: its SSE data lines joined by newlines,
	// or an NDJSON line without its line end. It aliases the scanned
	// bytes or the scanner's scratch: it is valid until the next call.
	Data []byte
}

// EventScanner finds the events of a server-sent event stream or of an
// NDJSON stream in bytes that arrive a piece at a time. The caller keeps
// every byte read so far in one slice and calls Next with it after each
// read; the scanner remembers where it stopped, so each byte is looked
// at once. The zero value reads nothing: set Format first.
type EventScanner struct {
	Format EventFormat

	off     int    // where the next line starts in the caller's bytes
	name    []byte // the event field of the SSE event being read (aliases the caller's bytes)
	data    []byte // the data of the SSE event being read, when it spans lines
	first   []byte // its data when it is one line (aliases the caller's bytes)
	lines   int    // data lines of the event being read
	crAtEnd bool   // the last line ended with CR at the end of the bytes: skip an LF that follows
	begun   bool   // the start of an SSE stream has been looked at for a byte-order mark
	text    bool   // a line that is not blank has been scanned
}

// bom is the UTF-8 byte-order mark, which an SSE stream may start with.
const bom = "\xef\xbb\xbf"

// Next returns the next complete event in buf[:len(buf)], which must
// begin with the bytes of every earlier call. It reports false when buf
// holds no further complete event yet. An SSE event with no data line is
// not an event (the SSE rules dispatch nothing for it); nor is an empty
// NDJSON line.
func (s *EventScanner) Next(buf []byte) (Event, bool) {
	if !s.begun && s.Format == SSE {
		// The SSE rules strip one byte-order mark at the stream's start.
		n := min(len(buf), len(bom))
		if string(buf[:n]) == bom[:n] && n < len(bom) {
			return Event{}, false // maybe a mark: wait for its rest
		}
		s.begun = true
		if n == len(bom) && string(buf[:n]) == bom {
			s.off = len(bom)
		}
	}
	for {
		if s.crAtEnd && s.off < len(buf) {
			s.crAtEnd = false
			if buf[s.off] == '\n' {
				s.off++
			}
		}
		line, rest, ok := cutLine(buf, s.off)
		if !ok {
			return Event{}, false
		}
		if rest == len(buf) && buf[rest-1] == '\r' {
			s.crAtEnd = true
		}
		s.off = rest
		if ev, ok := s.line(line); ok {
			return ev, true
		}
	}
}

// Finish returns the event that the end of the stream completes, once
// Next has returned every complete event of buf, the stream's every
// byte. An NDJSON stream's last line needs no line end (JSON Lines
// allows it to lack one); an SSE event without its blank line is
// incomplete, and dispatched by nothing (the SSE rules discard it).
func (s *EventScanner) Finish(buf []byte) (Event, bool) {
	if s.off > len(buf) {
		return Event{}, false
	}
	rest := buf[s.off:]
	s.off = len(buf)
	if s.Format == NDJSON {
		if l := trimSpaceBytes(rest); len(l) > 0 {
			s.text = true
			return Event{Data: l}, true
		}
		return Event{}, false
	}
	if len(rest) > 0 {
		s.text = true
	}
	return Event{}, false
}

// Blank reports whether every line scanned so far was blank: after
// [EventScanner.Finish], that the stream carried nothing at all, neither
// an event nor a comment nor a part of one.
func (s *EventScanner) Blank() bool { return !s.text }

// Buffered returns how many bytes of the caller's slice have been
// scanned into complete lines.
func (s *EventScanner) Buffered() int { return s.off }

// line takes one line without its end, and returns an event when the
// line completes one.
func (s *EventScanner) line(l []byte) (Event, bool) {
	if s.Format == NDJSON {
		l = trimSpaceBytes(l)
		if len(l) == 0 {
			return Event{}, false
		}
		s.text = true
		return Event{Data: l}, true
	}
	if len(l) == 0 { // a blank line ends the event
		ev := Event{Name: s.name}
		n := s.lines
		switch n {
		case 0:
		case 1:
			ev.Data = s.first
		default:
			ev.Data = s.data
		}
		s.name, s.first, s.lines = nil, nil, 0
		s.data = s.data[:0]
		return ev, n > 0
	}
	s.text = true
	if l[0] == ':' {
		return Event{Comment: true}, true
	}
	field, value := l, []byte(nil)
	for i, c := range l {
		if c == ':' {
			field, value = l[:i], l[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
			break
		}
	}
	switch string(field) {
	case "event":
		s.name = value
	case "id", "retry":
	case "data":
		switch s.lines {
		case 0:
			s.first = value
		case 1:
			s.data = append(append(append(s.data[:0], s.first...), '\n'), value...)
		default:
			s.data = append(append(s.data, '\n'), value...)
		}
		s.lines++
	default:
		return Event{Other: true}, true
	}
	return Event{}, false
}

// cutLine returns the line that starts at off in buf, without its end
// (LF, CRLF or a lone CR), and where the next one starts; ok is false
// when the line has not ended yet.
func cutLine(buf []byte, off int) (line []byte, next int, ok bool) {
	for i := off; i < len(buf); i++ {
		switch buf[i] {
		case '\n':
			return buf[off:i], i + 1, true
		case '\r':
			if i+1 < len(buf) && buf[i+1] == '\n' {
				return buf[off:i], i + 2, true
			}
			return buf[off:i], i + 1, true
		}
	}
	return nil, off, false
}

func trimSpaceBytes(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}
