package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"
)

// step is one response of a random sequence: its status and headers, and
// the longest wait it states (a reset, a window, a Retry-After), measured
// as the server meant it.
type step struct {
	status int
	h      http.Header
	says   time.Duration
	desc   string
}

// randomStep makes a response of a random family, at the client's now,
// from a server whose clock is skew ahead of the client's.
func randomStep(rng *rand.Rand, now time.Time, skew time.Duration) step {
	server := now.Add(skew)
	h := http.Header{}
	if rng.IntN(3) > 0 {
		h.Set("Date", server.UTC().Format(http.TimeFormat))
	} else {
		server = now // no Date: absolute resets are read on the client's clock
	}
	delta := time.Duration(rng.IntN(40)-8) * time.Second // resets in the past too
	secs := strconv.Itoa(int(delta / time.Second))
	rem := strconv.Itoa(rng.IntN(3))
	s := step{status: 200, h: h, says: max(delta, 0)}
	switch rng.IntN(12) {
	case 0:
		s.desc = "x-ratelimit delta " + secs
		h.Set("X-RateLimit-Limit", "10")
		h.Set("X-RateLimit-Remaining", rem)
		h.Set("X-RateLimit-Reset", secs)
		if rng.IntN(2) == 0 {
			h.Set("X-RateLimit-Resource", []string{"core", "search"}[rng.IntN(2)])
		}
	case 1:
		s.desc = "x-rate-limit epoch " + secs
		h.Set("X-Rate-Limit-Remaining", rem)
		h.Set("X-Rate-Limit-Reset", strconv.FormatInt(server.Add(delta).Unix(), 10))
		s.says += time.Second // epochs are whole seconds
	case 2:
		s.desc = "openai " + secs
		h.Set("X-Ratelimit-Limit-Requests", "10")
		h.Set("X-Ratelimit-Remaining-Requests", rem)
		h.Set("X-Ratelimit-Reset-Requests", max(delta, 0).String())
		h.Set("X-Ratelimit-Remaining-Tokens", strconv.Itoa(rng.IntN(2)*1000))
		h.Set("X-Ratelimit-Reset-Tokens", max(delta/2, 0).String())
	case 3:
		s.desc = "anthropic " + secs
		h.Set("Anthropic-Ratelimit-Requests-Remaining", rem)
		h.Set("Anthropic-Ratelimit-Requests-Reset", server.Add(delta).UTC().Format(time.RFC3339))
		s.says += time.Second
	case 4:
		w := rng.IntN(30) + 1
		s.desc = "ietf " + secs + " w " + strconv.Itoa(w)
		h.Set("RateLimit-Policy", `"p";q=10;w=`+strconv.Itoa(w))
		h.Set("RateLimit", `"p";r=`+rem+`;t=`+strconv.Itoa(max(int(delta/time.Second), 0)))
		s.says = max(s.says, time.Duration(w)*time.Second)
	case 5:
		s.desc = "draft " + secs
		h.Set("RateLimit-Limit", "10")
		h.Set("RateLimit-Remaining", rem)
		h.Set("RateLimit-Reset", strconv.Itoa(max(int(delta/time.Second), 0)))
	case 6, 7:
		s.status = []int{429, 503}[rng.IntN(2)]
		s.desc = strconv.Itoa(s.status) + " retry-after " + secs
		h.Set("Retry-After", strconv.Itoa(max(int(delta/time.Second), 0)))
	case 8:
		s.status = 429
		s.desc = "429 retry-after date " + secs
		h.Set("Retry-After", server.Add(delta).UTC().Format(http.TimeFormat))
		s.says += time.Second
	case 9:
		s.status = 429
		s.desc = "429 retry-after-ms"
		ms := rng.IntN(5000)
		h.Set("Retry-After-Ms", strconv.Itoa(ms))
		s.says = time.Duration(ms) * time.Millisecond
	case 10:
		s.status = []int{429, 503}[rng.IntN(2)]
		s.desc = strconv.Itoa(s.status) + " bare"
		s.says = 0
	default:
		s.desc = "200 bare"
		s.says = 0
	}
	return s
}

// TestPropertyWaitsBounded sends random sequences of responses (every
// header family, 429 and 503 with and without Retry-After, resets in the
// past and the future, server clocks off by up to an hour either way,
// with and without Date) and checks for every request:
//
//   - it never waits longer than the largest reset, window or
//     Retry-After the server has sent so far, plus maxOwnWait (a second)
//     for the Tracker's own spreading and pacing;
//   - the caller's deadline rule: a request with a deadline either goes
//     before it, or fails at once with a QuotaError; never waits only to
//     fail.
func TestPropertyWaitsBounded(t *testing.T) {
	const sequences, steps = 300, 40
	for seq := range sequences {
		synctest.Test(t, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seq), 17))
			tr := NewTracker(Options{})
			skew := time.Duration(rng.IntN(7200)-3600) * time.Second
			var largest time.Duration
			var log []string
			paths := []string{"/a", "/search/x", "/v1/y"}
			for i := range steps {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				var deadline time.Duration
				if rng.IntN(3) == 0 {
					deadline = time.Duration(rng.IntN(20000)) * time.Millisecond
					ctx, cancel = context.WithTimeout(ctx, deadline)
				}
				r, _ := http.NewRequestWithContext(ctx, "GET", "https://api.example.com"+paths[rng.IntN(len(paths))], nil)
				start := time.Now()
				res, err := tr.Reserve(r)
				took := time.Since(start)
				cancel()
				var qe *QuotaError
				switch {
				case err != nil && !errors.As(err, &qe):
					t.Fatalf("seq %d step %d: Reserve = %v, want nil or a QuotaError\n%v", seq, i, err, log)
				case err != nil && took != 0:
					t.Fatalf("seq %d step %d: failed after %v, want at once\n%v", seq, i, took, log)
				case err == nil && deadline > 0 && took >= deadline:
					t.Fatalf("seq %d step %d: went after %v, past its deadline %v\n%v", seq, i, took, deadline, log)
				case took > largest+maxOwnWait:
					t.Fatalf("seq %d step %d: waited %v, longer than the largest the server sent (%v) + %v\n%v",
						seq, i, took, largest, maxOwnWait, log)
				}
				if err != nil {
					continue
				}
				s := randomStep(rng, time.Now(), skew)
				log = append(log, fmt.Sprintf("%d: waited %v, then %s", i, took, s.desc))
				if rng.IntN(8) == 0 {
					res.Cancel()
					continue
				}
				largest = max(largest, s.says)
				res.Settle(&http.Response{StatusCode: s.status, Header: s.h})
				// Time passes between requests, sometimes.
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Millisecond)
			}
		})
	}
}
