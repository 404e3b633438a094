package actors

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// TestDormantStreamThroughEtcdWipe: every etcd key goes while a stream is dormant (no actor
// to see it). Its status names the lost claim without waking it. Data committed afterwards
// wakes it; its new reader finds the claim gone,
// persists and deletes nothing, and says why and what to do in status. The bucket keeps
// every key it had; `node recover` (the Go API) rebuilds the records, and a node started
// again persists everything, the dormant stream's acknowledged offsets included.
func TestDormantStreamThroughEtcdWipe(t *testing.T) {
	w := newWorld(t, worldOptions{})
	ctx := context.Background()
	cfg := dormantConfig(t)
	cfg.ClaimRecheck = 100 * time.Millisecond
	n1, lg := startPersisted(t, w, cfg, "sleeper", 5)
	awaitDormant(t, n1, "sleeper", 1)
	acked := lg.NextOffset()
	superseded(t, w, "sleeper")
	before := bucketKeys(t, w.Store)

	if _, err := w.Meta.Client().Delete(ctx, w.Meta.Prefix()+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	until(t, 20*time.Second, "the dormant stream's status names the lost claim", func() (bool, string) {
		st, err := n1.Status(ctx, "sleeper")
		return err == nil && st.Dormant && st.Phase == "claim_changed" && strings.Contains(st.MetadataReason, "node recover"),
			fmt.Sprintf("phase %s dormant %t reason %q %v", st.Phase, st.Dormant, st.MetadataReason, err)
	})
	writeLog(t, lg, 6, loadgen.Limit{Bytes: 20 << 10}) // the commit wakes it
	until(t, 20*time.Second, "the woken stream sees its claim gone and says so", func() (bool, string) {
		st, err := n1.Status(ctx, "sleeper")
		return err == nil && !st.Dormant && st.Phase != "running" && strings.Contains(st.MetadataReason, "node recover"),
			fmt.Sprintf("phase %s dormant %t reason %q waiting %q %v", st.Phase, st.Dormant, st.MetadataReason, st.Waiting, err)
	})
	if n1.Metrics().Wakes.Load() < 1 {
		t.Fatal("the commit did not wake the dormant stream")
	}
	if _, _, found, err := w.Meta.ReadManifest(ctx, "sleeper"); err != nil || found {
		t.Fatalf("a record written after the wipe: found %t, %v", found, err)
	}
	stopNode(t, n1)
	if m := missingKeys(t, w.Store, before); len(m) > 0 {
		t.Fatalf("%v deleted after the wipe", m)
	}

	recoverTakeover(t, w, acked)
	n2 := resumeRecovered(t, w, cfg, "sleeper", lg)
	checkNothingLost(t, n2, "sleeper", lg)
	awaitDormant(t, n2, "sleeper", 1)
}

// TestDormantStreamsThroughEtcdRestore: etcd goes back to an old snapshot while two streams
// are dormant: "near" one persist behind the bucket, "far" two. Commits wake them. "near"
// adopts its child root by itself and persists on; "far" stalls in metadata_behind, writes
// no record and says what to do. Nothing in the bucket is deleted; after `node recover`
// (the Go API), with the node running, "far" resolves again by itself and every
// acknowledged offset of both is persisted and readable.
func TestDormantStreamsThroughEtcdRestore(t *testing.T) {
	w := newWorld(t, worldOptions{})
	ctx := context.Background()
	cfg := dormantConfig(t)
	n, far := startPersisted(t, w, cfg, "far", 5)
	defer stopNode(t, n)
	near := openLog(t, segments.Options{})
	writeLog(t, near, 6, loadgen.Limit{Bytes: 48 << 10})
	if err := n.AddStream(StreamSpec{ID: "near", Log: near, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, "near", near.NextOffset(), 30*time.Second)

	// The snapshot: each stream's keys as they were `behind` persists ago. A stream is
	// dormant (everything persisted, nothing to do) whenever its record is read, so that no
	// persist of its own comes between.
	snap := etcdSnapshot{}
	seqs := map[string]uint64{}
	for stream, behind := range map[string]uint64{"far": 2, "near": 1} {
		lg := map[string]*segments.Log{"far": far, "near": near}[stream]
		start, _ := record(t, w.Meta, stream)
		for i := uint64(0); ; i++ {
			awaitDormant(t, n, stream, 1)
			if now, _ := record(t, w.Meta, stream); now.Seq >= start.Seq+behind {
				break
			}
			writeLog(t, lg, 10+i, loadgen.Limit{Bytes: 20 << 10})
			persisted(t, n, stream, lg.NextOffset(), 30*time.Second)
		}
		// etcd's history (not compacted here) has the record `behind` seqs back: the
		// snapshot is the stream's keys at that revision.
		rec, mod := record(t, w.Meta, stream)
		target := rec.Seq - behind
		for rec.Seq > target {
			rec, mod = recordAt(t, w.Meta, stream, mod-1)
		}
		if rec.Seq != target {
			t.Fatalf("%s: no record of seq %d in etcd's history (went from %d to below)", stream, target, rec.Seq)
		}
		snap.snapshotStream(t, w.Meta, stream, mod)
		seqs[stream] = target
	}
	superseded(t, w, "far", "near")
	before := bucketKeys(t, w.Store)
	snap.restore(t, w.Meta, "far", "near")

	writeLog(t, far, 30, loadgen.Limit{Bytes: 20 << 10}) // the commits wake them
	writeLog(t, near, 31, loadgen.Limit{Bytes: 20 << 10})
	persisted(t, n, "near", near.NextOffset(), 30*time.Second)
	if rec, _ := record(t, w.Meta, "near"); rec.Seq <= seqs["near"]+1 {
		t.Fatalf("near: the record names seq %d after the wake, want past its child %d (adopted, then persisted on)", rec.Seq, seqs["near"]+1)
	}
	until(t, 20*time.Second, "far stalls in metadata_behind", func() (bool, string) {
		st, err := n.Status(ctx, "far")
		return err == nil && st.Phase == "metadata_behind" && strings.Contains(st.MetadataReason, "node recover --after-restore"),
			fmt.Sprintf("phase %s dormant %t reason %q %v", st.Phase, st.Dormant, st.MetadataReason, err)
	})
	if rec, _ := record(t, w.Meta, "far"); rec.Seq != seqs["far"] {
		t.Fatalf("far: the record names seq %d, want the restored %d (nothing written while behind)", rec.Seq, seqs["far"])
	}
	for _, k := range missingKeys(t, w.Store, before) {
		// near's adoption supersedes the root the restored record named: the reaper may
		// delete that root (a positive statement); nothing else goes.
		if !strings.Contains(k, "/near/meta/root-") {
			t.Errorf("%s was deleted", k)
		}
	}

	recoverAll(t, w)
	persisted(t, n, "far", far.NextOffset(), 30*time.Second)
	checkNothingLost(t, n, "far", far)
	checkNothingLost(t, n, "near", near)
}

// superseded waits until the reaper has deleted the superseded roots of each stream (one
// root left in the bucket): a stream may go dormant as its last persist supersedes a root,
// with that root's deletion still on its way to the reaper, and the wipe and restore tests
// compare the bucket before and after etcd is lost.
func superseded(t *testing.T, w *world, streams ...string) {
	t.Helper()
	for _, stream := range streams {
		until(t, 20*time.Second, stream+"'s superseded roots reaped", func() (bool, string) {
			var roots []string
			for _, k := range bucketKeys(t, w.Store) {
				if strings.Contains(k, "/"+stream+"/meta/root-") {
					roots = append(roots, k)
				}
			}
			return len(roots) == 1, fmt.Sprintf("roots %v", roots)
		})
	}
}
