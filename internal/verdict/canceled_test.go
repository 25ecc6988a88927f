package verdict

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// errUserLeft is the cause a caller ends its request with.
var errUserLeft = errors.New("user left")

// boundError is the cause a bound of the stack cancels an attempt with,
// as transport.DeadlineError: it matches context.DeadlineExceeded.
type boundError struct{}

func (boundError) Error() string        { return "bound ran out" }
func (boundError) Is(target error) bool { return target == context.DeadlineExceeded }

// ends are the ways a request's context ends, each with whether it was
// canceled, whether the caller ended it (as transport's callerEnded says:
// any end but a bound's), and the error net/http returns for it: the
// context's cause.
var ends = []struct {
	name        string
	ctx         func() context.Context
	canceled    bool
	callerEnded bool
}{
	{"alive", func() context.Context { return context.Background() }, false, false},
	{"cancel()", func() context.Context {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx
	}, true, true},
	{"cancel(cause)", func() context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(errUserLeft)
		return ctx
	}, true, true},
	{"cancel(cause) of the parent", func() context.Context {
		parent, cancel := context.WithCancelCause(context.Background())
		ctx, stop := context.WithTimeout(parent, time.Hour)
		defer stop()
		cancel(errUserLeft)
		return ctx
	}, true, true},
	{"a bound's cancel", func() context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(boundError{})
		return ctx
	}, false, false},
	{"cancel(context.DeadlineExceeded)", func() context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(context.DeadlineExceeded)
		return ctx
	}, false, true},
	{"deadline passed", func() context.Context {
		ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
		defer cancel()
		return ctx
	}, false, true},
	{"deadline passed, with a cause", func() context.Context {
		ctx, cancel := context.WithDeadlineCause(context.Background(), time.Unix(0, 0), errUserLeft)
		defer cancel()
		return ctx
	}, false, true},
}

// TestCanceled: a context is canceled when it ended as context.Canceled
// with a cause that is not a deadline: a caller's cancel(cause) is one,
// a bound's cancel and a deadline, with a cause or not, are not.
func TestCanceled(t *testing.T) {
	for _, e := range ends {
		if got := Canceled(e.ctx()); got != e.canceled {
			t.Errorf("%s: Canceled = %v, want %v", e.name, got, e.canceled)
		}
	}
}

// TestOfEnded: the verdict of an attempt whose context ended, failed
// with the error net/http returns (the context's cause): a cancel, with
// a cause or not, is no loss and says nothing of the host; a deadline of
// the caller's is a loss that says nothing of the host; a bound's is a
// loss of the host's.
func TestOfEnded(t *testing.T) {
	callerEnded := func(ctx context.Context) bool {
		var b boundError
		return ctx.Err() != nil && !errors.As(context.Cause(ctx), &b)
	}
	for _, e := range ends[1:] {
		ctx := e.ctx()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.test/", nil)
		if err != nil {
			t.Fatal(err)
		}
		want := policy.Verdict{Sent: true, Lost: !e.canceled}
		if !e.callerEnded {
			want.Host = policy.HostFailing
		}
		if got := Of(nil, req, nil, context.Cause(ctx), callerEnded); got != want {
			t.Errorf("%s: Of = %+v, want %+v", e.name, got, want)
		}
	}
}
