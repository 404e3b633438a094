package gc_test

import (
	"context"
	"crypto/rand"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/gc"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/tiertest"
)

// v3Stream is a stream upgraded to format version 3 by hand: its version 2 root and, on top,
// version 3 roots, the record naming one of them by seq.
type v3Stream struct {
	t     *testing.T
	env   tiertest.Env
	s     tiertest.Stream
	roots map[uint64]manifest.Lineage
}

func (v *v3Stream) putRoot(l manifest.Lineage, m manifest.Manifest) string {
	v.t.Helper()
	key := manifest.SeqRootKey(manifest.DefaultKeyPrefix, v.s.ID, l.Seq)
	if err := v.env.Store.PutObjectIfAbsent(context.Background(), key, manifest.EncodeRootV3(l, m)); err != nil {
		v.t.Fatal(err)
	}
	v.roots[l.Seq] = l
	return key
}

// record makes etcd name the root of seq (conditional on what it read, as recovery does).
func (v *v3Stream) record(seq uint64, m manifest.Manifest) {
	v.t.Helper()
	ctx := context.Background()
	_, _, _, _, read, err := v.env.Meta.ReadForRecovery(ctx, v.s.ID)
	if err != nil {
		v.t.Fatal(err)
	}
	l := v.roots[seq]
	rec := metadata.ManifestRecord{Seq: seq, Epoch: l.Epoch, RootUID: l.UID, FirstOffset: m.FirstOffset, NextOffset: m.NextOffset, TotalSize: m.TotalSize, FirstTimestamp: m.FirstTimestamp}
	if err := v.env.Meta.RecoverRecords(ctx, v.s.ID, read, rec, l.Epoch); err != nil {
		v.t.Fatal(err)
	}
}

