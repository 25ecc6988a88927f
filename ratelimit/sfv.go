package ratelimit

import "strings"

// This file is a parser for Structured Field Lists (RFC 9651, which
// obsoletes RFC 8941), the syntax of the current IETF RateLimit and
// RateLimit-Policy fields. It validates the whole grammar, because the
// draft requires a field that fails to parse to be ignored as a whole, and
// it allocates nothing: items point into the field's text.

// sfKind is the type of a Structured Field bare item.
type sfKind uint8

const (
	sfInteger sfKind = iota + 1
	sfDecimal
	sfString
	sfToken
	sfBinary
	sfBoolean
	sfDate
	sfDisplayString
)

// sfItem is a bare item. For strings, raw is the text between the quotes
// with its escapes still in place; for tokens, the token; for integers
// and dates, num holds the value.
type sfItem struct {
	kind sfKind
	raw  string
	num  int64
}

// sfMember is one member of a List: an item with its parameters, or an
// inner list (inner is true and item is unset). params is the member's
// parameter text, already validated; read it with sfParam.
type sfMember struct {
	item   sfItem
	inner  bool
	params string
}

// sfList iterates over the members of a Structured Field List. Call next
// until it returns false, then check err: when err is set, the field is
// malformed and every member seen must be ignored.
type sfList struct {
	s   string
	i   int
	err bool
	// started reports whether the first member has been read.
	started bool
}

func newSFList(s string) sfList { return sfList{s: s} }

// next returns the next member of the list, or false at the end of the
// list or at the first syntax error (then l.err is true).
func (l *sfList) next() (sfMember, bool) {
	if l.err {
		return sfMember{}, false
	}
	if !l.started {
		l.started = true
		l.skipSP()
		if l.i == len(l.s) {
			return sfMember{}, false // an empty list
		}
	} else {
		l.skipOWS()
		if l.i == len(l.s) {
			return sfMember{}, false
		}
		if l.s[l.i] != ',' {
			l.err = true
			return sfMember{}, false
		}
		l.i++
		l.skipOWS()
		if l.i == len(l.s) { // trailing comma
			l.err = true
			return sfMember{}, false
		}
	}
	m, ok := l.member()
	if !ok {
		l.err = true
		return sfMember{}, false
	}
	return m, true
}

// valid walks the rest of the list and reports whether the whole field
// parses.
func (l *sfList) valid() bool {
	for {
		if _, ok := l.next(); !ok {
			return !l.err
		}
	}
}

func (l *sfList) skipSP() {
	for l.i < len(l.s) && l.s[l.i] == ' ' {
		l.i++
	}
}

func (l *sfList) skipOWS() {
	for l.i < len(l.s) && (l.s[l.i] == ' ' || l.s[l.i] == '\t') {
		l.i++
	}
}

func (l *sfList) member() (sfMember, bool) {
	var m sfMember
	if l.s[l.i] == '(' {
		if !l.innerList() {
			return m, false
		}
		m.inner = true
	} else {
		it, ok := l.bareItem()
		if !ok {
			return m, false
		}
		m.item = it
	}
	start := l.i
	if !l.parameters() {
		return m, false
	}
	m.params = l.s[start:l.i]
	return m, true
}

func (l *sfList) innerList() bool {
	l.i++ // '('
	for l.i < len(l.s) {
		l.skipSP()
		if l.i == len(l.s) {
			return false
		}
		if l.s[l.i] == ')' {
			l.i++
			return true
		}
		if _, ok := l.bareItem(); !ok {
			return false
		}
		if !l.parameters() {
			return false
		}
		if l.i == len(l.s) {
			return false
		}
		if c := l.s[l.i]; c != ' ' && c != ')' {
			return false
		}
	}
	return false
}

func (l *sfList) parameters() bool {
	for l.i < len(l.s) && l.s[l.i] == ';' {
		l.i++
		l.skipSP()
		if _, ok := l.key(); !ok {
			return false
		}
		if l.i < len(l.s) && l.s[l.i] == '=' {
			l.i++
			if _, ok := l.bareItem(); !ok {
				return false
			}
		}
	}
	return true
}

func (l *sfList) key() (string, bool) {
	start := l.i
	if l.i == len(l.s) {
		return "", false
	}
	if c := l.s[l.i]; !isLCAlpha(c) && c != '*' {
		return "", false
	}
	l.i++
	for l.i < len(l.s) {
		c := l.s[l.i]
		if !isLCAlpha(c) && !isDigit(c) && c != '_' && c != '-' && c != '.' && c != '*' {
			break
		}
		l.i++
	}
	return l.s[start:l.i], true
}

