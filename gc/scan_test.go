package gc_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/gc"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/tiertest"
)

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

func keysOf(os []gc.Orphan) []string {
	var out []string
	for _, o := range os {
		out = append(out, o.Key)
	}
	return sorted(out)
}

func listAll(t *testing.T, store *s3io.Store, prefix string) []string {
	t.Helper()
	var keys []string
	if err := store.List(context.Background(), prefix, func(o s3io.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

func putAll(t *testing.T, store *s3io.Store, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if err := store.PutObject(context.Background(), k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
}

func exists(t *testing.T, store *s3io.Store, key string) bool {
	t.Helper()
	_, err := store.Head(context.Background(), key)
	if err != nil && !s3io.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// lastModifiedTick waits until the server's clock (LastModified has second resolution) is
// past everything written so far, so that what is written next is strictly newer.
func lastModifiedTick() { time.Sleep(1100 * time.Millisecond) }

// TestScanAndDelete writes streams by hand with known garbage (what retention dropped and
// the reaper never deleted, superseded roots, an upload of a fenced writer above the
// persisted next offset, a range uploaded again before the root, a deleted stream's
// prefix) and known pending objects (uploads at or above the persisted next offset at the
// current epoch, one with a version 1 key, a fragment below the next offset newer than the
// root), a corrupt root and a foreign key, in both key layouts. It checks that Scan names
// exactly the garbage and the pending objects, that the grace period and stream filter
// apply, that Delete removes exactly the garbage and never a pending object, and that a
// stream persisting meanwhile keeps its garbage until the next scan.
func TestScanAndDelete(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	be := tiertest.StartBackends(ctx, t, false)
	meta, store := be.Meta, be.Store
	env := tiertest.Env{Store: store, Meta: meta}
	p := manifest.DefaultKeyPrefix

	a := tiertest.Write(t, env, tiertest.Spec{Stream: "a", Seed: 1, Chunks: 60, Rebalance: 3, RetainBytes: 40_000})
	v := tiertest.Write(t, env, tiertest.Spec{Stream: "v", Seed: 4, Chunks: 60, Rebalance: 3, RetainBytes: 40_000, KeyVersion: 1})
	b := tiertest.Write(t, env, tiertest.Spec{Stream: "b", Seed: 2, Epoch: 2, Unpersisted: 1})
	c := tiertest.Write(t, env, tiertest.Spec{Stream: "c", Seed: 3})
	if len(a.Left) < 3 || len(v.Left) < 3 {
		t.Fatalf("streams a and v left only %d and %d objects behind: the fixture should drop fragments and a root", len(a.Left), len(v.Left))
	}
	if len(b.Pending) != 1 || b.Pending[0].Entry.FirstOffset != b.Record.NextOffset {
		t.Fatalf("b's pending upload: %+v, next %d", b.Pending, b.Record.NextOffset)
	}
	next := b.Record.NextOffset
	below := b.Manifest.Entries[1].FirstOffset
	bGarbage := []string{
		manifest.FragmentKey(p, "b", next, 1, tiertest.UID()),  // a fenced writer's
		manifest.RootKey(p, "b", 1, tiertest.UID()),            // superseded
		manifest.FragmentKey(p, "b", below, 2, tiertest.UID()), // uploaded again, before the root
		manifest.GroupKey(p, "b", manifest.KindGroup, 0, 1, tiertest.UID()),
	}
	bPending := []string{
		b.Pending[0].Key,
		manifest.FragmentKey(p, "b", next+100, 2, tiertest.UID()), // the current epoch's
		manifest.FragmentKey(p, "b", next+200, 3, tiertest.UID()), // a successor's, not persisted yet
		tiertest.ObjectKey(p, "b", manifest.Entry{FirstOffset: next + 300, UID: tiertest.UID()}, 0, 1),
	}
	gone := []string{
		manifest.FragmentKey(p, "gone", 0, 1, tiertest.UID()),
		manifest.FragmentKey(p, "gone", 100, 7, tiertest.UID()),
		manifest.RootKey(p, "gone", 1, tiertest.UID()),
	}
	foreign := p + "/README"
	putAll(t, store, append(append(slices.Clone(bGarbage), bPending[1:]...), append(gone, foreign)...)...)
	// c's root is corrupted in place: gc must keep all of c and say why.
	if err := store.PutObject(ctx, c.RootKey, []byte("OSIRgarbage")); err != nil {
		t.Fatal(err)
	}
	// Persist a, v and b again a second later, so that what they left behind is older than
	// the root their record names; b keeps its pending upload out of it.
	lastModifiedTick()
	tiertest.Persist(t, env, &a)
	tiertest.Persist(t, env, &v)
	pending := b.Pending
	b.Pending = nil
	tiertest.Persist(t, env, &b)
	b.Pending = pending
	// A range uploaded again after the root: it may still be on its way into the manifest.
	newer := manifest.FragmentKey(p, "b", below, 2, tiertest.UID())
	putAll(t, store, newer)
	bPending = append(bPending, newer)

	later := func() time.Time { return time.Now().Add(2 * time.Hour) }
	opts := gc.Options{Store: store, Meta: meta, Grace: gc.MinDeleteGrace, Now: later}
	plan, err := gc.Scan(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	// A prefix etcd knows nothing of (no anchor, marker or tombstone) is never collected.
	if got := keysOf(plan.Unclaimed); !slices.Equal(sorted(got), sorted(gone)) {
		t.Fatalf("unclaimed: got %v want %v", got, gone)
	}
	wantOrphans := sorted(slices.Concat(a.Left, v.Left, b.Left, bGarbage))
	if got := keysOf(plan.Orphans); !slices.Equal(got, wantOrphans) {
		t.Fatalf("orphans:\n got %v\nwant %v", got, wantOrphans)
	}
	if got := keysOf(plan.Pending); !slices.Equal(got, sorted(bPending)) {
		t.Fatalf("pending:\n got %v\nwant %v", got, sorted(bPending))
	}
	for _, o := range plan.Orphans {
		if strings.Contains(o.Key, "/v/") && !strings.Contains(o.Reason, "dropped by retention") && !strings.Contains(o.Reason, "superseded root") {
			t.Errorf("version 1 stream v: %s: %s", o.Key, o.Reason)
		}
	}
	if plan.Referenced != len(a.Live)+len(b.Live)+len(v.Live) {
		t.Fatalf("referenced %d, want %d", plan.Referenced, len(a.Live)+len(b.Live)+len(v.Live))
	}
	if len(plan.Undecided) != len(c.Live) {
		t.Fatalf("undecided %d, want every object of c (%d)", len(plan.Undecided), len(c.Live))
	}
	for _, u := range plan.Undecided {
		if u.Stream != "c" || !strings.Contains(u.Reason, c.RootKey) {
			t.Fatalf("undecided %+v: should be c's, naming its root", u)
		}
	}
	if !slices.Equal(plan.Foreign, []string{foreign}) {
		t.Fatalf("foreign %v", plan.Foreign)
	}

	// The grace period protects all the garbage just written; pending stays pending.
	young, err := gc.Scan(ctx, gc.Options{Store: store, Meta: meta, Grace: time.Hour})
	if err != nil || len(young.Orphans) != 0 || len(young.Young) != len(wantOrphans) || len(young.Pending) != len(bPending) {
		t.Fatalf("grace 1h: %d orphans %d young %d pending, %v", len(young.Orphans), len(young.Young), len(young.Pending), err)
	}

	// One stream only; an unknown one is an error.
	bOrphans := sorted(slices.Concat(b.Left, bGarbage))
	onlyB, err := gc.Scan(ctx, gc.Options{Store: store, Meta: meta, Stream: "b", Now: later})
	if err != nil || !slices.Equal(keysOf(onlyB.Orphans), bOrphans) || len(onlyB.Pending) != len(bPending) {
		t.Fatalf("stream b: %v, %d pending, %v", keysOf(onlyB.Orphans), len(onlyB.Pending), err)
	}
	if _, err := gc.Scan(ctx, gc.Options{Store: store, Meta: meta, Stream: "nope"}); !errors.Is(err, gc.ErrUnknownStream) {
		t.Fatalf("unknown stream: %v", err)
	}
	if _, err := gc.Scan(ctx, gc.Options{Store: store, Meta: meta, Stream: "../x"}); err == nil {
		t.Fatal("hostile stream id accepted")
	}

	// b persists again after the scan: its orphans are skipped, the others deleted.
	rec := b.Record
	if res, err := meta.Persist(ctx, "b", rec.Epoch, b.Revision, rec); err != nil || res.Outcome != metadata.PersistOK {
		t.Fatalf("re-persist b: %+v %v", res, err)
	}
	before := listAll(t, store, p+"/")
	res, err := gc.Delete(ctx, opts, plan)
	if err != nil {
		t.Fatal(err)
	}
	wantDeleted := sorted(slices.Concat(a.Left, v.Left))
	if !slices.Equal(sorted(res.Deleted), wantDeleted) || len(res.Failed) != 0 || !slices.Equal(keysOf(res.Skipped), bOrphans) {
		t.Fatalf("delete: deleted %v skipped %v failed %v; want deleted %v", res.Deleted, keysOf(res.Skipped), res.Failed, wantDeleted)
	}
	after := listAll(t, store, p+"/")
	if len(after) != len(before)-len(wantDeleted) {
		t.Fatalf("%d objects before, %d after, %d deleted", len(before), len(after), len(wantDeleted))
	}
	for _, k := range slices.Concat(a.Live, v.Live, bPending, gone) {
		if !slices.Contains(after, k) {
			t.Fatalf("referenced, pending or unclaimed %s is gone", k)
		}
	}

	// A fresh scan collects b's now, and then nothing is left but referenced and pending
	// objects.
	plan, err = gc.Scan(ctx, opts)
	if err != nil || !slices.Equal(keysOf(plan.Orphans), bOrphans) {
		t.Fatalf("second scan: %v, %v", keysOf(plan.Orphans), err)
	}
	if res, err = gc.Delete(ctx, opts, plan); err != nil || len(res.Deleted) != len(bOrphans) {
		t.Fatalf("second delete: %+v, %v", res, err)
	}
	if plan, err = gc.Scan(ctx, opts); err != nil || len(plan.Orphans) != 0 || !slices.Equal(keysOf(plan.Pending), sorted(bPending)) {
		t.Fatalf("third scan: %+v, pending %v, %v", plan.Orphans, keysOf(plan.Pending), err)
	}
}

// TestUnpersistedUploadSurvivesGC is the lost-fragment scenario as closely as gc alone
// allows: a manifest persisted at next offset N, a fragment uploaded at N by the writer at
// the current epoch, not yet persisted and older than the grace period; gc runs with
// --delete; then the writer's persist references the fragment. The fragment must still be
// there. Once a successor has persisted at a higher epoch, the same kind of upload by the
// fenced writer is collected.
func TestUnpersistedUploadSurvivesGC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	be := tiertest.StartBackends(ctx, t, false)
	meta, store := be.Meta, be.Store
	env := tiertest.Env{Store: store, Meta: meta}
	later := func() time.Time { return time.Now().Add(2 * time.Hour) }
	opts := gc.Options{Store: store, Meta: meta, Grace: time.Hour, Now: later}

	for _, version := range []int{2, 1} {
		id := fmt.Sprintf("s%d", version)
		s := tiertest.Write(t, env, tiertest.Spec{Stream: id, Seed: 5, Epoch: 3, Unpersisted: 1, KeyVersion: version})
		up := s.Pending[0]
		if up.Entry.FirstOffset != s.Record.NextOffset {
			t.Fatalf("the upload is at %d, the persisted next offset %d", up.Entry.FirstOffset, s.Record.NextOffset)
		}
		plan, err := gc.Scan(ctx, gc.Options{Store: store, Meta: meta, Stream: id, Grace: time.Hour, Now: later})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(keysOf(plan.Pending), []string{up.Key}) || len(plan.Orphans) != 0 {
			t.Fatalf("key version %d: pending %v, orphans %v", version, keysOf(plan.Pending), keysOf(plan.Orphans))
		}
		if res, err := gc.Delete(ctx, opts, plan); err != nil || len(res.Deleted) != 0 {
			t.Fatalf("delete: %+v %v", res, err)
		}
		tiertest.Persist(t, env, &s)
		if !exists(t, store, up.Key) {
			t.Fatalf("key version %d: the persisted manifest references %s, which gc deleted", version, up.Key)
		}
		if refs, err := gc.References(ctx, store, manifest.DefaultKeyPrefix, id, s.Record); err != nil || !refs[up.Key] {
			t.Fatalf("references after the persist: %v %v", refs, err)
		}
	}

	// A writer at epoch 3 uploads at its next offset; a successor at epoch 4 persists
	// (without it, as a writer that resolved the manifest does): the epoch 3 upload can
	// never be persisted, and goes once older than the grace period.
	s := tiertest.Write(t, env, tiertest.Spec{Stream: "fenced", Seed: 6, Epoch: 3, Unpersisted: 1})
	up := s.Pending[0]
	s.Pending, s.Epoch = nil, 4
	tiertest.Persist(t, env, &s)
	young, err := gc.Scan(ctx, gc.Options{Store: store, Meta: meta, Stream: "fenced", Grace: time.Hour})
	if err != nil || len(young.Orphans) != 0 || !slices.Contains(keysOf(young.Young), up.Key) {
		t.Fatalf("fenced upload within the grace period: orphans %v young %v, %v", keysOf(young.Orphans), keysOf(young.Young), err)
	}
	plan, err := gc.Scan(ctx, gc.Options{Store: store, Meta: meta, Stream: "fenced", Grace: time.Hour, Now: later})
	if err != nil || !slices.Contains(keysOf(plan.Orphans), up.Key) || len(plan.Pending) != 0 {
		t.Fatalf("fenced upload: orphans %v pending %v, %v", keysOf(plan.Orphans), keysOf(plan.Pending), err)
	}
	if res, err := gc.Delete(ctx, opts, plan); err != nil || !slices.Contains(res.Deleted, up.Key) {
		t.Fatalf("delete: %+v %v", res, err)
	}
	if exists(t, store, up.Key) {
		t.Fatalf("fenced upload %s not deleted", up.Key)
	}
}

// TestScanRereadsRecordWhenRootReplaced holds gc's GET of the root the manifest record names
// while the writer persists a new root and the reaper deletes the old one: the GET then
// finds nothing. gc must read the record again and decide on the new root, not give the
// stream up as undecided (what `node gc` on a busy node reported before).
func TestScanRereadsRecordWhenRootReplaced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	etcd := etcdtest.Start(t)
	meta := etcdtest.Store(t, etcd)
	srv := s3test.Start(t, s3test.Options{})
	direct, err := s3io.NewStore(ctx, srv.NewBucket(t))
	if err != nil {
		t.Fatal(err)
	}
	inj := s3test.NewInjector(t, srv)
	cfg := inj.Config()
	cfg.Bucket = direct.Bucket()
	viaInjector, err := s3io.NewStore(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	env := tiertest.Env{Store: direct, Meta: meta}
	s := tiertest.Write(t, env, tiertest.Spec{Stream: "busy", Seed: 7, Unpersisted: 1})
	oldRoot := s.RootKey

	hit := make(chan string, 4)
	inj.Add(s3test.Rule{Method: "GET", KeyRegexp: `/meta/root-.*\.manifest$`, Fault: s3test.FaultDelay, Delay: 2 * time.Second, Count: 1, Hit: hit})
	done := make(chan struct{})
	var plan gc.Plan
	var scanErr error
	go func() {
		defer close(done)
		plan, scanErr = gc.Scan(ctx, gc.Options{Store: viaInjector, Meta: meta, Stream: "busy"})
	}()
	select {
	case <-hit: // gc read the record and is fetching its root: persist meanwhile
	case <-ctx.Done():
		t.Fatal("gc never fetched the root")
	}
	tiertest.Persist(t, env, &s)
	if _, err := direct.DeleteObjects(ctx, []string{oldRoot}); err != nil {
		t.Fatal(err)
	}
	<-done
	if scanErr != nil {
		t.Fatal(scanErr)
	}
	if len(plan.Undecided) != 0 {
		t.Fatalf("gc gave the stream up: %v", plan.Undecided)
	}
	// Every listed object the new manifest references counts (its own root was written
	// after the listing): the fragment that was pending before is now referenced.
	if plan.Referenced != len(s.Live)-1 || len(plan.Pending) != 0 {
		t.Fatalf("gc saw %d referenced and %d pending objects, want %d and none (the new manifest references %d, its root unlisted)",
			plan.Referenced, len(plan.Pending), len(s.Live)-1, len(s.Live))
	}
}
