package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamtier/streamtier/metadata/etcdtest"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
)

// TestBinaryFollowRestartListedWhileEtcdAway (issue 22 item 4): a followed stream whose log
// is rewritten is taken out of the node and added back once its roots and stored epoch are
// read; while etcd is away (behind a partitioned proxy) it waits. It must stay listed in
// status meanwhile, phase "restarting", with why it waits; before, it vanished until etcd
// came back. Once etcd is back it is in the node again.
func TestBinaryFollowRestartListedWhileEtcdAway(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	etcd := etcdtest.Start(t)
	proxy := etcdtest.NewProxy(t, etcd)
	srv := s3test.Start(t, s3test.Options{})
	data := filepath.Join(dir, "data")
	logDir := filepath.Join(dir, "broker", "s1")
	common := writeSeededLog(t, logDir, 81, 30)
	next := appendEpoch(t, logDir, 82, 1, 30)
	n := startFollowing(t, dir, data, logDir, "",
		"--etcd-endpoints", proxy.Endpoint(), "--etcd-prefix", "/followstatus",
		"--s3-endpoint", srv.Endpoint, "--s3-bucket", srv.Bucket, "--s3-path-style", "--s3-access-key", srv.AccessKey, "--s3-secret-key", srv.SecretKey)
	waitFor(t, 30*time.Second, "the log persisted", func() bool {
		s, ok := n.streamStatus("s1")
		if ok && s.Pipeline.DrainNext == next && s.Remote.PersistedNext != next {
			node(t, dir, "cut", "s1", "--data-dir", data)
		}
		return ok && s.Remote.PersistedNext == next
	})

	proxy.Partition()
	truncateLogAt(t, logDir, common) // a rewrite: the follower restarts the stream
	waitFor(t, 30*time.Second, "the restarting stream listed with its reason", func() bool {
		s, ok := n.streamStatus("s1")
		return ok && s.Phase == "restarting" && s.Follow != nil && s.Follow.Restarting != "" && s.Local.Next == common
	})
	s, _ := n.streamStatus("s1")
	t.Logf("while etcd is away: phase %s, %q", s.Phase, s.Follow.Restarting)
	proxy.Heal()
	waitFor(t, 60*time.Second, "the stream back in the node", func() bool {
		s, ok := n.streamStatus("s1")
		return ok && s.Phase != "restarting" && s.Phase != "resolving" && (s.Follow == nil || s.Follow.Restarting == "")
	})
	if code := n.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, n.stderr)
	}
	if logs := n.stderr.String(); !strings.Contains(logs, "followed stream restarted on its rewritten log") {
		t.Fatalf("the restart did not complete:\n%s", logs)
	}
}

// TestBinaryFollowSeenRewriteThenRetentionStalls (issue 22 item 6, the follower's part): the
// follower sees the log shrink below what the node persisted (the broker truncated it), and
// before the restarted stream resolves (etcd is away meanwhile) the broker writes other
// chunks at the same epoch and its retention deletes every segment up to past the remote
// next offset. The rewritten log then starts above the remote next offset with a chunk of
// the remote tier's epoch: the node cannot compare the rewrite with the remote tier, whose
// old chunks above the rewrite point the broker discarded. It must hold the stream as
// diverged, naming the rewrite the follower saw, rather than declare the gap and tier the
// new chunks on top of the old timeline (before: phase running, a gap declared).
func TestBinaryFollowSeenRewriteThenRetentionStalls(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	etcd := etcdtest.Start(t)
	proxy := etcdtest.NewProxy(t, etcd)
	srv := s3test.Start(t, s3test.Options{})
	data := filepath.Join(dir, "data")
	logDir := filepath.Join(dir, "broker", "s1")
	common := writeSeededLog(t, logDir, 91, 30)
	next := appendEpoch(t, logDir, 92, 1, 30)
	n := startFollowing(t, dir, data, logDir, "",
		"--etcd-endpoints", proxy.Endpoint(), "--etcd-prefix", "/seenrewrite",
		"--s3-endpoint", srv.Endpoint, "--s3-bucket", srv.Bucket, "--s3-path-style", "--s3-access-key", srv.AccessKey, "--s3-secret-key", srv.SecretKey)
	waitFor(t, 30*time.Second, "the log persisted", func() bool {
		s, ok := n.streamStatus("s1")
		if ok && s.Pipeline.DrainNext == next && s.Remote.PersistedNext != next {
			node(t, dir, "cut", "s1", "--data-dir", data)
		}
		return ok && s.Remote.PersistedNext == next
	})

	proxy.Partition()
	truncateLogAt(t, logDir, common) // the follower sees the shrink and restarts the stream
	waitFor(t, 30*time.Second, "the restarting stream", func() bool {
		s, ok := n.streamStatus("s1")
		return ok && s.Phase == "restarting" && s.Local.Next == common
	})
	// Other chunks at the same epoch from common on, then the broker's retention deletes
	// every segment that does not start above the remote next offset.
	appendEpoch(t, logDir, 93, 1, 90)
	lg, err := segments.Open(logDir, segments.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	segs := lg.Segments()
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	first := uint64(0)
	for _, s := range segs {
		if s.FirstOffset > next {
			first = s.FirstOffset
			break
		}
		for _, name := range []string{s.Name, segments.IndexName(s.FirstOffset)} {
			if err := os.Remove(filepath.Join(logDir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if first == 0 {
		t.Fatalf("no segment of the rewritten log starts above %d: %+v", next, segs)
	}
	proxy.Heal()
	waitFor(t, 60*time.Second, "the stream held as diverged, naming the rewrite", func() bool {
		s, ok := n.streamStatus("s1")
		if ok && s.Phase == "running" && s.Remote.PersistedNext > next {
			t.Fatalf("the node tiered the rewritten log on (persisted next %d, remote next was %d, local first %d): %+v\n%s", s.Remote.PersistedNext, next, first, s.Remote, n.stderr)
		}
		return ok && s.Phase == "diverged" && s.Remote.Diverged != nil && strings.Contains(s.Remote.Diverged.Reason, "rewritten") &&
			s.Remote.Diverged.LocalFirst == first && s.Remote.PersistedNext == next
	})
	s, _ := n.streamStatus("s1")
	t.Logf("held: %s", s.Remote.Diverged.Reason)
	if code := n.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, n.stderr)
	}
}
