package lex

import (
	"encoding/json"
	"reflect"
	"testing"
)

// sfVectors cover each class of case of the httpwg structured-field-tests
// suite for Lists and Items, written here in the suite's JSON model. want
// is "" when the field must fail to parse.
var sfVectors = []struct {
	name, typ, raw, want string
}{
	// Integers and Decimals.
	{"integer", "item", `42`, `[42, []]`},
	{"negative zero", "item", `-0`, `[0, []]`},
	{"15 digits", "item", `-999999999999999`, `[-999999999999999, []]`},
	{"16 digits", "item", `1000000000000000`, ``},
	{"decimal", "item", `-4.5`, `[-4.5, []]`},
	{"decimal 12.3 digits", "item", `123456789012.123`, `[123456789012.123, []]`},
	{"decimal 13 integer digits", "item", `1234567890123.1`, ``},
	{"decimal 4 fraction digits", "item", `1.1234`, ``},
	{"trailing point", "item", `1.`, ``},
	{"double point", "item", `1.2.3`, ``},
	{"lone minus", "item", `-`, ``},
	{"double minus", "item", `--1`, ``},
	// Strings.
	{"string", "item", `"foo"`, `["foo", []]`},
	{"string escapes", "item", `"a\"b\\c"`, `["a\"b\\c", []]`},
	{"bad escape", "item", `"a\b"`, ``},
	{"escape at end", "item", `"foo \`, ``},
	{"unterminated", "item", `"foo`, ``},
	{"tab in string", "item", "\"a\tb\"", ``},
	{"non-ASCII string", "item", `"füü"`, ``},
	{"single quotes", "item", `'foo'`, ``},
	// Tokens.
	{"token", "item", `a:b/c*d`, `[{"__type": "token", "value": "a:b/c*d"}, []]`},
	{"star token", "item", `*x`, `[{"__type": "token", "value": "*x"}, []]`},
	{"token starting with a digit is a number", "item", `1a`, ``},
	// Binary: padding is synthesized when missing, refused when misplaced.
	{"binary", "item", `:aGVsbG8=:`, `[{"__type": "binary", "value": "NBSWY3DP"}, []]`},
	{"empty binary", "item", `::`, `[{"__type": "binary", "value": ""}, []]`},
	{"binary without padding", "item", `:aGVsbG8:`, `[{"__type": "binary", "value": "NBSWY3DP"}, []]`},
	{"padding at beginning", "item", `:=aGVsbG8=:`, ``},
	{"padding in the middle", "item", `:a=GVsbG8=:`, ``},
	{"too much padding", "item", `:aGVsbG8==:`, ``},
	{"one char of a quantum", "item", `:aGVsb:`, ``},
	{"base64url", "item", `:_-Ah:`, ``},
	{"space in binary", "item", `:aGVs bG8=:`, ``},
	{"unterminated binary", "item", `:aGVsbG8=`, ``},
	// Booleans and Dates.
	{"booleans", "list", `?1, ?0`, `[[true, []], [false, []]]`},
	{"bad boolean", "item", `?2`, ``},
	{"date", "item", `@1659578233`, `[{"__type": "date", "value": 1659578233}, []]`},
	{"decimal date", "item", `@1.5`, ``},
	{"bare date marker", "item", `@`, ``},
	{"date marker in a parameter", "item", `"a";t=@`, ``},
	// Display Strings: lowercase escapes of valid UTF-8 only.
	{"display string", "item", `%"f%c3%bc%c3%bc"`, `[{"__type": "displaystring", "value": "füü"}, []]`},
	{"uppercase escape", "item", `%"f%C3%BC"`, ``},
	{"invalid 2-byte UTF-8", "item", `%"%c3%28"`, ``},
	{"invalid lead byte", "item", `%"%a0%a1"`, ``},
	{"cut sequence", "item", `%"%e2%82"`, ``},
	{"sequence cut by a plain char", "item", `%"%e2x%82%ac"`, ``},
	{"overlong encoding", "item", `%"%c0%af"`, ``},
	{"unescaped non-ASCII", "item", `%"füü"`, ``},
	{"zero-digit escape", "item", `%"%"`, ``},
	{"unquoted display string", "item", `%foo`, ``},
	// Whitespace around an Item: leading and trailing SP only.
	{"spaces around item", "item", `  1  `, `[1, []]`},
	{"trailing tab in item", "item", "1 \t ", ``},
	{"leading tab in item", "item", " \t 1", ``},
	{"empty item", "item", ``, ``},
	{"two items", "item", `1, 2`, ``},
	// Lists.
	{"empty list", "list", ``, `[]`},
	{"blank list", "list", `   `, `[]`},
	{"list", "list", "1 ,\t42", `[[1, []], [42, []]]`},
	{"trailing OWS in list", "list", "1, 2 \t", `[[1, []], [2, []]]`},
	{"leading tab in list", "list", "\t1", ``},
	{"trailing comma", "list", `1,`, ``},
	{"leading comma", "list", `,1`, ``},
	{"empty member", "list", `1,,2`, ``},
	{"no comma", "list", `foo bar`, ``},
	{"inner lists", "list", `("foo" "bar"), (), ( 1 2 )`,
		`[[[["foo", []], ["bar", []]], []], [[], []], [[[1, []], [2, []]], []]]`},
	{"inner list parameters", "list", `("foo";a=1 "bar";b);c=?0`,
		`[[[["foo", [["a", 1]]], ["bar", [["b", true]]]], [["c", false]]]]`},
	{"inner list without space", "list", `("foo""bar")`, ``},
	{"unterminated inner list", "list", `("foo"`, ``},
	// Parameters.
	{"parameters", "list", `"a";q=100;w=60, "b"; q=1`,
		`[["a", [["q", 100], ["w", 60]]], ["b", [["q", 1]]]]`},
	{"repeated key keeps its place, last value", "item", `1;a=1;b=2;a=3`, `[1, [["a", 3], ["b", 2]]]`},
	{"uppercase key", "item", `"a";Q=100`, ``},
	{"missing value", "item", `"a";q=`, ``},
	{"missing key", "item", `"a";=1`, ``},
	{"dangling semicolon", "item", `1;`, ``},
	{"non-ASCII", "list", `é`, ``},
}

func TestSFVectors(t *testing.T) {
	for _, v := range sfVectors {
		got, ok := parseForSuite(v.typ, v.raw)
		if v.want == "" {
			if ok {
				t.Errorf("%s: parse %s %q = %v, want failure", v.name, v.typ, v.raw, got)
			}
			continue
		}
		var want any
		if err := json.Unmarshal([]byte(v.want), &want); err != nil {
			t.Fatalf("%s: bad want: %v", v.name, err)
		}
		if !ok {
			t.Errorf("%s: parse %s %q failed, want %s", v.name, v.typ, v.raw, v.want)
		} else if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: parse %s %q = %v, want %v", v.name, v.typ, v.raw, got, want)
		}
	}
}

