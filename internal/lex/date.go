package lex

import (
	"net/http"
	"time"
)

// ServerNow returns the time a response was made by the server's clock:
// the first value of its Date header when that is a valid HTTP-date, else
// now. A wait the server gives as a point in time (a Retry-After date, a
// quota reset as a date or an epoch) is measured from ServerNow and then
// applied from now, so that a client whose clock is off still waits the
// time the server meant, and every such header of one response is
// measured the same way.
//
// A Date is in whole seconds. When it is the second now falls in, the
// two clocks agree as far as the Date can tell, and now is the finer
// reading: taking the Date, the start of that second, would make every
// wait up to a second longer than the server meant (a quota of a
// second would lose the window it waits for).
func ServerNow(h http.Header, now time.Time) time.Time {
	if v := h["Date"]; len(v) > 0 {
		if t, ok := ParseHTTPDate(TrimOWS(v[0]), now); ok {
			if !now.Before(t) && now.Sub(t) < time.Second {
				return now
			}
			return t
		}
	}
	return now
}

var (
	shortDays = [...]string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}
	longDays  = [...]string{"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}
	months    = [...]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
)

// ParseHTTPDate parses an HTTP-date in any of the three forms recipients
// must accept (RFC 9110 §5.6.7): IMF-fixdate "Sun, 06 Nov 1994 08:49:37
// GMT", the obsolete RFC 850 form "Sunday, 06-Nov-94 08:49:37 GMT" (its
// two-digit year is taken within 50 years of now) and asctime "Sun Nov  6
// 08:49:37 1994". Dates are case-sensitive and in GMT, as RFC 9110
// defines them; the weekday is checked for form only; second 60 (a leap
// second) is accepted; impossible dates (Feb 30, 25:00) are not. s must
// not carry surrounding whitespace. It does not allocate.
func ParseHTTPDate(s string, now time.Time) (time.Time, bool) {
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
		if !isDigit(s[i]) {
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
