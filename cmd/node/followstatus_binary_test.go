package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamtier/streamtier/metadata/etcdtest"
	"github.com/streamtier/streamtier/s3io/s3test"
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