// claim writes a claimed cluster record and the bucket's claim: a version 3 cluster.
func claim(t *testing.T, meta *metadata.Store, store *s3io.Store) string {
	t.Helper()
	ctx := context.Background()
	id, err := s3io.NewClusterID(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := meta.CreateCluster(ctx, metadata.ClusterRecord{ClusterID: id, Generation: 1, Claimed: true}); err != nil {
		t.Fatal(err)
	}
	if err := store.CreateClaim(ctx, manifest.DefaultKeyPrefix, s3io.Claim{ClusterID: id, Generation: 1, EtcdPrefix: meta.Prefix(), Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestScanVersion3 walks garbage collection through a version 3 lineage: the version 2
// root superseded by the first version 3 root; a root in flight kept with what it
// references; a fenced stray collected; a fork (a root above the record referencing what
// the rules would collect) keeps the whole stream; a stale record (a chain above it) keeps
// the whole stream; grace 0 refused. Nothing referenced or recoverable is ever deleted.
func TestScanVersion3(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	be := tiertest.StartBackends(ctx, t, false)
	meta, store := be.Meta, be.Store
	env := tiertest.Env{Store: store, Meta: meta}
	claim(t, meta, store)
	later := func() time.Time { return time.Now().Add(2 * time.Hour) }
	opts := gc.Options{Store: store, Meta: meta, Grace: gc.MinDeleteGrace, Now: later}

	v := &v3Stream{t: t, env: env, s: tiertest.Write(t, env, tiertest.Spec{Stream: "s", Seed: 7, Epoch: 1}), roots: map[uint64]manifest.Lineage{}}
	m := v.s.Manifest
	lastModifiedTick()
	k1 := v.putRoot(manifest.Lineage{Seq: 1, Epoch: 1, UID: tiertest.UID(), ParentUID: v.s.Record.RootUID}, m)
	v.record(1, m)
	live := slices.DeleteFunc(slices.Clone(v.s.Live), func(k string) bool { return k == v.s.RootKey })
	live = append(live, k1)

	// The version 2 root is superseded once the record names a version 3 root.
	plan, err := gc.Scan(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(plan.Orphans); !slices.Equal(got, []string{v.s.RootKey}) || plan.Referenced != len(live) {
		t.Fatalf("after the upgrade: orphans %v referenced %d (want %d)", got, plan.Referenced, len(live))
	}

	// A root in flight: seq 2, child of 1, with a fragment appended at the next offset.
	frag := manifest.Entry{FirstOffset: m.NextOffset, FirstTimestamp: m.FirstTimestamp + 1, LastTimestamp: m.FirstTimestamp + 2, Size: 10, UID: tiertest.UID()}
	fragKey := manifest.FragmentKey(manifest.DefaultKeyPrefix, "s", frag.FirstOffset, 1, frag.UID)
	putAll(t, store, fragKey)
	edit, err := manifest.AppendEdit(m, frag, m.NextOffset+10)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := m.Apply(edit)
	if err != nil {
		t.Fatal(err)
	}
	k2 := v.putRoot(manifest.Lineage{Seq: 2, Epoch: 1, UID: tiertest.UID(), ParentSeq: 1, ParentUID: v.roots[1].UID}, m2)
	// And a fenced writer's stray on top: epoch 0, seq 3, child of 1, below the stored epoch.
	stray := v.putRoot(manifest.Lineage{Seq: 3, Epoch: 0, UID: tiertest.UID(), ParentSeq: 1, ParentUID: v.roots[1].UID}, m)
	plan, err = gc.Scan(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	pending := keysOf(plan.Pending)
	if !slices.Contains(pending, k2) || !slices.Contains(pending, fragKey) {
		t.Fatalf("root in flight: pending %v, want %s and %s", pending, k2, fragKey)
	}
	if got := keysOf(plan.Orphans); !slices.Equal(got, sorted([]string{v.s.RootKey, stray})) {
		t.Fatalf("orphans %v, want the version 2 root and the stray", got)
	}
	res, err := gc.Delete(ctx, opts, plan)
	if err != nil || len(res.Deleted) != 2 {
		t.Fatalf("delete: %+v %v", res, err)
	}
	for _, k := range append(slices.Clone(live), k2, fragKey) {
		if !exists(t, store, k) {
			t.Fatalf("%s deleted: referenced or recoverable", k)
		}
	}

	// Grace 0 (or anything below 5 minutes) is refused in delete mode: nothing deleted.
	zero := opts
	zero.Grace = 0
	if p0, err := gc.Scan(ctx, zero); err != nil {
		t.Fatal(err)
	} else if _, err := gc.Delete(ctx, zero, p0); err == nil || !strings.Contains(err.Error(), "below 5m0s") {
		t.Fatalf("delete with grace 0: %v", err)
	}

	// A stale record: a chain of two above it (etcd restored from an older snapshot). The
	// whole stream stalls: nothing of it is collected, even a superseded-looking object.
	k4 := v.putRoot(manifest.Lineage{Seq: 4, Epoch: 1, UID: tiertest.UID(), ParentSeq: 2, ParentUID: v.roots[2].UID}, m2)
	old := manifest.FragmentKey(manifest.DefaultKeyPrefix, "s", 0, 0, tiertest.UID())
	putAll(t, store, old)
	plan, err = gc.Scan(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Orphans) != 0 || len(plan.Young) != 0 {
		t.Fatalf("stale record: orphans %v young %v", keysOf(plan.Orphans), keysOf(plan.Young))
	}
	if len(plan.Undecided) == 0 || !strings.Contains(plan.Undecided[0].Reason, "metadata_behind") && !strings.Contains(plan.Undecided[0].Reason, "node recover") {
		t.Fatalf("stale record: undecided %+v", plan.Undecided)
	}
	if res, err := gc.Delete(ctx, opts, plan); err != nil || len(res.Deleted) != 0 {
		t.Fatalf("delete on a stale record: %+v %v", res, err)
	}
	// Recovery raises the record to seq 4: the chain is consumed, the older roots go.
	v.record(4, m2)
	plan, err = gc.Scan(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(plan.Orphans); !slices.Contains(got, k1) || !slices.Contains(got, k2) || slices.Contains(got, k4) || slices.Contains(got, fragKey) {
		t.Fatalf("after recovery: orphans %v", got)
	}
}

// TestScanFork: a root above the record that references an object the rules would collect
// (a fenced epoch's fragment) makes the stream undecided: nothing of it is collected.
func TestScanFork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	be := tiertest.StartBackends(ctx, t, false)
	env := tiertest.Env{Store: be.Store, Meta: be.Meta}
	claim(t, be.Meta, be.Store)
	v := &v3Stream{t: t, env: env, s: tiertest.Write(t, env, tiertest.Spec{Stream: "f", Seed: 8, Epoch: 2}), roots: map[uint64]manifest.Lineage{}}
	m := v.s.Manifest
	v.putRoot(manifest.Lineage{Seq: 1, Epoch: 2, UID: tiertest.UID(), ParentUID: v.s.Record.RootUID}, m)
	v.record(1, m)
	frag := manifest.Entry{FirstOffset: m.NextOffset, FirstTimestamp: m.FirstTimestamp + 1, LastTimestamp: m.FirstTimestamp + 2, Size: 10, UID: tiertest.UID()}
	fenced := manifest.FragmentKey(manifest.DefaultKeyPrefix, "f", frag.FirstOffset, 1, frag.UID) // epoch 1 < stored 2
	putAll(t, be.Store, fenced)
	edit, _ := manifest.AppendEdit(m, frag, m.NextOffset+10)
	m2, err := m.Apply(edit)
	if err != nil {
		t.Fatal(err)
	}
	v.putRoot(manifest.Lineage{Seq: 2, Epoch: 2, UID: tiertest.UID(), ParentSeq: 1, ParentUID: v.roots[1].UID}, m2)
	opts := gc.Options{Store: be.Store, Meta: be.Meta, Grace: gc.MinDeleteGrace, Now: func() time.Time { return time.Now().Add(2 * time.Hour) }}
	plan, err := gc.Scan(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Orphans) != 0 || len(plan.Undecided) == 0 || !strings.Contains(plan.Undecided[0].Reason, "fork") {
		t.Fatalf("fork: orphans %v undecided %+v", keysOf(plan.Orphans), plan.Undecided)
	}
}

// TestScanClaims: an empty etcd on a claimed bucket, and an etcd of another cluster, collect
// nothing at all; an empty etcd on an unclaimed bucket reports every prefix as unclaimed.
func TestScanClaims(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	be := tiertest.StartBackends(ctx, t, false)
	env := tiertest.Env{Store: be.Store, Meta: be.Meta}
	s := tiertest.Write(t, env, tiertest.Spec{Stream: "c", Seed: 9, Epoch: 1, RetainBytes: 20_000})
	later := func() time.Time { return time.Now().Add(2 * time.Hour) }

	// etcd lost before any claim: every prefix is unclaimed, nothing collected.
	empty := etcdtest.Store(t, etcdtest.Start(t))
	opts := gc.Options{Store: be.Store, Meta: empty, Grace: gc.MinDeleteGrace, Now: later}
	plan, err := gc.Scan(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Orphans)+len(plan.Young)+len(plan.Pending) != 0 || len(plan.Unclaimed) != len(s.Live)+len(s.Left) {
		t.Fatalf("empty etcd: orphans %d young %d pending %d unclaimed %d (want %d)", len(plan.Orphans), len(plan.Young), len(plan.Pending), len(plan.Unclaimed), len(s.Live)+len(s.Left))
	}

	// The bucket claimed by this cluster: an empty etcd, or another cluster's, is refused.
	claim(t, be.Meta, be.Store)
	if _, err := gc.Scan(ctx, opts); !errors.Is(err, gc.ErrClaimMismatch) || !strings.Contains(err.Error(), "node recover") {
		t.Fatalf("empty etcd on a claimed bucket: %v", err)
	}
	other := etcdtest.Store(t, etcdtest.Start(t))
	if _, _, _, err := other.CreateCluster(ctx, metadata.ClusterRecord{ClusterID: strings.Repeat("9", 32), Generation: 1, Claimed: true}); err != nil {
		t.Fatal(err)
	}
	oo := gc.Options{Store: be.Store, Meta: other, Grace: gc.MinDeleteGrace, Now: later}
	if _, err := gc.Scan(ctx, oo); !errors.Is(err, gc.ErrClaimMismatch) {
		t.Fatalf("another cluster's etcd: %v", err)
	}
	if _, err := gc.Delete(ctx, oo, gc.Plan{Grace: gc.MinDeleteGrace, Orphans: []gc.Orphan{{Key: s.Live[0], Stream: "c"}}}); !errors.Is(err, gc.ErrClaimMismatch) {
		t.Fatalf("delete from another cluster: %v", err)
	}
	for _, k := range append(slices.Clone(s.Live), s.Left...) {
		if !exists(t, be.Store, k) {
			t.Fatalf("%s deleted", k)
		}
	}
	// This cluster's own etcd still collects what retention left (the superseded root at
	// least; the dropped fragments are as young as the root, so pending).
	plan, err = gc.Scan(ctx, gc.Options{Store: be.Store, Meta: be.Meta, Grace: gc.MinDeleteGrace, Now: later})
	if err != nil || len(plan.Orphans) == 0 {
		t.Fatalf("own etcd: orphans %v, %v", keysOf(plan.Orphans), err)
	}
	for _, o := range plan.Orphans {
		if !slices.Contains(s.Left, o.Key) {
			t.Fatalf("own etcd: %s is not something retention left", o.Key)
		}
	}
}
