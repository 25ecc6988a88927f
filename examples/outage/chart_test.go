package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
)

func TestNiceStep(t *testing.T) {
	tests := []struct{ v, want float64 }{
		{0, 1}, {0.3, 1}, {1, 1}, {1.5, 2}, {3, 5}, {7, 10}, {10, 10}, {11, 20}, {240, 500}, {501, 1000},
	}
	for _, tt := range tests {
		if got := niceStep(tt.v); got != tt.want {
			t.Errorf("niceStep(%v) = %v, want %v", tt.v, got, tt.want)
		}
	}
}

func TestWriteChart(t *testing.T) {
	c := config{Clients: 3, Run: 2 * time.Second, OutageStart: 500 * time.Millisecond, Outage: time.Second, Deadline: time.Second}
	var runs []result
	var sums []summary
	for i, k := range kinds {
		r := result{kind: k}
		for j := range 20 {
			r.buckets = append(r.buckets, httptestutil.OutageBucket{Start: time.Duration(j) * bucket, Requests: int64(10 * (i + 1) * (j % 3))})
		}
		runs = append(runs, r)
		sums = append(sums, summarize(c, r))
	}
	var buf bytes.Buffer
	if err := writeChart(&buf, c, sums, runs); err != nil {
		t.Fatal(err)
	}

	d := xml.NewDecoder(&buf)
	var lines, shades int
	strokes := map[string]bool{}
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the chart is not well-formed XML: %v", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		attr := map[string]string{}
		for _, a := range se.Attr {
			attr[a.Name.Local] = a.Value
		}
		switch {
		case se.Name.Local == "path" && attr["class"] == "behind":
			t.Errorf("a dotted line where the load generator kept up: %v", attr["d"])
		case se.Name.Local == "path" && attr["class"] == "line":
			lines++
			strokes[attr["stroke"]] = true
			if got := len(strings.Fields(attr["d"])); got != 20 {
				t.Errorf("a line has %d points, want 20 (one per bucket): %s", got, attr["d"])
			}
		case se.Name.Local == "rect" && attr["fill-opacity"] != "":
			shades++
			// The outage runs from 0.5 s to 1.5 s of a 2 s axis.
			plotW := float64(chartW - padL - padR)
			x, _ := strconv.ParseFloat(attr["x"], 64)
			w, _ := strconv.ParseFloat(attr["width"], 64)
			if wantX := padL + plotW/4; abs(x-wantX) > 0.1 {
				t.Errorf("the shade starts at x=%v, want %v", x, wantX)
			}
			if wantW := plotW / 2; abs(w-wantW) > 0.1 {
				t.Errorf("the shade is %v wide, want %v", w, wantW)
			}
		}
	}
	if lines != len(kinds) || len(strokes) != len(kinds) {
		t.Errorf("got %d lines in %d colors, want %d in %d", lines, len(strokes), len(kinds), len(kinds))
	}
	if shades != 1 {
		t.Errorf("got %d shaded rectangles, want 1", shades)
	}
}

// TestWriteChartBehind checks that where the load generator fell behind
// the line is dotted instead of solid, and the chart says why.
func TestWriteChartBehind(t *testing.T) {
	c := config{Clients: 3, Run: 2 * time.Second, OutageStart: 500 * time.Millisecond, Outage: time.Second, Deadline: time.Second, Think: 100 * time.Millisecond}
	r := result{kind: kindSturdy, lag: lagStats{mean: make([]time.Duration, 30)}}
	for j := range 20 {
		r.buckets = append(r.buckets, httptestutil.OutageBucket{Start: time.Duration(j) * bucket, Requests: 10})
	}
	r.lag.mean[3], r.lag.mean[4] = 50*time.Millisecond, 20*time.Millisecond // 20ms: exactly Think/5
	var buf bytes.Buffer
	if err := writeChart(&buf, c, []summary{summarize(c, r)}, []result{r}); err != nil {
		t.Fatal(err)
	}
	solid, dotted := pathPoints(t, buf.Bytes())
	// Buckets 3 and 4 fell behind: segments 2-3, 3-4 and 4-5 are dotted,
	// the rest (0-1-2 and 5-...-19, the 2 s axis) solid.
	if got, want := dotted, []int{4}; !slices.Equal(got, want) {
		t.Errorf("dotted subpaths have %v points, want %v", got, want)
	}
	if got, want := solid, []int{3, 15}; !slices.Equal(got, want) {
		t.Errorf("solid subpaths have %v points, want %v", got, want)
	}
	if !strings.Contains(buf.String(), "load generator fell behind") {
		t.Errorf("the chart does not say what the dotted stretch means")
	}
}

// pathPoints returns the number of points of each subpath of the chart's
// solid and dotted lines.
func pathPoints(t *testing.T, doc []byte) (solid, dotted []int) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return solid, dotted
		}
		if err != nil {
			t.Fatalf("the chart is not well-formed XML: %v", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok || se.Name.Local != "path" {
			continue
		}
		var class, path string
		for _, a := range se.Attr {
			switch a.Name.Local {
			case "class":
				class = a.Value
			case "d":
				path = a.Value
			}
		}
		var counts []int
		for _, f := range strings.Fields(path) {
			if strings.HasPrefix(f, "M") {
				counts = append(counts, 0)
			}
			counts[len(counts)-1]++
		}
		if class == "behind" {
			dotted = append(dotted, counts...)
		} else {
			solid = append(solid, counts...)
		}
	}
}

func TestEsc(t *testing.T) {
	if got, want := esc(`a<b & "c"`), "a&lt;b &amp; &#34;c&#34;"; got != want {
		t.Errorf("esc = %q, want %q", got, want)
	}
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// TestWriteChartCapacity checks that the chart draws the server's
// capacity, at its height, only when the server has one.
func TestWriteChartCapacity(t *testing.T) {
	for _, tt := range []struct {
		capacity float64
		want     int
	}{{0, 0}, {1.5, 1}} {
		c := config{Clients: 30, Run: 2 * time.Second, OutageStart: 500 * time.Millisecond, Outage: time.Second,
			Deadline: time.Second, Think: 100 * time.Millisecond, Capacity: tt.capacity}
		r := result{kind: kindSturdy, buckets: []httptestutil.OutageBucket{{Start: 0, Requests: 9}}}
		var buf bytes.Buffer
		if err := writeChart(&buf, c, []summary{summarize(c, r)}, []result{r}); err != nil {
			t.Fatal(err)
		}
		d := xml.NewDecoder(&buf)
		var got int
		for {
			tok, err := d.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("the chart is not well-formed XML: %v", err)
			}
			se, ok := tok.(xml.StartElement)
			if !ok || se.Name.Local != "line" {
				continue
			}
			attr := map[string]string{}
			for _, a := range se.Attr {
				attr[a.Name.Local] = a.Value
			}
			if attr["class"] != "capacity" {
				continue
			}
			got++
			// 1.5 × 30 clients every 100 ms = 45 per 100 ms, above the
			// busiest bucket (9), on an axis up to 50.
			plotH := float64(chartH - padT - padB)
			y, _ := strconv.ParseFloat(attr["y1"], 64)
			if want := padT + plotH*(1-45.0/50); abs(y-want) > 0.1 {
				t.Errorf("capacity %v: the line is at y=%v, want %v", tt.capacity, y, want)
			}
		}
		if got != tt.want {
			t.Errorf("capacity %v: %d capacity lines, want %d", tt.capacity, got, tt.want)
		}
	}
}
