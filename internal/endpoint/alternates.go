package endpoint

import (
	"fmt"
	"net/http"
	"net/url"

	"github.com/sturdyhttp/sturdy/internal/hosts"
)

// Origin is one origin of an alternates list.
type Origin struct {
	URL  *url.URL // scheme and host
	Name string   // scheme://host, as keyed
}

// ParseOrigin parses s as an origin: scheme and host, nothing else. Its
// errors wrap bad.
func ParseOrigin(s string, bad error) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%w: origin %q: %v", bad, s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.User != nil ||
		u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%w: origin %q is not a scheme and host only, such as \"https://api.example.com\"", bad, s)
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

// ParseAlternates returns the alternates of m (an origin's to its
// alternates, in order of preference), each list starting with the
// origin it is for. Its errors wrap bad.
func ParseAlternates(m map[string][]string, bad error) (map[hosts.Key][]Origin, error) {
	out := make(map[hosts.Key][]Origin, len(m))
	for from, alts := range m {
		u, err := ParseOrigin(from, bad)
		if err != nil {
			return nil, err
		}
		k := hosts.KeyOf(u)
		list := []Origin{{URL: u, Name: k.String()}}
		for _, a := range alts {
			v, err := ParseOrigin(a, bad)
			if err != nil {
				return nil, fmt.Errorf("%w (an alternate of %q)", err, from)
			}
			list = append(list, Origin{URL: v, Name: hosts.KeyOf(v).String()})
		}
		if len(list) > 1 {
			out[k] = list
		}
	}
	return out, nil
}

// Pick returns the index in list of the origin an attempt goes to: the
// first from start, in turn, that refused does not refuse; start when
// every one is. refused is asked of an origin's URL, nil for the
// request's own.
func Pick(list []Origin, start int, refused func(u *url.URL) bool) int {
	for k := range list {
		i := (start + k) % len(list)
		var u *url.URL
		if i != 0 {
			u = list[i].URL
		}
		if !refused(u) {
			return i
		}
	}
	return start
}

// Rewrite returns a copy of req for the origin o: scheme and host the
// alternate's, path and query kept, then adjust (when set) called with
// it and o's name.
func Rewrite(req *http.Request, o Origin, adjust func(*http.Request, string)) *http.Request {
	r := req.Clone(req.Context())
	r.URL.Scheme, r.URL.Host, r.Host = o.URL.Scheme, o.URL.Host, ""
	if adjust != nil {
		adjust(r, o.Name)
	}
	return r
}

// FreshBody returns req with a new body from GetBody, or req itself when
// it has none; false when its body cannot be had again.
func FreshBody(req *http.Request) (*http.Request, bool) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, true
	}
	if req.GetBody == nil {
		return nil, false
	}
	b, err := req.GetBody()
	if err != nil {
		return nil, false
	}
	r := *req
	r.Body = b
	return &r, true
}
