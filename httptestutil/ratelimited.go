package httptestutil

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// RateLimitConfig configures a [RateLimitedAPI]. The zero value is 60
// requests a minute per client, with GitHub headers.
type RateLimitConfig struct {
	// Limit is how many requests a client may make per Window; 0 means 60.
	// Limit × Window in nanoseconds is capped to fit an int64 (a limit of
	// 100 000 a day or a million an hour fit).
	Limit int
	// Window is the period of the limit; 0 means one minute.
	Window time.Duration
	// FixedWindow false (the default) refills each client's bucket
	// continuously, Limit tokens per Window, as OpenAI and Anthropic
	// describe theirs. True gives the whole quota back at the end of
	// each window, counted from the client's first request, as GitHub does.
	FixedWindow bool
	// Family is the header family of every response; "" means
	// [FamilyGitHub].
	Family Family
	// KeyFunc names the client a request counts against; nil means the
	// Authorization header (requests without one share one bucket).
	KeyFunc func(*http.Request) string
	// Handler answers accepted requests; nil means 200 with the body
	// {"ok":true}.
	Handler http.Handler
}

// RateLimitedAPI is an [http.Handler] that emulates a rate-limited API: a
// token bucket per client key. Every response carries the client's quota
// in the configured header [Family]: the limit, what remains after this
// request, and when the quota is whole again (for a continuous bucket,
// when it is full; for a fixed window, the window's end). A request that
// finds the bucket empty gets 429 with Retry-After (whole seconds until
// the next token, at least 1) and a problem+json body, and does not reach
// the handler.
//
// It reads time.Now, so it runs on virtual time in a synctest bubble.
// It is safe for concurrent use by multiple goroutines.
type RateLimitedAPI struct {
	limit   int64
	window  time.Duration
	fixed   bool
	family  Family
	key     func(*http.Request) string
	handler http.Handler

	mu       sync.Mutex
	buckets  map[string]*tokenBucket
	accepted atomic.Int64
	rejected atomic.Int64
}

type tokenBucket struct {
	fill int64     // tokens × window; see take
	last time.Time // continuous: last refill; fixed: window start
}

// NewRateLimitedAPI returns an emulator configured by c.
func NewRateLimitedAPI(c RateLimitConfig) *RateLimitedAPI {
	a := &RateLimitedAPI{
		limit:   int64(c.Limit),
		window:  c.Window,
		fixed:   c.FixedWindow,
		family:  c.Family,
		key:     c.KeyFunc,
		handler: c.Handler,
		buckets: make(map[string]*tokenBucket),
	}
	if c.Limit <= 0 {
		a.limit = 60
	}
	if a.window <= 0 {
		a.window = time.Minute
	}
	if a.limit > math.MaxInt64/int64(a.window) {
		a.limit = math.MaxInt64 / int64(a.window) // keep limit×window in an int64
	}
	if a.family == "" {
		a.family = FamilyGitHub
	}
	if a.key == nil {
		a.key = func(r *http.Request) string { return r.Header.Get("Authorization") }
	}
	if a.handler == nil {
		a.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"ok":true}` + "\n"))
		})
	}
	return a
}

// ServeHTTP takes a token from the client's bucket and lets the handler
// answer, or answers 429 when there is none.
func (a *RateLimitedAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	ok, q, retry := a.take(a.key(r), now)
	QuotaHeaders(w.Header(), a.family, q, now)
	if ok {
		a.accepted.Add(1)
		a.handler.ServeHTTP(w, r)
		return
	}
	a.rejected.Add(1)
	secs := max(ceilSeconds(retry), 1)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusTooManyRequests)
	fmt.Fprintf(w, `{"title":"Too Many Requests","status":429,"detail":"rate limit of %d per %v exceeded; retry in %ds"}`+"\n",
		int(a.limit), a.window, secs)
}

// take takes a token for key at now. It returns whether there was one, the
// quota to report, and, when there was none, how long until the next.
//
// A bucket's fill is kept in exact integer units: one token is worth
// window units, and limit units drip in per nanosecond, so no rounding
// ever turns a due token into a 429.
func (a *RateLimitedAPI) take(key string, now time.Time) (bool, Quota, time.Duration) {
	limit, window := a.limit, int64(a.window)
	full := limit * window
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.buckets[key]
	if b == nil {
		b = &tokenBucket{fill: full, last: now}
		a.buckets[key] = b
	}
	elapsed := int64(now.Sub(b.last))
	switch {
	case a.fixed && elapsed >= window:
		b.last = b.last.Add(time.Duration(elapsed - elapsed%window))
		b.fill = full
	case !a.fixed && elapsed >= window:
		b.fill, b.last = full, now
	case !a.fixed && elapsed > 0:
		b.fill, b.last = min(full, b.fill+elapsed*limit), now
	}
	ok := b.fill >= window
	if ok {
		b.fill -= window
	}
	q := Quota{Limit: int(limit), Remaining: int(b.fill / window), Window: a.window}
	var retry time.Duration
	if a.fixed {
		q.Reset = b.last.Add(a.window).Sub(now)
		retry = q.Reset
	} else {
		q.Reset = time.Duration(ceilDiv(full-b.fill, limit))
		retry = time.Duration(ceilDiv(window-b.fill, limit))
	}
	return ok, q, retry
}

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// Accepted reports how many requests the handler was let to answer.
func (a *RateLimitedAPI) Accepted() int64 { return a.accepted.Load() }

// Rejected reports how many requests got 429.
func (a *RateLimitedAPI) Rejected() int64 { return a.rejected.Load() }
