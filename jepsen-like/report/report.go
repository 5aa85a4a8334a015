// Package report writes the human side of a run: porcupine's visualisation of
// the linearizability check with the faults annotated, and a one-page
// summary with a timeline of grants, tokens and faults.
package report

import (
	"fmt"
	"hash/fnv"
	"html/template"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/jepsen-like/checker"
	"github.com/fenced/fenced/jepsen-like/history"
)

// Linearizability writes porcupine's HTML visualisation of the linearizable
// checker's result to path.
func Linearizability(path string, res checker.Result) error {
	if res.Info == nil {
		return nil
	}
	if err := porcupine.VisualizePath(checker.Model(), *res.Info, path); err != nil {
		return fmt.Errorf("porcupine visualisation: %w", err)
	}
	return nil
}

// Summary is what the one-page summary shows.
type Summary struct {
	Title   string
	Config  any
	Results []checker.Result
	Ops     []history.Op
	Faults  []history.Fault
	// Deliveries are the grants the watch streams received, for the lag
	// plot; none draws an empty one.
	Deliveries []history.Delivery
	Final      *checker.Final
	Duration   string
	Files      []string
}

// bar is one grant on the timeline.
type bar struct {
	X, Y, W, H float64
	Fill       string
	Label      string
	Title      string
}

type band struct {
	X, W, Y, H float64
	LabelX     float64
	Label      string
	Title      string
	LabelY     float64
}

type tick struct {
	X, Y  float64
	Title string
	Color string
}

type dot struct {
	X, Y  float64
	Fill  string
	Title string
}

type lane struct {
	Y     float64
	Label string
}

type axisTick struct {
	X     float64
	Label string
}

type timeline struct {
	Width, Height     float64
	Left              float64
	Lanes             []lane
	Bars              []bar
	Bands             []band
	Ticks             []tick
	Axis              []axisTick
	AxisY             float64
	EpochY0, EpochH   float64
	Dots              []dot
	EpochMin, EpochMx uint64
	EpochTicks        []lane
}

const (
	svgWidth   = 1100.0
	leftMargin = 90.0
	laneH      = 26.0
	faultLaneH = 16.0
)

// palette is a set of distinguishable colours for holders and keys.
var palette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
	"#86bcb6", "#d37295", "#8cd17d", "#b6992d", "#499894", "#79706e"}

func holderColor(h string) string {
	f := fnv.New32a()
	f.Write([]byte(h))
	return palette[f.Sum32()%uint32(len(palette))]
}

