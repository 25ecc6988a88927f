package policy

import (
	"math"
	"net/http"
	"time"
)

// maxRetryAfter is where a server-asked wait saturates: the longest whole
// number of seconds a time.Duration holds (9223372036 s, about 292 years).
// It is a whole number of seconds so that a saturated delay-seconds value
// still formats back to the same wait.
const maxRetryAfter = time.Duration(math.MaxInt64/int64(time.Second)) * time.Second

// ParseRetryAfter returns the wait a response asks for before the next
// request, and whether it asks for one. now is the time the response was
// received; an HTTP-date is measured from it.
//
// Two fields are read, keys in the canonical form net/http gives them:
//
//   - retry-after-ms (OpenAI, Anthropic): a decimal number of
//     milliseconds, digits with an optional fraction ("1500", "1500.5"),
//     read as their SDKs read it. Digits past the nanosecond are dropped.
//     A valid retry-after-ms wins over Retry-After, which is read only when
//     retry-after-ms is absent or invalid.
//   - Retry-After (RFC 9110 §10.2.3): delay-seconds (1*DIGIT, "120") or an
//     HTTP-date in any of the three forms recipients must accept (RFC 9110
//     §5.6.7): IMF-fixdate "Sun, 06 Nov 1994 08:49:37 GMT", the obsolete
//     RFC 850 form "Sunday, 06-Nov-94 08:49:37 GMT" (its two-digit year is
//     taken within 50 years of now) and asctime "Sun Nov  6 08:49:37 1994".
//     Dates are case-sensitive and in GMT, as RFC 9110 defines them; the
//     weekday is checked for form only. A date in the past, or now, means
//     a wait of 0.
//
// Leading and trailing spaces and tabs are ignored. Anything else is
// invalid and ignored: a sign ("+120", "-1"), an empty value, "NaN",
// "Inf", exponents, ISO 8601 dates, other time zones, impossible dates
// (Feb 30, 25:00). When a field has several lines, the first valid one
// wins. A wait too long for a time.Duration saturates at 9223372036 s
// (about 292 years) and never wraps around; callers compare the result
// with their own limit, such as [Retry.MaxRetryAfter].
//
// The result is never negative, and parsing does not allocate.
func ParseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	for _, v := range h["Retry-After-Ms"] {
		if d, ok := parseMillis(trimOWS(v)); ok {
			return d, true
		}
	}
	for _, v := range h["Retry-After"] {
		v = trimOWS(v)
		if d, ok := parseSeconds(v); ok {
			return d, true
		}
		if t, ok := parseHTTPDate(v, now); ok {
			if !t.After(now) {
				return 0, true
			}
			return min(t.Sub(now), maxRetryAfter), true
		}
	}
	return 0, false
}

// trimOWS removes the optional whitespace (SP, HTAB) around a field value.
func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// parseSeconds parses delay-seconds = 1*DIGIT, saturating at maxRetryAfter.
func parseSeconds(s string) (time.Duration, bool) {
	n, rest, ok := parseDigits(s, int64(maxRetryAfter/time.Second))
	if !ok || rest != "" {
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}

// parseMillis parses 1*DIGIT [ "." 1*DIGIT ] milliseconds, saturating at
// maxRetryAfter.
func parseMillis(s string) (time.Duration, bool) {
	const maxMillis = int64(maxRetryAfter / time.Millisecond)
	ms, rest, ok := parseDigits(s, maxMillis)
	if !ok {
		return 0, false
	}
	var frac int64 // nanoseconds
	if rest != "" {
		if rest[0] != '.' || len(rest) == 1 {
			return 0, false
		}
		scale := int64(time.Millisecond)
		for i := 1; i < len(rest); i++ {
			c := rest[i]
			if c < '0' || c > '9' {
				return 0, false
			}
			scale /= 10
			frac += int64(c-'0') * scale
		}
	}
	if ms == maxMillis {
		return maxRetryAfter, true
	}
	return time.Duration(ms)*time.Millisecond + time.Duration(frac), true
}

// parseDigits reads the leading run of ASCII digits of s, at least one, as
// a number, saturating at limit. It returns the rest of s.
func parseDigits(s string, limit int64) (n int64, rest string, ok bool) {
	i := 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		d := int64(s[i] - '0')
		if n > (limit-d)/10 { // n*10+d > limit
			n = limit
			continue
		}
		n = n*10 + d
	}
	return n, s[i:], i > 0
}

