package main

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
)

// Geometry of the chart, in SVG user units.
const (
	chartW, chartH = 960, 480
	padL, padR     = 76, 24
	padT, padB     = 122, 56
)

// colors of the lines, by kind.
var colors = map[kind]string{
	kindNaive:   "#d62728",
	kindBackoff: "#ff7f0e",
	kindSturdy:  "#1f77b4",
}

// writeChart draws the server's requests per 100 ms over time, one line
// per run, with the outage shaded, as a standalone SVG document.
func writeChart(w io.Writer, c config, sums []summary, runs []result) error {
	bw := bufio.NewWriter(w)
	xmax := c.Run
	var ymax int64 = 1
	capacity := c.Capacity * c.baseLoad() * bucket.Seconds() // requests per bucket; 0 for none
	if capacity > 0 {
		ymax = int64(math.Ceil(capacity))
	}
	for _, r := range runs {
		for _, b := range r.buckets {
			xmax = max(xmax, b.Start+bucket)
			ymax = max(ymax, b.Requests)
		}
	}
	xmax = min(xmax, c.Run+c.Deadline) // the tail of late operations, at most
	ystep := niceStep(float64(ymax) / 5)
	ytop := ystep * math.Ceil(float64(ymax)/ystep)
	plotW, plotH := float64(chartW-padL-padR), float64(chartH-padT-padB)
	x := func(d time.Duration) float64 { return padL + plotW*d.Seconds()/xmax.Seconds() }
	y := func(n float64) float64 { return padT + plotH*(1-n/ytop) }

	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif" font-size="13">`+"\n",
		chartW, chartH, chartW, chartH)
	fmt.Fprintf(bw, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", chartW, chartH)
	fmt.Fprintf(bw, `<text x="%d" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", padL,
		esc(fmt.Sprintf("Requests reaching the server per 100 ms: %d callers, server down %v to %v (%s), then back",
			c.Clients, c.OutageStart, c.outageEnd(), shortMode(c.Mode))))

	// The outage.
	fmt.Fprintf(bw, `<rect x="%.1f" y="%d" width="%.1f" height="%.1f" fill="#7f7f7f" fill-opacity="0.18"/>`+"\n",
		x(c.OutageStart), padT, x(c.outageEnd())-x(c.OutageStart), plotH)
	fmt.Fprintf(bw, `<text x="%.1f" y="%d" fill="#555555" text-anchor="middle">server down</text>`+"\n",
		(x(c.OutageStart)+x(c.outageEnd()))/2, padT+16)

	// Axes, grid and ticks.
	for v := 0.0; v <= ytop+ystep/2; v += ystep {
		fmt.Fprintf(bw, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e0e0e0"/>`+"\n", padL, y(v), padL+plotW, y(v))
		fmt.Fprintf(bw, `<text x="%d" y="%.1f" text-anchor="end" fill="#333333">%s</text>`+"\n", padL-6, y(v)+4, thousands(int64(v)))
	}
	xstep := time.Second
	for xmax/xstep > 12 {
		xstep *= 2
	}
	for t := time.Duration(0); t <= xmax; t += xstep {
		fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333333"/>`+"\n", x(t), padT+plotH, x(t), padT+plotH+5)
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#333333">%gs</text>`+"\n", x(t), padT+plotH+20, t.Seconds())
	}
	fmt.Fprintf(bw, `<line x1="%d" y1="%d" x2="%d" y2="%.1f" stroke="#333333"/>`+"\n", padL, padT, padL, padT+plotH)
	fmt.Fprintf(bw, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333333"/>`+"\n", padL, padT+plotH, padL+plotW, padT+plotH)
	fmt.Fprintf(bw, `<text x="%.1f" y="%d" text-anchor="middle" fill="#333333">time since the start of the run</text>`+"\n", padL+plotW/2, chartH-12)
	fmt.Fprintf(bw, `<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle" fill="#333333">requests per 100 ms</text>`+"\n", padT+plotH/2)

	// What the server can serve.
	if capacity > 0 {
		fmt.Fprintf(bw, `<line class="capacity" x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#555555" stroke-dasharray="6 4"/>`+"\n",
			padL, y(capacity), padL+plotW, y(capacity))
	}

	// One line per kind of client, zero where the server saw nothing:
	// solid where the load generator kept up, dotted where it fell
	// behind (see lagMeter), since there the line shows this machine.
	n := int((xmax + bucket - 1) / bucket)
	anyBehind := false
	for _, r := range runs {
		counts := make([]int64, n)
		for _, b := range r.buckets {
			if i := int(b.Start / bucket); i < n {
				counts[i] = b.Requests
			}
		}
		behind := r.lag.behind(c)
		late := func(i int) bool { return i < len(behind) && behind[i] }
		pt := func(i int) string {
			return fmt.Sprintf("%.1f,%.1f", x(time.Duration(i)*bucket+bucket/2), y(float64(counts[i])))
		}
		// Segment i joins point i to point i+1; it is dotted if either
		// end fell behind. Each stretch of one style is a subpath.
		var solid, dotted strings.Builder
		for i := 0; i+1 < n; i++ {
			d := &solid
			if late(i) || late(i+1) {
				d = &dotted
			}
			if i == 0 || (late(i-1) || late(i)) != (late(i) || late(i+1)) {
				fmt.Fprintf(d, "M%s ", pt(i))
			}
			fmt.Fprintf(d, "L%s ", pt(i+1))
		}
		if n == 1 {
			fmt.Fprintf(&solid, "M%s h0.1 ", pt(0))
		}
		if solid.Len() > 0 {
			fmt.Fprintf(bw, `<path class="line" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round" d="%s"/>`+"\n",
				colors[r.kind], strings.TrimSpace(solid.String()))
		}
		if dotted.Len() > 0 {
			anyBehind = true
			fmt.Fprintf(bw, `<path class="behind" fill="none" stroke="%s" stroke-width="2" stroke-dasharray="1 5" stroke-linecap="round" d="%s"/>`+"\n",
				colors[r.kind], strings.TrimSpace(dotted.String()))
		}
	}
	if anyBehind {
		fmt.Fprintf(bw, `<text x="%.1f" y="%d" text-anchor="end" fill="#555555">dotted: the load generator fell behind (busy machine)</text>`+"\n",
			padL+plotW, padT-8)
	}

	// The legend, above the plot, one row per kind.
	for i, s := range sums {
		ly := 44 + 18*i
		label := fmt.Sprintf("%s: %s of operations succeeded; server back after its return: %s; %s requests while it was down",
			s.kind, pct(s.ok, s.ops), backAfter(c, s), thousands(s.during))
		fmt.Fprintf(bw, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", padL, ly, padL+18, ly, colors[s.kind])
		fmt.Fprintf(bw, `<text x="%d" y="%d" fill="#333333">%s</text>`+"\n", padL+24, ly+4, esc(label))
	}
	if capacity > 0 {
		ly := 44 + 18*len(sums)
		fmt.Fprintf(bw, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#555555" stroke-dasharray="6 4"/>`+"\n", padL, ly, padL+18, ly)
		fmt.Fprintf(bw, `<text x="%d" y="%d" fill="#333333">%s</text>`+"\n", padL+24, ly+4,
			esc(fmt.Sprintf("the server's capacity, %s per 100 ms: beyond it, requests fail and still cost it work", thousands(int64(capacity)))))
	}
	fmt.Fprintln(bw, `</svg>`)
	return bw.Flush()
}

// niceStep rounds v up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// esc escapes s for SVG text.
func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// shortMode names m in a few characters, for the chart's title.
func shortMode(m httptestutil.OutageMode) string {
	if m == httptestutil.OutageReset {
		return "connections reset"
	}
	return "503s"
}
