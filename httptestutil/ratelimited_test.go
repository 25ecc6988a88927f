package httptestutil

import (
	"net/http"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// do sends a GET with an optional Authorization header and returns the
// response with its body closed.
func do(t *testing.T, c *http.Client, url, auth string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp
}

func TestQuotaHeadersPerFamily(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		in1s := start.Add(time.Second)
		tests := []struct {
			family Family
			want   map[string]string
		}{
			{FamilyGitHub, map[string]string{
				"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "X-RateLimit-Used": "1",
				"X-RateLimit-Reset": strconv.FormatInt(in1s.Unix(), 10)}},
			{FamilyOpenAI, map[string]string{
				"x-ratelimit-limit-requests": "3", "x-ratelimit-remaining-requests": "2", "x-ratelimit-reset-requests": "1s"}},
			{FamilyAnthropic, map[string]string{
				"anthropic-ratelimit-requests-limit": "3", "anthropic-ratelimit-requests-remaining": "2",
				"anthropic-ratelimit-requests-reset": in1s.UTC().Format(time.RFC3339)}},
			{FamilyIETF, map[string]string{
				"RateLimit-Limit": "3", "RateLimit-Remaining": "2", "RateLimit-Reset": "1", "RateLimit-Policy": "3;w=3"}},
			{FamilyIETFStructured, map[string]string{
				"RateLimit": `"default";r=2;t=1`, "RateLimit-Policy": `"default";q=3;w=3`}},
		}
		for _, tt := range tests {
			api := NewRateLimitedAPI(RateLimitConfig{Limit: 3, Window: 3 * time.Second, Family: tt.family})
			resp := do(t, &http.Client{Transport: NewHandlerTransport(api)}, "http://api.test/", "")
			for k, want := range tt.want {
				if got := resp.Header.Get(k); got != want {
					t.Errorf("%s: %s = %q, want %q", tt.family, k, got, want)
				}
			}
		}
	})
}

func TestQuotaHeadersTokensAndClamps(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	q := Quota{Limit: 5, Remaining: -3, Reset: 2590 * time.Millisecond, TokenLimit: 1000, TokenRemaining: 10, TokenReset: 6 * time.Minute}
	tests := []struct {
		family Family
		want   map[string]string
	}{
		{FamilyOpenAI, map[string]string{"X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "2.59s",
			"X-Ratelimit-Limit-Tokens": "1000", "X-Ratelimit-Remaining-Tokens": "10", "X-Ratelimit-Reset-Tokens": "6m0s"}},
		{FamilyAnthropic, map[string]string{"Anthropic-Ratelimit-Tokens-Limit": "1000",
			"Anthropic-Ratelimit-Tokens-Reset": "2025-03-01T12:06:00Z", "Anthropic-Ratelimit-Requests-Reset": "2025-03-01T12:00:02Z"}},
		{FamilyGitHub, map[string]string{"X-Ratelimit-Reset": strconv.FormatInt(now.Unix()+3, 10), "X-Ratelimit-Used": "5"}},
		{FamilyIETF, map[string]string{"Ratelimit-Reset": "3", "Ratelimit-Policy": ""}},
		{FamilyIETFStructured, map[string]string{"Ratelimit": `"default";r=0;t=3`, "Ratelimit-Policy": `"default";q=5`}},
		{Family("nope"), map[string]string{}},
	}
	for _, tt := range tests {
		h := http.Header{}
		QuotaHeaders(h, tt.family, q, now)
		for k, want := range tt.want {
			if got := h.Get(k); got != want {
				t.Errorf("%s: %s = %q, want %q", tt.family, k, got, want)
			}
		}
		if len(tt.want) == 0 && len(h) != 0 {
			t.Errorf("%s: wrote %v, want nothing", tt.family, h)
		}
	}
	if got := len(Families()); got != 5 {
		t.Errorf("len(Families()) = %d, want 5", got)
	}
}

