package respbody

import (
	"errors"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/internal/timecut"
)

// WatchIdle's body cuts a Read blocked for the limit, and only that: the time
// between Reads is the reader's. It is watched by the Timeout layer's
// bound, whose idle watch ticks every eighth of the limit: a stalled
// Read is cut after the limit, and at most two ticks later.
func TestIdleBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pr, pw := io.Pipe()
		l := timecut.NewLimits(0, time.Second, "Timeout",
			func(time.Duration) error { return errors.New("deadline") },
			func(time.Duration) error { return errors.New("idle") })
		cut := l.IdleErr
		b := WatchIdle(pr, &timecut.Watch{L: &l})
		go func() {
			pw.Write([]byte("a"))
			time.Sleep(900 * time.Millisecond)
			pw.Write([]byte("b")) // blocked 0.9 s: in time
		}()
		p := make([]byte, 1)
		for _, want := range "ab" {
			if n, err := b.Read(p); n != 1 || err != nil || p[0] != byte(want) {
				t.Fatalf("Read = %d %q, %v; want 1 %q, nil", n, p[:n], err, want)
			}
			time.Sleep(5 * time.Second) // the reader's own time
		}
		start := time.Now()
		n, err := b.Read(p)
		if got := time.Since(start); n != 0 || err != cut || got < time.Second || got > time.Second+2*l.Tick {
			t.Errorf("stalled Read = %d, %v after %v; want 0, the cut after 1s to %v", n, err, got, time.Second+2*l.Tick)
		}
		if _, err := b.Read(p); err != cut {
			t.Errorf("Read after the cut: %v; want the cut", err)
		}
		if err := b.Close(); err != nil {
			t.Errorf("Close after the cut: %v", err)
		}
	})
}
