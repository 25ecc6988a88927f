package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// lagTick is how often the lag meter asks to wake up.
const lagTick = 10 * time.Millisecond

// lagMeter measures how far behind this program's own goroutines run: one
// goroutine sleeps lagTick at a time and records by how much each wake-up
// came late. On a busy machine (other work, or more clients than the CPUs
// can drive) every client goroutine is late by as much, so it starts fewer
// operations than the workload asks for, and the server's load drops for
// reasons that have nothing to do with the kind of client.
type lagMeter struct {
	start time.Time
	late  []time.Duration // per 100 ms bucket of the run: lateness summed
	n     []int           // wake-ups counted
	worst time.Duration
	quit  chan struct{}
	done  chan struct{}
}

// startLag starts a meter for a run that began at start and whose
// buckets go up to horizon.
func startLag(start time.Time, horizon time.Duration) *lagMeter {
	n := int(horizon/bucket) + 1
	m := &lagMeter{
		start: start,
		late:  make([]time.Duration, n),
		n:     make([]int, n),
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go m.run()
	return m
}

func (m *lagMeter) run() {
	defer close(m.done)
	t := time.NewTimer(lagTick)
	defer t.Stop()
	want := time.Now().Add(lagTick)
	for {
		select {
		case <-m.quit:
			return
		case <-t.C:
			now := time.Now()
			m.record(now, max(0, now.Sub(want)))
			want = now.Add(lagTick)
			t.Reset(lagTick)
		}
	}
}

func (m *lagMeter) record(now time.Time, late time.Duration) {
	i := int(now.Sub(m.start) / bucket)
	if i < 0 || i >= len(m.late) {
		return
	}
	m.late[i] += late
	m.n[i]++
	m.worst = max(m.worst, late)
}

// stop ends the meter and returns what it measured.
func (m *lagMeter) stop() lagStats {
	close(m.quit)
	<-m.done
	s := lagStats{worst: m.worst, mean: make([]time.Duration, len(m.late))}
	var sum time.Duration
	var n int
	for i := range m.late {
		if m.n[i] > 0 {
			s.mean[i] = m.late[i] / time.Duration(m.n[i])
		}
		sum += m.late[i]
		n += m.n[i]
	}
	if n > 0 {
		s.overall = sum / time.Duration(n)
	}
	return s
}

// lagStats is what a lagMeter measured in one run.
type lagStats struct {
	mean    []time.Duration // mean lateness of a wake-up, per 100 ms bucket
	overall time.Duration   // mean lateness over the run
	worst   time.Duration   // the latest wake-up
}

// behindAt is the mean lateness from which a bucket counts as one where
// the load generator fell behind: a fifth of the time between a caller's
// operations, so the callers there start at most about 5/6 of the
// operations asked of them.
func behindAt(c config) time.Duration { return c.Think / 5 }

// behind reports, per bucket, whether the load generator fell behind.
func (s lagStats) behind(c config) []bool {
	b := make([]bool, len(s.mean))
	for i, d := range s.mean {
		b[i] = d >= behindAt(c)
	}
	return b
}

// stretch is a span of the run where the load generator fell behind.
type stretch struct{ from, to time.Duration }

func (s stretch) String() string {
	return fmt.Sprintf("%.1f–%.1fs", s.from.Seconds(), s.to.Seconds())
}

// stretches lists the spans of the run where the load generator fell
// behind, in time order, up to the end of the run.
func (s lagStats) stretches(c config) []stretch {
	var out []stretch
	b := s.behind(c)
	last := min(len(b), int((c.Run+bucket-1)/bucket))
	for i := 0; i < last; i++ {
		if !b[i] {
			continue
		}
		j := i
		for j+1 < last && b[j+1] {
			j++
		}
		out = append(out, stretch{time.Duration(i) * bucket, time.Duration(j+1) * bucket})
		i = j
	}
	return out
}

// lagNote warns when the load generator fell behind in a run: for how
// long, where the longest stretches were, and the worst lateness; ""
// when every run kept up.
func lagNote(c config, runs []result) string {
	var b strings.Builder
	for _, r := range runs {
		st := r.lag.stretches(c)
		if len(st) == 0 {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "WARNING: the load generator fell behind (this machine was busy): its timers fired %v or more late on average\n", behindAt(c))
		}
		var total time.Duration
		for _, s := range st {
			total += s.to - s.from
		}
		longest := slices.Clone(st)
		slices.SortStableFunc(longest, func(a, b stretch) int { return cmp.Compare(b.to-b.from, a.to-a.from) })
		longest = longest[:min(3, len(longest))]
		slices.SortFunc(longest, func(a, b stretch) int { return cmp.Compare(a.from, b.from) })
		var names []string
		for _, s := range longest {
			names = append(names, s.String())
		}
		more := ""
		if len(st) > len(longest) {
			more = ", ..."
		}
		fmt.Fprintf(&b, "  %s: for %.1fs of the %v run, as in %s%s (worst %v)\n",
			r.kind, total.Seconds(), c.Run, strings.Join(names, ", "), more, r.lag.worst.Round(time.Millisecond))
	}
	if b.Len() == 0 {
		return ""
	}
	b.WriteString("There its clients started fewer operations than the workload asks for, so the server's load drops for reasons\n" +
		"that have nothing to do with the kind of client; the chart draws those stretches dotted. Compare runs on a quieter\n" +
		"machine, or with fewer -clients.")
	return b.String()
}
