package actors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/claim"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/recovery"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// v3Config is a node configuration with small fragments, quick persists and a quick
// retry of stalled resolutions.
func v3Config(t *testing.T) Config {
	log, _ := testLogger(t)
	return Config{Logger: log, StallRetry: 100 * time.Millisecond,
		Stream: StreamOptions{FragmentTargetSize: 16 << 10, PersistThreshold: 1, PersistInterval: 100 * time.Millisecond}}
}

// record reads stream's manifest record and its etcd ModRevision.
func record(t *testing.T, meta *metadata.Store, stream string) (metadata.ManifestRecord, int64) {
	t.Helper()
	return recordAt(t, meta, stream, 0)
}

// recordAt is stream's manifest record as etcd held it at revision rev (0: now), and the
// revision it was written at.
func recordAt(t *testing.T, meta *metadata.Store, stream string, rev int64) (metadata.ManifestRecord, int64) {
	t.Helper()
	resp, err := meta.Client().Get(context.Background(), metadata.ManifestKey(meta.Prefix(), stream), clientv3.WithRev(rev))
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("record of %s at revision %d: %v (%d keys)", stream, rev, err, len(resp.Kvs))
	}
	rec, err := metadata.DecodeManifestRecord(string(resp.Kvs[0].Key), resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	return rec, resp.Kvs[0].ModRevision
}

// etcdSnapshot is the keys of some streams as etcd held them at one revision each.
type etcdSnapshot map[string]map[string][]byte // stream -> key -> value

// snapshotStream copies stream's etcd keys as they were at revision rev (etcd's history
// before compaction: a snapshot taken then).
func (s etcdSnapshot) snapshotStream(t *testing.T, meta *metadata.Store, stream string, rev int64) {
	t.Helper()
	resp, err := meta.Client().Get(context.Background(), metadata.StreamPrefix(meta.Prefix(), stream), clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatalf("snapshot %s at %d: %v", stream, rev, err)
	}
	kv := map[string][]byte{}
	for _, k := range resp.Kvs {
		kv[string(k.Key)] = k.Value
	}
	s[stream] = kv
}

