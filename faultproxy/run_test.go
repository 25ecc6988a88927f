package faultproxy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// goodResult is a run in which every promise held: two operations, one
// that succeeded after a retry (its first attempt's body arrived too, and
// the upstream replayed its answer), one that failed without a side
// effect.
func goodResult() *Result {
	t0 := time.Unix(1000, 0)
	s := Short
	s.Vouched = true
	ok := &Op{ID: "p/sturdy/0", Key: "key-p-sturdy-0", BodySHA: "aaa", Start: t0, Deadline: t0.Add(2 * time.Second),
		End: t0.Add(time.Second), OK: true, Status: 201, Receipt: Receipt{Op: "p/sturdy/0", Charge: "ch_1", BodySHA: "aaa"}}
	failed := &Op{ID: "p/sturdy/1", Key: "key-p-sturdy-1", BodySHA: "bbb", Start: t0, Deadline: t0.Add(2 * time.Second),
		End: t0.Add(2*time.Second + 10*time.Millisecond), Err: fmt.Errorf("Post \"http://127.0.0.1/charges\": %w", context.DeadlineExceeded)}
	return &Result{
		Phase: "p", Client: "sturdy", Settings: s, Ops: []*Op{ok, failed},
		Arrivals: []Arrival{
			{Op: ok.ID, Key: ok.Key, BodySHA: "aaa", Complete: true, Performed: true, PerformedAt: t0.Add(100 * time.Millisecond)},
			{Op: ok.ID, Key: ok.Key, BodySHA: "aaa", Complete: true, Status: 201},
			{Op: failed.ID, Key: failed.Key, Status: 504},
		},
		Effects: map[string]int{ok.ID: 1},
		Charges: map[string]string{ok.ID: "ch_1"},
		Conns:   2,
	}
}

// TestFaultProxyCheck checks that Check finds each broken promise, and
// that Summarize counts what the table shows, on results made by hand.
func TestFaultProxyCheck(t *testing.T) {
	tests := []struct {
		name   string
		change func(r *Result)
		want   string // in Check's error; "" for none
		sum    func(Summary) bool
	}{
		{name: "all promises kept", change: func(*Result) {}, sum: func(s Summary) bool {
			return s.OK == 1 && s.Duplicates == 0 && s.Late == 0 && s.Mismatches == 0 && s.Failures["timeout"] == 1
		}},
		{name: "a duplicate", change: func(r *Result) { r.Effects["p/sturdy/0"] = 2 }, want: "2 side effects, want at most 1",
			sum: func(s Summary) bool { return s.Duplicates == 1 }},
		{name: "a success without a side effect", change: func(r *Result) { r.Effects["p/sturdy/0"] = 0 }, want: "succeeded with 0 side effects",
			sum: func(s Summary) bool { return s.Missing == 1 }},
		{name: "a failed operation performed once is allowed", change: func(r *Result) { r.Effects["p/sturdy/1"] = 1 }},
		{name: "a key performed twice through the Handler", change: func(r *Result) { r.KeyEffects = map[string]int{"k1": 1, "k2": 2} },
			want: "key k2: 2 side effects through idempotency.Handler, want 1"},
		{name: "another body under the key", change: func(r *Result) { r.Arrivals[1].BodySHA = "abc" }, want: "a body arrived with SHA-256 abc",
			sum: func(s Summary) bool { return s.Mismatches == 1 }},
		{name: "an incomplete body is not compared", change: func(r *Result) { r.Arrivals[2].BodySHA = "zzz" }},
		{name: "another operation's receipt", change: func(r *Result) { r.Ops[0].Receipt.Op = "p/sturdy/1" }, want: "got receipt ch_1 for p/sturdy/1"},
		{name: "a receipt for another body", change: func(r *Result) { r.Ops[0].Receipt.BodySHA = "bbb" }, want: "body bbb"},
		{name: "another charge's receipt", change: func(r *Result) { r.Ops[0].Receipt.Charge = "ch_2" }, want: "got receipt ch_2"},
		{name: "past the deadline beyond the margin", change: func(r *Result) { r.Ops[1].End = r.Ops[1].Deadline.Add(r.Settings.Margin + time.Millisecond) },
			want: "past its deadline", sum: func(s Summary) bool { return s.Overshoot == Short.Margin+time.Millisecond }},
		{name: "a key where none was set", change: func(r *Result) { r.Arrivals[2].Key = "k" }, want: `arrived with key "k"`},
		{name: "an unknown operation", change: func(r *Result) { r.Arrivals[2].Op = "x" }, want: `unknown operation "x"`},
		{name: "performed after its operation ended", change: func(r *Result) {
			r.Effects["p/sturdy/1"] = 1
			r.Arrivals[2].Performed, r.Arrivals[2].PerformedAt = true, r.Ops[1].End.Add(time.Millisecond)
		}, sum: func(s Summary) bool { return s.Late == 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := goodResult()
			tt.change(r)
			err := r.Check()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Check() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Check() = %v, want an error with %q", err, tt.want)
			}
			if s := r.Summarize(); tt.sum != nil && !tt.sum(s) {
				t.Errorf("Summarize() = %+v, not what %q should count", s, tt.name)
			}
		})
	}
}