func layout(ops []history.Op, faults []history.Fault) timeline {
	end := runEnd(ops, faults)
	plotW := svgWidth - leftMargin - 10
	x := func(t int64) float64 { return leftMargin + plotW*float64(t)/float64(end) }

	// Fault label lanes: greedy packing in pixels, by the extent of the band
	// or of its label, whichever is wider, so labels never overlap.
	var laneEnds []float64
	faultLane := make([]int, len(faults))
	for i, f := range faults {
		x0 := x(f.Start)
		x1 := max(x(f.End), x0+6.7*float64(len(f.Nemesis))+4)
		l := 0
		for ; l < len(laneEnds) && laneEnds[l] > x0; l++ {
		}
		if l == len(laneEnds) {
			laneEnds = append(laneEnds, 0)
		}
		laneEnds[l] = x1
		faultLane[i] = l
	}
	top := 10 + faultLaneH*float64(max(1, len(laneEnds)))

	keySet := map[string]bool{}
	for _, o := range ops {
		if o.Kind == history.Acquire {
			keySet[o.Key] = true
		}
	}
	var keys []string
	for k := range keySet {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	laneOf := map[string]int{}
	tl := timeline{Width: svgWidth, Left: leftMargin}
	for i, k := range keys {
		laneOf[k] = i
		tl.Lanes = append(tl.Lanes, lane{Y: top + float64(i)*laneH, Label: k})
	}
	lanesBottom := top + float64(len(keys))*laneH

	// Grant ends: the first acknowledged release of the token, or the next
	// grant of the key, or the end of the run.
	type kt struct {
		k string
		t fence.Token
	}
	relAt := map[kt]int64{}
	byKey := map[string][]history.Op{}
	for _, o := range ops {
		switch {
		case o.Kind == history.Release && o.Outcome == history.OK:
			if t, ok := relAt[kt{o.Key, o.Token}]; !ok || o.Complete < t {
				relAt[kt{o.Key, o.Token}] = o.Complete
			}
		case o.Kind == history.Acquire && o.Outcome == history.OK:
			byKey[o.Key] = append(byKey[o.Key], o)
		case o.Kind == history.Acquire && o.Outcome == history.Info:
			tl.Ticks = append(tl.Ticks, tick{X: x(o.Invoke), Y: top + float64(laneOf[o.Key])*laneH, Color: "#b00",
				Title: "unknown outcome: " + o.Describe()})
		}
	}
	var epochs []uint64
	for _, k := range keys {
		gs := byKey[k]
		sort.Slice(gs, func(i, j int) bool { return gs[i].Complete < gs[j].Complete })
		seen := map[fence.Token]bool{}
		for i, g := range gs {
			if seen[g.Granted] {
				continue // the same grant again (an acquire that renewed it)
			}
			seen[g.Granted] = true
			stop := end
			if t, ok := relAt[kt{k, g.Granted}]; ok {
				stop = t
			}
			for _, n := range gs[i+1:] {
				if n.Granted != g.Granted {
					stop = min(stop, n.Complete)
					break
				}
			}
			x0, x1 := x(g.Complete), x(max(stop, g.Complete))
			label := fmt.Sprintf("%d.%d", g.Granted.Epoch(), g.Granted.Seq())
			if x1-x0 < float64(len(label))*6 {
				label = ""
			}
			tl.Bars = append(tl.Bars, bar{X: x0, W: max(x1-x0, 1.5), Y: top + float64(laneOf[k])*laneH + 3, H: laneH - 6,
				Fill: holderColor(g.Holder), Label: label,
				Title: fmt.Sprintf("%s token %s (epoch %d seq %d) held by %s from %.3fs", k, g.Granted, g.Granted.Epoch(), g.Granted.Seq(), g.Holder, float64(g.Complete)/1e9)})
			epochs = append(epochs, g.Granted.Epoch())
		}
	}
	for i, f := range faults {
		tl.Bands = append(tl.Bands, band{X: x(f.Start), W: max(x(f.End)-x(f.Start), 2), Y: top, H: lanesBottom - top,
			LabelX: min(x(f.Start), svgWidth-6.7*float64(len(f.Nemesis))),
			Label:  f.Nemesis, LabelY: 10 + faultLaneH*float64(faultLane[i]) + 11,
			Title: fmt.Sprintf("%s %v %.3fs..%.3fs %s", f.Nemesis, f.Nodes, float64(f.Start)/1e9, float64(f.End)/1e9, f.Detail)})
	}
	tl.AxisY = lanesBottom + 14
	step := niceStep(float64(end) / 1e9)
	for s := 0.0; s*1e9 <= float64(end); s += step {
		tl.Axis = append(tl.Axis, axisTick{X: x(int64(s * 1e9)), Label: fmt.Sprintf("%gs", s)})
	}
	// Epoch plot: one dot per grant, the epoch (Raft term) on the y axis.
	tl.EpochY0, tl.EpochH = tl.AxisY+30, 120
	if len(epochs) > 0 {
		lo, hi := epochs[0], epochs[0]
		for _, e := range epochs {
			lo, hi = min(lo, e), max(hi, e)
		}
		tl.EpochMin, tl.EpochMx = lo, hi
		y := func(e uint64) float64 {
			if hi == lo {
				return tl.EpochY0 + tl.EpochH/2
			}
			return tl.EpochY0 + tl.EpochH - tl.EpochH*float64(e-lo)/float64(hi-lo)
		}
		for _, e := range []uint64{lo, hi} {
			tl.EpochTicks = append(tl.EpochTicks, lane{Y: y(e), Label: fmt.Sprintf("epoch %d", e)})
		}
		for _, k := range keys {
			for _, g := range byKey[k] {
				tl.Dots = append(tl.Dots, dot{X: x(g.Complete), Y: y(g.Granted.Epoch()), Fill: holderColor(k),
					Title: fmt.Sprintf("%s %s by %s", k, g.Granted, g.Holder)})
			}
		}
	}
	tl.Height = tl.EpochY0 + tl.EpochH + 20
	return tl
}

func niceStep(total float64) float64 {
	for _, s := range []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600} {
		if total/s <= 20 {
			return s
		}
	}
	return 1200
}

