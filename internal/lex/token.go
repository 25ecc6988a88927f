package lex

// IsTChar reports whether c is a tchar of RFC 9110 §5.6.2: a character
// allowed in a token.
func IsTChar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// IsToken reports whether s is a token of RFC 9110 §5.6.2: one or more
// tchars. Methods and field names are tokens.
func IsToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !IsTChar(s[i]) {
			return false
		}
	}
	return true
}

// IsDigit reports whether c is an ASCII digit.
func IsDigit(c byte) bool { return isDigit(c) }

// IsAlpha reports whether c is an ASCII letter.
func IsAlpha(c byte) bool { return isAlpha(c) }

func isDigit(c byte) bool   { return '0' <= c && c <= '9' }
func isLCAlpha(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || ('A' <= c && c <= 'Z') }
func isLCHex(c byte) bool   { return isDigit(c) || ('a' <= c && c <= 'f') }
