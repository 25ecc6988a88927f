package lex

import (
	"fmt"
	"testing"
)

// scanAll feeds in to a scanner in pieces of size chunk, as reads would
// deliver them, and returns the events found, one string each.
func scanAll(f EventFormat, in string, chunk int) []string {
	s := EventScanner{Format: f}
	var got []string
	var buf []byte
	for i := 0; i < len(in); i += chunk {
		buf = append(buf, in[i:min(i+chunk, len(in))]...)
		for {
			ev, ok := s.Next(buf)
			if !ok {
				break
			}
			if ev.Comment {
				got = append(got, "comment")
				continue
			}
			if ev.Other {
				got = append(got, "other")
				continue
			}
			got = append(got, fmt.Sprintf("%s|%s", ev.Name, ev.Data))
		}
	}
	return got
}

func TestEventScanner(t *testing.T) {
	tests := []struct {
		name string
		f    EventFormat
		in   string
		want []string
	}{
		{"one named event", SSE, "event: ping\ndata: {}\n\n", []string{"ping|{}"}},
		{"an unnamed event", SSE, "data: [DONE]\n\n", []string{"|[DONE]"}},
		{"a comment is a keepalive", SSE, ": keepalive\n\n", []string{"comment"}},
		{"no space after the colon", SSE, "event:error\ndata:{\"a\":1}\n\n", []string{"error|{\"a\":1}"}},
		{"data lines joined by newlines", SSE, "data: a\ndata: b\ndata: c\n\n", []string{"|a\nb\nc"}},
		{"CRLF line ends", SSE, "event: x\r\ndata: 1\r\n\r\n", []string{"x|1"}},
		{"lone CR line ends", SSE, "event: x\rdata: 1\r\r", []string{"x|1"}},
		{"an event without data is not dispatched", SSE, "event: x\n\ndata: 2\n\n", []string{"|2"}},
		{"id and retry fields are skipped", SSE, "id: 7\nretry: 10\ndata: 3\n\n", []string{"|3"}},
		{"a line that is no field", SSE, "chunk\ndata: 1\n\n", []string{"other", "|1"}},
		{"an unfinished event is not returned", SSE, "event: a\ndata: 1\n", nil},
		{"two events", SSE, "event: a\ndata: 1\n\nevent: b\ndata: 2\n\n", []string{"a|1", "b|2"}},
		{"NDJSON lines", NDJSON, "{\"a\":1}\n\n  {\"b\":2}\r\n", []string{"|{\"a\":1}", "|{\"b\":2}"}},
		{"NDJSON without a final newline", NDJSON, "{\"a\":1}\n{\"b\"", []string{"|{\"a\":1}"}},
	}
	for _, tt := range tests {
		for _, chunk := range []int{1, 2, 3, 7, 1 << 10} {
			got := scanAll(tt.f, tt.in, chunk)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("%s, read %d bytes at a time: got %q, want %q", tt.name, chunk, got, tt.want)
			}
		}
	}
}

func FuzzEventScanner(f *testing.F) {
	f.Add("event: a\ndata: 1\n\n: c\r\ndata: x\rdata: y\r\r\n", 3)
	f.Fuzz(func(t *testing.T, in string, chunk int) {
		if chunk < 1 || chunk > 64 {
			chunk = 1
		}
		whole := scanAll(SSE, in, len(in)+1)
		if got := scanAll(SSE, in, chunk); fmt.Sprint(got) != fmt.Sprint(whole) {
			// A lone CR at a piece's end may be a CRLF's first half: the
			// scanner waits for the next byte, so pieces never change events.
			t.Errorf("in pieces of %d: %q; whole: %q", chunk, got, whole)
		}
	})
}

// At the end of a stream, an NDJSON line without its line end is a
// complete record; an SSE event without its blank line is not. Blank
// tells a stream that carried nothing from one that carried something.
// An SSE stream may start with one byte-order mark.
func TestEventScannerFinish(t *testing.T) {
	tests := []struct {
		name      string
		f         EventFormat
		in        string
		want      []string // events from Next, then from Finish
		wantBlank bool
	}{
		{"NDJSON, a last line without its newline", NDJSON, `{"a":1}` + "\n" + `{"b":2}`, []string{`|{"a":1}`, `|{"b":2}`}, false},
		{"NDJSON, one line without its newline", NDJSON, `{"a":1}`, []string{`|{"a":1}`}, false},
		{"NDJSON, a last line and blanks", NDJSON, "{\"a\":1} \t", []string{`|{"a":1}`}, false},
		{"NDJSON, a last line after CR", NDJSON, "{\"a\":1}\r", []string{`|{"a":1}`}, false},
		{"NDJSON, empty", NDJSON, "", nil, true},
		{"NDJSON, blank lines", NDJSON, "\n \r\n\t\n", nil, true},
		{"SSE, an event without its blank line", SSE, "data: 1\n", nil, false},
		{"SSE, a field without its line end", SSE, "data: 1", nil, false},
		{"SSE, empty", SSE, "", nil, true},
		{"SSE, blank lines", SSE, "\n\r\n", nil, true},
		{"SSE, a comment", SSE, ": hi\n\n", []string{"comment"}, false},
		{"SSE, a byte-order mark", SSE, "\ufeffevent: a\ndata: 1\n\n", []string{"a|1"}, false},
		{"SSE, a byte-order mark alone", SSE, "\ufeff", nil, true},
		{"SSE, part of a byte-order mark", SSE, "\xef\xbb", nil, false},
		{"SSE, two byte-order marks: the second is no field", SSE, "\ufeff\ufeffdata: 1\n\n", []string{"other"}, false},
		{"NDJSON keeps a byte-order mark", NDJSON, "\ufeff{}\n", []string{"|\ufeff{}"}, false},
	}
	for _, tt := range tests {
		for _, chunk := range []int{1, 2, 3, 1 << 10} {
			s := EventScanner{Format: tt.f}
			var got []string
			var buf []byte
			add := func(ev Event) {
				switch {
				case ev.Comment:
					got = append(got, "comment")
				case ev.Other:
					got = append(got, "other")
				default:
					got = append(got, fmt.Sprintf("%s|%s", ev.Name, ev.Data))
				}
			}
			for i := 0; i < len(tt.in); i += chunk {
				buf = append(buf, tt.in[i:min(i+chunk, len(tt.in))]...)
				for {
					ev, ok := s.Next(buf)
					if !ok {
						break
					}
					add(ev)
				}
			}
			if ev, ok := s.Finish(buf); ok {
				add(ev)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) || s.Blank() != tt.wantBlank {
				t.Errorf("%s, read %d bytes at a time: got %q, blank %v; want %q, blank %v", tt.name, chunk, got, s.Blank(), tt.want, tt.wantBlank)
			}
		}
	}
}
