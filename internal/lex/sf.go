package lex

import (
	"encoding/base64"
	"iter"
	"strings"
	"unicode/utf8"
)

// This file parses Structured Field Lists and Items (RFC 9651, which
// obsoletes RFC 8941). It validates the whole grammar, because a field
// that fails to parse must be ignored as a whole, and it allocates
// nothing: items point into the field's text, and values that need
// decoding (escaped Strings, Binary, Display Strings) are decoded only
// when asked for.

// Kind is the type of a Structured Field bare item.
type Kind uint8

// The kinds of bare item (RFC 9651 §3.3).
const (
	Integer Kind = iota + 1
	Decimal
	String
	Token
	Binary
	Boolean
	Date
	DisplayString
)

// Item is a bare item.
type Item struct {
	// Kind is the item's type.
	Kind Kind
	// Raw is the item's text: for a String or a Display String, the text
	// between the quotes with its escapes still in place; for Binary, the
	// base64 between the colons; for a Token, the token.
	Raw string
	// Int is the value of an Integer or a Date, a Decimal in thousandths,
	// and 1 or 0 for a Boolean.
	Int int64
}

// Str returns the value of a String (unescaped) or a Token, and false for
// other kinds. It allocates only when the String has escapes.
func (it Item) Str() (string, bool) {
	switch it.Kind {
	case String:
		return Unescape(it.Raw), true
	case Token:
		return it.Raw, true
	}
	return "", false
}

// Bytes returns the content of a Binary item. It allocates.
func (it Item) Bytes() []byte {
	if it.Kind != Binary {
		return nil
	}
	s := it.Raw
	if n := len(s) % 4; n != 0 {
		s += "==="[:4-n]
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil // not reached: the parser checked the form
	}
	return b
}

// Display returns the text of a Display String, percent-decoded. It
// allocates.
func (it Item) Display() string {
	if it.Kind != DisplayString {
		return ""
	}
	var b strings.Builder
	for i := 0; i < len(it.Raw); i++ {
		if c := it.Raw[i]; c == '%' && i+2 < len(it.Raw) {
			b.WriteByte(unhex(it.Raw[i+1])<<4 | unhex(it.Raw[i+2]))
			i += 2
			continue
		}
		b.WriteByte(it.Raw[i])
	}
	return b.String()
}

// Float returns the value of a Decimal or an Integer.
func (it Item) Float() float64 {
	if it.Kind == Decimal {
		return float64(it.Int) / 1000
	}
	return float64(it.Int)
}

// Unescape returns the value of a String item's raw text: `\"` and `\\`
// stand for `"` and `\`. It allocates only when there is an escape.
func Unescape(raw string) string {
	if strings.IndexByte(raw, '\\') < 0 {
		return raw
	}
	var b strings.Builder
	b.Grow(len(raw))
	for i := 0; i < len(raw); i++ {
		if raw[i] == '\\' && i+1 < len(raw) {
			i++
		}
		b.WriteByte(raw[i])
	}
	return b.String()
}

// Params is the text of an item's parameters (";a=1;b"), already
// validated by the parser that returned it.
type Params string

// Get returns the value of parameter key; when the key repeats, the last
// value wins, as RFC 9651 says. A key without a value is the Boolean true.
func (p Params) Get(key string) (Item, bool) {
	var (
		found Item
		ok    bool
	)
	for k, v := range p.All() {
		if k == key {
			found, ok = v, true
		}
	}
	return found, ok
}

// Int returns parameter key as a non-negative Integer. A missing
// parameter, another type or a negative value gives false.
func (p Params) Int(key string) (int64, bool) {
	v, ok := p.Get(key)
	if !ok || v.Kind != Integer || v.Int < 0 {
		return 0, false
	}
	return v.Int, true
}

// All yields the parameters in order, repeated keys included.
func (p Params) All() iter.Seq2[string, Item] {
	return func(yield func(string, Item) bool) {
		s := scanner{s: string(p)}
		for s.i < len(s.s) && s.s[s.i] == ';' {
			s.i++
			s.skipSP()
			k, ok := s.key()
			if !ok {
				return
			}
			v := Item{Kind: Boolean, Int: 1}
			if s.i < len(s.s) && s.s[s.i] == '=' {
				s.i++
				if v, ok = s.bareItem(); !ok {
					return
				}
			}
			if !yield(k, v) {
				return
			}
		}
	}
}