func (l *sfList) bareItem() (sfItem, bool) {
	if l.i == len(l.s) {
		return sfItem{}, false
	}
	switch c := l.s[l.i]; {
	case c == '-' || isDigit(c):
		return l.number()
	case c == '"':
		raw, ok := l.str()
		return sfItem{kind: sfString, raw: raw}, ok
	case c == '*' || isAlpha(c):
		start := l.i
		l.i++
		for l.i < len(l.s) && (isTChar(l.s[l.i]) || l.s[l.i] == ':' || l.s[l.i] == '/') {
			l.i++
		}
		return sfItem{kind: sfToken, raw: l.s[start:l.i]}, true
	case c == ':':
		l.i++
		start := l.i
		for l.i < len(l.s) && l.s[l.i] != ':' {
			if !isBase64(l.s[l.i]) {
				return sfItem{}, false
			}
			l.i++
		}
		if l.i == len(l.s) {
			return sfItem{}, false
		}
		raw := l.s[start:l.i]
		l.i++
		return sfItem{kind: sfBinary, raw: raw}, true
	case c == '?':
		if l.i+1 < len(l.s) && (l.s[l.i+1] == '0' || l.s[l.i+1] == '1') {
			l.i += 2
			return sfItem{kind: sfBoolean, num: int64(l.s[l.i-1] - '0')}, true
		}
		return sfItem{}, false
	case c == '@':
		l.i++
		it, ok := l.number()
		if !ok || it.kind != sfInteger {
			return sfItem{}, false
		}
		it.kind = sfDate
		return it, true
	case c == '%':
		l.i++
		raw, ok := l.displayString()
		return sfItem{kind: sfDisplayString, raw: raw}, ok
	}
	return sfItem{}, false
}

// number parses an Integer or a Decimal (RFC 9651 §4.2.4).
func (l *sfList) number() (sfItem, bool) {
	if l.i == len(l.s) {
		return sfItem{}, false
	}
	neg := false
	if l.s[l.i] == '-' {
		neg = true
		l.i++
	}
	if l.i == len(l.s) || !isDigit(l.s[l.i]) {
		return sfItem{}, false
	}
	var n int64
	digits, dot, frac := 0, false, 0
	for l.i < len(l.s) {
		c := l.s[l.i]
		switch {
		case isDigit(c):
			if dot {
				frac++
				if frac > 3 {
					return sfItem{}, false
				}
			} else {
				digits++
				if digits > 15 {
					return sfItem{}, false
				}
				n = n*10 + int64(c-'0')
			}
		case c == '.' && !dot:
			if digits > 12 {
				return sfItem{}, false
			}
			dot = true
		default:
			goto done
		}
		l.i++
	}
done:
	if dot {
		if frac == 0 {
			return sfItem{}, false
		}
		return sfItem{kind: sfDecimal}, true
	}
	if neg {
		n = -n
	}
	return sfItem{kind: sfInteger, num: n}, true
}

// str parses a String and returns its text between the quotes, escapes
// not yet undone.
func (l *sfList) str() (string, bool) {
	l.i++ // '"'
	start := l.i
	for l.i < len(l.s) {
		c := l.s[l.i]
		switch {
		case c == '\\':
			if l.i+1 == len(l.s) {
				return "", false
			}
			if n := l.s[l.i+1]; n != '"' && n != '\\' {
				return "", false
			}
			l.i += 2
		case c == '"':
			raw := l.s[start:l.i]
			l.i++
			return raw, true
		case c < 0x20 || c > 0x7e:
			return "", false
		default:
			l.i++
		}
	}
	return "", false
}

// displayString parses a Display String after its '%'.
func (l *sfList) displayString() (string, bool) {
	if l.i == len(l.s) || l.s[l.i] != '"' {
		return "", false
	}
	l.i++
	start := l.i
	for l.i < len(l.s) {
		c := l.s[l.i]
		switch {
		case c == '"':
			raw := l.s[start:l.i]
			l.i++
			return raw, true
		case c == '%':
			if l.i+2 >= len(l.s) || !isLCHex(l.s[l.i+1]) || !isLCHex(l.s[l.i+2]) {
				return "", false
			}
			l.i += 3
		case c < 0x20 || c > 0x7e:
			return "", false
		default:
			l.i++
		}
	}
	return "", false
}

// sfParam returns the last value of parameter key in params (the text of
// a member's validated parameters), as RFC 9651 says duplicate keys
// resolve. A key without a value is the Boolean true.
func sfParam(params, key string) (sfItem, bool) {
	var (
		found sfItem
		ok    bool
	)
	l := sfList{s: params}
	for l.i < len(l.s) && l.s[l.i] == ';' {
		l.i++
		l.skipSP()
		k, kok := l.key()
		if !kok {
			return sfItem{}, false
		}
		v := sfItem{kind: sfBoolean, num: 1}
		if l.i < len(l.s) && l.s[l.i] == '=' {
			l.i++
			var vok bool
			if v, vok = l.bareItem(); !vok {
				return sfItem{}, false
			}
		}
		if k == key {
			found, ok = v, true
		}
	}
	return found, ok
}

// sfParamInt returns parameter key as a non-negative Integer. A missing
// parameter, another type or a negative value gives false.
func sfParamInt(params, key string) (int64, bool) {
	v, ok := sfParam(params, key)
	if !ok || v.kind != sfInteger || v.num < 0 {
		return 0, false
	}
	return v.num, true
}

// sfUnescape returns the value of a String item's raw text.
func sfUnescape(raw string) string {
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

// sfName returns the policy name an item stands for: a String's value or
// a Token. Other kinds have no name.
func sfName(it sfItem) (string, bool) {
	switch it.kind {
	case sfString:
		return sfUnescape(it.raw), true
	case sfToken:
		return it.raw, true
	}
	return "", false
}

func isDigit(c byte) bool   { return '0' <= c && c <= '9' }
func isLCAlpha(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || ('A' <= c && c <= 'Z') }
func isLCHex(c byte) bool   { return isDigit(c) || ('a' <= c && c <= 'f') }

func isBase64(c byte) bool {
	return isAlpha(c) || isDigit(c) || c == '+' || c == '/' || c == '='
}

// isTChar reports whether c is a tchar of RFC 9110 §5.6.2.
func isTChar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}