var (
	shortDays = [...]string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}
	longDays  = [...]string{"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}
	months    = [...]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
)

// parseHTTPDate parses the three HTTP-date forms of RFC 9110 §5.6.7.
func parseHTTPDate(s string, now time.Time) (time.Time, bool) {
	switch {
	case len(s) == 29 && s[3] == ',':
		// IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
		if !isOneOf(s[:3], shortDays[:]) || s[4] != ' ' || s[7] != ' ' ||
			s[11] != ' ' || s[16] != ' ' || s[25:] != " GMT" {
			return time.Time{}, false
		}
		day, ok1 := num(s[5:7])
		year, ok2 := num(s[12:16])
		return makeDate(year, s[8:11], day, s[17:25], ok1 && ok2)
	case len(s) == 24 && s[3] == ' ':
		// asctime: "Sun Nov  6 08:49:37 1994"
		if !isOneOf(s[:3], shortDays[:]) || s[7] != ' ' || s[10] != ' ' || s[19] != ' ' {
			return time.Time{}, false
		}
		dd := s[8:10]
		if dd[0] == ' ' {
			dd = dd[1:]
		}
		day, ok1 := num(dd)
		year, ok2 := num(s[20:24])
		return makeDate(year, s[4:7], day, s[11:19], ok1 && ok2)
	}
	// rfc850-date: "Sunday, 06-Nov-94 08:49:37 GMT"
	for _, name := range longDays {
		if len(s) != len(name)+24 || s[:len(name)] != name {
			continue
		}
		r := s[len(name):] // ", 06-Nov-94 08:49:37 GMT"
		if r[:2] != ", " || r[4] != '-' || r[8] != '-' || r[11] != ' ' || r[20:] != " GMT" {
			return time.Time{}, false
		}
		day, ok1 := num(r[2:4])
		yy, ok2 := num(r[9:11])
		return makeDate(fullYear(yy, now), r[5:8], day, r[12:20], ok1 && ok2)
	}
	return time.Time{}, false
}

// fullYear expands an rfc850 two-digit year: RFC 9110 §5.6.7 says one
// that appears more than 50 years in the future is in the past. The year
// is taken within 50 years of now's.
func fullYear(yy int, now time.Time) int {
	cur := now.UTC().Year()
	y := cur - cur%100 + yy
	switch {
	case y > cur+50:
		y -= 100
	case y <= cur-50:
		y += 100
	}
	return y
}

// makeDate checks the parts of a date and builds it in UTC. clock is
// "HH:MM:SS"; second 60 (a leap second) is accepted.
func makeDate(year int, month string, day int, clock string, ok bool) (time.Time, bool) {
	m := 0
	for i, name := range months {
		if month == name {
			m = i + 1
			break
		}
	}
	if !ok || m == 0 || clock[2] != ':' || clock[5] != ':' {
		return time.Time{}, false
	}
	hh, ok1 := num(clock[0:2])
	mm, ok2 := num(clock[3:5])
	ss, ok3 := num(clock[6:8])
	if !ok1 || !ok2 || !ok3 || hh > 23 || mm > 59 || ss > 60 ||
		day < 1 || day > daysIn(time.Month(m), year) {
		return time.Time{}, false
	}
	return time.Date(year, time.Month(m), day, hh, mm, ss, 0, time.UTC), true
}

// num parses a short, non-empty run of ASCII digits.
func num(s string) (int, bool) {
	if s == "" {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}

func isOneOf(s string, names []string) bool {
	for _, n := range names {
		if s == n {
			return true
		}
	}
	return false
}

func daysIn(m time.Month, year int) int {
	switch m {
	case time.February:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case time.April, time.June, time.September, time.November:
		return 30
	}
	return 31
}
