package httptestutil

import (
	"errors"
	"net/http"
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
	o.count(start.Add(-time.Hour), false) // before the start: first bucket
	o.count(start.Add(time.Hour), true)   // after the horizon: last bucket
	o.count(start.Add(2500*time.Millisecond), false)
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
