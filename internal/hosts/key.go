package hosts

import (
	"net/url"
	"strings"
)

// Key names the host that per-host state is kept for.
//
// A host is its URL's scheme and host, both lowercased, with the
// scheme's default port (80 for http, 443 for https) and an empty port
// left out: "https://API.example.com:443/v1" and "https://api.example.com"
// are one host, "https://api.example.com:8443" another. This is the one
// definition of "a host" in the module: breakers, quotas and retry
// budgets are all kept under it.
//
// A Key with an empty Scheme holds a caller's own key (a
// [transport.BreakerSettings].Key result, say) in Host, as it is.
type Key struct {
	Scheme string
	Host   string
}

// KeyOf returns u's key. It allocates only when u's scheme or host has
// upper-case letters; nil gives the zero Key.
func KeyOf(u *url.URL) Key {
	if u == nil {
		return Key{}
	}
	return MakeKey(u.Scheme, u.Host)
}

// MakeKey returns the key of a scheme and a host (with its port, if any),
// as [KeyOf] does for a URL.
func MakeKey(scheme, host string) Key {
	if !lower(scheme) {
		scheme = strings.ToLower(scheme)
	}
	if !lower(host) {
		host = strings.ToLower(host)
	}
	switch {
	case scheme == "https" && strings.HasSuffix(host, ":443"):
		host = host[:len(host)-len(":443")]
	case scheme == "http" && strings.HasSuffix(host, ":80"):
		host = host[:len(host)-len(":80")]
	case strings.HasSuffix(host, ":"):
		host = host[:len(host)-1]
	}
	return Key{Scheme: scheme, Host: host}
}

// Custom returns the Key of a caller's own key string.
func Custom(key string) Key { return Key{Host: key} }

// String returns "scheme://host", or Host alone for a custom key.
func (k Key) String() string {
	if k.Scheme == "" {
		return k.Host
	}
	return k.Scheme + "://" + k.Host
}

// lower reports whether s is ASCII without upper-case letters, which
// strings.ToLower would return as it is (checked here for speed).
func lower(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 0x80 || 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}
