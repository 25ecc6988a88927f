package ratelimit

import "testing"

// sfCount parses s as a List and returns how many members it has and
// whether it is valid.
func sfCount(s string) (int, bool) {
	l := newSFList(s)
	n := 0
	for {
		if _, ok := l.next(); !ok {
			return n, !l.err
		}
		n++
	}
}

func TestSFList(t *testing.T) {
	// Cases follow RFC 9651 and the httpwg structured-field-tests corpus.
	cases := []struct {
		in      string
		members int
		valid   bool
	}{
		{``, 0, true},
		{`   `, 0, true},
		{`1`, 1, true},
		{`1, 42`, 2, true},
		{`1 , 42`, 2, true},
		{"1\t,\t42", 2, true},
		{`1,42`, 2, true},
		{`-999999999999999`, 1, true},
		{`1000000000000000`, 0, false}, // 16 digits
		{`4.5`, 1, true},
		{`-4.5`, 1, true},
		{`123456789012.123`, 1, true},
		{`1234567890123.1`, 0, false},
		{`1.1234`, 0, false},
		{`1.`, 0, false},
		{`-`, 0, false},
		{`--1`, 0, false},
		{`"foo", "bar"`, 2, true},
		{`"a\"b\\c"`, 1, true},
		{`"a\b"`, 0, false},
		{`"unterminated`, 0, false},
		{"\"tab\there\"", 0, false},
		{`foo, bar*baz, *x, a:b/c`, 4, true},
		{`foo bar`, 0, false},
		{`:aGVsbG8=:`, 1, true},
		{`:aGVs bG8=:`, 0, false},
		{`:aGVsbG8=`, 0, false},
		{`?1, ?0`, 2, true},
		{`?2`, 0, false},
		{`@1659578233`, 1, true},
		{`@1.5`, 0, false},
		// Found by FuzzParseHeaders: a Date marker at the end of the
		// field read past it.
		{`@`, 0, false},
		{`"a";t=@`, 0, false},
		{`@-`, 0, false},
		{`%"f%c3%bc%c3%bc"`, 1, true},
		{`%"f%C3"`, 0, false},
		{`("foo" "bar"), ("baz"), (), ( 1 2 )`, 4, true},
		{`("foo";a=1 "bar";b);c=?0`, 1, true},
		{`("foo""bar")`, 0, false},
		{`("foo"`, 0, false},
		{`"a";q=100;w=60, "b";q=1`, 2, true},
		{`"a"; q=100`, 1, true},
		{`"a";Q=100`, 0, false},
		{`"a";q=`, 0, false},
		{`"a";=1`, 0, false},
		{`"a";q`, 1, true},
		{`1,`, 0, false},
		{`,1`, 0, false},
		{`1,,2`, 0, false},
		{`1, 2 `, 2, true},
		{` 1`, 1, true},
		{"\t1", 0, false}, // leading whitespace must be SP
		{`1;`, 0, false},
		{`é`, 0, false},
	}
	for _, tc := range cases {
		n, ok := sfCount(tc.in)
		if ok != tc.valid || (ok && n != tc.members) {
			t.Errorf("parse %q = %d members, valid %v; want %d, valid %v", tc.in, n, ok, tc.members, tc.valid)
		}
	}
}

func TestSFParam(t *testing.T) {
	cases := []struct {
		params, key string
		want        int64
		ok          bool
	}{
		{`;q=100;w=60`, "q", 100, true},
		{`;q=100;w=60`, "w", 60, true},
		{`;q=100;w=60`, "r", 0, false},
		{`;r=1;r=2`, "r", 2, true},
		{`;r=-2`, "r", 0, false},
		{`;r=2.5`, "r", 0, false},
		{`;r="2"`, "r", 0, false},
		{`;r`, "r", 0, false}, // Boolean true, not an Integer
		{`; r=7`, "r", 7, true},
	}
	for _, tc := range cases {
		got, ok := sfParamInt(tc.params, tc.key)
		if got != tc.want || ok != tc.ok {
			t.Errorf("sfParamInt(%q, %q) = %d, %v; want %d, %v", tc.params, tc.key, got, ok, tc.want, tc.ok)
		}
	}
}

func TestSFName(t *testing.T) {
	l := newSFList(`"plain", "a\"b\\c", tok, 5`)
	want := []struct {
		name string
		ok   bool
	}{{"plain", true}, {`a"b\c`, true}, {"tok", true}, {"", false}}
	for i, w := range want {
		m, ok := l.next()
		if !ok {
			t.Fatalf("member %d missing", i)
		}
		if got, ok := sfName(m.item); got != w.name || ok != w.ok {
			t.Errorf("member %d: sfName = %q, %v; want %q, %v", i, got, ok, w.name, w.ok)
		}
	}
}
