package lex

import (
	"net/http"
	"testing"
	"time"
)

func TestParseHTTPDate(t *testing.T) {
	rfc := time.Date(1994, time.November, 6, 8, 49, 37, 0, time.UTC)
	now := time.Date(2026, time.March, 14, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"Sun, 06 Nov 1994 08:49:37 GMT", rfc, true},
		{"Sunday, 06-Nov-94 08:49:37 GMT", rfc, true},
		{"Sun Nov  6 08:49:37 1994", rfc, true},
		{"Sun Nov 06 08:49:37 1994", rfc, true},
		{"Sat, 31 Dec 2016 23:59:60 GMT", time.Date(2017, 1, 1, 0, 0, 0, 0, time.UTC), true}, // leap second
		{"Thursday, 01-Jan-70 00:00:00 GMT", time.Date(2070, 1, 1, 0, 0, 0, 0, time.UTC), true},
		// 2077 would be more than 50 years after 2026: the year is 1977.
		{"Saturday, 01-Jan-77 00:00:00 GMT", time.Date(1977, 1, 1, 0, 0, 0, 0, time.UTC), true},
		{"Sun, 30 Feb 2026 08:49:37 GMT", time.Time{}, false},
		{"Sun, 06 Nov 1994 25:49:37 GMT", time.Time{}, false},
		{"sun, 06 Nov 1994 08:49:37 GMT", time.Time{}, false},
		{"Sun, 06 Nov 1994 08:49:37 UTC", time.Time{}, false},
		{"Sun, 06 nov 1994 08:49:37 GMT", time.Time{}, false},
		{"1994-11-06T08:49:37Z", time.Time{}, false},
		{" Sun, 06 Nov 1994 08:49:37 GMT", time.Time{}, false},
		{"", time.Time{}, false},
	}
	for _, tc := range cases {
		got, ok := ParseHTTPDate(tc.in, now)
		if ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("ParseHTTPDate(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestServerNow(t *testing.T) {
	now := time.Date(2026, time.March, 14, 13, 0, 0, 0, time.UTC) // an hour fast
	server := time.Date(2026, time.March, 14, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		date []string
		want time.Time
	}{
		{nil, now},
		{[]string{server.Format(http.TimeFormat)}, server},
		{[]string{" " + server.Format(http.TimeFormat) + "\t"}, server},
		{[]string{"garbage"}, now},
		{[]string{"garbage", server.Format(http.TimeFormat)}, now}, // the first line rules
	}
	for _, tc := range cases {
		h := http.Header{"Date": tc.date}
		if got := ServerNow(h, now); !got.Equal(tc.want) {
			t.Errorf("ServerNow(Date %q) = %v, want %v", tc.date, got, tc.want)
		}
	}
	// A Date of the second the client's clock is in: the clocks agree as
	// far as it tells, and the client's reading is the finer one.
	sec := time.Date(2026, time.March, 14, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		now, want time.Time
	}{
		{sec, sec},
		{sec.Add(700 * time.Millisecond), sec.Add(700 * time.Millisecond)},
		{sec.Add(time.Second - time.Nanosecond), sec.Add(time.Second - time.Nanosecond)},
		{sec.Add(time.Second), sec},                      // a second off: the Date
		{sec.Add(-time.Millisecond), sec},                // the client's clock behind: the Date
		{sec.Add(time.Hour + 300*time.Millisecond), sec}, // an hour fast: the Date
	} {
		h := http.Header{"Date": {sec.Format(http.TimeFormat)}}
		if got := ServerNow(h, tc.now); !got.Equal(tc.want) {
			t.Errorf("ServerNow(Date %v) at %v = %v, want %v", sec, tc.now, got, tc.want)
		}
	}
}

func TestTrimOWSAndToken(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{" \t a b \t", "a b"}, {"", ""}, {"\t\t", ""}, {"x", "x"}, {"\na\n", "\na\n"},
	} {
		if got := TrimOWS(tc.in); got != tc.want {
			t.Errorf("TrimOWS(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"GET", true}, {"X-Custom_1.a~", true}, {"", false}, {"a b", false},
		{"a:b", false}, {"é", false}, {"a\"", false}, {"a/b", false},
	} {
		if got := IsToken(tc.in); got != tc.want {
			t.Errorf("IsToken(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
