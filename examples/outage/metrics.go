package main

import (
	"slices"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
)

// bucket is the width of the time buckets the server counts requests in,
// and the resolution of the recovery time.
const bucket = 100 * time.Millisecond

// recoveryTarget is the share of new operations that must succeed for a
// time bucket to count as recovered.
const recoveryTarget = 0.99

// summary is one column of the table: what a run of one kind of client
// did to the server and what its callers saw.
type summary struct {
	kind kind

	// Server side: requests that reached the handler.
	total        int64         // over the whole run
	baseline     int64         // peak per 100 ms before the outage
	during       int64         // while the server was down
	duringPeak   int64         // peak per 100 ms while the server was down
	recovery     int64         // in the first second after the server came back
	recoveryPeak int64         // peak per 100 ms in that second
	late         int64         // arrived after their operation's deadline
	overloaded   int64         // failed by the server while up, for lack of capacity
	serverBack   time.Duration // from the server's return until it failed under 1% of the requests it got
	serverNever  bool          // the server was not back by the end of the run

	// Client side: operations as their callers saw them.
	ops       int
	ok        int
	open      int           // refused by an open circuit without a request
	p50, p99  time.Duration // latency of every operation, failures included
	recovered time.Duration // from the server's return until new operations succeed again
	neverOK   bool          // new operations never got back to recoveryTarget within the run

	breaker breakerStats // sturdy only
}

// summarize computes a column of the table from one run.
func summarize(c config, r result) summary {
	s := summary{kind: r.kind, late: r.late, ops: len(r.ops), breaker: r.breaker}
	end := c.outageEnd()
	for _, b := range r.buckets {
		s.total += b.Requests
		switch {
		case b.Start < c.OutageStart:
			s.baseline = max(s.baseline, b.Requests)
		case b.Start < end:
			s.during += b.Requests
			s.duringPeak = max(s.duringPeak, b.Requests)
		case b.Start < end+time.Second:
			s.recovery += b.Requests
			s.recoveryPeak = max(s.recoveryPeak, b.Requests)
		}
		s.overloaded += b.Overloaded
	}
	s.serverBack, s.serverNever = serverBack(r.buckets, end, c.Run)
	lat := make([]time.Duration, 0, len(r.ops))
	for _, o := range r.ops {
		lat = append(lat, o.latency)
		if o.ok {
			s.ok++
		}
		if o.open {
			s.open++
		}
	}
	slices.Sort(lat)
	s.p50, s.p99 = percentile(lat, 0.50), percentile(lat, 0.99)
	s.recovered, s.neverOK = recoveryTime(r.ops, end)
	return s
}

// serverTarget is the largest share of its requests the server may fail
// in a time bucket that counts as back.
const serverTarget = 0.01

// serverBack looks at the server's buckets from its return (at end) to the
// end of the run (run: after it, no new operation starts, and the load
// falls for reasons of its own), and finds the first bucket from which
// every later one had the server fail at most 1% of its requests (a
// bucket without requests fails none). It returns that bucket's start, measured from end, or never = true when
// even the run's last bucket fell short.
func serverBack(buckets []httptestutil.OutageBucket, end, run time.Duration) (d time.Duration, never bool) {
	first := time.Duration(-1)
	for i := len(buckets) - 1; i >= 0; i-- {
		b := buckets[i]
		if b.Start < end {
			break
		}
		if b.Start+bucket > run {
			continue
		}
		if float64(b.Failed) > serverTarget*float64(b.Requests) {
			break
		}
		first = b.Start
	}
	if first < 0 {
		return 0, true
	}
	return first - end, false
}

// percentile returns the nearest-rank q-quantile of sorted durations, 0
// for none.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// recoveryTime looks at the operations that started once the server was
// back (at end), grouped by start time in 100 ms buckets, and finds the
// first bucket from which every later bucket had at least 99% of its
// operations succeed. It returns that bucket's start, measured from end,
// or never = true when even the last bucket fell short (or no operation
// started after end).
func recoveryTime(ops []op, end time.Duration) (d time.Duration, never bool) {
	var n, ok []int
	for _, o := range ops {
		if o.start < end {
			continue
		}
		i := int((o.start - end) / bucket)
		for len(n) <= i {
			n, ok = append(n, 0), append(ok, 0)
		}
		n[i]++
		if o.ok {
			ok[i]++
		}
	}
	first := -1 // the first bucket of the final good stretch
	for i := len(n) - 1; i >= 0; i-- {
		if n[i] == 0 {
			continue
		}
		if float64(ok[i]) < recoveryTarget*float64(n[i]) {
			break
		}
		first = i
	}
	if first < 0 {
		return 0, true
	}
	return time.Duration(first) * bucket, false
}
