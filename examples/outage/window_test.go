package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
)

// The table's "during the outage" and "in the first second after it came
// back" rows must count exactly the requests the server got in those
// windows, for every outage the program accepts. The server counts in
// 100 ms buckets, so an outage whose edges fall inside a bucket would put
// a request answered 503 in "before the outage", and one answered 200
// after the return in "during".
func TestSummarizeCountsTheOutageWindowExactly(t *testing.T) {
	for _, tt := range []struct {
		name         string
		start, width time.Duration
	}{
		{"on the bucket grid", time.Second, 2500 * time.Millisecond},
		{"off the bucket grid", 1050 * time.Millisecond, 2500 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := config{Clients: 1, Instances: 1, Run: 7 * time.Second, OutageStart: tt.start, Outage: tt.width,
				Deadline: 2 * time.Second, Think: 100 * time.Millisecond, Backoff: 100 * time.Millisecond}
			if err := c.validate(); err != nil {
				t.Skipf("the program refuses this outage: %v", err)
			}
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				emu := httptestutil.NewOutage(start, httptestutil.OutageConfig{Start: c.OutageStart, Duration: c.Outage})
				var during, recovery int64
				// Two requests 10 ms into the outage, one 10 ms after it.
				in, after := c.OutageStart+10*time.Millisecond, c.outageEnd()+10*time.Millisecond
				for _, at := range []time.Duration{in, in, after} {
					time.Sleep(at - time.Since(start))
					w := httptest.NewRecorder()
					emu.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
					if w.Code == http.StatusServiceUnavailable {
						during++
					} else {
						recovery++
					}
				}
				s := summarize(c, result{buckets: emu.Buckets()})
				if s.during != during {
					t.Errorf("during = %d, want %d (requests answered 503)", s.during, during)
				}
				if s.recovery != recovery {
					t.Errorf("recovery = %d, want %d (requests in the second after the return)", s.recovery, recovery)
				}
			})
		})
	}
}
