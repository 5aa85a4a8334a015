package report

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/jepsen-like/checker"
	"github.com/fenced/fenced/jepsen-like/history"
)

// The plots beside the grant timeline share its time axis (x) and its
// fault bands, so that a spike of latency or a hole in throughput lines up
// with the fault under it. They are SVG written here, with no script and
// nothing fetched.

// fencedKinds are the operations that go to fenced, in the order of the
// legend; writes and reads go to the harness's resource.
var fencedKinds = []string{history.Acquire, history.Renew, history.Keepalive, history.Release, history.Verify}

// kindColor gives each operation kind one colour in every plot.
var kindColor = map[string]string{
	history.Acquire: "#4e79a7", history.Renew: "#59a14f", history.Keepalive: "#76b7b2",
	history.Release: "#f28e2b", history.Verify: "#b07aa1",
}

// outcome colours of the throughput plot.
const (
	okColor      = "#59a14f"
	refusedColor = "#f28e2b"
	unknownColor = "#e15759"
)

// runEnd is the end of the run's time axis: the last completion or heal.
func runEnd(ops []history.Op, faults []history.Fault) int64 {
	var end int64 = 1
	for _, o := range ops {
		end = max(end, o.Complete)
	}
	for _, f := range faults {
		end = max(end, f.End)
	}
	return end
}

// axis maps run time onto the plots' x, as the timeline does.
type axis struct{ end int64 }

func (a axis) x(t int64) float64 {
	return leftMargin + (svgWidth-leftMargin-10)*float64(min(max(t, 0), a.end))/float64(a.end)
}

// svg builds one plot's SVG text. Every number goes through num, so no
// NaN or infinity can reach the page.
type svg struct {
	b strings.Builder
}

func num(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		f = 0
	}
	return strconv.FormatFloat(f, 'f', 1, 64)
}

func (s *svg) printf(format string, args ...any) { fmt.Fprintf(&s.b, format, args...) }

func (s *svg) text(x, y float64, anchor, fill, text string) {
	s.printf(`<text x="%s" y="%s" text-anchor="%s" fill="%s">%s</text>`+"\n", num(x), num(y), anchor, fill, html.EscapeString(text))
}

// faultBands shades each fault over the plot area (class fault) or over
// the clients' rows (class fault-rows), with its title.
func (s *svg) faultBands(class string, a axis, faults []history.Fault, top, height float64) {
	for _, f := range faults {
		x0 := a.x(f.Start)
		w := max(a.x(f.End)-x0, 2)
		s.printf(`<rect class="%s" x="%s" y="%s" width="%s" height="%s" fill="#f8d7da" fill-opacity="0.55"><title>%s</title></rect>`+"\n",
			class, num(x0), num(top), num(w), num(height), html.EscapeString(fmt.Sprintf("%s %v %.3fs..%.3fs", f.Nemesis, f.Nodes, float64(f.Start)/1e9, float64(f.End)/1e9)))
	}
}

// timeAxis writes the seconds under a plot, with the timeline's step.
func (s *svg) timeAxis(a axis, y float64) {
	step := niceStep(float64(a.end) / 1e9)
	for sec := 0.0; sec*1e9 <= float64(a.end); sec += step {
		s.text(a.x(int64(sec*1e9)), y, "middle", "#333", fmt.Sprintf("%gs", sec))
	}
}

func (s *svg) open(id string, height float64) {
	s.printf(`<svg id="%s" xmlns="http://www.w3.org/2000/svg" width="%s" height="%s">`+"\n", id, num(svgWidth), num(height))
}

func (s *svg) close() template.HTML {
	s.b.WriteString("</svg>\n")
	return template.HTML(s.b.String()) // built from numbers and escaped text only
}

// seconds is the number of one-second buckets of the run.
func (a axis) seconds() int { return int(a.end/int64(time.Second)) + 1 }

// bucketX returns the x of the start and the width of second i.
func (a axis) bucketX(i int) (float64, float64) {
	x0 := a.x(int64(i) * int64(time.Second))
	x1 := a.x(int64(i+1) * int64(time.Second))
	return x0, max(x1-x0, 0.5)
}

const plotH = 170.0

