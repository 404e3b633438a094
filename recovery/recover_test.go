package recovery_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/manifest/resolve"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
	"github.com/streamtier/streamtier/recovery"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/tiertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const p = manifest.DefaultKeyPrefix

// upgrade puts version 3 roots 1..n on top of s's version 2 root (the same manifest).
func upgrade(t *testing.T, store *s3io.Store, s tiertest.Stream, n uint64, epoch uint64) manifest.Lineage {
	t.Helper()
	l := manifest.Lineage{Seq: 1, Epoch: epoch, UID: tiertest.UID(), ParentUID: s.Record.RootUID}
	for seq := uint64(1); seq <= n; seq++ {
		if seq > 1 {
			l = manifest.Lineage{Seq: seq, Epoch: epoch, UID: tiertest.UID(), ParentSeq: l.Seq, ParentUID: l.UID}
		}
		if err := store.PutObjectIfAbsent(context.Background(), manifest.SeqRootKey(p, s.ID, seq), manifest.EncodeRootV3(l, s.Manifest)); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// TestRecoverAfterEtcdLoss: etcd wiped; the bucket alone finds every stream and rebuilds
// its records: a version 2 stream (its single root), a version 3 stream (the top of its
// lineage), a deleted one (a tombstone), one that never persisted (reported), one whose
// newest root fails its check (refused, no fallback). Run again, everything is up to date.
func TestRecoverAfterEtcdLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	be := tiertest.StartBackends(ctx, t, false)
	store := be.Store
	env := tiertest.Env{Store: store, Meta: be.Meta}
	v2 := tiertest.Write(t, env, tiertest.Spec{Stream: "v2", Seed: 1, Epoch: 1})
	v3 := tiertest.Write(t, env, tiertest.Spec{Stream: "v3", Seed: 2, Epoch: 2})
	top := upgrade(t, store, v3, 3, 2)
	del := tiertest.Write(t, env, tiertest.Spec{Stream: "del", Seed: 3, Epoch: 1})
	if err := store.CreateMarker(ctx, p, s3io.Marker{Stream: "del", ClusterID: strings.Repeat("1", 32), Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := store.PutObject(ctx, manifest.FragmentKey(p, "orph", 0, 1, tiertest.UID()), []byte("x")); err != nil {
		t.Fatal(err)
	}
	bad := tiertest.Write(t, env, tiertest.Spec{Stream: "bad", Seed: 4, Epoch: 1, Chunks: 60, Rebalance: 3})
	upgrade(t, store, bad, 1, 1)
	var group string
	for _, k := range bad.Live {
		if strings.HasSuffix(k, ".group") {
			group = k
		}
	}
	if group == "" {
		t.Fatal("the fixture made no group")
	}
	if _, err := store.DeleteObjects(ctx, []string{group}); err != nil {
		t.Fatal(err)
	}
	_ = del

	streams, err := recovery.ListStreams(ctx, store, p)
	if err != nil || !slices.Equal(streams, []string{"bad", "del", "orph", "v2", "v3"}) {
		t.Fatalf("streams %v %v", streams, err)
	}
	wiped := etcdtest.Store(t, etcdtest.Start(t))
	want := map[string]resolve.RecoveryAction{"v2": resolve.RecoverWrite, "v3": resolve.RecoverWrite, "del": resolve.RecoverTombstone, "orph": resolve.RecoverOrphans, "bad": resolve.RecoverRefuse}
	for _, write := range []bool{false, true} {
		for _, s := range streams {
			rep, err := recovery.Recover(ctx, recovery.Options{Store: store, Meta: wiped, Write: write}, s)
			if err != nil {
				t.Fatalf("%s: %v", s, err)
			}
			if rep.Plan.Action != want[s] || rep.Written != (write && want[s] != resolve.RecoverOrphans && want[s] != resolve.RecoverRefuse) {
				t.Fatalf("%s (write %v): %v written %v: %s", s, write, rep.Plan.Action, rep.Written, rep.Plan.Reason)
			}
			if s == "v3" && (rep.Root.Seq != 3 || rep.Next != v3.Manifest.NextOffset || rep.Requests > 6) {
				t.Fatalf("v3: root %v next %d, %d requests", rep.Root, rep.Next, rep.Requests)
			}
			if s == "bad" && !strings.Contains(rep.Plan.Reason, "fails its check") {
				t.Fatalf("bad: %s", rep.Plan.Reason)
			}
		}
	}
	rec, _, found, err := wiped.ReadManifest(ctx, "v3")
	if err != nil || !found || rec.Seq != 3 || rec.RootUID != top.UID || rec.NextOffset != v3.Manifest.NextOffset {
		t.Fatalf("v3 record %+v %v %v", rec, found, err)
	}
	if e, _, _ := wiped.ReadEpoch(ctx, "v3"); e != 2 {
		t.Fatalf("v3 stored epoch %d", e)
	}
	rec, _, found, err = wiped.ReadManifest(ctx, "v2")
	if err != nil || !found || rec.Seq != 0 || rec.RootUID != v2.Record.RootUID {
		t.Fatalf("v2 record %+v %v %v", rec, found, err)
	}
	if _, found, _ := wiped.ReadTombstone(ctx, "del"); !found {
		t.Fatal("del has no tombstone")
	}
	if ok, _ := wiped.HasAnchor(ctx, "orph", true); ok {
		t.Fatal("a stream that never persisted was anchored")
	}
	for _, s := range []string{"v2", "v3"} {
		rep, err := recovery.Recover(ctx, recovery.Options{Store: store, Meta: wiped, Write: true}, s)
		if err != nil || rep.Plan.Action != resolve.RecoverUpToDate || rep.Written {
			t.Fatalf("%s again: %+v %v", s, rep.Plan, err)
		}
	}
}

// TestRecoverAfterRestore: etcd restored from an older snapshot names seq 1; the bucket's
// lineage is at seq 3: recovery raises the record, and never lowers a newer one.
func TestRecoverAfterRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	be := tiertest.StartBackends(ctx, t, false)
	env := tiertest.Env{Store: be.Store, Meta: be.Meta}
	s := tiertest.Write(t, env, tiertest.Spec{Stream: "s", Seed: 5, Epoch: 1})
	top := upgrade(t, be.Store, s, 3, 1)
	_, _, _, _, read, err := be.Meta.ReadForRecovery(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	b, err := be.Store.GetObject(ctx, manifest.SeqRootKey(p, "s", 1))
	if err != nil {
		t.Fatal(err)
	}
	r1, _ := manifest.DecodeRootObject(b)
	m := s.Manifest
	old := metadata.ManifestRecord{Seq: 1, Epoch: 1, RootUID: r1.Lineage.UID, FirstOffset: m.FirstOffset, NextOffset: m.NextOffset, TotalSize: m.TotalSize, FirstTimestamp: m.FirstTimestamp}
	if err := be.Meta.RecoverRecords(ctx, "s", read, old, 1); err != nil {
		t.Fatal(err)
	}
	rep, err := recovery.Recover(ctx, recovery.Options{Store: be.Store, Meta: be.Meta, Write: true}, "s")
	if err != nil || rep.Plan.Action != resolve.RecoverWrite || !rep.Written {
		t.Fatalf("%+v %v", rep.Plan, err)
	}
	if rec, _, _, _ := be.Meta.ReadManifest(ctx, "s"); rec.Seq != 3 || rec.RootUID != top.UID {
		t.Fatalf("record after recovery %+v", rec)
	}
}

// TestInspectListsAgainWhenARootVanishes: a live writer persists a later root and reaps
// the one recovery listed before recovery reads it: recovery lists again and chooses the
// later root (it called the lineage undecided, and `node recover --takeover` of a live
// cluster's prefix refused the stream).
func TestInspectListsAgainWhenARootVanishes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	be := tiertest.StartBackends(ctx, t, true)
	store := be.Store
	s := tiertest.Write(t, tiertest.Env{Store: store, Meta: be.Meta}, tiertest.Spec{Stream: "live", Seed: 5, Epoch: 1})
	top := upgrade(t, store, s, 2, 1)
	hit := make(chan string, 1)
	be.Faults.Add(s3test.Rule{Method: "GET", KeyRegexp: "root-00000000000000000002", Fault: s3test.FaultDelay, Delay: time.Second, Count: 1, Hit: hit})
	done := make(chan struct{})
	go func() { // the live writer, owned by the test and joined below
		defer close(done)
		<-hit
		next := manifest.Lineage{Seq: 3, Epoch: 1, UID: tiertest.UID(), ParentSeq: top.Seq, ParentUID: top.UID}
		if err := store.PutObjectIfAbsent(ctx, manifest.SeqRootKey(p, "live", 3), manifest.EncodeRootV3(next, s.Manifest)); err != nil {
			t.Error(err)
		}
		if _, err := store.DeleteObjects(ctx, []string{manifest.SeqRootKey(p, "live", 2)}); err != nil {
			t.Error(err)
		}
	}()
	in, err := recovery.Inspect(ctx, store, p, "live", false)
	<-done
	if err != nil || !in.Chosen() || in.Check != nil || in.Choice.Root.Seq != 3 {
		t.Fatalf("inspection with a root reaped under it: %+v %v, want seq 3 chosen", in.Choice, err)
	}
}
