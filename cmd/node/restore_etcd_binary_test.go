package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamtier/streamtier/backends"
)

// TestBinaryRecoverAfterEtcdRestore: the embedded etcd goes back to a copy taken while the
// node was stopped (an operator restoring a snapshot), after the demo persisted twice more.
// The node stalls the stream in metadata_behind, writes nothing for it, names the
// documented repair (--after-restore), and a stop does not wait for it. `node recover`
// without --after-restore says the records are behind; with it, the claim's generation
// goes up and the record is raised to the bucket's newest root; the demo then resumes from
// there and verify finds every offset from 0 in the bucket.
func TestBinaryRecoverAfterEtcdRestore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := startNode(t, dir, demoFlags...)
	waitFor(t, 60*time.Second, "a first persist", func() bool { return n.status().Remote.PersistedNext > 0 })
	if code := n.stop(syscall.SIGINT); code != 0 {
		t.Fatalf("SIGINT: exit %d\n%s", code, n.stderr)
	}
	etcdDir := backends.EtcdDir(n.dataDir)
	snapshot := filepath.Join(dir, "etcd-snapshot")
	if err := os.CopyFS(snapshot, os.DirFS(etcdDir)); err != nil {
		t.Fatal(err)
	}

	// Two more persists after the snapshot: a lineage the restored record cannot adopt alone.
	n = startNode(t, dir, demoFlags...)
	first := n.status().Remote.PersistedNext
	var second uint64
	waitFor(t, 60*time.Second, "two persists after the snapshot", func() bool {
		p := n.status().Remote.PersistedNext
		if second == 0 && p > first {
			second = p
		}
		return second != 0 && p > second
	})
	if code := n.stop(syscall.SIGINT); code != 0 {
		t.Fatalf("SIGINT: exit %d\n%s", code, n.stderr)
	}
	if err := os.RemoveAll(etcdDir); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(etcdDir, os.DirFS(snapshot)); err != nil {
		t.Fatal(err)
	}

	// The node on the restored etcd: the stream stalls, naming the repair; the stop does not
	// wait the stop timeout for it.
	n = startNode(t, dir, append(demoFlags, "--stop-timeout", "2m")...)
	waitFor(t, 60*time.Second, "the stream stalled in metadata_behind", func() bool {
		s := n.status()
		return s.Phase == "metadata_behind" && strings.Contains(s.Waiting, "--after-restore")
	})
	began := time.Now()
	if code := n.stop(syscall.SIGINT); code != 0 {
		t.Fatalf("SIGINT: exit %d\n%s", code, n.stderr)
	}
	if d := time.Since(began); d > 30*time.Second {
		t.Fatalf("the stop waited %v for a stream stalled on its metadata", d)
	}

	out, r := recoverJSON(t, dir)
	if r.code != 0 || len(out.Streams) != 1 || out.Streams[0].Action != "write" || !strings.Contains(r.stderr, "--after-restore") {
		t.Fatalf("recover dry run on the restored etcd: want a write and a note naming --after-restore:\n%s", r)
	}
	out, r = recoverJSON(t, dir, "--yes", "--after-restore")
	if r.code != 0 || !out.Streams[0].Written || out.Claim.Target == nil || out.Claim.Target.Generation != 2 || !out.Claim.Written || strings.Contains(r.stderr, "behind") {
		t.Fatalf("recover --yes --after-restore:\n%s", r)
	}
	recovered := out.Streams[0].Next
	if recovered < second {
		t.Fatalf("recovered to %d, below the persist at %d made after the snapshot", recovered, second)
	}
	n = startNode(t, dir, demoFlags...)
	waitFor(t, 60*time.Second, "persists past the recovered root", func() bool { return n.status().Remote.PersistedNext > recovered })
	if code := n.stop(syscall.SIGINT); code != 0 {
		t.Fatalf("SIGINT: exit %d\n%s", code, n.stderr)
	}
	if rep, r := verifyJSON(t, dir); r.code != 0 || !rep.OK() || rep.FirstOffset != 0 {
		t.Fatalf("verify after resuming:\n%s", r)
	}
}
