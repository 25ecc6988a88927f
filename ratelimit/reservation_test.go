package ratelimit

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"
)

func respond(status int, h http.Header) *http.Response {
	return &http.Response{StatusCode: status, Header: h}
}

func TestReservationCancelGivesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{MaxWait: -1})
		r := newReq(t, nil, "https://api.example.com/x")
		tr.Observe(r, quotaHeader(10, 2, 30*time.Second))
		a, err := tr.Reserve(r)
		if err != nil {
			t.Fatal(err)
		}
		b, err := tr.Reserve(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Reserve(r); err == nil {
			t.Fatalf("third Reserve with 2 left = nil, want a QuotaError")
		}
		b.Cancel() // refused beneath: never reached the server
		b.Cancel() // a second cancel gives nothing more back
		b.Settle(respond(200, nil))
		if q, _ := tr.Quota(r); q.Remaining != 1 {
			t.Errorf("Remaining after a cancel = %d, want 1", q.Remaining)
		}
		c, err := tr.Reserve(r)
		if err != nil {
			t.Errorf("Reserve after a cancel = %v, want nil", err)
		}
		a.Settle(respond(200, quotaHeader(10, 1, 30*time.Second)))
		c.Settle(nil)
		if _, err := tr.Reserve(r); err == nil {
			t.Errorf("Reserve with none left = nil, want a QuotaError")
		}
		var zero Reservation
		zero.Settle(respond(429, nil)) // the zero Reservation does nothing
		zero.Cancel()
	})
}

func TestReservationCancelAfterNewWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		r := newReq(t, nil, "https://api.example.com/x")
		tr.Observe(r, quotaHeader(3, 1, time.Second))
		res, _ := tr.Reserve(r)
		time.Sleep(2 * time.Second)
		tr.Observe(r, quotaHeader(3, 3, 5*time.Second)) // a new window
		res.Cancel()
		if q, _ := tr.Quota(r); q.Remaining != 3 {
			t.Errorf("Remaining = %d after cancelling a unit of the old window, want 3", q.Remaining)
		}
	})
}

func TestResponseVerdict(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	exhausted := []Quota{{Limit: 10, Remaining: 0, Reset: now.Add(time.Minute)}}
	search := []Quota{{Limit: 30, Remaining: 0, Reset: now.Add(time.Minute), Resource: "search", Family: FamilyXRateLimit}}
	policy := []Quota{{Limit: 30, Remaining: 0, Reset: now.Add(59 * time.Second), Policy: "search", Family: FamilyRateLimit}}
	tokens := []Quota{{Limit: 30, Remaining: 0, Reset: now.Add(time.Minute), Policy: "tokens", Family: FamilyOpenAI}}
	cases := []struct {
		name   string
		status int
		h      http.Header
		qs     []Quota
		want   Verdict
		until  time.Duration
	}{
		{"200", 200, hdr("Retry-After", "5"), nil, VerdictNone, 0},
		{"429 retry-after", 429, hdr("Retry-After", "5"), nil, VerdictPause, 5 * time.Second},
		{"503 retry-after", 503, hdr("Retry-After", "5"), nil, VerdictPause, 5 * time.Second},
		{"429 retry-after-ms", 429, hdr("Retry-After-Ms", "1500"), nil, VerdictPause, 1500 * time.Millisecond},
		{"429 date against Date", 429, hdr("Date", "Tue, 01 Jan 2030 01:00:00 GMT", "Retry-After", "Tue, 01 Jan 2030 01:00:10 GMT"), nil, VerdictPause, 10 * time.Second},
		{"429 retry-after 0", 429, hdr("Retry-After", "0"), nil, VerdictNone, 0},
		{"429 bare", 429, hdr(), nil, VerdictThrottle, 0},
		{"429 with an exhausted quota", 429, hdr(), exhausted, VerdictNone, 0},
		// A named quota spent for as long as Retry-After asks holds its own
		// routes only; an unnamed one, or one that resets sooner, does not
		// explain the wait.
		{"429 retry-after, its resource spent as long", 429, hdr("Retry-After", "60"), search, VerdictNone, 0},
		{"429 retry-after, its policy spent a second less", 429, hdr("Retry-After", "60"), policy, VerdictNone, 0},
		{"429 retry-after, its resource spent shorter", 429, hdr("Retry-After", "90"), search, VerdictPause, 90 * time.Second},
		{"429 retry-after, an unnamed quota spent", 429, hdr("Retry-After", "60"), tokens, VerdictPause, time.Minute},
		{"429 retry-after, a quota spent with no name", 429, hdr("Retry-After", "60"), exhausted, VerdictPause, time.Minute},
		{"503 bare", 503, hdr(), nil, VerdictNone, 0},
		{"429 garbage retry-after", 429, hdr("Retry-After", "soon"), nil, VerdictThrottle, 0},
		{"429 retry-after past 400 days", 429, hdr("Retry-After", "99999999999"), nil, VerdictNone, 0},
	}
	for _, tc := range cases {
		v, until := ResponseVerdict(tc.status, tc.h, tc.qs, now)
		var got time.Duration
		if !until.IsZero() {
			got = until.Sub(now)
		}
		if v != tc.want || got != tc.until {
			t.Errorf("%s: ResponseVerdict = %v, +%v; want %v, +%v", tc.name, v, got, tc.want, tc.until)
		}
	}
}