// Member is one member of a List: an Item with its parameters, or an
// inner list.
type Member struct {
	// Item is the member's item; unset for an inner list.
	Item Item
	// Inner reports whether the member is an inner list.
	Inner bool
	// Params are the member's parameters (the inner list's, for an inner
	// list).
	Params Params
	// inner is the inner list's text between its parentheses.
	inner string
}

// Items yields the items of an inner list with their parameters.
func (m Member) Items() iter.Seq2[Item, Params] {
	return func(yield func(Item, Params) bool) {
		if !m.Inner {
			return
		}
		s := scanner{s: m.inner}
		for {
			s.skipSP()
			if s.i >= len(s.s) {
				return
			}
			it, ok := s.bareItem()
			if !ok {
				return
			}
			start := s.i
			if !s.params() {
				return
			}
			if !yield(it, Params(s.s[start:s.i])) {
				return
			}
		}
	}
}

// List iterates over the members of a Structured Field List. Call Next
// until it returns false, then check Err: when it is true, the field is
// malformed and every member seen must be ignored. The zero List is an
// empty list.
type List struct {
	s       scanner
	err     bool
	started bool
}

// NewList returns a List over the field value s (several field lines
// joined with ", ", as RFC 9110 combines them).
func NewList(s string) List { return List{s: scanner{s: s}} }

// Err reports whether the list was found malformed.
func (l *List) Err() bool { return l.err }

// Next returns the next member of the list, or false at the end of the
// list or at the first syntax error (then Err is true).
func (l *List) Next() (Member, bool) {
	if l.err {
		return Member{}, false
	}
	s := &l.s
	if !l.started {
		l.started = true
		s.skipSP()
		if s.i == len(s.s) {
			return Member{}, false // an empty list
		}
	} else {
		s.skipOWS()
		if s.i == len(s.s) {
			return Member{}, false
		}
		if s.s[s.i] != ',' {
			l.err = true
			return Member{}, false
		}
		s.i++
		s.skipOWS()
		if s.i == len(s.s) { // trailing comma
			l.err = true
			return Member{}, false
		}
	}
	m, ok := s.member()
	if !ok {
		l.err = true
		return Member{}, false
	}
	return m, true
}

// Valid walks the rest of the list and reports whether the whole field
// parses.
func (l *List) Valid() bool {
	for {
		if _, ok := l.Next(); !ok {
			return !l.err
		}
	}
}

// ParseItem parses the field value s as a Structured Field Item: a bare
// item with parameters, with optional spaces before and after (RFC 9651
// §4.2).
func ParseItem(s string) (Item, Params, bool) {
	sc := scanner{s: s}
	sc.skipSP()
	it, ok := sc.bareItem()
	if !ok {
		return Item{}, "", false
	}
	start := sc.i
	if !sc.params() {
		return Item{}, "", false
	}
	p := Params(sc.s[start:sc.i])
	sc.skipSP()
	if sc.i != len(sc.s) {
		return Item{}, "", false
	}
	return it, p, true
}

// ScanString reads the Structured Field String at the start of s (its
// first byte is '"'). It returns the text between the quotes, escapes in
// place, and the index just past the closing quote. When s does not start
// with a valid String, ok is false and end is the index of the first byte
// that is wrong (len(s) when the closing quote is missing).
func ScanString(s string) (raw string, end int, ok bool) {
	sc := scanner{s: s}
	raw, ok = sc.str()
	return raw, sc.i, ok
}

// scanner is a position in a field value.
type scanner struct {
	s string
	i int
}

func (s *scanner) skipSP() {
	for s.i < len(s.s) && s.s[s.i] == ' ' {
		s.i++
	}
}

func (s *scanner) skipOWS() {
	for s.i < len(s.s) && (s.s[s.i] == ' ' || s.s[s.i] == '\t') {
		s.i++
	}
}

