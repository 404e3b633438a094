package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamtier/streamtier/admin"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// writeLoadLog writes chunks of the deterministic load generator into a new osiris log in
// dir: the same bytes in every directory it is called on, standing in for the broker's own
// replication of the stream's log.
func writeLoadLog(t *testing.T, dir string, chunks int) {
	t.Helper()
	lg, err := segments.Open(dir, segments.Options{MaxSegmentBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	g, err := loadgen.New(loadgen.Config{Seed: 7, MinDataBytes: 1000, MaxDataBytes: 3000, StartTimestamp: 1_700_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	for range chunks {
		if _, _, err := lg.Append(g.Next()); err != nil {
			t.Fatal(err)
		}
	}
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestBinaryCluster runs two `node run --cluster` processes on one etcd (embedded in the
// test, reached by endpoint) and one S3 server, with the same log of stream s1 in each
// node's data directory. `node place` puts the writer on a with b as replica: b's replica
// manifest reaches the revision a persisted. Then `node place` moves the writer to b at
// epoch 2 (a lower epoch is refused), an operator cut makes b upload the tail a left
// assembling, and b persists at epoch 2 in etcd; a, now a replica, follows.
func TestBinaryCluster(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	etcd := etcdtest.Start(t)
	srv := s3test.Start(t, s3test.Options{})
	const prefix = "/clustertest"
	meta := metadata.NewStore(etcd.Client(), prefix)
	backend := []string{"--etcd-endpoints", strings.Join(etcd.Endpoints(), ","), "--etcd-prefix", prefix,
		"--s3-endpoint", srv.Endpoint, "--s3-bucket", srv.Bucket, "--s3-path-style", "--s3-access-key", srv.AccessKey,
		"--s3-secret-key", srv.SecretKey}
	dataA, dataB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, d := range []string{dataA, dataB} {
		writeLoadLog(t, filepath.Join(d, "streams", "s1"), 200)
	}
	with := func(args ...string) []string { return append(args, backend...) }

	// Placement refusals before any I/O, then the first placement.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"place", "s1", "--epoch", "1"}, "--writer is required"},
		{[]string{"place", "s1", "--writer", "a"}, "--epoch"},
		{[]string{"place", "../s1", "--writer", "a", "--epoch", "1"}, "invalid stream id"},
		{[]string{"place", "s1", "--writer", "a", "--epoch", "1", "--replicas", "b,a"}, "also listed as a replica"},
		{[]string{"place", "s1", "--writer", "a", "--epoch", "1", "--replicas", "-x"}, "--replicas"},
	} {
		if r := node(t, dir, c.args...); r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("node %v: want exit 2 and %q:\n%s", c.args, c.want, r)
		}
	}
	if r := node(t, dir, with("place", "s1", "--writer", "a", "--epoch", "1", "--replicas", "b")...); r.code != 0 || !strings.Contains(r.stdout, "writer a at epoch 1, replicas b") {
		t.Fatalf("place s1 on a:\n%s", r)
	}

	member := func(id, data string) *running {
		return startNode(t, dir, with("run", "--cluster", "--node-id", id, "--data-dir", data, "--progress", "off",
			"--fragment-target-size", "32KiB", "--persist-interval", "200ms", "--persist-threshold", "2",
			"--cluster-member-ttl", "2s", "--cluster-resync-retry", "300ms")...)
	}
	a, b := member("a", dataA), member("b", dataB)
	status := func(n *running) admin.Report {
		t.Helper()
		rep, err := n.client.Status(context.Background())
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		if rep.Cluster == nil {
			t.Fatalf("/status of a cluster member has no cluster part: %+v", rep)
		}
		return rep
	}

	// a writes: it uploads every full fragment and persists; the tail stays assembling.
	var aStream admin.StreamReport
	waitFor(t, 30*time.Second, "a to upload and persist every full fragment of s1", func() bool {
		rep := status(a)
		if len(rep.Streams) != 1 {
			return false
		}
		s := rep.Streams[0]
		aStream = s
		return s.Phase == "running" && s.Pipeline.DrainNext == s.Local.Committed && s.Local.Committed > 0 &&
			s.Pipeline.InFlight+s.Pipeline.WaitingRetry+s.Pipeline.Buffered+s.Pipeline.UnpersistedEdits == 0 &&
			s.Remote.PersistedNext == s.Remote.Next && s.Remote.PersistedNext > 0 && s.Pipeline.PersistState != "in-flight"
	})
	if aStream.Epoch != 1 || aStream.Fragment.Bytes == 0 {
		t.Fatalf("a's stream: want epoch 1 and a partial fragment left assembling: %+v", aStream)
	}
	rec, rev, found, err := meta.ReadManifest(context.Background(), "s1")
	if err != nil || !found || rec.Epoch != 1 || rec.NextOffset != aStream.Remote.PersistedNext {
		t.Fatalf("etcd manifest of s1: %+v rev %d found %v err %v; a reports %+v", rec, rev, found, err, aStream.Remote)
	}
	waitFor(t, 30*time.Second, "b's replica of s1 to reach a's persisted root", func() bool {
		r, ok := status(b).Cluster.Replicas["s1"]
		return ok && r.Synced && r.Seq == rec.Seq && r.UID == fmt.Sprintf("%016x", rec.RootUID)
	})
	rb := status(b)
	if r := rb.Cluster.Replicas["s1"]; r.Epoch != 1 || r.NextOffset != rec.NextOffset || r.Writer != "a" || r.LocalNext != aStream.Local.Next {
		t.Fatalf("b's replica: %+v (etcd %+v)", r, rec)
	}
	if len(rb.Streams) != 0 || rb.Cluster.Transport.Received == 0 || status(a).Cluster.Writers["s1"] != 1 {
		t.Fatalf("b's cluster status: streams %v, members %v, transport %+v", rb.Streams, rb.Cluster.Members, rb.Cluster.Transport)
	}
	// Membership is a lease: a stalled host may lapse it and the node registers again, so
	// what holds is that b lists both members, not that it does at one instant.
	waitFor(t, 30*time.Second, "b to list a and b as members", func() bool {
		m := status(b).Cluster.Members
		return len(m) == 2 && m["a"] != "" && m["b"] != ""
	})
	if r := node(t, dir, "status", "--data-dir", dataB); r.code != 0 || !strings.Contains(r.stdout, "cluster member b") || !strings.Contains(r.stdout, fmt.Sprintf("replica: root seq %d uid %016x", rec.Seq, rec.RootUID)) {
		t.Fatalf("status of b:\n%s", r)
	}

	// Move the writer to b at epoch 2; an older epoch is refused.
	if r := node(t, dir, with("place", "s1", "--writer", "b", "--epoch", "2", "--replicas", "a")...); r.code != 0 || !strings.Contains(r.stdout, "was writer a at epoch 1") {
		t.Fatalf("place s1 on b:\n%s", r)
	}
	if r := node(t, dir, with("place", "s1", "--writer", "a", "--epoch", "1")...); r.code != 1 || !strings.Contains(r.stderr, "stale epoch") {
		t.Fatalf("place at a lower epoch:\n%s", r)
	}
	waitFor(t, 30*time.Second, "b to run the writer of s1 at epoch 2", func() bool {
		rep := status(b)
		return len(rep.Streams) == 1 && rep.Streams[0].Phase == "running" && rep.Streams[0].Epoch == 2 &&
			rep.Streams[0].Pipeline.DrainNext == rep.Streams[0].Local.Committed
	})
	if r := node(t, dir, "cut", "s1", "--data-dir", dataB); r.code != 0 {
		t.Fatalf("cut on b:\n%s", r)
	}
	waitFor(t, 30*time.Second, "b to persist s1 at epoch 2", func() bool {
		rec2, _, found, err := meta.ReadManifest(context.Background(), "s1")
		return err == nil && found && rec2.Epoch == 2 && rec2.NextOffset == aStream.Local.Committed
	})
	rec2, rev2, _, _ := meta.ReadManifest(context.Background(), "s1")
	if rec2.FirstOffset != rec.FirstOffset || rev2 <= rev {
		t.Fatalf("the persist at epoch 2 does not extend epoch 1's: %+v rev %d after %+v rev %d", rec2, rev2, rec, rev)
	}
	waitFor(t, 30*time.Second, "a, now a replica, to hold b's persist", func() bool {
		r, ok := status(a).Cluster.Replicas["s1"]
		return ok && r.Synced && r.Epoch == 2 && r.Seq == rec2.Seq && r.UID == fmt.Sprintf("%016x", rec2.RootUID)
	})
	if len(status(a).Streams) != 0 {
		t.Fatalf("a still runs a writer after the move: %+v", status(a).Streams)
	}

	for _, n := range []*running{a, b} {
		if code := n.stop(syscall.SIGTERM); code != 0 {
			t.Fatalf("SIGTERM: exit %d\n%s", code, n.stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dataB, "node.json")); !os.IsNotExist(err) {
		t.Fatalf("b's run file after a clean stop: %v", err)
	}
}
