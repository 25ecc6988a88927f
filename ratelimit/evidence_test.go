package ratelimit

import (
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"
)

// A 429's Retry-After pauses the host until the host shows it refuses
// only the excess: it accepts a request let through after one it
// refused. Then a 429 with Retry-After slows the pace and pauses no
// one; two in a row, with no success between, pause the host again.
func TestRetryAfterPausesHostUntilExcessShown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		u := "https://api.example.com/v1/items"
		tooMany := &http.Response{StatusCode: 429, Header: hdr("Retry-After", "1")}
		ok := &http.Response{StatusCode: 200, Header: http.Header{}}
		send := func(resp *http.Response) {
			t.Helper()
			res, err := tr.Reserve(newReq(t, nil, u))
			if err != nil {
				t.Fatalf("Reserve = %v", err)
			}
			time.Sleep(time.Millisecond)
			res.Settle(resp)
		}
		paused := func() bool {
			_, p := tr.Paused(newReq(t, nil, u), time.Now())
			return p
		}

		for i := range 2 { // nothing known: the host pauses as asked
			send(tooMany)
			if !paused() {
				t.Fatalf("after 429 %d: not paused, want the host paused for its Retry-After", i+1)
			}
			time.Sleep(time.Second)
		}
		send(ok) // let through after a refused one, and accepted
		for i, step := range []struct {
			resp       *http.Response
			wantPaused bool
		}{
			{tooMany, false}, // the excess: slower, no pause
			{ok, false},
			{tooMany, false},
			{tooMany, true}, // a second in a row: the host means it
		} {
			time.Sleep(100 * time.Millisecond) // past the pace a cut sets
			send(step.resp)
			if got := paused(); got != step.wantPaused {
				t.Errorf("step %d (%d): paused = %v, want %v", i, step.resp.StatusCode, got, step.wantPaused)
			}
		}
	})
}

// A per-second quota that refills by itself (GCRA, IETF headers) is not
// held to its reset once a probe, sent at its rate before the reset, is
// accepted; a fixed window, which refuses three probes in a row, is held
// to its reset as before.
func TestQuotaProbeTellsRefillFromFixedWindow(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refills bool
	}{
		{"refills", true},
		{"fixed window", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := NewTracker(Options{})
				u := "https://api.example.com/v1/items"
				spent := func() http.Header {
					return hdr("RateLimit-Policy", `"default";q=20;w=1`, "RateLimit", `"default";r=0;t=1`)
				}
				res, err := tr.Reserve(newReq(t, nil, u))
				if err != nil {
					t.Fatal(err)
				}
				res.Settle(&http.Response{StatusCode: 200, Header: spent()})
				start := time.Now()
				var last time.Duration
				probes := 0
				for i := range 4 {
					res, err := tr.Reserve(newReq(t, nil, u))
					if err != nil {
						t.Fatalf("request %d: %v", i, err)
					}
					last = time.Since(start)
					if tc.refills || last >= time.Second {
						res.Settle(&http.Response{StatusCode: 200, Header: hdr("RateLimit-Policy", `"default";q=20;w=1`, "RateLimit", `"default";r=4;t=1`)})
						if !tc.refills {
							break // the reset: the window is whole again
						}
						continue
					}
					probes++
					res.Settle(&http.Response{StatusCode: 429, Header: spent()}) // a probe, refused
				}
				if tc.refills {
					// The probe goes 50 ms (1/20 s) after the spent answer;
					// accepted, the quota refills, and the host is paced at
					// its rate (97% of 20/s) rather than held to the reset.
					if last > 250*time.Millisecond {
						t.Errorf("the fourth request went at %v, want it paced, not held to the reset (1s)", last)
					}
					return
				}
				// Three probes, each an interval after the last answer, then
				// the reset the last answer named (t=1: a second later).
				if probes != probeRefusals || last < time.Second+probeRefusals*50*time.Millisecond {
					t.Errorf("%d probes, then a request at %v; want %d, then one held to the last answer's reset (1 s after it)", probes, last, probeRefusals)
				}
			})
		})
	}
}

