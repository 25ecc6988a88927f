package ratelimit

import (
	"hash/maphash"
	"sync"
	"time"
)

// This file counts the first burst: the successes of a host that has no
// state yet (no quota headers, no 429), so that its first 429 finds out
// how many requests the host accepted in the second before it. A host
// with no state costs no lookup of its own, so the count is kept in a
// few slots chosen by the host's name; two hosts that share a slot add
// up, which at worst starts the guess high, and the 429s that follow cut
// it.

// burstSlots is how many slots the first bursts are counted in.
const burstSlots = 16

// burstSpan is the span a first burst is counted over: a second, the
// window of the limiters that count one (HAProxy's http_req_rate(1s),
// go-chi/httprate).
const burstSpan = time.Second

var burstSeed = maphash.MakeSeed()

// firstBursts counts the successes of hosts without state, a span at a
// time in each slot.
type firstBursts [burstSlots]struct {
	mu   sync.Mutex
	from time.Time // when the slot's count began
	n    int
	_    [24]byte // a cache line each: the slots are written concurrently
}

// add counts a success of host at now.
func (b *firstBursts) add(host string, now time.Time) {
	s := &b[maphash.String(burstSeed, host)%burstSlots]
	s.mu.Lock()
	if now.Sub(s.from) > burstSpan {
		s.from, s.n = now, 0
	}
	s.n++
	s.mu.Unlock()
}

// count returns the successes of host counted within the last span at
// now, and empties its slot: the host has state from now on.
func (b *firstBursts) count(host string, now time.Time) int {
	s := &b[maphash.String(burstSeed, host)%burstSlots]
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.n
	if now.Sub(s.from) > burstSpan {
		n = 0
	}
	s.from, s.n = time.Time{}, 0
	return n
}
