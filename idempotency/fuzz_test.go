package idempotency

import (
	"strings"
	"testing"
)

// FuzzKeyReader checks the properties of ParseKey on any input: it does
// not panic; it is deterministic; a key it accepts is non-empty, within
// the limit and free of control characters and non-ASCII bytes; and a key
// accepted as a plain token parses to itself when sent quoted.
func FuzzKeyReader(f *testing.F) {
	for _, s := range []string{
		"8e03978e-40d5-43e8-bc93-6894a57f9324",
		`"8e03978e-40d5-43e8-bc93-6894a57f9324"`,
		`"a\"b\\c"`,
		"dGVzdA+/=",
		`"abc";p=1`,
		"a\x00b",
		`"caf` + "\xc3\xa9" + `"`,
		"",
	} {
		f.Add(s, 0)
		f.Add(s, 4)
	}
	f.Fuzz(func(t *testing.T, v string, maxLen int) {
		maxLen %= 2 * DefaultMaxKeyLength
		limit := maxLen
		if limit <= 0 {
			limit = DefaultMaxKeyLength
		}
		k1, err1 := ParseKey(v, maxLen)
		k2, err2 := ParseKey(v, maxLen)
		if k1 != k2 || (err1 == nil) != (err2 == nil) {
			t.Fatalf("ParseKey(%q) not deterministic: (%q, %v) then (%q, %v)", v, k1, err1, k2, err2)
		}
		if err1 != nil {
			if k1 != "" {
				t.Fatalf("ParseKey(%q) = %q with error %v, want empty key", v, k1, err1)
			}
			return
		}
		if k1 == "" || len(k1) > limit {
			t.Fatalf("ParseKey(%q, %d) = %q: length %d, want 1..%d", v, maxLen, k1, len(k1), limit)
		}
		for i := 0; i < len(k1); i++ {
			if c := k1[i]; c < 0x20 || c >= 0x7f {
				t.Fatalf("ParseKey(%q) = %q holds byte %#x at %d", v, k1, c, i)
			}
		}
		if !strings.HasPrefix(trimOWS(v), `"`) { // accepted as a plain token
			q, err := ParseKey(`"`+k1+`"`, maxLen)
			if err != nil || q != k1 {
				t.Fatalf(`ParseKey("\"%s\"") = %q, %v; want %q, nil`, k1, q, err, k1)
			}
		}
	})
}
