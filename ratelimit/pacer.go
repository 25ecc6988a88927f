package ratelimit

import "time"

// This file paces a host at its learned rate (see throttle.go).

// pacer spaces requests at a rate, as a virtual schedule (GCRA): each
// reservation takes the next slot; a cancelled one gives it back when no
// later slot was taken. A restart voids every slot taken: their holders
// take new ones, as do holders woken more than paceLate intervals late.
type pacer struct {
	interval time.Duration
	next     time.Time // the next free slot
	epoch    uint32    // counts restarts
	// low is the lowest rate set since the throttle's anchor (0: none).
	low float64
}

func (p *pacer) setRate(r float64) {
	if p.low == 0 || r < p.low {
		p.low = r
	}
	p.interval = time.Duration(float64(time.Second) / r)
}

// restart starts the schedule again at from.
func (p *pacer) restart(from time.Time) {
	p.next = from
	p.epoch++
}

// reserve takes the next slot at or after now and returns it.
func (p *pacer) reserve(now time.Time) time.Time {
	slot := p.next
	if slot.Before(now) {
		slot = now
	}
	p.next = slot.Add(p.interval)
	return slot
}

// late reports whether a request woken at now for slot is so late that
// going now could make a burst with the others woken late (a process
// that stalled): more than paceLate intervals. A little late goes, so
// that the schedule does not lose a slot to every late wake-up.
func (p *pacer) late(slot, now time.Time) bool {
	return now.Sub(slot) > paceLate*p.interval
}

// cancel gives back slot, if it is the last one taken.
func (p *pacer) cancel(slot time.Time) {
	if p.next.Equal(slot.Add(p.interval)) {
		p.next = slot
	}
}
