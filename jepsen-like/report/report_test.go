package report

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/jepsen-like/history"
)

// synthetic is a 20 s run of four clients with two faults (5-7 s and
// 12-14 s) that slow fenced down and leave some outcomes unknown; client 2
// hears nothing from 8 s to 11 s.
func synthetic() ([]history.Op, []history.Fault) {
	rng := rand.New(rand.NewPCG(1, 2))
	faults := []history.Fault{
		{Index: 0, Nemesis: "kill-leader", Start: 5e9, End: 7e9, Nodes: []string{"n1"}},
		{Index: 1, Nemesis: "partition", Start: 12e9, End: 14e9, Nodes: []string{"n2"}},
	}
	inFault := func(t int64) bool { return (t >= 5e9 && t < 7e9) || (t >= 12e9 && t < 14e9) }
	kinds := []string{history.Acquire, history.Renew, history.Verify, history.Release, history.Write}
	var ops []history.Op
	for c := 0; c < 4; c++ {
		for t := int64(c) * 7e6; t < 20e9; t += 50e6 {
			o := history.Op{Index: len(ops), Client: c, Kind: kinds[rng.IntN(len(kinds))], Key: fmt.Sprintf("orders/%d", c%3), Holder: fmt.Sprintf("c%d", c),
				Invoke: t, Outcome: history.OK}
			lat := int64(1e6 + rng.IntN(20e6))
			switch {
			case c == 2 && t >= 8e9 && t < 11e9:
				o.Outcome, o.Code, lat = history.Info, "timeout", 40e6
			case inFault(t) && rng.IntN(3) == 0:
				o.Outcome, o.Code, lat = history.Info, "unavailable", 500e6
			case inFault(t):
				lat = 100e6 + int64(rng.IntN(400e6))
			case rng.IntN(10) == 0:
				o.Outcome, o.Code = history.Fail, "held"
			}
			if o.Kind == history.Acquire && o.Outcome == history.OK {
				// A new epoch after each fault, as a new leader makes.
				epoch := uint64(2)
				for _, f := range faults {
					if t >= f.Start {
						epoch++
					}
				}
				o.Granted = fence.Token(epoch<<32 | uint64(len(ops)+1))
			}
			o.Complete = t + lat
			ops = append(ops, o)
		}
	}
	return ops, faults
}

// svgOf returns the SVG element with the id from the page, and checks it
// is well-formed XML.
func svgOf(t *testing.T, page, id string) string {
	t.Helper()
	i := strings.Index(page, `<svg id="`+id+`"`)
	if i < 0 {
		t.Fatalf("no svg %s in the summary", id)
	}
	j := strings.Index(page[i:], "</svg>")
	s := page[i : i+j+len("</svg>")]
	d := xml.NewDecoder(strings.NewReader(s))
	for {
		if _, err := d.Token(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("svg %s is not well-formed: %v", id, err)
		}
	}
	return s
}