// A 429 that names no wait pauses the host a quarter of a second; when
// the first request let through after that pause is refused too, with
// no success between, the pause doubles (the limiter still counts what
// came before), and the learned cap is not cut again.
func TestBare429PauseDoublesWhenStillRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		u := "https://api.example.com/v1/items"
		bare := &http.Response{StatusCode: 429, Header: http.Header{}}
		var pauses []time.Duration
		for range 4 {
			res, err := tr.Reserve(newReq(t, nil, u))
			if err != nil {
				t.Fatal(err)
			}
			at := time.Now()
			res.Settle(bare)
			end, _ := tr.Paused(newReq(t, nil, u), at)
			pauses = append(pauses, end.Sub(at))
		}
		want := []time.Duration{throttlePause, 2 * throttlePause, 4 * throttlePause, maxOwnWait}
		for i := range want {
			if pauses[i] != want[i] {
				t.Errorf("pauses = %v, want %v", pauses, want)
				break
			}
		}
	})
}

// A quota that says no window (go-chi/httprate's X-RateLimit-*) and
// whose reset, in Unix seconds, is never more than a second ahead for
// longer than a second is a quota a second: the host is paced at 97% of
// it, a spent count holds nobody to the reset, and a 429's Retry-After
// cuts the pace rather than pause the host. A quota of a minute said the
// same way is held to its reset as before.
func TestShortWindowGuessedFromResets(t *testing.T) {
	for _, tc := range []struct {
		name     string
		window   int64 // seconds: the reset is the next multiple of it
		wantHeld bool
	}{
		{"a second", 1, false},
		{"a minute", 60, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := NewTracker(Options{})
				u := "https://api.example.com/v1/items"
				answer := func(remaining int) *http.Response {
					now := time.Now()
					reset := (now.Unix()/tc.window + 1) * tc.window
					return &http.Response{StatusCode: 200, Header: hdr(
						"Date", now.UTC().Format(http.TimeFormat),
						"X-RateLimit-Limit", "20",
						"X-RateLimit-Remaining", strconv.Itoa(remaining),
						"X-RateLimit-Reset", strconv.FormatInt(reset, 10))}
				}
				send := func(remaining int) time.Duration {
					t.Helper()
					start := time.Now()
					res, err := tr.Reserve(newReq(t, nil, u))
					if err != nil {
						t.Fatal(err)
					}
					waited := time.Since(start)
					res.Settle(answer(remaining))
					return waited
				}
				time.Sleep(300 * time.Millisecond) // off the second
				for range 15 {                     // 1.5 s at 10/s, quota left
					send(10)
					time.Sleep(100 * time.Millisecond)
				}
				send(0) // spent
				waited := send(5)
				if held := waited > 500*time.Millisecond; held != tc.wantHeld {
					t.Errorf("the request after the spent answer waited %v; want held to the reset: %v", waited, tc.wantHeld)
				}
				if tc.wantHeld {
					return
				}
				// Paced at 97% of 20/s: ten requests take about half a second.
				start := time.Now()
				for range 10 {
					send(5)
				}
				rate := 20 * throttleBelow
				if d, want := time.Since(start), time.Duration(10/rate*float64(time.Second)); d < want*8/10 || d > want*12/10 {
					t.Errorf("ten requests took %v, want about %v (paced at 97%% of 20/s)", d, want)
				}
				// The client paces below the quota's rate: a 429 with
				// Retry-After answers the excess, and the request that
				// got it waits (Retry does), not the host.
				res, err := tr.Reserve(newReq(t, nil, u))
				if err != nil {
					t.Fatal(err)
				}
				refused := answer(0)
				refused.StatusCode = 429
				refused.Header.Set("Retry-After", "1")
				res.Settle(refused)
				if _, p := tr.Paused(newReq(t, nil, u), time.Now()); p {
					t.Error("after a 429 with Retry-After: the host is paused, want only its pace cut")
				}
			})
		})
	}
}

// A 429 with Retry-After to a request sent before the host had any
// state (the first burst) still counts: a request let through after it
// came back, and accepted, shows that the host refuses only the excess,
// so the next such 429 slows the pace and pauses no one.
func TestFirstBurst429CountsAsEvidence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		u := "https://api.example.com/v1/items"
		tooMany := func() *http.Response { return &http.Response{StatusCode: 429, Header: hdr("Retry-After", "1")} }
		first, err := tr.Reserve(newReq(t, nil, u)) // no state yet
		if err != nil {
			t.Fatal(err)
		}
		first.Settle(tooMany())
		if _, p := tr.Paused(newReq(t, nil, u), time.Now()); !p {
			t.Fatal("after the first 429: not paused, want the host paused for its Retry-After")
		}
		time.Sleep(time.Second)
		for i, resp := range []*http.Response{{StatusCode: 200, Header: http.Header{}}, tooMany()} {
			res, err := tr.Reserve(newReq(t, nil, u))
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			res.Settle(resp)
		}
		if _, p := tr.Paused(newReq(t, nil, u), time.Now()); p {
			t.Error("after a success and a 429: paused, want the excess shown (the success went after the first 429) and no pause")
		}
	})
}

