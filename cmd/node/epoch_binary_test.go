package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBinaryRunEpochNeverFalls is TestBinaryFollowEpochNeverFalls for a plain `node run`
// restart of a directory the node does not follow (issue 22 item 1): the node persisted at
// epoch 2, the broker lost that epoch-2 tail while the node was stopped, and the node is
// started again on the shorter log. It must open the stream at the epoch etcd stores (2),
// not at the log's last chunk's (1), where every persist would be fenced and the stream
// stopped as deposed; once the new leader's epoch-3 timeline is there, it is tiered and the
// remote tier is cut back where the logs part.
func TestBinaryRunEpochNeverFalls(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	logDir := filepath.Join(dir, "broker", "s1")
	common := writeSeededLog(t, logDir, 41, 100)
	first := appendEpoch(t, logDir, 42, 2, 20) // the deposed leader's tail
	cfg := filepath.Join(dir, "node.yaml")
	yaml := fmt.Sprintf("data_dir: %s\nstreams:\n  - id: s1\n    log_dir: %s\n", data, logDir)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func() *running {
		return startNode(t, dir, "run", "--config", cfg, "--data-dir", data, "--progress", "off", "--fragment-target-size", "32KiB", "--persist-interval", "200ms")
	}
	stop := func(n *running, what string) {
		if code := n.stop(syscall.SIGTERM); code != 0 {
			t.Fatalf("stop %s: exit %d\n%s", what, code, n.stderr)
		}
	}
	persist := func(n *running, next uint64, what string) {
		waitFor(t, 60*time.Second, what, func() bool {
			s, ok := n.streamStatus("s1")
			if ok && s.Phase == "stopped" {
				t.Fatalf("%s: the stream stopped: %s", what, s.StopReason)
			}
			if ok && s.Pipeline.DrainNext == next && s.Remote.PersistedNext != next {
				node(t, dir, "cut", "s1", "--data-dir", data)
			}
			return ok && s.Remote.PersistedNext == next
		})
	}

	n := run()
	persist(n, first, "the epoch-2 tail persisted")
	stop(n, "after the epoch-2 tail")

	truncateLogAt(t, logDir, common) // the broker cut the deposed leader's suffix
	n = run()
	waitFor(t, 30*time.Second, "the restarted stream behind the remote tier", func() bool {
		s, ok := n.streamStatus("s1")
		return ok && s.Phase == "behind" && s.Local.Committed == common
	})
	if s, _ := n.streamStatus("s1"); s.Epoch != 2 {
		t.Fatalf("the stream reopened at epoch %d on the truncated log; want 2, the epoch etcd stores (status %+v)", s.Epoch, s)
	}
	stop(n, "on the truncated log")
	if logs := n.stderr.String(); !strings.Contains(logs, "opening the stream at the epoch etcd stores") {
		t.Fatalf("the raised epoch was not logged:\n%s", logs)
	}

	second := appendEpoch(t, logDir, 43, 3, 30) // the new leader's timeline
	n = run()
	persist(n, second, "the new timeline persisted")
	if s := n.status(); s.Counters["truncations"] == 0 || s.Epoch != 3 {
		t.Fatalf("after the new timeline: epoch %d, counters %v; want epoch 3 and a truncation of the remote tier", s.Epoch, s.Counters)
	}
	stop(n, "after the new timeline")
	rep, r := verifyStream(t, dir, "s1", "--config", cfg)
	if r.code != 0 || !rep.OK() || rep.NextOffset != second || rep.Chunks != 100+30 {
		t.Fatalf("verify after the new timeline (want [0, %d), %d chunks):\n%s", second, 100+30, r)
	}
}
