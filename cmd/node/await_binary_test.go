package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamtier/streamtier/admin"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// TestBinaryAwait runs `node run` on a declared log and checks `node await`'s exit codes:
// 0 once everything committed is persisted (and the node's answer as JSON), 4 when the
// timeout passes first, 1 for a stream the node does not run, 2 for usage errors; then,
// with the node stopped, the broker appends and its retention deletes what was never
// uploaded, and after the restart an offset in the declared gap exits 3 while the log's end
// still exits 0.
func TestBinaryAwait(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logDir := filepath.Join(dir, "logs", "s")
	segOpts := segments.Options{MaxSegmentBytes: 64 << 10}
	g, err := loadgen.New(loadgen.Config{Seed: 9, MinDataBytes: 2000, MaxDataBytes: 6000})
	if err != nil {
		t.Fatal(err)
	}
	appendLog := func(bytes int64) (first, next uint64) {
		t.Helper()
		lg, err := segments.Open(logDir, segOpts)
		if err != nil {
			t.Fatal(err)
		}
		if bytes > 0 {
			if _, err := loadgen.Write(context.Background(), lg, g, loadgen.Limit{Bytes: bytes}, loadgen.WriteOptions{Commit: true}); err != nil {
				t.Fatal(err)
			}
		}
		first, next = lg.FirstOffset(), lg.NextOffset()
		if err := lg.Close(); err != nil {
			t.Fatal(err)
		}
		return first, next
	}
	_, next := appendLog(256 << 10)
	cfg := filepath.Join(dir, "node.yaml")
	yaml := fmt.Sprintf("fragment_target_size: 32KiB\nfragment_max_age: 200ms\npersist_interval: 100ms\nstreams:\n  - id: s\n    log_dir: %s\n", logDir)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "data")
	args := []string{"run", "--config", cfg, "--data-dir", dataDir, "--progress", "off"}
	await := func(a ...string) result {
		t.Helper()
		return node(t, dir, append([]string{"await", "--config", cfg, "--data-dir", dataDir}, a...)...)
	}

	n := startNode(t, dir, args...)
	r := await("s", "--timeout", "60s", "--json")
	var res admin.AwaitResult
	if err := json.Unmarshal([]byte(r.stdout), &res); r.code != 0 || err != nil || !res.Persisted || res.Offset != next-1 || res.Asked != "committed" {
		t.Fatalf("await everything committed (log next %d): %+v %v\n%s", next, res, err, r)
	}
	if r := await("s", "--offset", "0", "--timeout", "5s"); r.code != 0 || !strings.Contains(r.stdout, "s: offset 0 persisted") {
		t.Fatalf("await offset 0:\n%s", r)
	}
	if r := await("s", "--offset", "999999999", "--timeout", "300ms"); r.code != exitAwaitTimeout || !strings.Contains(r.stderr, "not persisted within the timeout of 300ms") {
		t.Fatalf("await beyond the log: want exit %d\n%s", exitAwaitTimeout, r)
	}
	if r := await("nope"); r.code != exitFailed || !strings.Contains(r.stderr, "unknown stream") {
		t.Fatalf("await an unknown stream: want exit %d\n%s", exitFailed, r)
	}
	for _, bad := range [][]string{{}, {"s", "t"}, {"s", "--offset", "soon"}, {"s", "--timeout", "11m"}, {"s", "--timeout", "0s"}} {
		r := await(bad...)
		lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
		if r.code != exitBadInput || len(lines) != 3 || !strings.HasPrefix(lines[1], "usage: node await <stream>") {
			t.Errorf("await %v: want exit 2 and a short usage error\n%s", bad, r)
		}
	}
	if code := n.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, n.stderr)
	}

	// With the node down the broker writes on and its retention deletes the oldest
	// segments, past what the node uploaded: a gap is due at the next start.
	appendLog(512 << 10)
	lg, err := segments.Open(logDir, segOpts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lg.ApplyRetention(segments.RetentionPolicy{MayDelete: func(segments.SegmentInfo) bool { return true }}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	lost, _ := appendLog(128 << 10)
	if lost <= next {
		t.Fatalf("retention left the log at %d, not above the persisted %d", lost, next)
	}
	n = startNode(t, dir, args...)
	if r := await("s", "--timeout", "60s"); r.code != 0 {
		t.Fatalf("await everything committed after the loss:\n%s", r)
	}
	inGap := (next + lost) / 2
	r = await("s", "--offset", fmt.Sprint(inGap), "--json")
	if err := json.Unmarshal([]byte(r.stdout), &res); r.code != exitAwaitInGap || err != nil || res.ErrorClass != admin.AwaitInGap || !strings.Contains(r.stderr, "declared gap") {
		t.Fatalf("await %d in the gap [%d,%d): want exit %d\n%s", inGap, next, lost, exitAwaitInGap, r)
	}
	if code := n.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("second run: exit %d\n%s", code, n.stderr)
	}
}
