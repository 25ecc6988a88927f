package hedge

import (
	"context"
	"net/http"
	"testing"
)

// refusalError is a layer's refusal of a copy it never sent, as a
// breaker's open circuit is ([policy.Refusal]).
type refusalError struct{}

func (refusalError) Error() string     { return "transport: circuit open for http://api.test" }
func (refusalError) RefusedBy() string { return "circuit open" }

// A failure kept while other copies run: a response over an error, and
// any error over a later copy's refusal unsent, which says nothing of the
// host; otherwise the first.
func TestHedgeHold(t *testing.T) {
	refusal := refusalError{}
	timeout := context.DeadlineExceeded
	resp := func() *http.Response { return &http.Response{StatusCode: 503, Body: http.NoBody} }
	for _, tc := range []struct {
		name     string
		held, r  result
		wantCopy int
	}{
		{"a response over an error", result{i: 0, err: timeout}, result{i: 1, resp: resp()}, 1},
		{"an error over a hedge's refusal", result{i: 1, err: refusal}, result{i: 0, err: timeout}, 0},
		{"the first copy's refusal stays", result{i: 0, err: refusal}, result{i: 1, err: timeout}, 0},
		{"the first of two responses", result{i: 0, resp: resp()}, result{i: 1, resp: resp()}, 0},
		{"the first of two errors", result{i: 1, err: timeout}, result{i: 0, err: timeout}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			copies := []hedgeCopy{{op: &copyOp{}}, {op: &copyOp{}}}
			held := hold(copies, nil, tc.held)
			if got := hold(copies, held, tc.r); got.i != tc.wantCopy {
				t.Errorf("kept copy %d; want copy %d", got.i, tc.wantCopy)
			}
		})
	}
}
