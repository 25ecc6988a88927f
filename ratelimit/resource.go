package ratelimit

import (
	"net/http"
	"net/url"
	"strings"
)

// This file maps a request to the quotas that count it.
//
// A host may keep several quotas: GitHub counts /search against its
// "search" resource and most other paths against "core"; OpenAI and
// Anthropic count every request against a requests quota and a tokens
// quota; an IETF server names a policy per endpoint. A response says
// which quotas counted it (its X-RateLimit-Resource, its dimensions, its
// policy names), and the Tracker remembers that for the request's route:
// the first segment of its path ("/search/code" is route "search",
// "/v1/chat/completions" is "v1", "/" is ""). A later request on that
// route is held back only by those quotas. A request on a route no
// response has named yet is held back only by host-wide quotas: those
// that name no resource (a plain X-RateLimit-*, OpenAI's and Anthropic's
// requests and tokens) and that every known route of the host is counted
// against. A quota that names its resource (GitHub's, an IETF policy)
// does not hold it: it goes out, and its response names its quotas.
// Options.Key remains for callers who know better (a key per model, say).

// maxQuotas bounds the quotas kept per host, and maxRoutes the routes
// remembered per host: past them, the least recently updated is dropped.
const (
	maxQuotas = 8
	maxRoutes = 32
	// maxRouteLen bounds a route; a longer first segment is cut.
	maxRouteLen = 64
)

// quotaSet is a set of a host's quota slots, bit i for quotas[i].
type quotaSet uint8

// routeOf returns the route of r: the first segment of its URL path.
func routeOf(r *http.Request) string {
	if r == nil {
		return ""
	}
	return routeOfURL(r.URL)
}

// routeOfURL is routeOf for a request to u.
func routeOfURL(u *url.URL) string {
	if u == nil {
		return ""
	}
	p := strings.TrimPrefix(u.Path, "/")
	if i := strings.IndexByte(p, '/'); i >= 0 {
		p = p[:i]
	}
	if len(p) > maxRouteLen {
		p = p[:maxRouteLen]
	}
	return p
}

// route is what the host's responses said about one route: the quotas
// that counted its last response.
type route struct {
	name string
	set  quotaSet
	used int64 // update counter, for replacement
}

// counting returns the quotas that count a request on route name. h.mu
// is held.
func (h *hostState) counting(name string) quotaSet {
	for i := range h.routes[:h.nr] {
		if h.routes[i].name == name {
			return h.routes[i].set
		}
	}
	return h.common
}

// learn records that a response on route name was counted against set.
// h.mu is held.
func (h *hostState) learn(name string, set quotaSet) {
	h.tick++
	idx := -1
	for i := range h.routes[:h.nr] {
		if h.routes[i].name == name {
			idx = i
			break
		}
	}
	switch {
	case idx >= 0 && h.routes[idx].set == set:
		h.routes[idx].used = h.tick
		return
	case idx >= 0:
	case h.nr < maxRoutes:
		idx = h.nr
		h.nr++
		h.routes[idx].name = strings.Clone(name)
	default:
		idx = 0
		for i := range h.routes[:h.nr] {
			if h.routes[i].used < h.routes[idx].used {
				idx = i
			}
		}
		h.routes[idx].name = strings.Clone(name)
	}
	h.routes[idx].set, h.routes[idx].used = set, h.tick
	h.recommon()
}

// recommon recomputes the host-wide quotas: those that name no resource
// and that every known route is counted against. h.mu is held.
func (h *hostState) recommon() {
	c := ^quotaSet(0)
	for i := range h.routes[:h.nr] {
		c &= h.routes[i].set
	}
	for i := range h.quotas[:h.nq] {
		if h.quotas[i].named() {
			c &^= 1 << i
		}
	}
	if h.nr == 0 {
		c = 0
	}
	h.common = c
}

// forget removes quota slot i from every route. h.mu is held.
func (h *hostState) forget(i int) {
	for j := range h.routes[:h.nr] {
		h.routes[j].set &^= 1 << i
	}
	h.recommon()
}
