package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"streamtier/nodeconfig"
)

// table writes aligned columns.
type table struct{ w *tabwriter.Writer }

func newTable(out io.Writer) *table {
	return &table{w: tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)}
}

func (t *table) row(cols ...string) { fmt.Fprintln(t.w, strings.Join(cols, "\t")) }

func (t *table) flush() { t.w.Flush() }

// human renders a byte count in binary units.
func human[T int64 | uint64 | float64](b T) string { return nodeconfig.FormatSize(float64(b)) }

// ago renders an age in seconds for a table ("0.8s", "3m12s", "-" when unknown).
func ago(seconds float64) string {
	if seconds < 0 {
		return "-"
	}
	return dur(time.Duration(seconds * float64(time.Second)))
}

// dur renders a duration rounded for people.
func dur(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// commandName is how the user runs this binary, for the hints printed at the end of the
// demo: "go run ./cmd/node" under go run, else the program path as typed.
func commandName() string {
	if strings.Contains(os.Args[0], "go-build") {
		return "go run ./cmd/node"
	}
	return os.Args[0]
}
