package actors

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/manifest"
)

// TestRetentionLogRateLimited: a hundred evaluations in 33 s (100 MB/s) give the first
// change at once and one summed line after 30 s, not a line each; stopping writes what is
// pending; with debug on, each evaluation is a debug line.
func TestRetentionLogRateLimited(t *testing.T) {
	var buf bytes.Buffer
	log := zerolog.New(&buf).Level(zerolog.InfoLevel)
	var l retentionLog
	t0 := time.Unix(1000, 0)
	var at time.Time
	for i := range 100 {
		at = t0.Add(time.Duration(i) * 330 * time.Millisecond)
		l.note(log, at, manifest.Edit{Remove: 1, FirstOffset: uint64(1000 * (i + 1)), SizeDelta: -8 << 20}, 1)
	}
	lines := infoLines(t, &buf)
	if len(lines) != 2 {
		t.Fatalf("want 2 lines (the first change, then one after 30 s), got %d:\n%s", len(lines), buf.String())
	}
	if lines[0]["evaluations"] != 1.0 || lines[0]["first_offset"] != 1000.0 {
		t.Errorf("first line: %v", lines[0])
	}
	// The second line sums the evaluations from the second to the one 30 s after the first.
	n := lines[1]["evaluations"].(float64)
	if n < 90 || lines[1]["entries_dropped"] != n || lines[1]["bytes_dropped"] != n*(8<<20) || lines[1]["objects_to_delete"] != n {
		t.Errorf("second line does not sum its evaluations: %v", lines[1])
	}
	if ms, ok := lines[1]["over"].(float64); !ok || ms < 29000 { // zerolog's default unit here; cmd/node logs "29.7s"
		t.Errorf("second line: over %v", lines[1]["over"])
	}
	buf.Reset()
	l.flush(log, at)
	pending := infoLines(t, &buf)
	if len(pending) != 1 || pending[0]["evaluations"].(float64)+n+1 != 100 || pending[0]["first_offset"] != 100000.0 {
		t.Fatalf("flush on stop: want the remaining evaluations summed, got %v", pending)
	}
	buf.Reset()
	l.flush(log, at)
	if buf.Len() != 0 {
		t.Fatalf("a second flush wrote %q", buf.String())
	}

	debug := zerolog.New(&buf).Level(zerolog.DebugLevel)
	l.note(debug, at.Add(time.Second), manifest.Edit{Remove: 2}, 2)
	l.note(debug, at.Add(2*time.Second), manifest.Edit{Remove: 2}, 2)
	if got := strings.Count(buf.String(), "remote retention evaluated"); got != 2 {
		t.Fatalf("debug: %d evaluation lines for 2 evaluations:\n%s", got, buf.String())
	}
}

func infoLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		if m["level"] == "info" {
			out = append(out, m)
		}
	}
	return out
}