// A burst of 429s from a quota a second that is paced at its rate (a
// fixed window refusing the requests beyond its count) answers one
// excess: the pace is cut once, not once a 429.
func TestRefillingQuota429sCutOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		u := "https://api.example.com/v1/items"
		answer := func(status, remaining int) *http.Response {
			now := time.Now()
			return &http.Response{StatusCode: status, Header: hdr(
				"Date", now.UTC().Format(http.TimeFormat),
				"X-RateLimit-Limit", "20",
				"X-RateLimit-Remaining", strconv.Itoa(remaining),
				"X-RateLimit-Reset", strconv.FormatInt(now.Unix()+1, 10))}
		}
		send := func(status, remaining int) {
			t.Helper()
			res, err := tr.Reserve(newReq(t, nil, u))
			if err != nil {
				t.Fatal(err)
			}
			res.Settle(answer(status, remaining))
		}
		time.Sleep(300 * time.Millisecond)
		for range 15 { // 1.5 s: the window is guessed, the host paced
			send(200, 10)
			time.Sleep(100 * time.Millisecond)
		}
		for range 20 { // a second at the pace: the host accepts its rate
			send(200, 1)
		}
		for range 5 {
			send(429, 0)
		}
		time.Sleep(time.Second) // past the spent window
		start := time.Now()
		for range 10 {
			send(200, 5)
		}
		rate := 20 * throttleBelow * throttleCut // one cut
		if d, want := time.Since(start), time.Duration(10/rate*float64(time.Second)); d < want*9/10 || d > want*11/10 {
			t.Errorf("ten requests took %v, want about %v (paced at 97%% of 20/s, cut once)", d, want)
		}
	})
}

// A 429 that names no wait, to a request sent at a rate the host has
// been accepting for a second, is a probe above the host's rate: it
// costs that request, not a pause of the host, and the cap holds just
// under what the host accepted. Only a 429 with nothing learned but a
// guess pauses the host.
func TestProbeAboveLearnedRateCostsOnlyTheProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		u := "https://api.example.com/v1/items"
		bare := func() *http.Response { return &http.Response{StatusCode: 429, Header: http.Header{}} }
		ok := func() *http.Response { return &http.Response{StatusCode: 200, Header: http.Header{}} }
		send := func(resp *http.Response) {
			t.Helper()
			res, err := tr.Reserve(newReq(t, nil, u))
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
			res.Settle(resp)
		}
		send(bare())
		if _, p := tr.Paused(newReq(t, nil, u), time.Now()); !p {
			t.Fatal("after the first 429: not paused, want the host paused (nothing is learned yet)")
		}
		for start := time.Now(); time.Since(start) < time.Second; {
			send(ok()) // paced at the guess, which grows
		}
		send(bare()) // the guess was above the host's rate: cut, and paused (the guess was a guess)
		for start := time.Now(); time.Since(start) < 2*time.Second; {
			send(ok()) // paced at the learned rate
		}
		send(bare())
		if end, p := tr.Paused(newReq(t, nil, u), time.Now()); p {
			t.Errorf("after a 429 at the learned rate: paused for %v, want no pause (the probe alone is refused)", time.Until(end))
		}
		// The next request waits one interval of the pace, not a pause.
		start := time.Now()
		send(ok())
		if d := time.Since(start); d >= throttlePause {
			t.Errorf("the request after the probe waited %v, want less than a pause (%v)", d, throttlePause)
		}
	})
}

// The successes a host had before its first 429, sent while nothing was
// known, seed the rate guessed at that 429: a host that accepted 100 in
// the first burst is paced at 90/s after it, not at DefaultReleaseRate.
func TestFirstBurstSeedsTheGuess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		u := "https://api.example.com/v1/items"
		for range 100 { // the first burst, nothing known
			res, err := tr.Reserve(newReq(t, nil, u))
			if err != nil {
				t.Fatal(err)
			}
			res.Settle(&http.Response{StatusCode: 200, Header: http.Header{}})
		}
		res, err := tr.Reserve(newReq(t, nil, u))
		if err != nil {
			t.Fatal(err)
		}
		res.Settle(&http.Response{StatusCode: 429, Header: http.Header{}})
		time.Sleep(time.Second) // past the pause and its release
		start := time.Now()
		for range 45 {
			res, err := tr.Reserve(newReq(t, nil, u))
			if err != nil {
				t.Fatal(err)
			}
			res.Settle(&http.Response{StatusCode: 200, Header: http.Header{}})
		}
		// At 90/s and up, 45 requests take half a second at most; at
		// DefaultReleaseRate (20/s, growing by one a success) they took 1.2 s.
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("45 requests after the first 429 took %v, want at most 500ms (paced from the first burst's 100/s)", d)
		}
	})
}

