package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// result is one benchmark line: "BenchmarkX/a=1/client=c-2  N  v unit ...".
type result struct {
	group  string             // the name without its client= part and -procs suffix
	client string             // the value of client=
	procs  int                // the -N suffix, 1 when absent
	values map[string]float64 // unit -> value
}

// parseLine parses one line of `go test -bench` output; ok is false for
// any other line.
func parseLine(line string) (r result, ok bool) {
	f := strings.Fields(line)
	if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
		return result{}, false
	}
	if _, err := strconv.Atoi(f[1]); err != nil {
		return result{}, false
	}
	name, procs := f[0], 1
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if p, err := strconv.Atoi(name[i+1:]); err == nil {
			name, procs = name[:i], p
		}
	}
	var parts []string
	for _, p := range strings.Split(name, "/") {
		if c, ok := strings.CutPrefix(p, "client="); ok {
			r.client = c
			continue
		}
		parts = append(parts, p)
	}
	if r.client == "" {
		return result{}, false
	}
	r.group, r.procs = strings.Join(parts, "/"), procs
	r.values = make(map[string]float64, (len(f)-2)/2)
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return result{}, false
		}
		r.values[f[i+1]] = v
	}
	return r, true
}

// series is every measurement of one client in one group.
type series struct {
	client string
	values map[string][]float64 // unit -> one value per run
}

// table is one group: the clients in the order they first appeared.
type table struct {
	group   string // the group and " (GOMAXPROCS=N)"
	clients []*series
}

// collect reads benchmark output and groups it into tables, in the order
// the groups first appear. Lines that are not results are skipped.
func collect(r io.Reader) ([]*table, error) {
	var tables []*table
	byGroup := map[string]*table{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		res, ok := parseLine(sc.Text())
		if !ok {
			continue
		}
		key := fmt.Sprintf("%s (GOMAXPROCS=%d)", res.group, res.procs)
		t := byGroup[key]
		if t == nil {
			t = &table{group: key}
			byGroup[key] = t
			tables = append(tables, t)
		}
		i := slices.IndexFunc(t.clients, func(s *series) bool { return s.client == res.client })
		if i < 0 {
			t.clients = append(t.clients, &series{client: res.client, values: map[string][]float64{}})
			i = len(t.clients) - 1
		}
		for u, v := range res.values {
			t.clients[i].values[u] = append(t.clients[i].values[u], v)
		}
	}
	return tables, sc.Err()
}

// median returns the median of vs, NaN for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// spread returns half the range of vs relative to its median, as a
// percentage: how far the runs were apart.
func spread(vs []float64) float64 {
	m := median(vs)
	if len(vs) < 2 || m == 0 {
		return 0
	}
	return 100 * (slices.Max(vs) - slices.Min(vs)) / 2 / m
}

// get returns the median of unit for client in t.
func (t *table) get(client, unit string) (float64, bool) {
	for _, s := range t.clients {
		if s.client == client {
			vs, ok := s.values[unit]
			return median(vs), ok
		}
	}
	return 0, false
}

// column is one column of a printed table.
type column struct {
	unit  string // the unit whose median is shown
	ratio bool   // add a column with the ratio to the baseline client's
	noise bool   // add a column with the runs' spread
}

// markdown prints t with the given columns, ratios to baseline.
func (t *table) markdown(w io.Writer, cols []column, baseline string) {
	head := []string{"client"}
	for _, c := range cols {
		head = append(head, c.unit)
		if c.noise {
			head = append(head, "±")
		}
		if c.ratio {
			head = append(head, "×"+baseline)
		}
	}
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat(" --- |", len(head)))
	for _, s := range t.clients {
		row := []string{s.client}
		for _, c := range cols {
			vs, ok := s.values[c.unit]
			if !ok {
				row = append(row, "–")
				if c.noise {
					row = append(row, "")
				}
				if c.ratio {
					row = append(row, "")
				}
				continue
			}
			m := median(vs)
			row = append(row, format(m))
			if c.noise {
				row = append(row, fmt.Sprintf("%.0f%%", spread(vs)))
			}
			if c.ratio {
				b, ok := t.get(baseline, c.unit)
				switch {
				case !ok || b == 0:
					row = append(row, "–")
				default:
					row = append(row, fmt.Sprintf("%.2f", m/b))
				}
			}
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
}

// format prints v with the precision a table needs.
func format(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 1:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
