package ratelimit

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fleetLog is a QuotaStore that answers Take with a fixed wait and
// records every call, to test what the Tracker asks of a store (the
// fleet module tests the Redis store itself).
type fleetLog struct {
	wait time.Duration

	mu     sync.Mutex
	takes  []string // key|resource|maxWait
	back   []string // key|resource
	pauses []string // key|resource|until offset
	start  time.Time
}

func (f *fleetLog) Take(ctx context.Context, key, resource string, maxWait time.Duration) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.takes = append(f.takes, key+"|"+resource+"|"+maxWait.String())
	return f.wait, nil
}

func (f *fleetLog) Return(key, resource string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.back = append(f.back, key+"|"+resource)
}

func (f *fleetLog) Pause(key, resource string, until time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pauses = append(f.pauses, key+"|"+resource+"|"+until.Sub(f.start).String())
}

func TestTrackerStoreTake(t *testing.T) {
	tests := []struct {
		name      string
		wait      time.Duration // the store's answer
		deadline  time.Duration // the request's; 0: none (MaxWait 60s applies)
		wantErr   error
		wantAfter time.Duration // when Reserve returns
		wantTake  string
		wantBack  int // places returned by a Cancel after Reserve
	}{
		{"no wait", 0, 0, nil, 0, "https://api.example.com||1m0s", 1},
		{"wait", 3 * time.Second, 0, nil, 3 * time.Second, "https://api.example.com||1m0s", 1},
		{"wait within the deadline", 3 * time.Second, 5 * time.Second, nil, 3 * time.Second, "https://api.example.com||4.999999999s", 1},
		{"wait past the deadline", 3 * time.Second, 2 * time.Second, ErrQuotaExhausted, 0, "https://api.example.com||1.999999999s", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &fleetLog{wait: tt.wait, start: time.Now()}
				tr := NewTracker(Options{Store: store})
				ctx := context.Background()
				if tt.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.deadline)
					defer cancel()
				}
				start := time.Now()
				res, err := tr.Reserve(newReq(t, ctx, "https://api.example.com/v1/x"))
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Reserve = %v, want %v", err, tt.wantErr)
				}
				if got := time.Since(start); got != tt.wantAfter {
					t.Errorf("Reserve returned after %v, want %v", got, tt.wantAfter)
				}
				if len(store.takes) != 1 || store.takes[0] != tt.wantTake {
					t.Errorf("takes = %q, want [%q]", store.takes, tt.wantTake)
				}
				res.Cancel()
				if len(store.back) != tt.wantBack {
					t.Errorf("places given back after Cancel = %q, want %d", store.back, tt.wantBack)
				}
			})
		})
	}
}

// A settled request's place stays spent; what the response says that
// holds every process back goes to the store.
func TestTrackerStoreSettle(t *testing.T) {
	tests := []struct {
		name   string
		status int
		h      http.Header
		want   []string
	}{
		{"success", 200, nil, nil},
		{"quota left", 200, quotaHeader(100, 5, 10*time.Second), nil},
		{"quota exhausted", 200, quotaHeader(100, 0, 10*time.Second), []string{"https://api.example.com||10s"}},
		{"exhausted resource", 200, func() http.Header {
			h := quotaHeader(100, 0, 40*time.Second)
			h.Set("X-RateLimit-Resource", "search")
			return h
		}(), []string{"https://api.example.com|search|40s"}},
		{"429 Retry-After", 429, hdr("Retry-After", "7"), []string{"https://api.example.com||7s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &fleetLog{start: time.Now()}
				tr := NewTracker(Options{Store: store})
				res, err := tr.Reserve(newReq(t, nil, "https://api.example.com/v1/x"))
				if err != nil {
					t.Fatal(err)
				}
				h := tt.h
				if h == nil {
					h = http.Header{}
				}
				res.Settle(&http.Response{StatusCode: tt.status, Header: h})
				res.Cancel() // after Settle: nothing to give back
				if len(store.back) != 0 {
					t.Errorf("places given back = %q, want none", store.back)
				}
				if !slices.Equal(store.pauses, tt.want) {
					t.Errorf("pauses = %q, want %q", store.pauses, tt.want)
				}
			})
		})
	}
}
