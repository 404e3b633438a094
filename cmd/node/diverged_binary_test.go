package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
	"github.com/streamtier/streamtier/verify"
)

// writeSeededLog writes chunks of the load generator with seed into a new log in dir.
func writeSeededLog(t *testing.T, dir string, seed uint64, chunks int) uint64 {
	t.Helper()
	lg, err := segments.Open(dir, segments.Options{MaxSegmentBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	g, err := loadgen.New(loadgen.Config{Seed: seed, MinDataBytes: 1000, MaxDataBytes: 3000, StartTimestamp: 1_700_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	for range chunks {
		if _, _, err := lg.Append(g.Next()); err != nil {
			t.Fatal(err)
		}
	}
	next := lg.NextOffset()
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	return next
}

// verifyStream runs `node verify <stream> --json` and decodes the report.
func verifyStream(t *testing.T, dir, stream string, args ...string) (verify.Report, result) {
	t.Helper()
	r := node(t, dir, append([]string{"verify", stream, "--json"}, args...)...)
	var rep verify.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("verify --json output: %v\n%s", err, r)
	}
	return rep, r
}

// TestBinaryWipedLogDiverges tiers a declared stream, then wipes its directory and starts
// the broker's log again at offset 0 with other data (what a replaced disk looks like): the
// node deletes nothing and reports the stream as diverged with both ranges, `node truncate`
// wants --yes, and with it the remote tier gives way and the new log is tiered and verified.
func TestBinaryWipedLogDiverges(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	logDir := filepath.Join(data, "streams", "s1")
	first := writeSeededLog(t, logDir, 7, 300)
	cfg := filepath.Join(dir, "node.yaml")
	if err := os.WriteFile(cfg, []byte("data_dir: "+data+"\nstreams:\n  - id: s1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := []string{"run", "--config", cfg, "--data-dir", data, "--progress", "off", "--fragment-target-size", "32KiB", "--persist-interval", "200ms"}
	n := startNode(t, dir, run...)
	waitFor(t, 30*time.Second, "the drain to reach the end", func() bool { return n.status().Pipeline.DrainNext == first })
	if r := node(t, dir, "cut", "s1", "--data-dir", data); r.code != 0 {
		t.Fatalf("cut:\n%s", r)
	}
	waitFor(t, 30*time.Second, "the whole log persisted", func() bool { return n.status().Remote.PersistedNext == first })
	if code := n.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, n.stderr)
	}
	before, r := verifyStream(t, dir, "s1", "--data-dir", data)
	if r.code != 0 || !before.OK() {
		t.Fatalf("verify before the wipe:\n%s", r)
	}

	if err := os.RemoveAll(logDir); err != nil {
		t.Fatal(err)
	}
	second := writeSeededLog(t, logDir, 8, 100)
	n = startNode(t, dir, run...)
	waitFor(t, 30*time.Second, "the stream to report the divergence", func() bool { return n.status().Phase == "diverged" })
	s := n.status()
	if d := s.Remote.Diverged; d == nil || d.RemoteNext != first || d.LocalFirst != 0 || d.LocalNext != second {
		t.Fatalf("diverged report %+v, want remote next %d and local [0,%d)", s.Remote.Diverged, first, second)
	}
	if r := node(t, dir, "status", "--data-dir", data); r.code != 0 || !strings.Contains(r.stdout, "DIVERGED") || !strings.Contains(r.stdout, "node truncate s1 --yes") {
		t.Fatalf("status of a diverged stream:\n%s", r)
	}
	// verify compares with the declared log directory: it names the chunks that differ,
	// and the remote tier is all still there.
	still, r := verifyStream(t, dir, "s1", "--data-dir", data)
	if r.code != 1 || still.Fragments != before.Fragments || still.NextOffset != first || !strings.Contains(r.stdout, "differs from the local log") {
		t.Fatalf("the remote tier changed while diverged (%d fragments to %d), or verify did not see the other log:\n%s", before.Fragments, still.Fragments, r)
	}
	if r := node(t, dir, "truncate", "s1", "--data-dir", data); r.code != 1 || !strings.Contains(r.stderr, "--yes") {
		t.Fatalf("truncate without --yes:\n%s", r)
	}
	if r := node(t, dir, "truncate", "s1", "--yes", "--data-dir", data); r.code != 0 || !strings.Contains(r.stdout, "truncate done") {
		t.Fatalf("truncate --yes:\n%s", r)
	}
	if r := node(t, dir, "truncate", "s1", "--yes", "--data-dir", data); r.code != 1 || !strings.Contains(r.stderr, "truncate refused") {
		t.Fatalf("a second truncate must be refused:\n%s", r)
	}
	waitFor(t, 30*time.Second, "the new log drained", func() bool { return n.status().Pipeline.DrainNext == second })
	if r := node(t, dir, "cut", "s1", "--data-dir", data); r.code != 0 {
		t.Fatalf("cut:\n%s", r)
	}
	waitFor(t, 30*time.Second, "the new log persisted", func() bool { return n.status().Remote.PersistedNext == second })
	if code := n.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, n.stderr)
	}
	after, r := verifyStream(t, dir, "s1", "--data-dir", data, "--log-dir", logDir)
	if r.code != 0 || !after.OK() || after.FirstOffset != 0 || after.NextOffset != second || after.LocalCompared == 0 {
		t.Fatalf("verify after the truncate:\n%s", r)
	}
}