// TestSummaryPlots renders a synthetic run's summary and checks its plots:
// one band per fault in each, the same x for a fault in each plot, no NaN
// or infinity anywhere, and each client's longest time without service
// marked, client 2's (8 s to 11 s) the longest.
func TestSummaryPlots(t *testing.T) {
	ops, faults := synthetic()
	dir := t.TempDir()
	if err := WriteSummary(dir, Summary{Title: "synthetic", Ops: ops, Faults: faults}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "summary.html"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, bad := range []string{"NaN", "Inf"} {
		if strings.Contains(page, bad) {
			t.Errorf("the summary has %s", bad)
		}
	}
	lat, tp := svgOf(t, page, "latency"), svgOf(t, page, "throughput")
	for name, s := range map[string]string{"latency": lat, "throughput": tp} {
		if n := strings.Count(s, `class="fault"`); n != len(faults) {
			t.Errorf("%s: %d fault bands, want %d", name, n, len(faults))
		}
		// Both plots put the first fault where the timeline does.
		x := num(axis{end: runEnd(ops, faults)}.x(faults[0].Start))
		if !strings.Contains(s, `class="fault" x="`+x+`"`) {
			t.Errorf("%s: the first fault is not at x=%s", name, x)
		}
	}
	if n := strings.Count(lat, `class="lat"`); n < 8 {
		t.Errorf("latency: %d lines, want p50 and p99 of four kinds at least", n)
	}
	if n := strings.Count(tp, `class="gap"`); n != 4 {
		t.Errorf("throughput: %d clients' gaps marked, want 4", n)
	}
	gaps := longestGaps(ops)
	var worst clientGap
	for _, g := range gaps {
		if g.to-g.from > worst.to-worst.from {
			worst = g
		}
	}
	if d := time.Duration(worst.to - worst.from); worst.client != 2 || d < 3*time.Second || d > 3500*time.Millisecond {
		t.Errorf("the longest gap is client %d's %v, want client 2's, about 3s", worst.client, d)
	}
}

// TestPlotsOfNothing: a run with no operations and no faults, or with an
// operation that never completed, still draws finite plots.
func TestPlotsOfNothing(t *testing.T) {
	for _, ops := range [][]history.Op{nil, {{Kind: history.Acquire, Invoke: 5, Complete: -1, Outcome: history.Info}}} {
		for _, s := range []string{string(latencyPlot(ops, nil)), string(throughputPlot(ops, nil)), string(lagPlot(ops, nil, nil))} {
			if strings.Contains(s, "NaN") || strings.Contains(s, "Inf") {
				t.Errorf("%v: %s", ops, s)
			}
		}
	}
}

// TestLagPlot: each watch stream is a line of its worst lag per second,
// measured from the grant's first acknowledgement; a grant no client saw
// acknowledged is left out, and the fault bands are the timeline's.
func TestLagPlot(t *testing.T) {
	ops, faults := synthetic()
	var deliveries []history.Delivery
	var late history.Delivery
	for _, o := range ops {
		if o.Kind != history.Acquire || o.Outcome != history.OK {
			continue
		}
		for st := 0; st < 2; st++ {
			d := history.Delivery{Stream: st, Key: o.Key, Token: o.Granted, At: o.Complete + 5e6}
			if st == 1 && late.Token == 0 && o.Complete > 6e9 {
				d.At, late = o.Complete+1500e6, d // stream 1 lags 1.5 s once
			}
			deliveries = append(deliveries, d)
		}
	}
	// A grant whose answer was lost: no lag to draw, whatever its arrival,
	// also when another key's grant had the same token.
	deliveries = append(deliveries, history.Delivery{Stream: 0, Token: 1<<62 | 1, At: 19e9},
		history.Delivery{Stream: 0, Key: "other", Token: late.Token, At: 19e9})
	dir := t.TempDir()
	if err := WriteSummary(dir, Summary{Title: "synthetic", Ops: ops, Faults: faults, Deliveries: deliveries}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "summary.html"))
	if err != nil {
		t.Fatal(err)
	}
	lag := svgOf(t, string(b), "lag")
	if n := strings.Count(lag, `class="fault"`); n != len(faults) {
		t.Errorf("lag: %d fault bands, want %d", n, len(faults))
	}
	if strings.Count(lag, "<title>stream 0</title>") == 0 || strings.Count(lag, "<title>stream 1</title>") == 0 {
		t.Errorf("lag: a line per stream wanted:\n%s", lag)
	}
	// The scale's top is the worst lag rounded up (1.5 s: 2 s), not the
	// unacknowledged grant's 19 s.
	if !strings.Contains(lag, ">2s<") || strings.Contains(lag, ">20s<") {
		t.Errorf("lag: the scale does not end at 2s:\n%s", lag)
	}
	if strings.Contains(lag, "NaN") || strings.Contains(lag, "Inf") {
		t.Errorf("lag: %s", lag)
	}
}
