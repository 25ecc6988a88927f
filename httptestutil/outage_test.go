package httptestutil

import (
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

func TestOutageBuckets(t *testing.T) {
	tests := []struct {
		name       string
		mode       OutageMode
		wantStatus int // while down; 0 for a connection error
	}{
		{"503", Outage503, 503},
		{"reset", OutageReset, 0},
		{"refuse", OutageRefuse, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				o := NewOutage(time.Now(), OutageConfig{
					Start: time.Second, Duration: 2 * time.Second, Mode: tt.mode,
					RetryAfter: 1500 * time.Millisecond, Bucket: 500 * time.Millisecond,
				})
				n := NewNetwork()
				srv := n.Serve("api.test", o)
				defer srv.Close()
				n.RefuseWhen("api.test", o.Refusing)
				tr := n.Transport()
				tr.DisableKeepAlives = true // each request dials, so refusals show
				defer tr.CloseIdleConnections()
				c := &http.Client{Transport: tr}
				// One request every 100 ms for 4 s.
				for i := range 40 {
					at := time.Duration(i) * 100 * time.Millisecond
					down := at >= time.Second && at < 3*time.Second
					resp, err := c.Get(srv.URL)
					switch {
					case !down && (err != nil || resp.StatusCode != 200):
						t.Errorf("at %v (healthy): %v %v, want 200", at, resp, err)
					case down && tt.wantStatus != 0 && (err != nil || resp.StatusCode != tt.wantStatus || resp.Header.Get("Retry-After") != "2"):
						t.Errorf("at %v (down): %v %v, want %d with Retry-After 2", at, resp, err, tt.wantStatus)
					case down && tt.wantStatus == 0 && err == nil:
						t.Errorf("at %v (down): status %d, want a connection error", at, resp.StatusCode)
					case down && tt.mode == OutageRefuse && !errors.Is(err, syscall.ECONNREFUSED):
						t.Errorf("at %v (down): %v, want ECONNREFUSED", at, err)
					}
					if resp != nil {
						resp.Body.Close()
					}
					time.Sleep(100 * time.Millisecond)
				}
				buckets := o.Buckets()
				if len(buckets) != 8 {
					t.Fatalf("got %d buckets, want 8: %v", len(buckets), buckets)
				}
				for i, b := range buckets {
					want := OutageBucket{Start: time.Duration(i) * 500 * time.Millisecond, Requests: 5}
					if i >= 2 && i < 6 {
						want.Failed = 5
					}
					if b != want {
						t.Errorf("bucket %d = %+v, want %+v", i, b, want)
					}
				}
				if got, want := o.Between(time.Second, 3*time.Second), (OutageBucket{Start: time.Second, Requests: 20, Failed: 20}); got != want {
					t.Errorf("Between(1s, 3s) = %+v, want %+v", got, want)
				}
				if got, want := o.Total(), (OutageBucket{Requests: 40, Failed: 20}); got != want {
					t.Errorf("Total() = %+v, want %+v", got, want)
				}
			})
		})
	}
}

func TestOutageEdges(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	o := NewOutage(start, OutageConfig{Start: time.Minute, Duration: time.Minute, Bucket: time.Second, Horizon: 10 * time.Second})
	tests := []struct {
		at   time.Duration
		down bool
	}{{-time.Second, false}, {0, false}, {time.Minute - 1, false}, {time.Minute, true}, {2*time.Minute - 1, true}, {2 * time.Minute, false}}
	for _, tt := range tests {
		if got := o.Down(start.Add(tt.at)); got != tt.down {
			t.Errorf("Down(start%+v) = %v, want %v", tt.at, got, tt.down)
		}
	}
	o.count(start.Add(-time.Hour), false, false) // before the start: first bucket
	o.count(start.Add(time.Hour), true, false)   // after the horizon: last bucket
	o.count(start.Add(2500*time.Millisecond), false, false)
	b := o.Buckets()
	if len(b) != 11 || b[0].Requests != 1 || b[2].Requests != 1 || b[10] != (OutageBucket{Start: 10 * time.Second, Requests: 1, Failed: 1}) {
		t.Errorf("Buckets() = %+v, want 11 buckets with 1 request in 0, 2 and 10", b)
	}
	if never := NewOutage(start, OutageConfig{}); never.Down(start) || never.Refusing() || len(never.Buckets()) != 0 {
		t.Errorf("zero OutageConfig: down, refusing or counted, want always healthy and empty")
	}
}

func TestOutageLoopback(t *testing.T) {
	forEachBed(t, func() http.Handler {
		return NewOutage(time.Now(), OutageConfig{Duration: time.Hour, Mode: OutageReset})
	}, func(t *testing.T, b bed, c *http.Client, url string) {
		if b.virtual {
			return
		}
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			t.Errorf("status %d during a reset outage, want a connection error", resp.StatusCode)
		}
	})
}