var page = template.Must(template.New("summary").Funcs(template.FuncMap{
	"join": strings.Join,
	"secs": func(ns int64) string { return fmt.Sprintf("%.3f", float64(ns)/1e9) },
	"dur":  func(d time.Duration) string { return d.Round(time.Millisecond).String() },
}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>{{.S.Title}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;max-width:1150px;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top;font-size:13px}
.pass{color:#176b2c;font-weight:bold}.fail{color:#b00020;font-weight:bold}
pre{background:#f6f6f6;padding:6px;white-space:pre-wrap;font-size:12px;margin:0}
svg text{font-size:11px;font-family:monospace}
</style></head><body>
<h1>{{.S.Title}}</h1>
<p><b>{{.Passed}} passed, {{.Failed}} failed</b> &middot; {{len .S.Ops}} operations &middot; {{len .S.Faults}} faults &middot; {{.S.Duration}}</p>
<h2>Checkers</h2>
<table><tr><th>checker</th><th>verdict</th><th>summary</th></tr>
{{range .S.Results}}<tr><td>{{.Name}}</td><td class="{{if .Pass}}pass{{else}}fail{{end}}">{{if .Pass}}pass{{else}}FAIL{{end}}</td><td>{{.Summary}}{{range .Violations}}<pre>{{.}}</pre>{{end}}</td></tr>
{{end}}</table>
{{range .S.Results}}{{if .Unavailability}}<h2>Time without service while a quorum was healthy</h2>
<p>Per client and fault, the longest gap between two operations the cluster served (an acknowledgement, a verdict or a refusal about the key), from the fault's start until the next fault; max, p99 and median over those gaps. Bound: election timeout + margin; target: election timeout + 1 s.</p>
<table><tr><th>fault</th><th>faults</th><th>client gaps</th><th>max</th><th>p99</th><th>median</th><th>bound</th><th>target</th><th>worst</th></tr>
{{range .Unavailability}}<tr><td>{{.Nemesis}}</td><td>{{.Faults}}</td><td>{{.Samples}}</td><td>{{dur .Max}}</td><td>{{dur .P99}}</td><td>{{dur .P50}}</td><td>{{dur .Bound}}</td><td>{{dur .Target}}</td><td>{{.Worst}}</td></tr>
{{end}}</table>{{end}}{{end}}
<h2>Timeline</h2>
<p>Each row is a key; each bar a grant, coloured by holder and labelled epoch.seq, from its acknowledgement to its release or the next grant (expiry is not drawn: it is decided on the leader's clock). Red ticks: acquires with an unknown outcome. Shaded bands: faults. Below: the epoch (Raft term) of every grant.</p>
<svg xmlns="http://www.w3.org/2000/svg" width="{{.T.Width}}" height="{{.T.Height}}">
{{range .T.Bands}}<rect x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" fill="#f8d7da" fill-opacity="0.55"><title>{{.Title}}</title></rect>
<text x="{{.LabelX}}" y="{{.LabelY}}" fill="#a02030">{{.Label}}<title>{{.Title}}</title></text>
{{end}}
{{range .T.Lanes}}<text x="4" y="{{.Y}}" dy="17">{{.Label}}</text><line x1="{{$.T.Left}}" x2="{{$.T.Width}}" y1="{{.Y}}" y2="{{.Y}}" stroke="#eee"/>
{{end}}
{{range .T.Bars}}<rect x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" fill="{{.Fill}}" stroke="#555" stroke-width="0.3"><title>{{.Title}}</title></rect>{{if .Label}}<text x="{{.X}}" y="{{.Y}}" dx="2" dy="14">{{.Label}}</text>{{end}}
{{end}}
{{range .T.Ticks}}<rect x="{{.X}}" y="{{.Y}}" width="2" height="6" fill="{{.Color}}"><title>{{.Title}}</title></rect>
{{end}}
{{range .T.Axis}}<text x="{{.X}}" y="{{$.T.AxisY}}" text-anchor="middle">{{.Label}}</text>
{{end}}
{{range .T.EpochTicks}}<text x="4" y="{{.Y}}" dy="4">{{.Label}}</text><line x1="{{$.T.Left}}" x2="{{$.T.Width}}" y1="{{.Y}}" y2="{{.Y}}" stroke="#ddd"/>
{{end}}
{{range .T.Dots}}<circle cx="{{.X}}" cy="{{.Y}}" r="2.5" fill="{{.Fill}}"><title>{{.Title}}</title></circle>
{{end}}
</svg>
<h2>Latency</h2>
<p>Per second of invocation and kind of operation, the median (dashed) and 99th percentile (solid) of the time fenced took to acknowledge or refuse it, on the timeline's time axis with the same fault bands. Unknown outcomes are left out (their latency is the client's timeout); a line breaks where a second had no answer of that kind.</p>
{{.Latency}}
<h2>Throughput and time without service</h2>
<p>Operations completed per second: acknowledged (ok), refused (a definite answer), unknown outcome. Below, one row per client: its longest time without service (no acknowledgement, verdict or refusal about a key), from the last answer before it to the first after it.</p>
{{.Throughput}}
<h2>Watch lag</h2>
<p>Per second and per watch stream, the longest time from a grant's acknowledgement to its client to its arrival on the stream (0 when the stream saw it first). A stream that moved to another node after a fault shows here as a rise and a gap.</p>
{{.Lag}}
<h2>Faults</h2>
<table><tr><th>#</th><th>nemesis</th><th>from</th><th>to</th><th>nodes</th><th>detail</th></tr>
{{range .S.Faults}}<tr><td>{{.Index}}</td><td>{{.Nemesis}}</td><td>{{secs .Start}}s</td><td>{{secs .End}}s</td><td>{{join .Nodes ","}}</td><td>{{.Detail}}</td></tr>
{{end}}</table>
<h2>Operations</h2>
<table><tr><th>kind</th><th>ok</th><th>fail</th><th>info</th></tr>
{{range .Counts}}<tr><td>{{.Kind}}</td><td>{{.OK}}</td><td>{{.Fail}}</td><td>{{.Info}}</td></tr>
{{end}}</table>
{{with .S.Final}}<h2>After the final heal</h2>
<p>recovery: {{.RecoveryTime}} (limit {{.RecoveryLimit}}) {{.RecoveryDetail}}<br>convergence: {{.ConvergeWait}} (limit {{.ConvergeLimit}}) {{.ConvergeDetail}}</p>
<table><tr><th>node</th><th>state</th><th>term</th><th>commit</th><th>applied</th><th>last</th><th>keys</th></tr>
{{range $id, $s := .Statuses}}{{if $s}}<tr><td>{{$id}}</td><td>{{$s.State}}</td><td>{{$s.Term}}</td><td>{{$s.CommitIndex}}</td><td>{{$s.AppliedIndex}}</td><td>{{$s.LastIndex}}</td><td>{{$s.Keys}}</td></tr>{{end}}
{{end}}</table>{{end}}
<h2>Files</h2><ul>{{range .S.Files}}<li><a href="{{.}}">{{.}}</a></li>{{end}}</ul>
<h2>Configuration</h2><pre>{{printf "%+v" .S.Config}}</pre>
</body></html>
`))

type count struct {
	Kind           string
	OK, Fail, Info int
}

// WriteSummary writes summary.html to dir.
func WriteSummary(dir string, s Summary) error {
	passed, failed := 0, 0
	for _, r := range s.Results {
		if r.Pass {
			passed++
		} else {
			failed++
		}
	}
	byKind := map[string]*count{}
	var kinds []string
	for _, o := range s.Ops {
		c := byKind[o.Kind]
		if c == nil {
			c = &count{Kind: o.Kind}
			byKind[o.Kind] = c
			kinds = append(kinds, o.Kind)
		}
		switch o.Outcome {
		case history.OK:
			c.OK++
		case history.Fail:
			c.Fail++
		default:
			c.Info++
		}
	}
	sort.Strings(kinds)
	var counts []count
	for _, k := range kinds {
		counts = append(counts, *byKind[k])
	}
	f, err := os.Create(filepath.Join(dir, "summary.html"))
	if err != nil {
		return err
	}
	err = page.Execute(f, map[string]any{"S": s, "T": layout(s.Ops, s.Faults),
		"Latency": latencyPlot(s.Ops, s.Faults), "Throughput": throughputPlot(s.Ops, s.Faults), "Lag": lagPlot(s.Ops, s.Faults, s.Deliveries), "Passed": passed, "Failed": failed, "Counts": counts})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("summary.html: %w", err)
	}
	return nil
}
