package hosts

import (
	"net/url"
	"testing"
)

func TestKeyOf(t *testing.T) {
	tests := []struct {
		url  string
		want Key
		str  string
	}{
		{"https://api.example.com/v1", Key{"https", "api.example.com"}, "https://api.example.com"},
		{"https://API.Example.COM:443/v1", Key{"https", "api.example.com"}, "https://api.example.com"},
		{"HTTPS://api.example.com:/", Key{"https", "api.example.com"}, "https://api.example.com"},
		{"https://api.example.com:8443", Key{"https", "api.example.com:8443"}, "https://api.example.com:8443"},
		{"http://api.example.com:80", Key{"http", "api.example.com"}, "http://api.example.com"},
		{"http://api.example.com:443", Key{"http", "api.example.com:443"}, "http://api.example.com:443"},
		{"https://api.example.com:80", Key{"https", "api.example.com:80"}, "https://api.example.com:80"},
		{"http://[::1]:80/x", Key{"http", "[::1]"}, "http://[::1]"},
		{"http://[::1]:8080/x", Key{"http", "[::1]:8080"}, "http://[::1]:8080"},
		{"/relative", Key{}, ""},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := KeyOf(u); got != tt.want {
			t.Errorf("KeyOf(%q) = %#v, want %#v", tt.url, got, tt.want)
		}
		if got := KeyOf(u).String(); got != tt.str {
			t.Errorf("KeyOf(%q).String() = %q, want %q", tt.url, got, tt.str)
		}
	}
	if got := KeyOf(nil); got != (Key{}) {
		t.Errorf("KeyOf(nil) = %#v, want the zero Key", got)
	}
	if got := Custom("tenant-7").String(); got != "tenant-7" {
		t.Errorf("Custom(%q).String() = %q, want %q", "tenant-7", got, "tenant-7")
	}
}

func TestKeyOfAllocatesNothingForANormalURL(t *testing.T) {
	u, _ := url.Parse("https://api.example.com:443/v1")
	if n := testing.AllocsPerRun(100, func() { _ = KeyOf(u) }); n != 0 {
		t.Errorf("KeyOf allocates %v times, want 0", n)
	}
}
