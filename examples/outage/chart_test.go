package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
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
	var polylines, shades int
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
		case se.Name.Local == "polyline":
			polylines++
			strokes[attr["stroke"]] = true
			if got := len(strings.Fields(attr["points"])); got != 20 {
				t.Errorf("a polyline has %d points, want 20 (one per bucket)", got)
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
	if polylines != len(kinds) || len(strokes) != len(kinds) {
		t.Errorf("got %d polylines in %d colors, want %d in %d", polylines, len(strokes), len(kinds), len(kinds))
	}
	if shades != 1 {
		t.Errorf("got %d shaded rectangles, want 1", shades)
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
