package ratelimit

import (
	"hash/maphash"
	"sync/atomic"
	"time"
)

// This file counts the first burst: the successes of a host that has no
// state yet (no quota headers, no 429), so that its first 429 finds out
// how many requests the host accepted in the second before it. A host
// with no state costs no lookup of its own, so the count is kept in a
// few slots chosen by the host's name; two hosts that share a slot add
// up, which at worst starts the guess high, and the 429s that follow cut
// it.
//
// It also counts the requests let through without state that are still
// out, so that a host's first quota, told by the first of a burst of
// responses, is not spent again by the requests sent after it before
// the others come back (see hostState.unknown). Sharing a slot makes that
// count high, which holds a small quota for at most awaitNewsMax.

// burstSlots is how many slots the first bursts are counted in: two
// hosts share one with a chance of 1 in 64.
const burstSlots = 64

// burstSpan is the span a first burst is counted over: a second, the
// window of the limiters that count one (HAProxy's http_req_rate(1s),
// go-chi/httprate).
const burstSpan = time.Second

// burstCountBits is how many low bits of a slot hold its count; the
// others hold when its span began, in milliseconds since burstEpoch.
const burstCountBits = 24

var (
	burstSeed  = maphash.MakeSeed()
	burstEpoch = time.Now()
)

// firstBursts counts the successes of hosts without state, a span at a
// time in each slot, and the requests to them still out. A slot's count
// is one word (the span's start and its count), changed by
// compare-and-swap: a success costs no lock. The requests still out are
// a word of their own beside it, added to as a request goes and as it is
// settled: those adds do not make the count's compare-and-swap fail, and
// share its cache line (a line of their own measured slower, 161 against
// 134 ns a request from two goroutines, BenchmarkTracker/none/parallel).
type firstBursts [burstSlots]struct {
	v   atomic.Uint64
	out atomic.Int64
	_   [48]byte // a cache line each: the slots are written concurrently
}

// slotOf returns the slot host is counted in.
func slotOf(host string) uint8 { return uint8(maphash.String(burstSeed, host) % burstSlots) }

// went counts a request to host let through without state, and
// returns its slot plus one, for back.
func (b *firstBursts) went(host string) uint8 {
	i := slotOf(host)
	b[i].out.Add(1)
	return i + 1
}

// back counts a request counted by went (which returned slot) as
// settled.
func (b *firstBursts) back(slot uint8) { b[slot-1].out.Add(-1) }

// outstanding returns the requests counted in slot (as went returned
// it) that are still out: those of the host (and of any host that
// shares its slot) sent before it had state.
func (b *firstBursts) outstanding(slot uint8) int { return int(max(b[slot-1].out.Load(), 0)) }

// burstMillis returns now in milliseconds since burstEpoch.
func burstMillis(now time.Time) uint64 { return uint64(max(now.Sub(burstEpoch).Milliseconds(), 0)) }

// burstEvery is how many successes are counted between two looks at
// the clock: a success costs no clock reading but every burstEvery-th.
// A span is thus known to within that many successes.
const burstEvery = 16

// add counts a success of a host in slot i (as slotOf gives it).
func (b *firstBursts) add(i uint8) {
	s := &b[i]
	for {
		v := s.v.Load()
		n := v & (1<<burstCountBits - 1)
		if v != 0 && n%burstEvery != 0 && n < 1<<burstCountBits-1 {
			if s.v.CompareAndSwap(v, v+1) {
				return
			}
			continue
		}
		ms := burstMillis(time.Now())
		nv := ms<<burstCountBits | 1 // a new span, begun by this success
		if from := v >> burstCountBits; v != 0 && int64(ms)-int64(from) <= burstSpan.Milliseconds() {
			if n == 1<<burstCountBits-1 {
				return // full
			}
			nv = v + 1
		}
		if s.v.CompareAndSwap(v, nv) {
			return
		}
	}
}

// count returns the successes of host counted within the last span at
// now, and empties its slot: the host has state from now on.
func (b *firstBursts) count(host string, now time.Time) int {
	s := &b[slotOf(host)]
	v := s.v.Swap(0)
	if v == 0 || int64(burstMillis(now))-int64(v>>burstCountBits) > burstSpan.Milliseconds() {
		return 0
	}
	return int(v & (1<<burstCountBits - 1))
}