// latencyPlot draws, per second of invocation and per kind of operation
// fenced answered (acknowledged or refused), the median (dashed) and the
// 99th percentile (solid) of its latency, on a log scale. Unknown outcomes
// are left out: their latency is a client's timeout, not fenced's.
func latencyPlot(ops []history.Op, faults []history.Fault) template.HTML {
	a := axis{end: runEnd(ops, faults)}
	n := a.seconds()
	lat := map[string][][]float64{} // kind -> second -> latencies in ms
	var hi float64 = 10
	for _, o := range ops {
		if o.Outcome == history.Info || o.Complete < o.Invoke || kindColor[o.Kind] == "" {
			continue
		}
		if lat[o.Kind] == nil {
			lat[o.Kind] = make([][]float64, n)
		}
		i := min(int(o.Invoke/int64(time.Second)), n-1)
		ms := float64(o.Complete-o.Invoke) / 1e6
		lat[o.Kind][i] = append(lat[o.Kind][i], ms)
		hi = max(hi, ms)
	}
	// A log scale from 0.1 ms to the next power of ten above the slowest.
	lo, top := 0.1, math.Pow(10, math.Ceil(math.Log10(hi)))
	y0 := 28.0
	y := func(ms float64) float64 {
		ms = min(max(ms, lo), top)
		return y0 + plotH - plotH*(math.Log10(ms)-math.Log10(lo))/(math.Log10(top)-math.Log10(lo))
	}
	var s svg
	s.open("latency", y0+plotH+40)
	s.faultBands("fault", a, faults, y0, plotH)
	for d := lo; d <= top*1.001; d *= 10 {
		s.printf(`<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="#e6e6e6"/>`+"\n", num(leftMargin), num(svgWidth-10), num(y(d)), num(y(d)))
		s.text(leftMargin-6, y(d)+4, "end", "#333", fmtMs(d))
	}
	lx := leftMargin
	for _, k := range fencedKinds {
		per := lat[k]
		if per == nil {
			continue
		}
		for _, q := range []struct {
			p    int
			dash string
		}{{50, ` stroke-dasharray="4 3"`}, {99, ""}} {
			var pts []string
			flush := func() {
				if len(pts) > 0 {
					s.printf(`<polyline class="lat" fill="none" stroke="%s" stroke-width="1.4"%s points="%s"><title>%s p%d</title></polyline>`+"\n",
						kindColor[k], q.dash, strings.Join(pts, " "), k, q.p)
				}
				pts = pts[:0]
			}
			for i, ls := range per {
				if len(ls) == 0 {
					flush() // no answer that second: a gap in the line
					continue
				}
				sort.Float64s(ls)
				x0, w := a.bucketX(i)
				pts = append(pts, num(x0+w/2)+","+num(y(quantile(ls, q.p))))
			}
			flush()
		}
		s.printf(`<rect x="%s" y="6" width="10" height="10" fill="%s"/>`+"\n", num(lx), kindColor[k])
		s.text(lx+14, 15, "start", "#333", k)
		lx += 30 + 7*float64(len(k))
	}
	s.text(svgWidth-10, 15, "end", "#666", "latency per second: p99 solid, p50 dashed (log scale)")
	s.timeAxis(a, y0+plotH+16)
	return s.close()
}

// quantile returns the p-th percentile of sorted values.
func quantile(sorted []float64, p int) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

func fmtMs(ms float64) string {
	switch {
	case ms == 0:
		return "0"
	case ms >= 1000:
		return fmt.Sprintf("%gs", ms/1000)
	case ms >= 1:
		return fmt.Sprintf("%gms", ms)
	}
	return fmt.Sprintf("%gµs", ms*1000)
}

