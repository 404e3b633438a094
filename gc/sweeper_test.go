package gc_test

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/gc"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/tiertest"
)

// TestSweepersTakeTurns runs automatic garbage collection in delete mode on two nodes that
// share one etcd and one bucket, sweeping every 10 ms while every listing is held 60 ms:
// without the lock their sweeps would overlap at once. The recorded sweep intervals never
// overlap, the node that finds the lock taken skips its round, and of the planted objects
// only the garbage past the grace period goes: the live manifest's objects, an uploaded
// fragment not yet persisted, pending uploads and garbage younger than the grace all stay.
func TestSweepersTakeTurns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	be := tiertest.StartBackends(ctx, t, true)
	etcd, meta, inj, store := be.Etcd, be.Meta, be.Faults, be.Store
	env := tiertest.Env{Store: store, Meta: meta}
	p := manifest.DefaultKeyPrefix
	const grace = gc.MinDeleteGrace
	if err := meta.DeleteStream(ctx, "gone"); err != nil { // a deleted stream's prefix is garbage
		t.Fatal(err)
	}

	// Live data with an upload not yet persisted (pending at the next offset), and old
	// garbage: a superseded root, a fenced writer's upload, a deleted stream's prefix.
	live := tiertest.Write(t, env, tiertest.Spec{Stream: "live", Seed: 1, Epoch: 2, Unpersisted: 1})
	next := live.Record.NextOffset
	oldGarbage := []string{
		manifest.RootKey(p, "live", 1, tiertest.UID()),
		manifest.FragmentKey(p, "live", next, 1, tiertest.UID()),
		manifest.FragmentKey(p, "gone", 0, 1, tiertest.UID()),
		manifest.RootKey(p, "gone", 1, tiertest.UID()),
	}
	pending := []string{live.Pending[0].Key, manifest.FragmentKey(p, "live", next+500, 2, tiertest.UID())}
	putAll(t, store, append(slices.Clone(oldGarbage), pending[1])...)
	lastModifiedTick() // the old garbage's LastModified is a second before the young one's
	young := []string{manifest.FragmentKey(p, "gone", 100, 1, tiertest.UID()), manifest.RootKey(p, "live", 1, tiertest.UID())}
	putAll(t, store, young...)
	// The store's clock, frozen just inside the grace period (and its margin) of the young
	// garbage: the old garbage, a second older, is past it.
	var youngest time.Time
	for _, k := range young {
		info, err := store.Head(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if youngest.IsZero() || info.LastModified.Before(youngest) {
			youngest = info.LastModified
		}
	}
	storeNow := youngest.Add(grace + gc.ClockMargin - time.Millisecond)

	inj.Add(s3test.Rule{Method: "GET", KeyRegexp: "^$", Fault: s3test.FaultDelay, Delay: 60 * time.Millisecond})
	var mu sync.Mutex
	var sweeps []gc.SweepResult
	var sweepers []*gc.Sweeper
	for _, node := range []string{"a", "b"} {
		s, err := gc.NewSweeper(gc.SweeperConfig{
			Options: gc.Options{Store: store, Meta: meta, Grace: grace, Now: func() time.Time { return storeNow }}, Interval: 10 * time.Millisecond, Mode: gc.ModeDelete,
			NodeID: node, LockTTL: 5 * time.Second, Log: zerolog.Nop(),
			Observe: func(r gc.SweepResult) {
				mu.Lock()
				sweeps = append(sweeps, r)
				mu.Unlock()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		sweepers = append(sweepers, s)
	}
	for _, s := range sweepers {
		s.Start(ctx)
	}
	// Sweep until several sweeps ran and a round found the lock taken (the store's clock is
	// frozen, so the young garbage stays young however long that takes).
	enough := func() bool {
		mu.Lock()
		defer mu.Unlock()
		ran, skipped := 0, 0
		for _, r := range sweeps {
			if r.Skipped {
				skipped++
			} else {
				ran++
			}
		}
		return ran >= 3 && skipped > 0
	}
	for !enough() && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond) // polls the recorded sweeps; not a synchronisation
	}
	for _, s := range sweepers {
		s.Stop()
	}

	var ran []gc.SweepResult
	skipped := 0
	for _, r := range sweeps {
		if r.Err != nil {
			t.Fatalf("sweep by %s failed: %v", r.Node, r.Err)
		}
		if r.Skipped {
			skipped++
			continue
		}
		ran = append(ran, r)
	}
	sort.Slice(ran, func(i, j int) bool { return ran[i].Started.Before(ran[j].Started) })
	for i := 1; i < len(ran); i++ {
		if ran[i].Started.Before(ran[i-1].Finished) {
			t.Fatalf("sweeps overlap: %s [%v, %v] and %s [%v, %v]", ran[i-1].Node, ran[i-1].Started.Format("15:04:05.000"), ran[i-1].Finished.Format("15:04:05.000"),
				ran[i].Node, ran[i].Started.Format("15:04:05.000"), ran[i].Finished.Format("15:04:05.000"))
		}
	}
	if len(ran) < 3 || skipped == 0 {
		t.Fatalf("%d sweeps ran and %d rounds were skipped: want several, and the lock contended", len(ran), skipped)
	}
	first := ran[0]
	if first.Orphans != len(oldGarbage) || first.Deleted != len(oldGarbage) || first.Young != len(young) || first.Pending != len(pending) {
		t.Fatalf("first sweep: %+v; want %d orphans deleted, %d young, %d pending", first, len(oldGarbage), len(young), len(pending))
	}
	for _, r := range ran[1:] {
		if r.Orphans != 0 || r.Deleted != 0 {
			t.Fatalf("a later sweep found orphans again: %+v", r)
		}
	}
	for _, k := range oldGarbage {
		if exists(t, store, k) {
			t.Errorf("garbage %s not deleted", k)
		}
	}
	for _, k := range append(append(slices.Clone(live.Live), pending...), young...) {
		if !exists(t, store, k) {
			t.Errorf("%s deleted: it is referenced, pending or younger than the grace period", k)
		}
	}
	refs, err := gc.References(ctx, store, p, "live", live.Record)
	if err != nil || len(refs) != len(live.Live) {
		t.Fatalf("the live manifest after the sweeps: %d references, %v", len(refs), err)
	}
	// The status adds it up.
	var total gc.SweeperStatus
	for _, s := range sweepers {
		st := s.Status()
		total.Sweeps += st.Sweeps
		total.SkippedLocked += st.SkippedLocked
		total.ObjectsDeleted += st.ObjectsDeleted
		if !st.Enabled || st.Mode != gc.ModeDelete || st.Grace != grace {
			t.Fatalf("status: %+v", st)
		}
	}
	if total.Sweeps != uint64(len(ran)) || total.SkippedLocked != uint64(skipped) || total.ObjectsDeleted != uint64(len(oldGarbage)) {
		t.Fatalf("status totals %+v; %d ran, %d skipped", total, len(ran), skipped)
	}
	// After the sweeps, nobody holds the lock.
	resp, err := etcd.Client().Get(ctx, meta.Prefix()+"/gc/lock", clientPrefix())
	if err != nil || resp.Count != 0 {
		t.Fatalf("lock keys left: %v %v", resp, err)
	}
}

// TestSweeperDryRun: in the default mode a sweep reports the orphans and deletes nothing.
func TestSweeperDryRun(t *testing.T) {
	ctx := context.Background()
	be := tiertest.StartBackends(ctx, t, false)
	meta, store := be.Meta, be.Store
	k := manifest.FragmentKey(manifest.DefaultKeyPrefix, "gone", 0, 1, tiertest.UID())
	putAll(t, store, k)
	if err := meta.DeleteStream(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	later := func() time.Time { return time.Now().Add(2 * time.Hour) }
	s, err := gc.NewSweeper(gc.SweeperConfig{Options: gc.Options{Store: store, Meta: meta, Now: later}, Interval: time.Hour, NodeID: "a",
		Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	r := s.SweepOnce(ctx)
	if r.Err != nil || r.Mode != gc.ModeDryRun || r.Orphans != 1 || r.Deleted != 0 || !exists(t, store, k) {
		t.Fatalf("dry run: %+v, exists %v", r, exists(t, store, k))
	}
	if st := s.Status(); st.Last == nil || st.Last.Orphans != 1 || st.OrphansFound != 1 || st.ObjectsDeleted != 0 {
		t.Fatalf("status: %+v", st)
	}
	for _, bad := range []gc.SweeperConfig{
		{Options: gc.Options{Store: store, Meta: meta}},
		{Options: gc.Options{Store: store, Meta: meta}, Interval: time.Second, Mode: "sometimes"},
		{Options: gc.Options{Store: store, Meta: meta, Stream: "s"}, Interval: time.Second},
		{Options: gc.Options{Store: store, Meta: meta, Grace: gc.MinDeleteGrace - time.Second}, Interval: time.Second, Mode: gc.ModeDelete},
		{Options: gc.Options{Store: store, Meta: meta}, Interval: time.Second, Mode: gc.ModeDelete},
	} {
		if _, err := gc.NewSweeper(bad); err == nil || !strings.Contains(err.Error(), "gc sweeper") {
			t.Errorf("%+v accepted: %v", bad, err)
		}
	}
}

func clientPrefix() clientv3.OpOption { return clientv3.WithPrefix() }

// TestSweepTimeout: a sweep that takes longer than its timeout (every listing held) stops
// and reports why, and the lock is free again for the next round.
func TestSweepTimeout(t *testing.T) {
	ctx := context.Background()
	be := tiertest.StartBackends(ctx, t, true)
	meta, inj, store := be.Meta, be.Faults, be.Store
	inj.Add(s3test.Rule{Method: "GET", KeyRegexp: "^$", Fault: s3test.FaultDelay, Delay: 5 * time.Second, Count: 1})
	s, err := gc.NewSweeper(gc.SweeperConfig{Options: gc.Options{Store: store, Meta: meta}, Interval: time.Hour, NodeID: "a",
		Timeout: 200 * time.Millisecond, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if r := s.SweepOnce(ctx); r.Err == nil || !strings.Contains(r.Err.Error(), "not done after 200ms") {
		t.Fatalf("sweep past its timeout: %+v", r)
	}
	if st := s.Status(); st.SweepErrors != 1 || st.Last == nil || st.Last.Err == nil {
		t.Fatalf("status: %+v", st)
	}
	if r := s.SweepOnce(ctx); r.Err != nil || r.Skipped {
		t.Fatalf("the next sweep: %+v", r)
	}
}
