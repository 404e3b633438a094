package metadata_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
)

// TestDeleteStreamWritesTombstone: a pending tombstone fences the stream, then one
// transaction deletes the stream's records and its placement and completes the tombstone, which records what they said; afterwards the stream
// can be neither anchored, nor persisted (at any revision), nor resolved.
func TestDeleteStreamWritesTombstone(t *testing.T) {
	e := etcdtest.Start(t)
	s := etcdtest.Store(t, e)
	cli := e.Client()
	ctx := testCtx(t, 10*time.Second)
	if err := s.Anchor(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutPlacement(ctx, metadata.Placement{Stream: "s1", Writer: "n1", Epoch: 3}); err != nil {
		t.Fatal(err)
	}
	mustPersist(t, ctx, s, "s1", 0, record(3, 10), metadata.PersistOK)
	mustPersist(t, ctx, s, "s1", 1, record(3, 25), metadata.PersistOK)
	if _, found, err := s.ReadTombstone(ctx, "s1"); err != nil || found {
		t.Fatalf("tombstone of a live stream: %v %v", found, err)
	}
	before := time.Now().Add(-time.Millisecond)
	if err := s.DeleteStream(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	after := time.Now()

	ts, found, err := s.ReadTombstone(ctx, "s1")
	if err != nil || !found {
		t.Fatalf("tombstone after the deletion: %v %v", found, err)
	}
	if ts.Stream != "s1" || ts.Revision != 2 || ts.Epoch != 3 || ts.NextOffset != 25 || ts.DeletedAt.Before(before) || ts.DeletedAt.After(after) {
		t.Fatalf("tombstone %+v, want s1 at revision 2, epoch 3, next 25, deleted in [%v, %v]", ts, before, after)
	}
	// Atomic: at the revision that completed the tombstone every record is gone, one
	// revision earlier (the fence) every record was there.
	tKey := metadata.TombstoneKey(s.Prefix(), "s1")
	resp, err := cli.Get(ctx, tKey)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("tombstone key: %v %v", resp, err)
	}
	rev := resp.Kvs[0].ModRevision
	if resp.Kvs[0].CreateRevision != rev-1 {
		t.Fatalf("tombstone created at %d, completed at %d: want the fence one revision before its completion", resp.Kvs[0].CreateRevision, rev)
	}
	keys := []string{metadata.AnchorKey(s.Prefix(), "s1"), metadata.ManifestKey(s.Prefix(), "s1"),
		metadata.EpochKey(s.Prefix(), "s1"), metadata.PlacementKey(s.Prefix(), "s1")}
	for _, k := range keys {
		for _, at := range []struct {
			rev  int64
			want int64
		}{{rev - 1, 1}, {rev, 0}} {
			r, err := cli.Get(ctx, k, clientv3.WithRev(at.rev), clientv3.WithCountOnly())
			if err != nil || r.Count != at.want {
				t.Fatalf("%s at revision %d: %d keys (%v), want %d: not deleted in the tombstone's transaction", k, at.rev, r.Count, err, at.want)
			}
		}
	}

	// Never anchored again.
	err = s.Anchor(ctx, "s1")
	var de *metadata.DeletedError
	if !errors.Is(err, metadata.ErrStreamDeleted) || !errors.As(err, &de) || de.Tombstone != ts || metadata.IsRetriable(err) {
		t.Fatalf("anchor of a deleted stream: %v (%+v), want a non-retriable DeletedError with the tombstone", err, de)
	}
	if !strings.Contains(err.Error(), "stream s1 was deleted at") {
		t.Fatalf("error %q does not say the stream was deleted", err)
	}
	// Never persisted again, whatever revision the writer expects.
	for _, rev := range []int64{0, 1, 2} {
		res := mustPersist(t, ctx, s, "s1", rev, record(4, 30), metadata.PersistDeleted)
		if res.Tombstone == nil || *res.Tombstone != ts {
			t.Fatalf("persist at revision %d: tombstone %+v, want %+v", rev, res.Tombstone, ts)
		}
	}
	// Resolution reports the deletion.
	if _, _, found, err := s.ReadForResolution(ctx, "s1"); !errors.As(err, &de) || found || de.Tombstone != ts {
		t.Fatalf("resolution of a deleted stream: found %v, %v", found, err)
	}
	r, err := cli.Get(ctx, metadata.StreamPrefix(s.Prefix(), "s1"), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || r.Count != 0 {
		t.Fatalf("%d records under the deleted stream (%v)", r.Count, err)
	}

	// Deleting again keeps the first tombstone.
	if err := s.DeleteStream(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	again, _, err := s.ReadTombstone(ctx, "s1")
	if err != nil || again != ts {
		t.Fatalf("tombstone after a second deletion: %+v %v, want %+v", again, err, ts)
	}
	// Another stream is untouched, and resolves normally.
	if _, _, found, err := s.ReadForResolution(ctx, "s10"); err != nil || found {
		t.Fatalf("resolution of a stream never seen: %v %v", found, err)
	}
}

// TestDeleteNeverPersistedStream: a stream anchored but never persisted gets a tombstone at
// revision 0, and a writer that was about to create its record is refused.
func TestDeleteNeverPersistedStream(t *testing.T) {
	_, s, ctx := anchored(t, 10*time.Second)
	if err := s.DeleteStream(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	ts, found, err := s.ReadTombstone(ctx, "s1")
	if err != nil || !found || ts.Revision != 0 || ts.Epoch != 0 || ts.NextOffset != 0 {
		t.Fatalf("tombstone %+v found %v (%v), want one at revision 0", ts, found, err)
	}
	mustPersist(t, ctx, s, "s1", 0, record(1, 10), metadata.PersistDeleted)
}

// TestDeleteStreamRacingPersists: a writer persists as fast as it can while the stream is
// deleted; the tombstone records exactly the writer's last successful persist.
func TestDeleteStreamRacingPersists(t *testing.T) {
	_, s, ctx := anchored(t, 30*time.Second)
	var (
		wg     sync.WaitGroup
		lastOK int64
		werr   error
	)
	started := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for rev := int64(0); ; rev++ {
			res, err := s.Persist(ctx, "s1", 2, rev, record(2, uint64(rev+1)))
			if err != nil {
				werr = err
				return
			}
			if res.Outcome != metadata.PersistOK {
				if res.Outcome != metadata.PersistDeleted {
					werr = errors.New("persist outcome " + res.Outcome.String())
				}
				return
			}
			lastOK = res.Revision
			if rev == 3 {
				close(started)
			}
		}
	}()
	<-started
	if err := s.DeleteStream(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if werr != nil {
		t.Fatal(werr)
	}
	ts, _, err := s.ReadTombstone(ctx, "s1")
	if err != nil || ts.Revision != lastOK || ts.NextOffset != uint64(lastOK) || ts.Epoch != 2 {
		t.Fatalf("tombstone %+v (%v), want the last persisted revision %d", ts, err, lastOK)
	}
}

// TestCorruptTombstoneStillDeletes: a tombstone whose value does not decode still marks the
// stream deleted (and the error says so, naming the key); it never reads as absent.
func TestCorruptTombstoneStillDeletes(t *testing.T) {
	e := etcdtest.Start(t)
	s := etcdtest.Store(t, e)
	ctx := testCtx(t, 10*time.Second)
	key := metadata.TombstoneKey(s.Prefix(), "s1")
	if _, err := e.Client().Put(ctx, key, `{"version":1}`); err != nil {
		t.Fatal(err)
	}
	checks := map[string]error{"Anchor": s.Anchor(ctx, "s1")}
	_, _, _, checks["ReadForResolution"] = s.ReadForResolution(ctx, "s1")
	for name, err := range checks {
		if !errors.Is(err, metadata.ErrStreamDeleted) || !errors.Is(err, metadata.ErrCorruptRecord) || !strings.Contains(err.Error(), key) {
			t.Errorf("%s with a corrupt tombstone: %v, want deleted and corrupt, naming %s", name, err, key)
		}
	}
	if ok, err := s.HasAnchor(ctx, "s1", true); err != nil || ok {
		t.Fatalf("a corrupt tombstone let the stream be anchored: %v %v", ok, err)
	}
	if _, found, err := s.ReadTombstone(ctx, "s1"); !found || !errors.Is(err, metadata.ErrCorruptRecord) {
		t.Fatalf("ReadTombstone of garbage: found %v, %v", found, err)
	}
	if err := s.DeleteStream(ctx, "s1"); err != nil {
		t.Fatalf("deleting a stream with a corrupt tombstone: %v", err)
	}
}

// TestInterruptedDeletionFencesAndCompletes: a deletion interrupted after its fence (a pending
// tombstone, the records still there) already refuses the writer, reads as deleted, and the
// next DeleteStream completes it with what the records said.
func TestInterruptedDeletionFencesAndCompletes(t *testing.T) {
	e, s, ctx := anchored(t, 10*time.Second)
	mustPersist(t, ctx, s, "s1", 0, record(3, 40), metadata.PersistOK)
	mustPersist(t, ctx, s, "s1", 1, record(3, 70), metadata.PersistOK)
	key := metadata.TombstoneKey(s.Prefix(), "s1")
	pending := `{"version":1,"stream":"s1","deletedAt":"2026-12-01T18:00:00.000Z","revision":0,"epoch":0,"nextOffset":0,"pending":true}`
	if _, err := e.Client().Put(ctx, key, pending); err != nil {
		t.Fatal(err)
	}
	mustPersist(t, ctx, s, "s1", 2, record(3, 90), metadata.PersistDeleted)
	if _, _, _, err := s.ReadForResolution(ctx, "s1"); !errors.Is(err, metadata.ErrStreamDeleted) || !strings.Contains(err.Error(), "being deleted") {
		t.Fatalf("resolution of a fenced stream: %v, want deleted (being deleted)", err)
	}
	if ts, _, err := s.ReadTombstone(ctx, "s1"); err != nil || !ts.Pending {
		t.Fatalf("tombstone of an interrupted deletion: %+v %v, want pending", ts, err)
	}
	if err := s.DeleteStream(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	ts, _, err := s.ReadTombstone(ctx, "s1")
	want := metadata.Tombstone{Stream: "s1", DeletedAt: ts.DeletedAt, Revision: 2, Epoch: 3, NextOffset: 70}
	if err != nil || ts != want || ts.DeletedAt.Format(time.RFC3339) != "2026-12-01T18:00:00Z" {
		t.Fatalf("completed tombstone %+v (%v), want %+v deleted at the fence's time", ts, err, want)
	}
	resp, err := e.Client().Get(ctx, metadata.StreamPrefix(s.Prefix(), "s1"), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("records left after completing the deletion: %v %v", resp.Count, err)
	}
}

// TestDeleteStreamMarkedOrder: the callback runs once the tombstone fences the writers and
// before the records go (where version 3 writes the deletion marker); its error stops the
// deletion with the stream fenced, and the next deletion completes it.
func TestDeleteStreamMarkedOrder(t *testing.T) {
	_, s, ctx := anchored(t, 10*time.Second)
	mustPersist(t, ctx, s, "s1", 0, record(1, 10), metadata.PersistOK)
	calls := 0
	fail := errors.New("marker PUT refused")
	err := s.DeleteStreamMarked(ctx, "s1", func(ctx context.Context) error {
		calls++
		if _, found, err := s.ReadTombstone(ctx, "s1"); err != nil || !found {
			t.Errorf("in the callback: tombstone found %t, %v", found, err)
		}
		if _, _, found, err := s.ReadManifest(ctx, "s1"); err != nil || !found {
			t.Errorf("in the callback: record found %t, %v", found, err)
		}
		return fail
	})
	if !errors.Is(err, fail) || calls != 1 {
		t.Fatalf("deletion with a failing callback: %v (%d calls)", err, calls)
	}
	mustPersist(t, ctx, s, "s1", 1, record(1, 20), metadata.PersistDeleted)
	if err := s.DeleteStreamMarked(ctx, "s1", func(context.Context) error { calls++; return nil }); err != nil || calls != 2 {
		t.Fatalf("second deletion: %v (%d calls)", err, calls)
	}
	if _, _, found, err := s.ReadManifest(ctx, "s1"); err != nil || found {
		t.Fatalf("after the deletion: record found %t, %v", found, err)
	}
}
