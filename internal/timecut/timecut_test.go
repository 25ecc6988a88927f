package timecut

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func mkErr(d time.Duration) error { return errors.New("limit of " + d.String() + " exceeded") }

// The ways a bound's watch ends, raced: a watch whose deadline is a
// microsecond or two is released, settled, held and handed its body
// while its timer fires, from several goroutines. Its cut runs once,
// and what it reports agrees with how it ended. Run it with -race.
// (Ported from transport's TestBoundCtxConcurrentEnds: the bounds'
// contexts are now the standard library's, whose races are its own;
// what is sturdy's is the watch that ends them.)
func TestWatchConcurrentEnds(t *testing.T) {
	for i := 0; i < 3000; i++ {
		l := NewLimits(time.Duration(i%3+1)*time.Microsecond, time.Duration(i%2)*time.Millisecond, "Timeout", mkErr, mkErr)
		w := &Watch{}
		var cuts atomic.Int32
		var last atomic.Value
		w.Start(&l, Now(), func(err error) {
			if err != nil {
				last.Store(err)
			}
			cuts.Add(1)
		})
		var wg sync.WaitGroup
		wg.Add(5)
		go func() { defer wg.Done(); w.Release() }()
		go func() { defer wg.Done(); w.Settle() }()
		go func() { defer wg.Done(); w.BodyStarts(i%2 == 0, true) }()
		go func() {
			defer wg.Done()
			if w.Hold() {
				w.Unhold(i%3 == 0)
			}
		}()
		go func() { defer wg.Done(); w.Deadline() }()
		wg.Wait()
		w.Release()
		// The timer's goroutine may be running the cut still.
		for deadline := time.Now().Add(5 * time.Second); cuts.Load() == 0 && time.Now().Before(deadline); {
			time.Sleep(time.Microsecond)
		}
		if n := cuts.Load(); n != 1 {
			t.Fatalf("iteration %d: the cut ran %d times, want once", i, n)
		}
		err := w.CutErr()
		if got, _ := last.Load().(error); got != err {
			t.Fatalf("iteration %d: the cut was given %v, the watch reports %v", i, got, err)
		}
		if err != nil && err != l.DlErr && err != l.IdleErr {
			t.Fatalf("iteration %d: cut by %v, not one of its limits", i, err)
		}
	}
}
