package idempotency

import (
	"errors"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	long := strings.Repeat("k", DefaultMaxKeyLength)
	tests := []struct {
		in     string
		maxLen int
		want   string
		ok     bool
	}{
		{"8e03978e-40d5-43e8-bc93-6894a57f9324", 0, "8e03978e-40d5-43e8-bc93-6894a57f9324", true},
		{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, 0, "8e03978e-40d5-43e8-bc93-6894a57f9324", true},
		{"  abc\t", 0, "abc", true},
		{`  "abc"  `, 0, "abc", true},
		{"dGVzdA+/=", 0, "dGVzdA+/=", true}, // base64
		{"order:42;v=1", 0, "order:42;v=1", true},
		{`"a b"`, 0, "a b", true},
		{`"a\"b"`, 0, `a"b`, true},
		{`"a\\b"`, 0, `a\b`, true},
		{`"\\"`, 0, `\`, true},
		{long, 0, long, true},
		{`"` + long + `"`, 0, long, true},
		{"abcd", 4, "abcd", true},
		{`"ab\"c"`, 4, `ab"c`, true}, // the limit counts the key, not the escapes

		{"", 0, "", false},
		{"   ", 0, "", false},
		{`""`, 0, "", false},
		{long + "k", 0, "", false},
		{`"` + long + `k"`, 0, "", false},
		{"abcde", 4, "", false},
		{"a b", 0, "", false},
		{"a\x00b", 0, "", false},
		{"a\nb", 0, "", false},
		{"a\x7fb", 0, "", false},
		{`"a` + "\x01" + `b"`, 0, "", false},
		{`"a` + "\t" + `b"`, 0, "", false},
		{"caf\xc3\xa9", 0, "", false},
		{`"caf` + "\xc3\xa9" + `"`, 0, "", false},
		{`a"b`, 0, "", false},
		{`a\b`, 0, "", false},
		{`"abc`, 0, "", false},
		{`"abc\"`, 0, "", false},
		{`"a\b"`, 0, "", false},
		{`"abc";p=1`, 0, "", false},
		{`"abc" x`, 0, "", false},
		{`"a"b"`, 0, "", false},
	}
	for _, tt := range tests {
		got, err := ParseKey(tt.in, tt.maxLen)
		if (err == nil) != tt.ok {
			t.Errorf("ParseKey(%q, %d) error = %v, want ok %v", tt.in, tt.maxLen, err, tt.ok)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				t.Errorf("ParseKey(%q) error %v does not wrap ErrInvalidKey", tt.in, err)
			}
			var ke *KeyError
			if !errors.As(err, &ke) || ke.Reason == "" {
				t.Errorf("ParseKey(%q) error %v is not a *KeyError with a reason", tt.in, err)
			}
			if !strings.HasPrefix(err.Error(), "idempotency: invalid key: ") {
				t.Errorf("ParseKey(%q) error = %q, want prefix %q", tt.in, err, "idempotency: invalid key: ")
			}
			continue
		}
		if got != tt.want {
			t.Errorf("ParseKey(%q, %d) = %q, want %q", tt.in, tt.maxLen, got, tt.want)
		}
	}
}

func TestParseKeyNoCopy(t *testing.T) {
	// Keys without escapes are substrings of the header value: no
	// allocation on the common path.
	for _, in := range []string{"8e03978e-40d5-43e8-bc93-6894a57f9324", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`} {
		if got := testing.AllocsPerRun(100, func() { ParseKey(in, 0) }); got != 0 {
			t.Errorf("ParseKey(%q) allocs = %v, want 0", in, got)
		}
	}
}
