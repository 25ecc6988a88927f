package idempotency

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/internal/lex"
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
		if !strings.HasPrefix(lex.TrimOWS(v), `"`) { // accepted as a plain token
			q, err := ParseKey(`"`+k1+`"`, maxLen)
			if err != nil || q != k1 {
				t.Fatalf(`ParseKey("\"%s\"") = %q, %v; want %q, nil`, k1, q, err, k1)
			}
		}
	})
}

// FuzzParseDeadline checks the properties of ParseDeadline on any value:
// it does not panic; what it accepts is 1 to 12 ASCII digits (white
// space around them aside) and parses to a whole, non-negative number of
// milliseconds that prints back to the same digits.
func FuzzParseDeadline(f *testing.F) {
	for _, s := range []string{"1500", "0", " 250\t", "000042", "999999999999", "1000000000000", "-5", "+5", "1.5", "2S", "", "１２"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := ParseDeadline([]string{v})
		if !ok {
			if d != 0 {
				t.Fatalf("ParseDeadline(%q) = %v, false, want 0", v, d)
			}
			return
		}
		digits := strings.Trim(v, " \t")
		if d < 0 || d%time.Millisecond != 0 || len(digits) == 0 || len(digits) > 12 || strings.Trim(digits, "0123456789") != "" {
			t.Fatalf("ParseDeadline(%q) = %v, true, want only 1-12 digits accepted, as whole milliseconds", v, d)
		}
		if got, want := strconv.FormatInt(d.Milliseconds(), 10), strings.TrimLeft(digits, "0"); got != want && !(want == "" && got == "0") {
			t.Fatalf("ParseDeadline(%q) = %v, want %s ms", v, d, want)
		}
	})
}
