package gc_test

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"streamtier/gc"
	"streamtier/manifest"
	"streamtier/metadata"
	"streamtier/metadata/etcdtest"
	"streamtier/s3io"
	"streamtier/s3io/s3test"
	"streamtier/tiertest"
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

// TestScanAndDelete writes streams by hand with known garbage (what retention dropped and
// the reaper never deleted, a superseded root, uploads above the persisted next offset, a
// deleted stream's prefix, a corrupt root, a foreign key), then checks that Scan names
// exactly the garbage, that the grace period and stream filter apply, that Delete removes
// exactly the orphans, and that a stream persisting meanwhile keeps its orphans.
func TestScanAndDelete(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	etcd := etcdtest.Start(t)
	meta := etcdtest.Store(t, etcd)
	srv := s3test.Start(t, s3test.Options{})
	store, err := s3io.NewStore(ctx, srv.NewBucket(t))
	if err != nil {
		t.Fatal(err)
	}
	env := tiertest.Env{Store: store, Meta: meta}
	p := manifest.DefaultKeyPrefix

	a := tiertest.Write(t, env, tiertest.Spec{Stream: "a", Seed: 1, Chunks: 60, Rebalance: 3, RetainBytes: 40_000})
	b := tiertest.Write(t, env, tiertest.Spec{Stream: "b", Seed: 2})
	c := tiertest.Write(t, env, tiertest.Spec{Stream: "c", Seed: 3})
	if len(a.Left) < 3 {
		t.Fatalf("stream a left only %d objects behind: the fixture should drop fragments and a root", len(a.Left))
	}
	extra := []string{
		manifest.FragmentKey(p, "b", b.Record.NextOffset, tiertest.UID()),
		manifest.FragmentKey(p, "b", b.Record.NextOffset+100, tiertest.UID()),
		manifest.RootKey(p, "b", 1, tiertest.UID()),
		manifest.FragmentKey(p, "gone", 0, tiertest.UID()),
		manifest.RootKey(p, "gone", 1, tiertest.UID()),
	}
	foreign := p + "/README"
	for _, k := range append(slices.Clone(extra), foreign) {
		if err := store.PutObject(ctx, k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	// c's root is corrupted in place: gc must keep all of c and say why.
	if err := store.PutObject(ctx, c.RootKey, []byte("OSIRgarbage")); err != nil {
		t.Fatal(err)
	}
	opts := gc.Options{Store: store, Meta: meta}

	plan, err := gc.Scan(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	wantOrphans := sorted(append(slices.Clone(a.Left), extra...))
	if got := keysOf(plan.Orphans); !slices.Equal(got, wantOrphans) {
		t.Fatalf("orphans:\n got %v\nwant %v", got, wantOrphans)
	}
	if plan.Referenced != len(a.Live)+len(b.Live) {
		t.Fatalf("referenced %d, want %d", plan.Referenced, len(a.Live)+len(b.Live))
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

	// The grace period protects everything just written.
	young, err := gc.Scan(ctx, gc.Options{Store: store, Meta: meta, Grace: time.Hour})
	if err != nil || len(young.Orphans) != 0 || len(young.Young) != len(wantOrphans) {
		t.Fatalf("grace 1h: %d orphans %d young, %v", len(young.Orphans), len(young.Young), err)
	}

	// One stream only; an unknown one is an error.
	onlyB, err := gc.Scan(ctx, gc.Options{Store: store, Meta: meta, Stream: "b"})
	if err != nil || !slices.Equal(keysOf(onlyB.Orphans), sorted(extra[:3])) {
		t.Fatalf("stream b: %v, %v", keysOf(onlyB.Orphans), err)
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
	wantDeleted := sorted(append(slices.Clone(a.Left), extra[3:]...))
	if !slices.Equal(sorted(res.Deleted), wantDeleted) || len(res.Failed) != 0 || !slices.Equal(keysOf(res.Skipped), sorted(extra[:3])) {
		t.Fatalf("delete: deleted %v skipped %v failed %v; want deleted %v", res.Deleted, keysOf(res.Skipped), res.Failed, wantDeleted)
	}
	after := listAll(t, store, p+"/")
	if len(after) != len(before)-len(wantDeleted) {
		t.Fatalf("%d objects before, %d after, %d deleted", len(before), len(after), len(wantDeleted))
	}
	for _, k := range a.Live {
		if !slices.Contains(after, k) {
			t.Fatalf("referenced %s is gone", k)
		}
	}

	// A fresh scan collects b's now, and then nothing is left but referenced objects.
	plan, err = gc.Scan(ctx, opts)
	if err != nil || !slices.Equal(keysOf(plan.Orphans), sorted(extra[:3])) {
		t.Fatalf("second scan: %v, %v", keysOf(plan.Orphans), err)
	}
	if res, err = gc.Delete(ctx, opts, plan); err != nil || len(res.Deleted) != 3 {
		t.Fatalf("second delete: %+v, %v", res, err)
	}
	if plan, err = gc.Scan(ctx, opts); err != nil || len(plan.Orphans) != 0 {
		t.Fatalf("third scan: %+v, %v", plan.Orphans, err)
	}
}
