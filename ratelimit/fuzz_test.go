package ratelimit

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// fuzzHeader turns "Name: value" lines into canonical response headers.
func fuzzHeader(raw string) http.Header {
	h := http.Header{}
	for _, line := range strings.Split(raw, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	return h
}

// FuzzParseHeaders checks ParseHeaders' promises on any headers: no
// panic, the same answer twice, and a Quota that keeps its invariants.
func FuzzParseHeaders(f *testing.F) {
	f.Add("X-RateLimit-Limit: 60\nX-RateLimit-Remaining: 56\nX-RateLimit-Reset: 1372700873\nDate: Mon, 01 Jul 2013 17:27:06 GMT", int64(1372699626))
	f.Add(`RateLimit-Policy: "default";q=100;w=60`+"\n"+`RateLimit: "default";r=50;t=30`, int64(0))
	f.Fuzz(func(t *testing.T, raw string, unix int64) {
		h := fuzzHeader(raw)
		now := time.Unix(unix%(1<<40), 0)
		q, ok := ParseHeaders(h, now)
		q2, ok2 := ParseHeaders(h, now)
		if q != q2 || ok != ok2 {
			t.Fatalf("not deterministic: %+v, %v then %+v, %v", q, ok, q2, ok2)
		}
		if !ok {
			if q != (Quota{}) {
				t.Fatalf("ok false with a non-zero quota %+v", q)
			}
			return
		}
		if q.Limit < Unknown || q.Remaining < Unknown || q.Limit > maxCount || q.Remaining > maxCount {
			t.Errorf("counts out of range: %+v", q)
		}
		if q.Limit == Unknown && q.Remaining == Unknown {
			t.Errorf("ok with neither Limit nor Remaining: %+v", q)
		}
		if q.Limit != Unknown && q.Remaining > q.Limit {
			t.Errorf("Remaining %d above Limit %d", q.Remaining, q.Limit)
		}
		if !q.Reset.IsZero() && (q.Reset.Before(now) || q.Reset.Sub(now) > maxReset) {
			t.Errorf("Reset %v outside [now, now+400d] (now %v)", q.Reset, now)
		}
		if q.Window < 0 || q.Window > maxReset {
			t.Errorf("Window %v out of range", q.Window)
		}
		if q.Family == FamilyUnknown || q.Family.String() == "unknown" {
			t.Errorf("no family: %+v", q)
		}
	})
}