func TestParamsInt(t *testing.T) {
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
		got, ok := Params(tc.params).Int(tc.key)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Params(%q).Int(%q) = %d, %v; want %d, %v", tc.params, tc.key, got, ok, tc.want, tc.ok)
		}
	}
}

func TestScanString(t *testing.T) {
	cases := []struct {
		in      string
		raw     string
		end     int
		ok      bool
		unesc   string
		comment string
	}{
		{`"abc"`, "abc", 5, true, "abc", ""},
		{`"a\"b" rest`, `a\"b`, 6, true, `a"b`, "stops after the quote"},
		{`"a\b"`, "", 2, false, "", "bad escape at its backslash"},
		{"\"a\x01\"", "", 2, false, "", "control byte"},
		{"\"caf\xc3\xa9\"", "", 4, false, "", "non-ASCII byte"},
		{`"abc`, "", 4, false, "", "missing quote: end of input"},
		{`"abc\`, "", 4, false, "", "escape at the end"},
	}
	for _, tc := range cases {
		raw, end, ok := ScanString(tc.in)
		if raw != tc.raw || end != tc.end || ok != tc.ok {
			t.Errorf("ScanString(%q) = %q, %d, %v; want %q, %d, %v (%s)", tc.in, raw, end, ok, tc.raw, tc.end, tc.ok, tc.comment)
		}
		if ok && Unescape(raw) != tc.unesc {
			t.Errorf("Unescape(%q) = %q, want %q", raw, Unescape(raw), tc.unesc)
		}
	}
}

func TestListAllocs(t *testing.T) {
	const v = `"default";r=50;t=30, "daily";r=1000;t=86400, :aGVsbG8=:, %"f%c3%bc"`
	allocs := testing.AllocsPerRun(100, func() {
		l := NewList(v)
		for {
			m, ok := l.Next()
			if !ok {
				break
			}
			m.Params.Int("r")
		}
	})
	if allocs != 0 {
		t.Errorf("allocations per List walk = %v, want 0", allocs)
	}
}

// FuzzList checks the List parser: no panic, the same answer twice, and
// that a valid list stays valid, one member longer, when a member is
// appended.
func FuzzList(f *testing.F) {
	for _, v := range sfVectors {
		f.Add(v.raw)
	}
	count := func(s string) (int, bool) {
		l := NewList(s)
		n := 0
		for {
			m, ok := l.Next()
			if !ok {
				return n, !l.Err()
			}
			for range m.Params.All() {
			}
			for range m.Items() {
			}
			m.Item.Str()
			m.Item.Bytes()
			m.Item.Display()
			n++
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := count(s)
		n2, ok2 := count(s)
		if n != n2 || ok != ok2 {
			t.Fatalf("not deterministic: %d, %v then %d, %v", n, ok, n2, ok2)
		}
		if ok && n > 0 {
			if n3, ok3 := count(s + ", 1"); !ok3 || n3 != n+1 {
				t.Errorf("%q valid with %d members, but with \", 1\" appended: %d members, valid %v", s, n, n3, ok3)
			}
		}
	})
}