func TestTrackerResources(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{MaxWait: -1})
		get := func(path string) *http.Request { return newReq(t, nil, "https://api.github.com"+path) }
		settle := func(path, resource, remaining string, reset time.Duration) {
			res, err := tr.Reserve(get(path))
			if err != nil {
				t.Fatalf("Reserve %s = %v", path, err)
			}
			h := quotaHeader(100, 0, reset)
			h.Set("X-RateLimit-Remaining", remaining)
			h.Set("X-RateLimit-Resource", resource)
			res.Settle(respond(200, h))
		}
		goes := func(path string, want bool) {
			t.Helper()
			res, err := tr.Reserve(get(path))
			res.Cancel()
			if (err == nil) != want {
				t.Errorf("Reserve %s = %v, want going %v", path, err, want)
			}
		}
		settle("/repos/o/r", "core", "0", time.Hour)
		// core is exhausted: its route waits; a route no response has
		// named yet is not held by a quota that names its resource.
		goes("/repos/o/r", false)
		goes("/users/u", true)
		settle("/search/code", "search", "0", 40*time.Second)
		goes("/search/issues", false)
		goes("/repos/o/r/issues", false)
		goes("/gists", true)
		// A quota that names no resource is host-wide: it holds a route
		// not seen yet once every known route is counted against it.
		api := func(path string) *http.Request { return newReq(t, nil, "https://api.example.com"+path) }
		tr.Observe(api("/a"), quotaHeader(10, 0, time.Minute))
		tr.Observe(api("/b"), quotaHeader(10, 0, time.Minute))
		if res, err := tr.Reserve(api("/c")); err == nil {
			res.Cancel()
			t.Errorf("unseen route of a host-wide exhausted quota: Reserve = nil, want a QuotaError")
		}
	})
}

func TestTrackerTokensQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		r := newReq(t, nil, "https://api.openai.com/v1/chat/completions")
		res, _ := tr.Reserve(r)
		res.Settle(respond(200, hdr(
			"X-Ratelimit-Limit-Requests", "60", "X-Ratelimit-Remaining-Requests", "59", "X-Ratelimit-Reset-Requests", "1s",
			"X-Ratelimit-Limit-Tokens", "1000", "X-Ratelimit-Remaining-Tokens", "0", "X-Ratelimit-Reset-Tokens", "6s",
		)))
		took, err := timedWait(tr, r)
		if err != nil || took != 6*time.Second {
			t.Errorf("with tokens spent: Reserve waited %v (%v), want 6s for the tokens' reset", took, err)
		}
		// The requests quota is counted down by the request; the tokens
		// quota is not (the Tracker cannot know how many it used).
		q, _ := tr.Quota(r)
		if q.Policy != "requests" && q.Policy != "tokens" {
			t.Errorf("Quota = %+v", q)
		}
	})
}

// TestTrackerBounded fills the Tracker with 100 000 hosts of four
// quotas each, all exhausted until a reset a second away: the hosts kept
// never exceed MaxHosts, and once the resets have passed, new hosts take
// the place of old ones.
func TestTrackerBounded(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{MaxHosts: 1000})
		h := hdr(
			"Anthropic-Ratelimit-Requests-Remaining", "0", "Anthropic-Ratelimit-Requests-Reset", "",
			"Anthropic-Ratelimit-Tokens-Remaining", "0", "Anthropic-Ratelimit-Input-Tokens-Remaining", "0",
			"Anthropic-Ratelimit-Output-Tokens-Remaining", "0",
		)
		for i := range n {
			if i%1000 == 0 {
				time.Sleep(2 * time.Second) // the resets of the last thousand pass
				h.Set("Anthropic-Ratelimit-Requests-Reset", time.Now().Add(time.Second).UTC().Format(time.RFC3339))
			}
			r, _ := http.NewRequest("GET", "https://h"+itoa(i)+".example.com/v1/messages", nil)
			tr.Observe(r, h)
			if got := tr.Len(); got > 1000 {
				t.Fatalf("after %d hosts: Len = %d, want at most 1000", i+1, got)
			}
		}
		last, _ := http.NewRequest("GET", "https://h"+itoa(n-1)+".example.com/v1/messages", nil)
		if q, ok := tr.Quota(last); !ok || q.Remaining != 0 {
			t.Errorf("the last host's quota = %+v, %v; want it tracked, exhausted", q, ok)
		}
	})
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		if i /= 10; i == 0 {
			return string(b[n:])
		}
	}
}

// Holds says whether Cancel gives something back: nothing for a host
// with nothing known; a quota's unit once its responses report one, and
// nothing more once cancelled.
func TestReservationHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		res, err := tr.Reserve(newReq(t, nil, "https://api.example.com/x"))
		if err != nil {
			t.Fatal(err)
		}
		if res.Holds() {
			t.Error("nothing known of the host: Holds = true; want false")
		}
		res.Settle(&http.Response{StatusCode: 200, Header: quotaHeader(100, 50, time.Minute)})
		res, err = tr.Reserve(newReq(t, nil, "https://api.example.com/x"))
		if err != nil {
			t.Fatal(err)
		}
		if !res.Holds() {
			t.Error("a quota with 50 left: Holds = false; want true (a unit)")
		}
		res.Cancel()
		if res.Holds() {
			t.Error("after Cancel: Holds = true; want false")
		}
	})
}
