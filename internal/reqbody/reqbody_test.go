package reqbody

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
)

func TestInMemoryLen(t *testing.T) {
	tests := []struct {
		name   string
		body   io.Reader
		want   int64
		wantOK bool
	}{
		{"bytes.Reader", bytes.NewReader(make([]byte, 7)), 7, true},
		{"strings.Reader", strings.NewReader("hello"), 5, true},
		{"bytes.Buffer", bytes.NewBufferString("abc"), 3, true},
		{"NopCloser(bytes.Reader)", io.NopCloser(bytes.NewReader(make([]byte, 11))), 11, true},
		{"NopCloser(strings.Reader), a WriterTo", io.NopCloser(strings.NewReader("hi")), 2, true},
		{"NopCloser(bytes.Buffer)", io.NopCloser(bytes.NewBufferString("four")), 4, true},
		{"NopCloser(a reader not in memory)", io.NopCloser(io.LimitReader(strings.NewReader("x"), 1)), 0, false},
		{"NopCloser(nil)", io.NopCloser(nil), 0, false},
		{"a file", os.Stdin, 0, false},
		{"a partly read strings.Reader", func() io.Reader { r := strings.NewReader("hello"); r.Read(make([]byte, 2)); return r }(), 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := InMemoryLen(tt.body)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("inMemoryLen = %d, %v; want %d, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
