package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/segments"
)

// TestBinaryRestoreThenAppend (issue 22 item 5): a stream whose remote tier holds a
// mid-stream gap is restored with `node restore` (no --from) and a broker continues the
// restored directory at a new epoch; the node tiers what it appends without truncating
// anything, and verify finds every chunk and the gap. Before, the restore wrote the run
// below the gap and exited with the gap error; a broker continuing that directory had the
// node cut the remote tier back to the gap's start.
func TestBinaryRestoreThenAppend(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	logDir := filepath.Join(dir, "broker", "s1")
	first := writeSeededLog(t, logDir, 61, 100)
	writeCfg := func(logDir string) string {
		cfg := filepath.Join(dir, "node.yaml")
		yaml := fmt.Sprintf("data_dir: %s\nstreams:\n  - id: s1\n    log_dir: %s\n", data, logDir)
		if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cfg := writeCfg(logDir)
	runUntil := func(next uint64, what string, check func(*running)) {
		n := startNode(t, dir, "run", "--config", cfg, "--data-dir", data, "--progress", "off", "--fragment-target-size", "32KiB", "--persist-interval", "200ms")
		waitFor(t, 60*time.Second, what, func() bool {
			s, ok := n.streamStatus("s1")
			if ok && s.Phase == "stopped" {
				t.Fatalf("%s: the stream stopped: %s", what, s.StopReason)
			}
			if ok && s.Remote.Diverged != nil {
				t.Fatalf("%s: the stream holds as diverged: %+v", what, *s.Remote.Diverged)
			}
			if ok && s.Pipeline.DrainNext == next && s.Remote.PersistedNext != next {
				node(t, dir, "cut", "s1", "--data-dir", data)
			}
			return ok && s.Remote.PersistedNext == next
		})
		if check != nil {
			check(n)
		}
		if code := n.stop(syscall.SIGTERM); code != 0 {
			t.Fatalf("%s: stop: exit %d\n%s", what, code, n.stderr)
		}
	}
	runUntil(first, "the first run persisted", nil)

	// With the node down the broker writes on and its retention deletes what was never
	// uploaded: the next run declares the gap.
	appendEpoch(t, logDir, 62, 1, 60)
	lg, err := segments.Open(logDir, segments.Options{MaxSegmentBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lg.ApplyRetention(segments.RetentionPolicy{MayDelete: func(segments.SegmentInfo) bool { return true }}, time.Now()); err != nil {
		t.Fatal(err)
	}
	gapTo := lg.FirstOffset()
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	if gapTo <= first {
		t.Fatalf("retention left the log at %d, not above the persisted %d", gapTo, first)
	}
	last := appendEpoch(t, logDir, 63, 1, 40)
	runUntil(last, "the run after the gap persisted", nil)

	restored := filepath.Join(dir, "restored", "s1")
	r := node(t, dir, "restore", "s1", "--to", restored, "--json", "--config", cfg, "--data-dir", data)
	var rep read.RestoreReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); r.code != 0 || err != nil || rep.FirstOffset != gapTo || rep.NextOffset != last ||
		rep.AfterGap == nil || rep.AfterGap.From != first || rep.AfterGap.To != gapTo {
		t.Fatalf("restore (want [%d,%d) after the gap [%d,%d)): %v\n%s", gapTo, last, first, gapTo, err, r)
	}

	// The broker continues the restored directory at a new epoch; the node follows it.
	next := appendEpoch(t, restored, 64, 2, 30)
	cfg = writeCfg(restored)
	runUntil(next, "the broker's chunks on the restored log persisted", func(n *running) {
		if s := n.status(); s.Counters["truncations"] != 0 {
			t.Fatalf("counters %v: the remote tier was truncated", s.Counters)
		}
	})
	v, r := verifyStream(t, dir, "s1", "--config", cfg)
	if r.code != 0 || !v.OK() || v.FirstOffset != 0 || v.NextOffset != next || v.Gaps != 1 {
		t.Fatalf("verify (want [0,%d) with one gap):\n%s", next, r)
	}
}