func TestRateLimitedAPIBucket(t *testing.T) {
	type step struct {
		at         time.Duration // since the start
		auth       string
		wantStatus int
		wantRem    string // X-RateLimit-Remaining
		wantRetry  string // Retry-After
	}
	tests := []struct {
		name  string
		cfg   RateLimitConfig
		steps []step
	}{
		{"continuous refill", RateLimitConfig{Limit: 2, Window: 10 * time.Second}, []step{
			{0, "", 200, "1", ""},
			{0, "", 200, "0", ""},
			{0, "", 429, "0", "5"},
			{4 * time.Second, "", 429, "0", "1"}, // 0.8 of a token
			{5 * time.Second, "", 200, "0", ""},
			{20 * time.Second, "", 200, "1", ""}, // full again, not more
		}},
		{"fixed window", RateLimitConfig{Limit: 2, Window: 10 * time.Second, FixedWindow: true}, []step{
			{0, "", 200, "1", ""},
			{1 * time.Second, "", 200, "0", ""},
			{9 * time.Second, "", 429, "0", "1"},
			{10 * time.Second, "", 200, "1", ""},
			{35 * time.Second, "", 200, "1", ""},
			{35 * time.Second, "", 200, "0", ""},
			{36 * time.Second, "", 429, "0", "4"}, // window 30..40
		}},
		{"keys are separate", RateLimitConfig{Limit: 1, Window: time.Minute}, []step{
			{0, "Bearer a", 200, "0", ""},
			{0, "Bearer a", 429, "0", "60"},
			{0, "Bearer b", 200, "0", ""},
		}},
		{"defaults", RateLimitConfig{}, []step{
			{0, "", 200, "59", ""},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api := NewRateLimitedAPI(tt.cfg)
				c := &http.Client{Transport: NewHandlerTransport(api)}
				start := time.Now()
				var ok, rejected int64
				for i, s := range tt.steps {
					time.Sleep(time.Until(start.Add(s.at)))
					resp := do(t, c, "http://api.test/", s.auth)
					if resp.StatusCode != s.wantStatus {
						t.Errorf("step %d: status %d, want %d", i, resp.StatusCode, s.wantStatus)
					}
					if got := resp.Header.Get("X-RateLimit-Remaining"); got != s.wantRem {
						t.Errorf("step %d: remaining %q, want %q", i, got, s.wantRem)
					}
					if got := resp.Header.Get("Retry-After"); got != s.wantRetry {
						t.Errorf("step %d: Retry-After %q, want %q", i, got, s.wantRetry)
					}
					if s.wantStatus == 200 {
						ok++
					} else {
						rejected++
						if got, want := resp.Header.Get("Content-Type"), "application/problem+json"; got != want {
							t.Errorf("step %d: Content-Type %q, want %q", i, got, want)
						}
					}
				}
				if api.Accepted() != ok || api.Rejected() != rejected {
					t.Errorf("Accepted, Rejected = %d, %d; want %d, %d", api.Accepted(), api.Rejected(), ok, rejected)
				}
			})
		})
	}
}

func TestRateLimitedAPIUnderLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := NewRateLimitedAPI(RateLimitConfig{Limit: 10, Window: time.Second, Family: FamilyIETFStructured})
		n := NewNetwork()
		srv := n.Serve("api.test", api)
		defer srv.Close()
		tr := n.Transport()
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr}
		// 20 clients, one request every 100 ms each, for 10 s: the bucket
		// lets through its burst of 10, then one request per 100 ms.
		const clients, ticks = 20, 100
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				for range ticks {
					do(t, c, srv.URL, "")
					time.Sleep(100 * time.Millisecond)
				}
			})
		}
		wg.Wait()
		if got, want := api.Accepted(), int64(10+ticks-1); got != want {
			t.Errorf("Accepted() = %d, want %d", got, want)
		}
		if got, want := api.Accepted()+api.Rejected(), int64(clients*ticks); got != want {
			t.Errorf("Accepted()+Rejected() = %d, want %d", got, want)
		}
	})
}

func TestRateLimitedAPILoopback(t *testing.T) {
	api := NewRateLimitedAPI(RateLimitConfig{Limit: 2, Window: time.Hour, Family: FamilyOpenAI})
	forEachBed(t, func() http.Handler { return api }, func(t *testing.T, b bed, c *http.Client, url string) {
		if b.virtual {
			return
		}
		for i, want := range []int{200, 200, 429} {
			resp := do(t, c, url, "k")
			if resp.StatusCode != want {
				t.Errorf("request %d: status %d, want %d", i, resp.StatusCode, want)
			}
			if resp.Header.Get("X-Ratelimit-Limit-Requests") != "2" {
				t.Errorf("request %d: no OpenAI headers in %v", i, resp.Header)
			}
		}
	})
}
