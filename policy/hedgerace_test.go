package policy

import "testing"

// Race decides whether a request is hedged at all: every "send once"
// exit of the Hedge layer is a row here.
func TestHedgeRace(t *testing.T) {
	all := HedgeStart{SafeToResend: true, DelayKnown: true, Replayable: true}
	tests := []struct {
		name string
		h    Hedge
		s    HedgeStart
		want bool
	}{
		{"everything known", Hedge{}, all, true},
		{"hedging off", Hedge{MaxHedges: -1}, all, false},
		{"not safe to send twice", Hedge{}, HedgeStart{DelayKnown: true, Replayable: true}, false},
		{"nothing known of the host's latency", Hedge{}, HedgeStart{SafeToResend: true, Replayable: true}, false},
		{"a body that cannot be had again", Hedge{}, HedgeStart{SafeToResend: true, DelayKnown: true}, false},
	}
	for _, tt := range tests {
		if got := tt.h.Race(tt.s); got != tt.want {
			t.Errorf("%s: Race = %v, want %v", tt.name, got, tt.want)
		}
	}
}
