package policy

import (
	"errors"
	"testing"
	"time"
)

func TestHedgeNext(t *testing.T) {
	now := time.Unix(1000, 0)
	refused := func(time.Time) error { return errors.New("circuit open") }
	open := func(time.Time) error { return nil }
	spent := func() bool { return false }
	left := func() bool { return true }
	tests := []struct {
		name string
		h    Hedge
		s    HedgeState
		want HedgeStep
	}{
		{"first hedge", Hedge{}, HedgeState{Sent: 1, BodySent: true, Refused: open, Budget: left}, HedgeSend},
		{"no hooks", Hedge{}, HedgeState{Sent: 1, BodySent: true}, HedgeSend},
		{"a copy answered", Hedge{}, HedgeState{Sent: 1, Answered: true, BodySent: true}, HedgeStop},
		{"a copy failed", Hedge{}, HedgeState{Sent: 1, Failed: true, BodySent: true}, HedgeStop},
		{"done", Hedge{}, HedgeState{Sent: 1, Done: errors.New("canceled"), BodySent: true}, HedgeStop},
		{"MaxHedges sent", Hedge{}, HedgeState{Sent: 2, BodySent: true}, HedgeStop},
		{"a second of two", Hedge{MaxHedges: 2}, HedgeState{Sent: 2, BodySent: true}, HedgeSend},
		{"body still sending", Hedge{}, HedgeState{Sent: 1}, HedgeLater},
		{"refused beneath", Hedge{}, HedgeState{Sent: 1, BodySent: true, Refused: refused, Budget: left}, HedgeStop},
		{"budget spent", Hedge{}, HedgeState{Sent: 1, BodySent: true, Refused: open, Budget: spent}, HedgeStop},
	}
	for _, tt := range tests {
		tt.s.Now = now
		if got := tt.h.Next(tt.s); got != tt.want {
			t.Errorf("%s: Next = %d, want %d", tt.name, got, tt.want)
		}
	}
	// The budget is asked last: a copy refused beneath takes nothing.
	asked := false
	Hedge{}.Next(HedgeState{Sent: 1, BodySent: true, Now: now, Refused: refused, Budget: func() bool { asked = true; return true }})
	if asked {
		t.Errorf("budget asked for a copy that a layer beneath refuses")
	}
}
