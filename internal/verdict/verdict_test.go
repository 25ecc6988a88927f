package verdict

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"

	"github.com/sturdyhttp/sturdy/policy"
)

// uncomparable is an error that == cannot compare.
type uncomparable []string

func (e uncomparable) Error() string { return "uncomparable" }

// TestKept: a verdict is kept once, for the outcome it judged, and read
// back only for that outcome; nil keeps nothing; an error that cannot be
// compared is never found, and does not panic.
func TestKept(t *testing.T) {
	r503 := &http.Response{StatusCode: 503}
	reset := errors.New("connection reset")
	v503, vReset := policy.JudgeStatus(503), policy.Judge(policy.Outcome{Err: reset})
	var k Kept
	if _, ok := k.Load(r503, nil); ok {
		t.Fatal("an empty Kept has a verdict")
	}
	k.Keep(r503, nil, v503)
	k.Keep(nil, reset, vReset) // kept already: not replaced
	tests := []struct {
		name   string
		resp   *http.Response
		err    error
		want   policy.Verdict
		wantOK bool
	}{
		{"the outcome kept", r503, nil, v503, true},
		{"another response", &http.Response{StatusCode: 503}, nil, policy.Verdict{}, false},
		{"an error", nil, reset, policy.Verdict{}, false},
	}
	for _, tt := range tests {
		got, ok := k.Load(tt.resp, tt.err)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("%s: Load = %+v, %v; want %+v, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
	var nilK *Kept
	nilK.Keep(r503, nil, v503)
	if _, ok := nilK.Load(r503, nil); ok {
		t.Error("a nil Kept has a verdict")
	}
	var u Kept
	u.Keep(nil, uncomparable{"a"}, vReset)
	if _, ok := u.Load(nil, uncomparable{"a"}); ok {
		t.Error("an uncomparable error found a verdict")
	}
}

// TestKeptConcurrent: many layers of attempts that share a Kept (a
// scope a caller shares) keep one verdict between them, with no race.
func TestKeptConcurrent(t *testing.T) {
	var k Kept
	resps := make([]*http.Response, 8)
	var wg sync.WaitGroup
	for i := range resps {
		resps[i] = &http.Response{StatusCode: 500 + i}
		wg.Go(func() {
			k.Keep(resps[i], nil, policy.JudgeStatus(resps[i].StatusCode))
			k.Load(resps[i], nil)
		})
	}
	wg.Wait()
	found := 0
	for _, r := range resps {
		if v, ok := k.Load(r, nil); ok {
			found++
			if v != policy.JudgeStatus(r.StatusCode) {
				t.Errorf("the verdict kept for a %d is %+v", r.StatusCode, v)
			}
		}
	}
	if found != 1 {
		t.Errorf("%d outcomes found a verdict, want 1", found)
	}
}

// TestKeptEveryVerdict: every verdict Judge gives is read back as kept,
// for the outcome it judged.
func TestKeptEveryVerdict(t *testing.T) {
	var outcomes []policy.Outcome
	for _, c := range []int{200, 404, 429, 500, 503, 529} {
		outcomes = append(outcomes, policy.Outcome{Response: &http.Response{StatusCode: c}})
	}
	outcomes = append(outcomes,
		policy.Outcome{Err: errors.New("reset")},
		policy.Outcome{Err: context.Canceled},
		policy.Outcome{Err: context.DeadlineExceeded, CallerEnded: true},
		policy.Outcome{Err: context.DeadlineExceeded, NotConnected: true},
		policy.Outcome{Err: refusal("circuit open")},
		policy.Outcome{Err: errors.Join(errors.New("x"), refusal("rate limited"))},
		policy.Outcome{},
	)
	for _, o := range outcomes {
		v := policy.Judge(o)
		var k Kept
		k.Keep(o.Response, o.Err, v)
		if got, ok := k.Load(o.Response, o.Err); !ok || got != v {
			t.Errorf("kept %+v, read %+v, %v", v, got, ok)
		}
	}
}

type refusal string

func (r refusal) Error() string     { return string(r) }
func (r refusal) RefusedBy() string { return string(r) }
