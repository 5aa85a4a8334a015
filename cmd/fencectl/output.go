package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/fenced/fenced/fence"
)

// printJSON writes v as one indented JSON document.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printJSONLine writes v as compact JSON on one line, for commands that
// stream one document per round.
func printJSONLine(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }

// table writes aligned columns. Rows are tab-separated cells; the zero
// values print as "-" so columns stay readable.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		if c == "" {
			cells[i] = "-"
		}
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// fields prints name/value pairs, one per line, values aligned.
func fields(w io.Writer, kv ...string) error {
	t := newTable(w)
	for i := 0; i+1 < len(kv); i += 2 {
		t.row(kv[i]+":", kv[i+1])
	}
	return t.flush()
}

// tokenText shows a token with its parts: "4294967297 (epoch 1, seq 1)".
func tokenText(t fence.Token) string {
	if t == 0 {
		return ""
	}
	return fmt.Sprintf("%d (epoch %d, seq %d)", uint64(t), t.Epoch(), t.Seq())
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
