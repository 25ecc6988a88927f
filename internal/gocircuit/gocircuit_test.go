package gocircuit

import (
	"errors"
	"net/http"
	"testing"

	"github.com/sony/gobreaker/v2"

	"github.com/sturdyhttp/sturdy/policy"
)

// TestSendExcludes: outcomes judged to say nothing of their host do not
// trip the circuit; failures do, and then it refuses unsent.
func TestSendExcludes(t *testing.T) {
	g := New(gobreaker.Settings{ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 2 }}, nil)
	c := g.Circuit("https://a.test")
	if c == nil || g.Circuit("https://a.test") != c {
		t.Fatal("Circuit: want one circuit per key, made once")
	}
	errStatus := errors.New("status")
	send := func(v policy.HostVerdict) (bool, error) {
		_, _, sent, cerr := Send(c,
			func() (*http.Response, error) { return &http.Response{StatusCode: 503}, nil },
			func(*http.Response, error) policy.Verdict { return policy.Verdict{Host: v} },
			func(*http.Response) error { return errStatus })
		return sent, cerr
	}
	for range 5 {
		if sent, cerr := send(policy.HostIgnored); !sent {
			t.Fatalf("ignored outcome: refused (%v); want sent, not counted", cerr)
		}
	}
	for range 2 {
		if sent, cerr := send(policy.HostFailing); !sent || !errors.Is(cerr, errStatus) {
			t.Fatalf("failing outcome: sent %v, %v; want sent, the failure", sent, cerr)
		}
	}
	if sent, cerr := send(policy.HostFailing); sent || !errors.Is(cerr, gobreaker.ErrOpenState) {
		t.Errorf("after 2 failures: sent %v, %v; want refused with ErrOpenState", sent, cerr)
	}
}

// TestCircuitMadeAgain: a key whose circuit could not be made has none,
// and is asked again.
func TestCircuitMadeAgain(t *testing.T) {
	calls := 0
	g := New(gobreaker.Settings{}, func(s gobreaker.Settings) (Circuit, error) {
		calls++
		if calls == 1 {
			return nil, errors.New("store down")
		}
		if s.Name != "https://a.test" {
			t.Errorf("Name %q, want the key", s.Name)
		}
		return gobreaker.NewCircuitBreaker[*http.Response](s), nil
	})
	if c := g.Circuit("https://a.test"); c != nil {
		t.Error("first Circuit: want nil while the store fails")
	}
	if c := g.Circuit("https://a.test"); c == nil || calls != 2 {
		t.Errorf("second Circuit: %v after %d calls, want a circuit after 2", c, calls)
	}
}
