package stream

import (
	"io"
	"strings"
	"testing"
)

// TestAhead: the bytes read ahead come first; the rest only once the
// body is open.
func TestAhead(t *testing.T) {
	tests := []struct {
		open bool
		want string
	}{
		{true, "data: a\n\ndata: b\n\n"},
		{false, "data: a\n\n"},
	}
	for _, tt := range tests {
		b := NewAhead([]byte("data: a\n\n"), io.NopCloser(strings.NewReader("data: b\n\n")), tt.open)
		got, err := io.ReadAll(b)
		if err != nil || string(got) != tt.want {
			t.Errorf("open %v: %q, %v; want %q", tt.open, got, err, tt.want)
		}
		if !tt.open {
			b.Open()
			rest, _ := io.ReadAll(b)
			if string(rest) != "data: b\n\n" || !b.IsOpen() {
				t.Errorf("opened: %q, want the rest of the stream", rest)
			}
		}
	}
}
