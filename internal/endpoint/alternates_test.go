package endpoint

import (
	"errors"
	"net/url"
	"testing"
)

var errBad = errors.New("bad")

func TestParseOrigin(t *testing.T) {
	tests := []struct {
		in, want string // want "" for an error
	}{
		{"https://api.example.com", "https://api.example.com"},
		{"http://api.example.com:8080/", "http://api.example.com:8080"},
		{"https://api.example.com/v1", ""},
		{"https://api.example.com?x=1", ""},
		{"ftp://api.example.com", ""},
		{"https://user@api.example.com", ""},
		{"api.example.com", ""},
		{"%zz", ""},
	}
	for _, tt := range tests {
		u, err := ParseOrigin(tt.in, errBad)
		got := ""
		if err == nil {
			got = u.String()
		} else if !errors.Is(err, errBad) {
			t.Errorf("ParseOrigin(%q): %v, want an error matching errBad", tt.in, err)
		}
		if got != tt.want {
			t.Errorf("ParseOrigin(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// TestPick: the first origin from start that is not refused, in turn;
// start when all are.
func TestPick(t *testing.T) {
	m, err := ParseAlternates(map[string][]string{"https://a.test": {"https://b.test", "https://c.test"}}, errBad)
	if err != nil {
		t.Fatal(err)
	}
	var list []Origin
	for _, l := range m {
		list = l
	}
	tests := []struct {
		refused []string // names refused; the request's own is "self"
		start   int
		want    int
	}{
		{nil, 0, 0},
		{[]string{"self"}, 0, 1},
		{[]string{"self", "https://b.test"}, 0, 2},
		{[]string{"https://c.test"}, 2, 0},
		{[]string{"self", "https://b.test", "https://c.test"}, 1, 1},
	}
	for _, tt := range tests {
		refused := func(u *url.URL) bool {
			name := "self"
			if u != nil {
				name = u.String()
			}
			for _, r := range tt.refused {
				if r == name {
					return true
				}
			}
			return false
		}
		if got := Pick(list, tt.start, refused); got != tt.want {
			t.Errorf("Pick(start %d, refused %v) = %d, want %d", tt.start, tt.refused, got, tt.want)
		}
	}
}