// throughputPlot stacks, per second of completion, the operations fenced
// acknowledged, refused and left unknown. Under it, each client's longest
// time without service (no acknowledgement, verdict or refusal about a
// key: checker.Served) is marked as a bar from the last answer before it
// to the first after it.
func throughputPlot(ops []history.Op, faults []history.Fault) template.HTML {
	a := axis{end: runEnd(ops, faults)}
	n := a.seconds()
	ok, refused, unknown := make([]int, n), make([]int, n), make([]int, n)
	hi := 1
	for _, o := range ops {
		if kindColor[o.Kind] == "" || o.Complete < 0 {
			continue
		}
		i := min(int(o.Complete/int64(time.Second)), n-1)
		switch o.Outcome {
		case history.OK:
			ok[i]++
		case history.Fail:
			refused[i]++
		default:
			unknown[i]++
		}
		hi = max(hi, ok[i]+refused[i]+unknown[i])
	}
	gaps := longestGaps(ops)
	y0 := 28.0
	gapTop := y0 + plotH + 30
	height := gapTop + 16*float64(len(gaps)) + 10
	var s svg
	s.open("throughput", height)
	s.faultBands("fault", a, faults, y0, plotH)
	s.faultBands("fault-rows", a, faults, gapTop, 16*float64(len(gaps)))
	scale := plotH / float64(niceCeil(hi))
	for _, v := range []int{0, niceCeil(hi) / 2, niceCeil(hi)} {
		yy := y0 + plotH - scale*float64(v)
		s.printf(`<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="#e6e6e6"/>`+"\n", num(leftMargin), num(svgWidth-10), num(yy), num(yy))
		s.text(leftMargin-6, yy+4, "end", "#333", fmt.Sprintf("%d/s", v))
	}
	for i := 0; i < n; i++ {
		x0, w := a.bucketX(i)
		base := y0 + plotH
		for _, part := range []struct {
			v     int
			color string
			what  string
		}{{ok[i], okColor, "ok"}, {refused[i], refusedColor, "refused"}, {unknown[i], unknownColor, "unknown"}} {
			if part.v == 0 {
				continue
			}
			h := scale * float64(part.v)
			s.printf(`<rect class="tp" x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%ds: %d %s</title></rect>`+"\n",
				num(x0+0.5), num(base-h), num(max(w-1, 0.5)), num(h), part.color, i, part.v, part.what)
			base -= h
		}
	}
	lx := leftMargin
	for _, l := range []struct{ what, color string }{{"ok", okColor}, {"refused", refusedColor}, {"unknown", unknownColor}} {
		s.printf(`<rect x="%s" y="6" width="10" height="10" fill="%s"/>`+"\n", num(lx), l.color)
		s.text(lx+14, 15, "start", "#333", l.what)
		lx += 30 + 7*float64(len(l.what))
	}
	s.text(svgWidth-10, 15, "end", "#666", "operations completed per second; below, each client's longest time without service")
	s.timeAxis(a, y0+plotH+16)
	for i, g := range gaps {
		yy := gapTop + 16*float64(i)
		s.text(leftMargin-6, yy+12, "end", "#333", fmt.Sprintf("c%d", g.client))
		x0 := a.x(g.from)
		w := max(a.x(g.to)-x0, 1.5)
		d := time.Duration(g.to - g.from).Round(time.Millisecond)
		s.printf(`<rect class="gap" x="%s" y="%s" width="%s" height="10" fill="#b00020"><title>client %d: %v without service, %.3fs..%.3fs</title></rect>`+"\n",
			num(x0), num(yy+3), num(w), g.client, d, float64(g.from)/1e9, float64(g.to)/1e9)
		s.text(min(x0+w+4, svgWidth-60), yy+12, "start", "#b00020", d.String())
	}
	return s.close()
}

// niceCeil rounds up to 1, 2 or 5 times a power of ten.
func niceCeil(v int) int {
	for p := 1; ; p *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m*p >= v {
				return m * p
			}
		}
	}
}

// clientGap is one client's longest time without service.
type clientGap struct {
	client   int
	from, to int64
}

// maxGapLanes bounds the clients marked: those with the longest gaps.
const maxGapLanes = 16

// longestGaps returns each client's longest time without service: between
// its first invocation and its first answer, between two answers, or from
// its last answer to its last completion. Clients are in order; when there
// are more than maxGapLanes, only the longest gaps are kept.
func longestGaps(ops []history.Op) []clientGap {
	served := map[int][]int64{}
	first, last := map[int]int64{}, map[int]int64{}
	for i := range ops {
		o := &ops[i]
		if kindColor[o.Kind] == "" {
			continue
		}
		if f, ok := first[o.Client]; !ok || o.Invoke < f {
			first[o.Client] = o.Invoke
		}
		last[o.Client] = max(last[o.Client], o.Complete)
		if checker.Served(o) {
			served[o.Client] = append(served[o.Client], o.Complete)
		}
	}
	var out []clientGap
	for c, start := range first {
		ts := append(served[c], last[c])
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		g := clientGap{client: c, from: start, to: start}
		prev := start
		for _, t := range ts {
			if t-prev > g.to-g.from {
				g.from, g.to = prev, t
			}
			prev = max(prev, t)
		}
		out = append(out, g)
	}
	if len(out) > maxGapLanes {
		sort.Slice(out, func(i, j int) bool { return out[i].to-out[i].from > out[j].to-out[j].from })
		out = out[:maxGapLanes]
	}
	sort.Slice(out, func(i, j int) bool { return out[i].client < out[j].client })
	return out
}