// restore puts the snapshot's keys back and deletes the streams' keys it did not hold,
// as an etcd restored from the snapshot would hold them.
func (s etcdSnapshot) restore(t *testing.T, meta *metadata.Store, streams ...string) {
	t.Helper()
	ctx := context.Background()
	for _, stream := range streams {
		if _, err := meta.Client().Delete(ctx, metadata.StreamPrefix(meta.Prefix(), stream), clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
		for k, v := range s[stream] {
			if _, err := meta.Client().Put(ctx, k, string(v)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// bucketKeys lists every key in the bucket.
func bucketKeys(t *testing.T, store *s3io.Store) []string {
	t.Helper()
	var keys []string
	if err := store.List(context.Background(), "", func(o s3io.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// missingKeys lists the keys of before that the bucket no longer holds.
func missingKeys(t *testing.T, store *s3io.Store, before []string) []string {
	t.Helper()
	after := bucketKeys(t, store)
	var missing []string
	for _, k := range before {
		if !slices.Contains(after, k) {
			missing = append(missing, k)
		}
	}
	return missing
}

// recoverAll is `node recover --yes` of every stream through the Go API (no takeover): the
// plan from the bucket, without errors, applied to etcd.
func recoverAll(t *testing.T, w *world) {
	t.Helper()
	ctx := context.Background()
	reps, errs, err := recovery.All(ctx, recovery.Options{Store: w.Store, Meta: w.Meta}, nil)
	if err != nil || len(errs) != 0 {
		t.Fatalf("recovery plan: %v %v", err, errs)
	}
	if _, errs := recovery.ApplyAll(ctx, w.Meta, reps, nil, 0); len(errs) != 0 {
		t.Fatalf("recovery: %v", errs)
	}
}

// resumeRecovered starts a node on the stream a recovery rebuilt and checks that it
// persists the whole log again, its record covering [0, next).
func resumeRecovered(t *testing.T, w *world, cfg Config, stream string, lg *segments.Log) *Node {
	t.Helper()
	n := startNode(w, cfg)
	if err := n.AddStream(StreamSpec{ID: stream, Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, stream, lg.NextOffset(), 30*time.Second)
	if rec, _ := record(t, w.Meta, stream); rec.FirstOffset != 0 || rec.NextOffset != lg.NextOffset() {
		t.Fatalf("after recovery and restart the record holds [%d,%d), want [0,%d)", rec.FirstOffset, rec.NextOffset, lg.NextOffset())
	}
	return n
}

// TestV3RestoreFromSnapshot (scenario b): etcd is restored from a snapshot after one stream
// persisted exactly once more, another several times, and a third was created. With the
// node started again: the first adopts its child by itself and goes on, the second stalls
// in metadata_behind, the third in metadata_missing (status, gauges), and nothing in the
// bucket is deleted; after `node recover` (the Go API), with the node running, all three go
// on.
func TestV3RestoreFromSnapshot(t *testing.T) {
	w := newWorld(t, worldOptions{})
	ctx := context.Background()
	cfg := v3Config(t)
	n1, err := Start(ctx, cfg, w.Store, w.Meta)
	if err != nil {
		t.Fatal(err)
	}
	logs := map[string]*segments.Log{}
	add := func(n *Node, stream string) {
		if logs[stream] == nil {
			logs[stream] = openLog(t, segments.Options{})
			writeLog(t, logs[stream], 3, loadgen.Limit{Bytes: 48 << 10})
		}
		if err := n.AddStream(StreamSpec{ID: stream, Log: logs[stream], Epoch: 1}); err != nil {
			t.Fatal(err)
		}
	}
	add(n1, "one")
	add(n1, "many")
	persisted(t, n1, "one", logs["one"].NextOffset(), 30*time.Second)
	persisted(t, n1, "many", logs["many"].NextOffset(), 30*time.Second)

	snap := etcdSnapshot{}
	manyRec, manyMod := record(t, w.Meta, "many")
	snap.snapshotStream(t, w.Meta, "many", manyMod)
	for i := uint64(0); ; i++ { // persist "many" until its record is two seqs or more ahead
		writeLog(t, logs["many"], 10+i, loadgen.Limit{Bytes: 20 << 10})
		persisted(t, n1, "many", logs["many"].NextOffset(), 30*time.Second)
		if rec, _ := record(t, w.Meta, "many"); rec.Seq >= manyRec.Seq+2 {
			break
		}
	}
	writeLog(t, logs["one"], 20, loadgen.Limit{Bytes: 20 << 10})
	persisted(t, n1, "one", logs["one"].NextOffset(), 30*time.Second)
	// The snapshot of "one" is etcd just before its last persist: exactly one behind.
	oneRec, oneMod := record(t, w.Meta, "one")
	snap.snapshotStream(t, w.Meta, "one", oneMod-1)
	add(n1, "new")
	persisted(t, n1, "new", logs["new"].NextOffset(), 30*time.Second)
	snap["new"] = nil // created after the snapshot
	stopNode(t, n1)

	snap.restore(t, w.Meta, "one", "many", "new")
	if rec, _ := record(t, w.Meta, "one"); rec.Seq != oneRec.Seq-1 {
		t.Fatalf("restored record of one names seq %d, want %d", rec.Seq, oneRec.Seq-1)
	}
	before := bucketKeys(t, w.Store)

	log, logBuf := testLogger(t)
	cfg.Logger = log
	n2 := startNode(w, cfg)
	for _, s := range []string{"one", "many", "new"} {
		add(n2, s)
	}
	persisted(t, n2, "one", logs["one"].NextOffset(), 30*time.Second)
	if rec, _ := record(t, w.Meta, "one"); rec.Seq != oneRec.Seq || rec.RootUID != oneRec.RootUID {
		t.Fatalf("one: the record names seq %d uid %016x after adoption, want its child seq %d uid %016x", rec.Seq, rec.RootUID, oneRec.Seq, oneRec.RootUID)
	}
	phase := func(stream, want string) {
		until(t, 20*time.Second, stream+" in "+want, func() (bool, string) {
			st, err := n2.Status(ctx, stream)
			if err != nil {
				return false, err.Error()
			}
			repair := "node recover " + stream // behind: the claim's generation goes up first
			if want == "metadata_behind" {
				repair = "node recover --yes --after-restore"
			}
			return st.Phase == want && strings.Contains(st.MetadataReason, repair), st.Phase + ": " + st.MetadataReason
		})
	}
	phase("many", "metadata_behind")
	phase("new", "metadata_missing")
	m := n2.Metrics()
	if m.Adoptions.Load() != 1 || m.StreamsMetadataBehind.Load() != 1 || m.StreamsMetadataMissing.Load() != 1 {
		t.Fatalf("%d adoptions, %d behind, %d missing", m.Adoptions.Load(), m.StreamsMetadataBehind.Load(), m.StreamsMetadataMissing.Load())
	}
	if err := n2.MetadataReady(ctx); err == nil || !strings.Contains(err.Error(), "1 streams in metadata_missing and 1 in metadata_behind") {
		t.Fatalf("readiness with two stalled streams: %v", err)
	}
	// Several retries later the stall is still logged once per stream.
	until(t, 10*time.Second, "stalled resolutions retried", func() (bool, string) {
		return m.StalledResolutions.Load() >= 8, fmt.Sprint(m.StalledResolutions.Load())
	})
	phase("many", "metadata_behind")
	if c := logBuf.Count("the stream stalls"); c != 2 {
		t.Fatalf("the stalls were logged %d times, want once per stream (2)", c)
	}
	if m := missingKeys(t, w.Store, before); len(m) > 0 {
		t.Errorf("%v were deleted", m)
	}
	for _, s := range []string{"many", "new"} {
		if _, _, found, _ := w.Meta.ReadManifest(ctx, s); found && s == "new" {
			t.Errorf("a record was written for the stalled stream %s", s)
		}
	}
	if rec, _ := record(t, w.Meta, "many"); rec.Seq != manyRec.Seq {
		t.Errorf("many: the record names seq %d, want the restored %d (nothing written)", rec.Seq, manyRec.Seq)
	}

	// The operator recovers from the bucket (node recover --yes) with the node running: the
	// stalled streams resolve again by themselves and every one goes on from where the
	// bucket says it was.
	recoverAll(t, w)
	for i, s := range []string{"one", "many", "new"} {
		writeLog(t, logs[s], 40+uint64(i), loadgen.Limit{Bytes: 20 << 10})
		persisted(t, n2, s, logs[s].NextOffset(), 30*time.Second)
		if st, err := n2.Status(ctx, s); err != nil || st.Phase != "running" {
			t.Fatalf("%s after recovery: %+v %v", s, st, err)
		}
	}
	// Superseded roots go to the reaper once a later persist names another; nothing else.
	for _, k := range missingKeys(t, w.Store, before) {
		if !strings.Contains(k, "/meta/root-") {
			t.Errorf("%s was deleted", k)
		}
	}
}

// startPersisted starts a node on w (the caller stops it), adds stream on a new log with
// 48 KiB written (loadgen seed) and waits until all of it is persisted.
func startPersisted(t *testing.T, w *world, cfg Config, stream string, seed uint64) (*Node, *segments.Log) {
	t.Helper()
	n, err := Start(context.Background(), cfg, w.Store, w.Meta)
	if err != nil {
		t.Fatal(err)
	}
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, seed, loadgen.Limit{Bytes: 48 << 10})
	if err := n.AddStream(StreamSpec{ID: stream, Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, stream, lg.NextOffset(), 30*time.Second)
	return n, lg
}

// TestV3AdoptionReapsTheReplacedRoot: a persist whose root reached the bucket and not etcd
// (a crash between the two) is adopted at the next start. The root the record named until
// then is superseded by a positive statement (the record names a later seq), so the node's
// reaper deletes it, as it deletes the root any persist replaces; the adopted root stays.
// Without it the replaced root stayed until `node gc`, and a clean stop of the binary
// waited for it to go until its timeout.
func TestV3AdoptionReapsTheReplacedRoot(t *testing.T) {
	w := newWorld(t, worldOptions{})
	ctx := context.Background()
	cfg := v3Config(t)
	n1, lg := startPersisted(t, w, cfg, "s", 5)
	stopNode(t, n1)

	rec, _ := record(t, w.Meta, "s")
	parentKey := rec.RootKey(manifest.DefaultKeyPrefix, "s")
	body, err := w.Store.GetObject(ctx, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := manifest.DecodeRootObject(body)
	if err != nil {
		t.Fatal(err)
	}
	child := manifest.Lineage{Seq: rec.Seq + 1, Epoch: rec.Epoch, UID: 0x5eed_c41d, ParentSeq: rec.Seq, ParentUID: rec.RootUID}
	childKey := manifest.SeqRootKey(manifest.DefaultKeyPrefix, "s", child.Seq)
	if err := w.Store.PutObjectIfAbsent(ctx, childKey, manifest.EncodeRootV3(child, obj.Manifest)); err != nil {
		t.Fatal(err)
	}

	n2 := startNode(w, cfg)
	if err := n2.AddStream(StreamSpec{ID: "s", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	until(t, 20*time.Second, "the replaced root "+parentKey+" deleted", func() (bool, string) {
		keys := bucketKeys(t, w.Store)
		return !slices.Contains(keys, parentKey), fmt.Sprintf("%d adoptions; keys %v", n2.Metrics().Adoptions.Load(), keys)
	})
	if now, _ := record(t, w.Meta, "s"); now.Seq != child.Seq || now.RootUID != child.UID {
		t.Fatalf("the record names seq %d uid %016x, want the adopted seq %d uid %016x", now.Seq, now.RootUID, child.Seq, child.UID)
	}
	if !slices.Contains(bucketKeys(t, w.Store), childKey) {
		t.Fatalf("the adopted root %s is gone", childKey)
	}
	if a := n2.Metrics().Adoptions.Load(); a != 1 {
		t.Fatalf("%d adoptions, want 1", a)
	}
}

// TestV3TwoWritersRaceForASeq (scenario e): another writer at the same epoch takes the
// seq the node's next persist needs (its root PUT with If-None-Match: * first): one root
// per seq; the node's PUT gets a 412, it reinitializes, adopts the other root (a child of
// the record) and persists on above it.
func TestV3TwoWritersRaceForASeq(t *testing.T) {
	w := newWorld(t, worldOptions{})
	ctx := context.Background()
	n, lg := readerStream(t, w, v3Config(t), "race")
	rec, _ := record(t, w.Meta, "race")
	body, err := w.Store.GetObject(ctx, manifest.SeqRootKey(manifest.DefaultKeyPrefix, "race", rec.Seq))
	if err != nil {
		t.Fatal(err)
	}
	obj, err := manifest.DecodeRootObject(body)
	if err != nil {
		t.Fatal(err)
	}
	// The other writer's root: the same manifest as a child of the record, at the next seq.
	other := manifest.Lineage{Seq: rec.Seq + 1, Epoch: 1, UID: 0xabcdef, ParentSeq: rec.Seq, ParentUID: rec.RootUID}
	key := manifest.SeqRootKey(manifest.DefaultKeyPrefix, "race", other.Seq)
	if err := w.Store.PutObjectIfAbsent(ctx, key, manifest.EncodeRootV3(other, obj.Manifest)); err != nil {
		t.Fatal(err)
	}
	// Every record from here on: the reaper may delete the root at other.Seq as soon as a
	// later persist supersedes it, so the records are what tell which root held that seq.
	_, modRev := record(t, w.Meta, "race")
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watch := w.Meta.Client().Watch(wctx, metadata.ManifestKey(w.Meta.Prefix(), "race"), clientv3.WithRev(modRev+1))
	reinits := n.Metrics().Reinitializations.Load()
	writeLog(t, lg, 30, loadgen.Limit{Bytes: 20 << 10})
	persisted(t, n, "race", lg.NextOffset(), 30*time.Second)
	final, _ := record(t, w.Meta, "race")
	named := map[uint64]uint64{} // seq -> root uid of every record that named it
	for len(named) == 0 || named[final.Seq] == 0 {
		resp := <-watch
		if err := resp.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range resp.Events {
			r, err := metadata.DecodeManifestRecord(string(ev.Kv.Key), ev.Kv.Value)
			if err != nil {
				t.Fatal(err)
			}
			if uid, ok := named[r.Seq]; ok && uid != r.RootUID {
				t.Fatalf("seq %d named roots %x and %x: one root per seq", r.Seq, uid, r.RootUID)
			}
			named[r.Seq] = r.RootUID
		}
	}
	if uid := named[other.Seq]; uid != other.UID {
		t.Fatalf("the records named %x at seq %d, want the other writer's root %x: one root per seq (records %v)", uid, other.Seq, other.UID, named)
	}
	m := n.Metrics()
	if m.Reinitializations.Load() <= reinits || m.Adoptions.Load() != 1 || m.PersistConflicts.Load() == 0 {
		t.Fatalf("%d reinitializations (from %d), %d adoptions, %d conflicts", m.Reinitializations.Load(), reinits, m.Adoptions.Load(), m.PersistConflicts.Load())
	}
	if now, _ := record(t, w.Meta, "race"); now.Seq <= other.Seq {
		t.Fatalf("the record names seq %d, want above the adopted %d", now.Seq, other.Seq)
	}
}

// TestV3StartRefusesStoreWithoutConditions (scenario f): a store that ignores If-None-Match
// is refused at Start, by name.
func TestV3StartRefusesStoreWithoutConditions(t *testing.T) {
	w := newWorld(t, worldOptions{})
	w.Inj.Add(s3test.Rule{Method: "PUT", Fault: s3test.FaultIgnoreConditions})
	_, err := Start(context.Background(), v3Config(t), w.Store, w.Meta)
	if !errors.Is(err, s3io.ErrNoConditionalCreate) {
		t.Fatalf("start on a store without conditional creates: %v", err)
	}
}

// TestV3StartRefusesSecondCluster (scenario f): a second cluster (another etcd prefix) on
// the same bucket and key prefix is refused at Start, naming what it found.
func TestV3StartRefusesSecondCluster(t *testing.T) {
	w := newWorld(t, worldOptions{})
	readerStream(t, w, v3Config(t), "first")
	other := metadata.NewStore(w.Meta.Client(), w.Meta.Prefix()+"-other")
	_, err := Start(context.Background(), v3Config(t), w.Store, other)
	if !errors.Is(err, claim.ErrRefused) || !strings.Contains(err.Error(), "claim") {
		t.Fatalf("a second cluster on the same key prefix: %v", err)
	}
	t.Log(err)
}

// TestV3ClaimChangeStopsPersistingAndDeleting: the cluster record changes under a running
// node (a takeover raised the generation): its periodic check sees it, the node stops
// persisting and deleting, its streams show the claim_changed phase naming what to do, and
// nothing in the bucket is deleted.
func TestV3ClaimChangeStopsPersistingAndDeleting(t *testing.T) {
	w := newWorld(t, worldOptions{})
	ctx := context.Background()
	cfg := v3Config(t)
	cfg.ClaimRecheck = 100 * time.Millisecond
	n, lg := readerStream(t, w, cfg, "taken")
	rec, modRev, found, err := w.Meta.ReadCluster(ctx)
	if err != nil || !found {
		t.Fatalf("cluster record: %v (found %t)", err, found)
	}
	rec.Generation++
	if _, err := w.Meta.UpdateCluster(ctx, modRev, rec); err != nil {
		t.Fatal(err)
	}
	until(t, 10*time.Second, "the claim change seen", func() (bool, string) {
		return n.Metrics().ClaimLost.Load() == 1, ""
	})
	before := bucketKeys(t, w.Store)
	stored, _ := record(t, w.Meta, "taken")
	failures := n.Metrics().PersistFailures.Load()
	writeLog(t, lg, 40, loadgen.Limit{Bytes: 40 << 10})
	until(t, 20*time.Second, "persists refused", func() (bool, string) {
		_ = n.ForceCut("taken")
		st, _ := n.Status(ctx, "taken")
		return n.Metrics().PersistFailures.Load() >= failures+3 && st.Phase == "claim_changed" &&
			strings.Contains(st.MetadataReason, "node recover"), st.Phase + ": " + st.MetadataReason
	})
	if now, _ := record(t, w.Meta, "taken"); now != stored {
		t.Fatalf("the record changed after the claim did: %+v, was %+v", now, stored)
	}
	if err := n.MetadataReady(ctx); !errors.Is(err, ErrClaimChanged) {
		t.Fatalf("readiness after the claim changed: %v", err)
	}
	if err := n.DeleteStream(ctx, "taken"); !errors.Is(err, ErrClaimChanged) {
		t.Fatalf("delete after the claim changed: %v", err)
	}
	if m := missingKeys(t, w.Store, before); len(m) > 0 {
		t.Errorf("%v were deleted after the claim changed", m)
	}
}

// TestFreshnessStale: when a writer must resolve again before it persists.
func TestFreshnessStale(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	for _, c := range []struct {
		name          string
		sure, failing time.Duration // offsets from t0; -1: never
		now           time.Duration
		want          string
	}{
		{"never persisted nor resolved", -1, -1, time.Hour, ""},
		{"fresh", 0, -1, 4 * time.Minute, ""},
		{"last success older than StaleAfter", 0, -1, 5*time.Minute + time.Millisecond, "last successful persist or resolution"},
		{"failing shorter than the persist timeout", 0, time.Second, 20 * time.Second, ""},
		{"failing longer than the persist timeout", 0, time.Second, 32 * time.Second, "persists have failed for 31s"},
	} {
		var f freshness
		if c.sure >= 0 {
			f.sureAt(t0.Add(c.sure))
		}
		if c.failing >= 0 {
			f.failedAt(t0.Add(c.failing))
		}
		got := f.stale(t0.Add(c.now), 5*time.Minute, 30*time.Second)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestV3StaleWriterResolvesAgain: a writer idle for longer than StaleAfter looks again
// (the listing, the marker, the record) before its next persist: when nothing moved it
// persists on; when another writer's root appeared above its parent it resolves again
// (a reinitialize) and adopts it.
func TestV3StaleWriterResolvesAgain(t *testing.T) {
	w := newWorld(t, worldOptions{})
	cfg := v3Config(t)
	clock := newManualClock()
	cfg.clock, cfg.StaleAfter = clock, time.Minute
	log, logBuf := testLogger(t)
	cfg.Logger = log
	n, lg := readerStream(t, w, cfg, "stale")
	reinits := n.Metrics().Reinitializations.Load()
	clock.Advance(2 * time.Minute)
	writeLog(t, lg, 50, loadgen.Limit{Bytes: 20 << 10})
	persisted(t, n, "stale", lg.NextOffset(), 30*time.Second)
	if n.Metrics().Reinitializations.Load() != reinits || logBuf.Count("stale writer: the listing and etcd still name its parent") != 1 {
		t.Fatalf("%d reinitializations (from %d), %d log lines naming a stale writer", n.Metrics().Reinitializations.Load(), reinits, logBuf.Count("stale writer"))
	}

	// Another writer's root above the record (a child of it, the same manifest).
	ctx := context.Background()
	rec, _ := record(t, w.Meta, "stale")
	body, err := w.Store.GetObject(ctx, manifest.SeqRootKey(manifest.DefaultKeyPrefix, "stale", rec.Seq))
	if err != nil {
		t.Fatal(err)
	}
	obj, err := manifest.DecodeRootObject(body)
	if err != nil {
		t.Fatal(err)
	}
	other := manifest.Lineage{Seq: rec.Seq + 1, Epoch: 1, UID: 0x5eed, ParentSeq: rec.Seq, ParentUID: rec.RootUID}
	if err := w.Store.PutObjectIfAbsent(ctx, manifest.SeqRootKey(manifest.DefaultKeyPrefix, "stale", other.Seq), manifest.EncodeRootV3(other, obj.Manifest)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	writeLog(t, lg, 51, loadgen.Limit{Bytes: 20 << 10})
	persisted(t, n, "stale", lg.NextOffset(), 30*time.Second)
	if n.Metrics().Reinitializations.Load() != reinits+1 || n.Metrics().Adoptions.Load() != 1 {
		t.Fatalf("%d reinitializations (from %d), %d adoptions", n.Metrics().Reinitializations.Load(), reinits, n.Metrics().Adoptions.Load())
	}
}

// TestV3MarkerWithoutTombstone: a deletion etcd rolled back (the bucket's marker is there,
// etcd holds the stream's records and no tombstone): the writer stops as deleted, writes
// the tombstone back, and deletes nothing in the bucket.
func TestV3MarkerWithoutTombstone(t *testing.T) {
	w := newWorld(t, worldOptions{})
	ctx := context.Background()
	n, _ := readerStream(t, w, v3Config(t), "undead")
	if err := n.RemoveStream(ctx, "undead"); err != nil {
		t.Fatal(err)
	}
	if err := w.Store.CreateMarker(ctx, manifest.DefaultKeyPrefix, s3io.Marker{Stream: "undead", ClusterID: "x", Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var before []string
	until(t, 10*time.Second, "the replaced roots reaped", func() (bool, string) {
		before = bucketKeys(t, w.Store)
		roots := slices.DeleteFunc(slices.Clone(before), func(k string) bool { return !strings.Contains(k, "/meta/root-") })
		return len(roots) == 1, fmt.Sprint(roots)
	})
	lg := openLog(t, segments.Options{})
	if err := n.AddStream(StreamSpec{ID: "undead", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	until(t, 20*time.Second, "stopped as deleted", func() (bool, string) {
		st, _ := n.Status(ctx, "undead")
		return st.Phase == "stopped" && strings.Contains(st.StopReason, "deletion marker"), st.Phase + ": " + st.StopReason
	})
	if _, found, err := w.Meta.ReadTombstone(ctx, "undead"); err != nil || !found {
		t.Fatalf("tombstone written back: found %t, %v", found, err)
	}
	if after := bucketKeys(t, w.Store); !slices.Equal(before, after) {
		t.Fatalf("the bucket changed: %v, was %v", after, before)
	}
}

// recoverTakeover is `node recover --yes --takeover` of a bucket holding one stream (the Go
// API): this cluster's claim, then the stream's records rebuilt from the bucket, which must
// cover acked.
func recoverTakeover(t *testing.T, w *world, acked uint64) {
	t.Helper()
	ctx := context.Background()
	if _, err := recovery.Claim(ctx, recovery.ClaimOptions{Store: w.Store, Meta: w.Meta, Takeover: true, Write: true}); err != nil {
		t.Fatal(err)
	}
	reps, errs, err := recovery.All(ctx, recovery.Options{Store: w.Store, Meta: w.Meta}, nil)
	if err != nil || len(errs) != 0 || len(reps) != 1 || reps[0].Next < acked {
		t.Fatalf("recovery plan: %+v %v %v (acknowledged next %d)", reps, errs, err, acked)
	}
	if _, errs := recovery.ApplyAll(ctx, w.Meta, reps, nil, 0); len(errs) != 0 {
		t.Fatalf("recovery: %v", errs)
	}
}

// TestV3EtcdWipedUnderRunningNode (scenario c): every etcd key of the cluster goes while a
// node tiers a stream. The node sees it (its cluster record is gone), stops persisting and
// deleting and says so in status; the acknowledged offsets stay in the bucket. `node recover
// --yes --takeover` (the Go API: the roots are seconds old) rebuilds the records; a node
// started again goes on from the recovered root without losing an acknowledged offset.
func TestV3EtcdWipedUnderRunningNode(t *testing.T) {
	w := newWorld(t, worldOptions{})
	ctx := context.Background()
	cfg := v3Config(t)
	cfg.ClaimRecheck = 100 * time.Millisecond
	n1, lg := startPersisted(t, w, cfg, "wiped", 3)
	acked := lg.NextOffset()

	if _, err := w.Meta.Client().Delete(ctx, w.Meta.Prefix()+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	until(t, 10*time.Second, "the node sees its claim gone", func() (bool, string) {
		st, err := n1.Status(ctx, "wiped")
		return err == nil && st.Phase == "claim_changed" && strings.Contains(st.MetadataReason, "node recover"), fmt.Sprintf("%+v %v", st.Phase, err)
	})
	writeLog(t, lg, 4, loadgen.Limit{Bytes: 20 << 10}) // the broker goes on meanwhile
	if _, _, found, err := w.Meta.ReadManifest(ctx, "wiped"); err != nil || found {
		t.Fatalf("a record written after the wipe: found %t, %v", found, err)
	}
	stopNode(t, n1)
	before := bucketKeys(t, w.Store)

	recoverTakeover(t, w, acked)
	if m := missingKeys(t, w.Store, before); len(m) > 0 {
		t.Fatalf("%v deleted by recovery", m)
	}
	resumeRecovered(t, w, cfg, "wiped", lg)
}