func (s *scanner) member() (Member, bool) {
	var m Member
	if s.s[s.i] == '(' {
		start := s.i + 1
		if !s.innerList() {
			return m, false
		}
		m.Inner, m.inner = true, s.s[start:s.i-1]
	} else {
		it, ok := s.bareItem()
		if !ok {
			return m, false
		}
		m.Item = it
	}
	start := s.i
	if !s.params() {
		return m, false
	}
	m.Params = Params(s.s[start:s.i])
	return m, true
}

// innerList reads "(" *SP [ item *( 1*SP item ) *SP ] ")".
func (s *scanner) innerList() bool {
	s.i++ // '('
	for s.i < len(s.s) {
		s.skipSP()
		if s.i == len(s.s) {
			return false
		}
		if s.s[s.i] == ')' {
			s.i++
			return true
		}
		if _, ok := s.bareItem(); !ok {
			return false
		}
		if !s.params() {
			return false
		}
		if s.i == len(s.s) {
			return false
		}
		if c := s.s[s.i]; c != ' ' && c != ')' {
			return false
		}
	}
	return false
}

// params reads *( ";" *SP key [ "=" bare-item ] ).
func (s *scanner) params() bool {
	for s.i < len(s.s) && s.s[s.i] == ';' {
		s.i++
		s.skipSP()
		if _, ok := s.key(); !ok {
			return false
		}
		if s.i < len(s.s) && s.s[s.i] == '=' {
			s.i++
			if _, ok := s.bareItem(); !ok {
				return false
			}
		}
	}
	return true
}

// key reads ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" ).
func (s *scanner) key() (string, bool) {
	start := s.i
	if s.i == len(s.s) {
		return "", false
	}
	if c := s.s[s.i]; !isLCAlpha(c) && c != '*' {
		return "", false
	}
	s.i++
	for s.i < len(s.s) {
		c := s.s[s.i]
		if !isLCAlpha(c) && !isDigit(c) && c != '_' && c != '-' && c != '.' && c != '*' {
			break
		}
		s.i++
	}
	return s.s[start:s.i], true
}

func (s *scanner) bareItem() (Item, bool) {
	if s.i == len(s.s) {
		return Item{}, false
	}
	switch c := s.s[s.i]; {
	case c == '-' || isDigit(c):
		return s.number()
	case c == '"':
		raw, ok := s.str()
		return Item{Kind: String, Raw: raw}, ok
	case c == '*' || isAlpha(c):
		start := s.i
		s.i++
		for s.i < len(s.s) && (IsTChar(s.s[s.i]) || s.s[s.i] == ':' || s.s[s.i] == '/') {
			s.i++
		}
		return Item{Kind: Token, Raw: s.s[start:s.i]}, true
	case c == ':':
		return s.binary()
	case c == '?':
		if s.i+1 < len(s.s) && (s.s[s.i+1] == '0' || s.s[s.i+1] == '1') {
			s.i += 2
			return Item{Kind: Boolean, Int: int64(s.s[s.i-1] - '0')}, true
		}
		return Item{}, false
	case c == '@':
		s.i++
		it, ok := s.number()
		if !ok || it.Kind != Integer {
			return Item{}, false
		}
		it.Kind = Date
		return it, true
	case c == '%':
		s.i++
		raw, ok := s.displayString()
		return Item{Kind: DisplayString, Raw: raw}, ok
	}
	return Item{}, false
}

// number reads an Integer or a Decimal (RFC 9651 §4.2.4): at most 15
// digits; a Decimal has at most 12 before its point and 1 to 3 after.
func (s *scanner) number() (Item, bool) {
	neg := false
	if s.i < len(s.s) && s.s[s.i] == '-' {
		neg = true
		s.i++
	}
	if s.i == len(s.s) || !isDigit(s.s[s.i]) {
		return Item{}, false
	}
	var n int64
	digits, dot, frac := 0, false, 0
loop:
	for s.i < len(s.s) {
		c := s.s[s.i]
		switch {
		case isDigit(c):
			if dot {
				frac++
				if frac > 3 {
					return Item{}, false
				}
			} else {
				digits++
				if digits > 15 {
					return Item{}, false
				}
			}
			n = n*10 + int64(c-'0')
		case c == '.' && !dot:
			if digits > 12 {
				return Item{}, false
			}
			dot = true
		default:
			break loop
		}
		s.i++
	}
	if neg {
		n = -n
	}
	if !dot {
		return Item{Kind: Integer, Int: n}, true
	}
	if frac == 0 {
		return Item{}, false
	}
	for ; frac < 3; frac++ {
		n *= 10
	}
	return Item{Kind: Decimal, Int: n}, true
}

