package retry

import (
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/internal/timecut"
)

// TestUnixNanoIsClockTime: the budget's clock is the bounds' clock, read
// as a time would read it, so that a Budget shared with a caller who
// passes time.Now keeps one window.
func TestUnixNanoIsClockTime(t *testing.T) {
	for _, d := range []time.Duration{0, 1, time.Second + 7, 90 * time.Minute, -time.Hour, -26 * 365 * 24 * time.Hour} {
		if got, want := unixNano(d), timecut.Time(d).UnixNano(); got != want {
			t.Errorf("unixNano(%v) = %d, want %d", d, got, want)
		}
	}
}