// TestOutageCapacity checks the capacity model in virtual time: a steady
// load below Capacity is served in full; above Capacity, the server
// serves about Capacity and fails the rest; above Capacity/OverloadCost,
// the work of the requests it fails leaves none to serve anything; and
// the budget is empty when the outage ends.
func TestOutageCapacity(t *testing.T) {
	tests := []struct {
		name       string
		rate       int     // requests a second, evenly spaced, while up
		cost       float64 // OverloadCost
		wantServed float64 // share of requests served, over the second measured
		tolerance  float64
	}{
		{"below capacity", 80, 0, 1, 0},
		{"above capacity, failures free", 200, -1, 0.5, 0.02},
		{"above capacity, failures cost half", 160, 0.5, 0.25, 0.02},             // s + 0.5(160-s) = 100: s = 40
		{"beyond capacity / cost: nothing served", 250, 0.5, 0, 0},               // 0.5 × 250 > 100
		{"beyond capacity / cost, cost a fifth", 600, 0.2, 0, 0},                 // 0.2 × 600 > 100
		{"just under capacity / cost, cost a fifth", 400, 0.2, 25.0 / 400, 0.02}, // s + 0.2(400-s) = 100: s = 25
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				o := NewOutage(time.Now(), OutageConfig{Capacity: 100, Burst: 10, OverloadCost: tt.cost, Horizon: 10 * time.Second, Bucket: time.Second})
				gap := time.Second / time.Duration(tt.rate)
				// One second to settle, one to measure.
				for range 2 * tt.rate {
					w := httptest.NewRecorder()
					o.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
					if w.Code != 200 && w.Code != 503 {
						t.Fatalf("status %d, want 200 or 503", w.Code)
					}
					time.Sleep(gap)
				}
				b := o.Buckets()[1]
				served := float64(b.Requests-b.Failed) / float64(b.Requests)
				if math.Abs(served-tt.wantServed) > tt.tolerance {
					t.Errorf("served %d of %d (%.2f), want %.2f ± %.2f", b.Requests-b.Failed, b.Requests, served, tt.wantServed, tt.tolerance)
				}
				if b.Overloaded != b.Failed {
					t.Errorf("overloaded %d, failed %d: want every failure for overload (no outage)", b.Overloaded, b.Failed)
				}
			})
		})
	}
}

// TestOutageCapacityAfterOutage checks that the server comes back cold,
// with a backlog of Burst, and that a storm that keeps it failing ends when the load
// falls below what the work of failures leaves it.
func TestOutageCapacityAfterOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		o := NewOutage(start, OutageConfig{Start: time.Second, Duration: time.Second, Capacity: 100, OverloadCost: 0.5,
			Bucket: 500 * time.Millisecond, Horizon: 10 * time.Second})
		get := func() int {
			w := httptest.NewRecorder()
			o.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
			return w.Code
		}
		if got := get(); got != 200 {
			t.Fatalf("at the start: status %d, want 200 (a full budget)", got)
		}
		time.Sleep(2*time.Second - time.Since(start)) // the outage just ended
		if got := get(); got != 503 {
			t.Errorf("at the return: status %d, want 503 (a backlog)", got)
		}
		// A tenth of a second (Burst, 10 units, at 100 a second) and the
		// half unit the 503 cost later, it serves again.
		time.Sleep(104 * time.Millisecond)
		if got := get(); got != 503 {
			t.Errorf("104 ms after the return: status %d, want 503 (still warming up)", got)
		}
		time.Sleep(20 * time.Millisecond)
		if got := get(); got != 200 {
			t.Errorf("124 ms after the return: status %d, want 200 (warm)", got)
		}
		// A storm of 400 requests a second for a second: 0.5 × 400 > 100.
		for range 400 {
			get()
			time.Sleep(time.Second / 400)
		}
		if b := o.Between(2*time.Second, 3*time.Second); b.Requests-b.Failed != 1 || b.Overloaded != b.Failed {
			t.Errorf("from the return through the storm: %+v, want 1 served (at 124 ms) and the others failed for overload", b)
		}
		// The storm stops; after a pause, 50 requests a second are served.
		time.Sleep(time.Second)
		for range 50 {
			if got := get(); got != 200 {
				t.Fatalf("after the storm, at 50 a second: status %d, want 200", got)
			}
			time.Sleep(time.Second / 50)
		}
		if got, want := o.Total().Failed, o.Total().Overloaded; got != want {
			t.Errorf("failed %d, overloaded %d: want every failure while up for overload", got, want)
		}
	})
}