// streamColors tell the watch streams apart in the lag plot.
var streamColors = []string{"#1b6ac9", "#d9822b", "#2e9e5b", "#8e44ad", "#c0392b", "#7f8c8d", "#16a085"}

// lagPlot draws, per second of arrival and per watch stream, the longest
// lag of a grant: the time from its acknowledgement to the client that
// asked (the first acknowledgement of that token) to its arrival on the
// stream, 0 when the stream saw it first (a grant is its key and token:
// tokens are unique per key only). Grants no client saw
// acknowledged (a lost answer) are left out.
func lagPlot(ops []history.Op, faults []history.Fault, deliveries []history.Delivery) template.HTML {
	type grant struct {
		key   string
		token fence.Token
	}
	acked := map[grant]int64{}
	for _, o := range ops {
		if o.Kind != history.Acquire || o.Outcome != history.OK || o.Granted == 0 || o.Complete < 0 {
			continue
		}
		g := grant{o.Key, o.Granted}
		if t, ok := acked[g]; !ok || o.Complete < t {
			acked[g] = o.Complete
		}
	}
	a := axis{end: runEnd(ops, faults)}
	for _, d := range deliveries {
		a.end = max(a.end, d.At)
	}
	n := a.seconds()
	lag := map[int][]float64{} // stream -> second -> worst lag in ms (-1: none)
	hi := 10.0
	for _, d := range deliveries {
		t, ok := acked[grant{d.Key, d.Token}]
		if !ok || d.At < 0 {
			continue
		}
		per := lag[d.Stream]
		if per == nil {
			per = make([]float64, n)
			for i := range per {
				per[i] = -1
			}
			lag[d.Stream] = per
		}
		i := min(int(d.At/int64(time.Second)), n-1)
		ms := max(float64(d.At-t)/1e6, 0)
		per[i] = max(per[i], ms)
		hi = max(hi, ms)
	}
	top := float64(niceCeil(int(math.Ceil(hi))))
	y0 := 28.0
	y := func(ms float64) float64 { return y0 + plotH - plotH*ms/top }
	var s svg
	s.open("lag", y0+plotH+40)
	s.faultBands("fault", a, faults, y0, plotH)
	for _, v := range []float64{0, top / 2, top} {
		s.printf(`<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="#e6e6e6"/>`+"\n", num(leftMargin), num(svgWidth-10), num(y(v)), num(y(v)))
		s.text(leftMargin-6, y(v)+4, "end", "#333", fmtMs(v))
	}
	streams := make([]int, 0, len(lag))
	for st := range lag {
		streams = append(streams, st)
	}
	sort.Ints(streams)
	lx := leftMargin
	for _, st := range streams {
		color := streamColors[st%len(streamColors)]
		var pts []string
		flush := func() {
			if len(pts) > 0 {
				s.printf(`<polyline class="lagline" fill="none" stroke="%s" stroke-width="1.4" points="%s"><title>stream %d</title></polyline>`+"\n",
					color, strings.Join(pts, " "), st)
			}
			pts = pts[:0]
		}
		for i, ms := range lag[st] {
			if ms < 0 {
				flush() // no grant arrived that second
				continue
			}
			x0, w := a.bucketX(i)
			pts = append(pts, num(x0+w/2)+","+num(y(ms)))
		}
		flush()
		label := fmt.Sprintf("stream %d", st)
		s.printf(`<rect x="%s" y="6" width="10" height="10" fill="%s"/>`+"\n", num(lx), color)
		s.text(lx+14, 15, "start", "#333", label)
		lx += 30 + 7*float64(len(label))
	}
	s.text(svgWidth-10, 15, "end", "#666", "watch lag per second: acknowledgement to arrival, worst per stream")
	s.timeAxis(a, y0+plotH+16)
	return s.close()
}
