package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamtier/streamtier/admin"
)

// streamStatus is stream id's part of the running node's status.
func (r *running) streamStatus(id string) (admin.StreamReport, bool) {
	r.t.Helper()
	rep, err := r.client.Status(context.Background())
	if err != nil {
		r.t.Fatalf("status: %v", err)
	}
	for _, s := range rep.Streams {
		if s.Stream == id {
			return s, true
		}
	}
	return admin.StreamReport{}, false
}

// TestBinaryStopDoesNotWaitForStuckStreams: a clean stop waits for what streams can
// persist, not for streams that cannot move by themselves. "behind" lost its log's tail
// (its log is a prefix of the remote tier: all it holds is durable), "wiped" got another
// log (diverged: only an operator moves it), and "busy" has new data. Before, the stop
// waited on the first stuck stream until stop_timeout, gave up with "not quiet" and never
// waited for the others.
func TestBinaryStopDoesNotWaitForStuckStreams(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	logDir := func(id string) string { return filepath.Join(data, "streams", id) }
	ends := map[string]uint64{}
	for i, id := range []string{"behind", "wiped", "busy"} {
		ends[id] = writeSeededLog(t, logDir(id), uint64(20+i), 200)
	}
	cfg := filepath.Join(dir, "node.yaml")
	if err := os.WriteFile(cfg, []byte("data_dir: "+data+"\nstop_timeout: 30s\nstreams:\n  - id: behind\n  - id: wiped\n  - id: busy\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := []string{"run", "--config", cfg, "--data-dir", data, "--progress", "off", "--fragment-target-size", "32KiB", "--persist-interval", "200ms"}
	n := startNode(t, dir, run...)
	for id, end := range ends {
		waitFor(t, 60*time.Second, id+" persisted", func() bool {
			s, _ := n.streamStatus(id)
			if s.Pipeline.DrainNext == end && s.Remote.PersistedNext < end {
				node(t, dir, "cut", id, "--data-dir", data)
			}
			return s.Remote.PersistedNext == end
		})
	}
	if code := n.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, n.stderr)
	}

	// behind: the same chunks, fewer of them; wiped: another log from offset 0; busy: more.
	for id, seed := range map[string]uint64{"behind": 20, "wiped": 99} {
		if err := os.RemoveAll(logDir(id)); err != nil {
			t.Fatal(err)
		}
		writeSeededLog(t, logDir(id), seed, 100)
	}
	if err := os.RemoveAll(logDir("busy")); err != nil {
		t.Fatal(err)
	}
	busyEnd := writeSeededLog(t, logDir("busy"), 22, 400)
	n = startNode(t, dir, run...)
	for id, phase := range map[string]string{"behind": "behind", "wiped": "diverged"} {
		waitFor(t, 60*time.Second, id+" "+phase, func() bool { s, _ := n.streamStatus(id); return s.Phase == phase })
	}
	start := time.Now()
	if code := n.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, n.stderr)
	}
	took := time.Since(start)
	if log := n.stderr.String(); strings.Contains(log, "not quiet") || strings.Contains(log, "stopping with work in flight") {
		t.Fatalf("the stop waited for streams that cannot move (%v):\n%s", took, log)
	}
	rep, r := verifyStream(t, dir, "busy", "--data-dir", data)
	if r.code != 0 || rep.NextOffset != busyEnd {
		t.Fatalf("busy after the stop: next %d, want %d (all it committed)\n%s", rep.NextOffset, busyEnd, r)
	}
	t.Logf("stop took %v with a stream behind and one diverged", took.Round(time.Millisecond))
}
