package ratelimit

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// pauseStore is a QuotaStore with the fleet's pause semantics (fleet's
// quotaView.pausedUntil): Take waits for the later of the host's pause
// ("") and the resource's.
type pauseStore struct {
	mu     sync.Mutex
	pauses map[string]time.Time // key|resource
	takes  []string
}

func (s *pauseStore) Take(ctx context.Context, key, resource string, maxWait time.Duration) (time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.takes = append(s.takes, resource)
	p := s.pauses[key+"|"]
	if r := s.pauses[key+"|"+resource]; r.After(p) {
		p = r
	}
	if d := time.Until(p); d > 0 {
		return d, nil
	}
	return 0, nil
}

func (s *pauseStore) Return(key, resource string) {}

func (s *pauseStore) Pause(key, resource string, until time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pauses == nil {
		s.pauses = map[string]time.Time{}
	}
	if until.After(s.pauses[key+"|"+resource]) {
		s.pauses[key+"|"+resource] = until
	}
}

// Two processes share a store. A host reports two IETF policies that
// both count every request ("rpm" and "daily"). Process A's response says
// "daily" is spent for an hour: the fleet must hold process B's requests,
// which are counted against "daily" too.
func TestFleetSecondPolicyExhaustedHoldsOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &pauseStore{}
		a := NewTracker(Options{Store: store})
		b := NewTracker(Options{Store: store})
		u := "https://api.example.com/v1/chat"
		both := func(daily int) http.Header {
			return hdr(
				"RateLimit-Policy", `"rpm";q=100;w=60, "daily";q=1000;w=86400`,
				"RateLimit", `"rpm";r=90;t=30, "daily";r=`+itoa(daily)+`;t=3600`,
			)
		}
		// B has seen both policies on this route.
		res, err := b.Reserve(newReq(t, nil, u))
		if err != nil {
			t.Fatal(err)
		}
		res.Settle(&http.Response{StatusCode: 200, Header: both(500)})
		// A's response: daily spent for an hour.
		res, err = a.Reserve(newReq(t, nil, u))
		if err != nil {
			t.Fatal(err)
		}
		res.Settle(&http.Response{StatusCode: 200, Header: both(0)})

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res, err = b.Reserve(newReq(t, ctx, u))
		if !errors.Is(err, ErrQuotaExhausted) {
			t.Errorf("process B, a request counted against the spent \"daily\" policy: Reserve = %v (store asked for %q); want ErrQuotaExhausted (the fleet paused daily for an hour, deadline 5s)", err, store.takes[len(store.takes)-1])
			res.Cancel()
		}
	})
}