// str reads a String and returns its text between the quotes, escapes
// not yet undone. On failure s.i is at the offending byte.
func (s *scanner) str() (string, bool) {
	s.i++ // '"'
	start := s.i
	for s.i < len(s.s) {
		c := s.s[s.i]
		switch {
		case c == '\\':
			if s.i+1 == len(s.s) {
				return "", false
			}
			if n := s.s[s.i+1]; n != '"' && n != '\\' {
				return "", false
			}
			s.i += 2
		case c == '"':
			raw := s.s[start:s.i]
			s.i++
			return raw, true
		case c < 0x20 || c > 0x7e:
			return "", false
		default:
			s.i++
		}
	}
	return "", false
}

// binary reads ":" base64 ":". Missing "=" padding is accepted, as RFC
// 9651 asks; padding anywhere but at the end, or more of it than the
// length allows, is not.
func (s *scanner) binary() (Item, bool) {
	s.i++ // ':'
	start := s.i
	for s.i < len(s.s) && s.s[s.i] != ':' {
		if c := s.s[s.i]; !isAlpha(c) && !isDigit(c) && c != '+' && c != '/' && c != '=' {
			return Item{}, false
		}
		s.i++
	}
	if s.i == len(s.s) {
		return Item{}, false
	}
	raw := s.s[start:s.i]
	s.i++
	if !validBase64(raw) {
		return Item{}, false
	}
	return Item{Kind: Binary, Raw: raw}, true
}

// validBase64 reports whether b64 (base64 characters and '=') decodes as
// standard base64 once any missing padding is added.
func validBase64(b64 string) bool {
	body := strings.TrimRight(b64, "=")
	pad := len(b64) - len(body)
	if strings.IndexByte(body, '=') >= 0 || pad > 2 {
		return false
	}
	n := len(body) % 4
	if n == 1 {
		return false // 6 bits cannot make a byte
	}
	if pad > 0 && n+pad != 4 {
		return false
	}
	return true
}

// displayString reads a Display String after its '%': a quoted string of
// printable ASCII and lowercase %xx escapes that decode to valid UTF-8.
func (s *scanner) displayString() (string, bool) {
	if s.i == len(s.s) || s.s[s.i] != '"' {
		return "", false
	}
	s.i++
	start := s.i
	var (
		buf  [utf8.UTFMax]byte
		want int // bytes of the current UTF-8 sequence
		have int
	)
	for s.i < len(s.s) {
		c := s.s[s.i]
		switch {
		case c == '"':
			if have != want {
				return "", false // a sequence cut short
			}
			raw := s.s[start:s.i]
			s.i++
			return raw, true
		case c == '%':
			if s.i+2 >= len(s.s) || !isLCHex(s.s[s.i+1]) || !isLCHex(s.s[s.i+2]) {
				return "", false
			}
			b := unhex(s.s[s.i+1])<<4 | unhex(s.s[s.i+2])
			s.i += 3
			if have == want {
				want, have = seqLen(b), 0
				if want == 0 {
					return "", false
				}
			}
			buf[have] = b
			have++
			if have == want && !utf8.Valid(buf[:have]) {
				return "", false
			}
		case c < 0x20 || c > 0x7e:
			return "", false
		default:
			if have != want {
				return "", false
			}
			s.i++
		}
	}
	return "", false
}

// seqLen returns the length of the UTF-8 sequence that starts with b, or
// 0 when b cannot start one.
func seqLen(b byte) int {
	switch {
	case b < 0x80:
		return 1
	case b&0xe0 == 0xc0:
		return 2
	case b&0xf0 == 0xe0:
		return 3
	case b&0xf8 == 0xf0:
		return 4
	}
	return 0
}

func unhex(c byte) byte {
	if isDigit(c) {
		return c - '0'
	}
	return c - 'a' + 10
}
