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
	// spaced is the lowest rate set since the last restart: the slots
	// taken since are at least 1/spaced apart.
	spaced float64
	// respaced is set when the schedule restarted because the rate grew:
	// the requests asleep in its slots wake to take new ones.
	respaced bool
}

func (p *pacer) setRate(r float64) {
	if p.low == 0 || r < p.low {
		p.low = r
	}
	if p.spaced == 0 || r < p.spaced {
		p.spaced = r
	}
	p.interval = time.Duration(float64(time.Second) / r)
}

// restart starts the schedule again at from.
func (p *pacer) restart(from time.Time) {
	p.next = from
	p.epoch++
	p.spaced = 0
	if p.interval > 0 {
		p.spaced = float64(time.Second) / float64(p.interval)
	}
}

// respace restarts the schedule at now when the rate has grown by
// respaceGrowth since its slots were taken and more than queued
// requests wait in them: those slots, spaced at the old rate, would hold
// the pace below the new one for as long as they last.
func (p *pacer) respace(now time.Time, queued int) {
	if p.interval <= 0 || p.spaced == 0 || p.backlog(now) < queued {
		return
	}
	if r := float64(time.Second) / float64(p.interval); r < respaceGrowth*p.spaced {
		return
	}
	p.restart(now.Add(p.interval))
	p.respaced = true
}

// respaceGrowth is how much a rate grows before the slots taken at the
// old one are taken again.
const respaceGrowth = 1.25

// reserve takes the next slot at or after now and returns it.
func (p *pacer) reserve(now time.Time) time.Time {
	slot := p.next
	if slot.Before(now) {
		slot = now
	}
	p.next = slot.Add(p.interval)
	return slot
}

// taken counts n slots as taken from from on, the last of them no
// sooner than last: the next free one is after them (requests that went
// before the pace, in a window that began at from), and no later than
// maxOwnWait after last.
func (p *pacer) taken(from time.Time, n int, last time.Time) {
	if n > 0 {
		next := later(from.Add(time.Duration(n)*p.interval), last.Add(p.interval))
		if capped := last.Add(maxOwnWait); next.After(capped) {
			next = capped
		}
		p.next = later(p.next, next)
	}
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

// backlog returns how many slots are taken ahead of now: requests that
// wait for the pace, more than it lets go.
func (p *pacer) backlog(now time.Time) int {
	if p.interval <= 0 || !p.next.After(now) {
		return 0
	}
	return int(p.next.Sub(now) / p.interval)
}