// A limiter that counts the requests it refuses (HAProxy's
// http_req_rate) refuses the first request let through after the pause
// of its first 429, with no success between: it is then held just under
// what it accepted in its first burst, and each later 429 pauses it.
func TestRefusalCountingLimiterHeldAtFirstBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		u := "https://api.example.com/v1/items"
		send := func(status int) {
			t.Helper()
			res, err := tr.Reserve(newReq(t, nil, u))
			if err != nil {
				t.Fatal(err)
			}
			res.Settle(&http.Response{StatusCode: status, Header: http.Header{}})
		}
		for range 100 { // the first burst, nothing known
			send(200)
		}
		first := time.Now()
		send(429) // the first 429: a pause
		time.Sleep(throttlePause)
		send(429) // let through after it, refused: the limiter counts refusals
		// Its window counts a second: the host is held until a second
		// after the first 429, not for pauses that double past it.
		if end, _ := tr.Paused(newReq(t, nil, u), time.Now()); !end.Equal(first.Add(time.Second)) {
			t.Errorf("held until %v after the first 429, want 1s", end.Sub(first))
		}
		time.Sleep(2 * time.Second)
		start := time.Now()
		for range 96 {
			send(200)
		}
		// Held at 97% of 100/s less half a request: 96 take a second.
		if d, want := time.Since(start), time.Second; d < want*9/10 || d > want*11/10 {
			t.Errorf("96 requests took %v, want about %v (held just under the first burst's 100/s)", d, want)
		}
		send(429)
		if _, p := tr.Paused(newReq(t, nil, u), time.Now()); !p {
			t.Error("a 429 from a limiter that counts its refusals: not paused, want the host paused")
		}
	})
}

// A first burst smaller than DefaultReleaseRate is a bucket's burst
// (nginx's burst of 5), not a second's count: a refusal after the first
// pause doubles the pause as before and holds no rate at that burst.
func TestSmallFirstBurstNotHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		u := "https://api.example.com/v1/items"
		send := func(status int) {
			t.Helper()
			res, err := tr.Reserve(newReq(t, nil, u))
			if err != nil {
				t.Fatal(err)
			}
			res.Settle(&http.Response{StatusCode: status, Header: http.Header{}})
		}
		for range 6 {
			send(200)
		}
		send(429)
		time.Sleep(throttlePause)
		send(429)
		time.Sleep(2 * time.Second)
		start := time.Now()
		for range 40 {
			send(200)
		}
		// The guess (20/s, growing by one a success), not 5.3/s: 40
		// requests take under 1.5 s, not over 7.
		if d := time.Since(start); d > 1500*time.Millisecond {
			t.Errorf("40 requests took %v, want under 1.5s (no hold at a bucket's burst)", d)
		}
	})
}

// A 429 without Retry-After to a request sent at a guess (a cap learned
// from an earlier 429) probed above the host's rate: it costs the probe
// and a few slots of the pace, not a pause of the host.
func TestGuessRefusedCostsNoPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		u := "https://api.example.com/v1/items"
		bare := &http.Response{StatusCode: 429, Header: http.Header{}}
		ok := &http.Response{StatusCode: 200, Header: http.Header{}}
		send := func(resp *http.Response) {
			t.Helper()
			res, err := tr.Reserve(newReq(t, nil, u))
			if err != nil {
				t.Fatalf("Reserve = %v", err)
			}
			time.Sleep(time.Millisecond)
			res.Settle(resp)
		}
		send(bare) // nothing known: a quarter-second pause, and a guess
		if _, p := tr.Paused(newReq(t, nil, u), time.Now()); !p {
			t.Fatal("after the first 429: not paused, want a quarter second")
		}
		time.Sleep(300 * time.Millisecond)
		for range 5 {
			send(ok)
		}
		before := time.Now()
		send(bare) // sent at the guess, refused
		if end, p := tr.Paused(newReq(t, nil, u), time.Now()); p {
			t.Errorf("after a 429 at the guess: paused for %v, want no pause", end.Sub(time.Now()))
		}
		// The next request waits a few slots of the pace at most.
		send(ok)
		if d := time.Since(before); d > 300*time.Millisecond {
			t.Errorf("the next request went %v after the refused one, want a few slots of the pace", d)
		}
	})
}
