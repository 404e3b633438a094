package metadata_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"pgregory.net/rapid"

	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
)

// record is a manifest record of a root written at epoch, with a fresh uid.
func record(epoch, next uint64) metadata.ManifestRecord {
	return metadata.ManifestRecord{Epoch: epoch, RootUID: rand.Uint64(), FirstOffset: 0, NextOffset: next, TotalSize: next * 10, FirstTimestamp: -1}
}

func mustPersist(t *testing.T, ctx context.Context, s *metadata.Store, stream string, rev int64, rec metadata.ManifestRecord, want metadata.PersistOutcome) metadata.PersistResult {
	t.Helper()
	res, err := s.Persist(ctx, stream, rec.Epoch, rev, rec)
	if err != nil {
		t.Fatalf("persist %s epoch %d at revision %d: %v", stream, rec.Epoch, rev, err)
	}
	if res.Outcome != want {
		t.Fatalf("persist %s epoch %d at revision %d: %v (%+v), want %v", stream, rec.Epoch, rev, res.Outcome, res, want)
	}
	return res
}

func TestPersistCreateAndAgain(t *testing.T) {
	e := etcdtest.Start(t)
	s := etcdtest.Store(t, e)
	ctx := testCtx(t, 10*time.Second)
	if _, _, found, err := s.ReadManifest(ctx, "s1"); err != nil || found {
		t.Fatalf("ReadManifest before any persist: found %v, %v", found, err)
	}
	if err := s.Anchor(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	rev := int64(0)
	for i := uint64(1); i <= 4; i++ {
		rec := record(3, i*100)
		res := mustPersist(t, ctx, s, "s1", rev, rec, metadata.PersistOK)
		if res.Revision != rev+1 || res.StoredEpoch != 3 {
			t.Fatalf("persist %d: %+v, want revision %d epoch 3", i, res, rev+1)
		}
		rev = res.Revision
		got, gotRev, found, err := s.ReadManifest(ctx, "s1")
		if err != nil || !found || got != rec || gotRev != rev {
			t.Fatalf("ReadManifest = %+v rev %d found %v err %v; want %+v rev %d", got, gotRev, found, err, rec, rev)
		}
		if _, v, ep, _ := readBoth(t, ctx, e.Client(), s, "s1"); v != rev || ep != 3 {
			t.Fatalf("stored version %d epoch %d", v, ep)
		}
	}
	resp, err := e.Client().Get(ctx, metadata.EpochKey(s.Prefix(), "s1"))
	if err != nil || string(resp.Kvs[0].Value) != "00000000000000000003" {
		t.Fatalf("epoch key holds %q (%v), want 20 zero-padded digits", resp.Kvs[0].Value, err)
	}
}

func TestPersistConflictFromSecondWriter(t *testing.T) {
	e := etcdtest.Start(t)
	s := etcdtest.Store(t, e)
	ctx := testCtx(t, 10*time.Second)
	for _, tc := range []struct {
		name   string
		epochB uint64
	}{{"same epoch", 3}, {"higher epoch", 4}} {
		t.Run(tc.name, func(t *testing.T) {
			stream := fmt.Sprintf("s-%d", tc.epochB)
			if err := s.Anchor(ctx, stream); err != nil {
				t.Fatal(err)
			}
			// Writer A persists; writer B resolves (reads revision 1) and persists on top.
			mustPersist(t, ctx, s, stream, 0, record(3, 10), metadata.PersistOK)
			_, revB, _, err := s.ReadManifest(ctx, stream)
			if err != nil || revB != 1 {
				t.Fatalf("B resolves revision %d, %v", revB, err)
			}
			recB := record(tc.epochB, 20)
			mustPersist(t, ctx, s, stream, revB, recB, metadata.PersistOK)
			// A still believes revision 1: conflict, and the read-back says what is stored.
			res := mustPersist(t, ctx, s, stream, 1, record(3, 30), metadata.PersistConflict)
			if res.Revision != 2 || res.StoredEpoch != tc.epochB || res.Stored != recB {
				t.Fatalf("conflict result %+v, want revision 2, epoch %d, B's record %+v", res, tc.epochB, recB)
			}
			if got, _, _, _ := s.ReadManifest(ctx, stream); got != recB {
				t.Fatalf("a conflicting persist changed the record to %+v", got)
			}
		})
	}
}

func TestEpochFencing(t *testing.T) {
	_, s, ctx := anchored(t, 10*time.Second)
	mustPersist(t, ctx, s, "s1", 0, record(3, 10), metadata.PersistOK)
	high := record(9, 20)
	mustPersist(t, ctx, s, "s1", 1, high, metadata.PersistOK)
	// The deposed writer, even knowing the current revision, can never persist again.
	for rev := int64(0); rev <= 3; rev++ {
		res := mustPersist(t, ctx, s, "s1", rev, record(3, 30), metadata.PersistConflict)
		if res.StoredEpoch != 9 {
			t.Fatalf("fenced persist reports stored epoch %d, want 9", res.StoredEpoch)
		}
	}
	if got, rev, _, _ := s.ReadManifest(ctx, "s1"); got != high || rev != 2 {
		t.Fatalf("record after fenced attempts: %+v rev %d; want %+v rev 2", got, rev, high)
	}
	// The higher epoch goes on; a still higher one takes over.
	mustPersist(t, ctx, s, "s1", 2, record(9, 40), metadata.PersistOK)
	mustPersist(t, ctx, s, "s1", 3, record(10, 50), metadata.PersistOK)
	mustPersist(t, ctx, s, "s1", 4, record(9, 60), metadata.PersistConflict)
}

func TestPersistNotFoundAfterDelete(t *testing.T) {
	e, s, ctx := anchored(t, 10*time.Second)
	if err := s.PutPlacement(ctx, metadata.Placement{Stream: "s1", Writer: "n1", Epoch: 3}); err != nil {
		t.Fatal(err)
	}
	mustPersist(t, ctx, s, "s1", 0, record(3, 10), metadata.PersistOK)
	if err := s.DeleteStream(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	// The tombstone says deleted, to the writer that persisted and to one that never did.
	res := mustPersist(t, ctx, s, "s1", 1, record(3, 20), metadata.PersistDeleted)
	if res.Tombstone == nil || res.Tombstone.Revision != 1 || res.Tombstone.Epoch != 3 || res.Tombstone.NextOffset != 10 {
		t.Fatalf("deleted persist's tombstone: %+v", res.Tombstone)
	}
	mustPersist(t, ctx, s, "s1", 0, record(3, 20), metadata.PersistDeleted)
	resp, err := e.Client().Get(ctx, metadata.StreamPrefix(s.Prefix(), "s1"), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("%d records left under the deleted stream (%v)", resp.Count, err)
	}
	if _, found, err := s.GetPlacement(ctx, "s1"); err != nil || found {
		t.Fatalf("placement survived the deletion: %v %v", found, err)
	}
	if ok, err := s.HasAnchor(ctx, "s1", true); err != nil || ok {
		t.Fatalf("anchor survived the deletion: %v %v", ok, err)
	}
}

func TestPersistUnanchoredIsNotFound(t *testing.T) {
	e := etcdtest.Start(t)
	s := etcdtest.Store(t, e)
	ctx := testCtx(t, 10*time.Second)
	mustPersist(t, ctx, s, "never-anchored", 0, record(1, 10), metadata.PersistNotFound)
	if _, _, found, _ := s.ReadManifest(ctx, "never-anchored"); found {
		t.Fatal("an unanchored persist wrote a record")
	}
}

// TestPersistRetryOfAppliedAttemptIsOK: a persist whose reply was lost is retried with the same
// arguments; it must report OK (the stored record is its own), never a conflict.
func TestPersistRetryOfAppliedAttemptIsOK(t *testing.T) {
	_, s, ctx := anchored(t, 10*time.Second)
	rec1 := record(2, 10)
	mustPersist(t, ctx, s, "s1", 0, rec1, metadata.PersistOK)
	if res := mustPersist(t, ctx, s, "s1", 0, rec1, metadata.PersistOK); res.Revision != 1 {
		t.Fatalf("retried first persist: revision %d, want 1", res.Revision)
	}
	rec2 := record(2, 20)
	mustPersist(t, ctx, s, "s1", 1, rec2, metadata.PersistOK)
	if res := mustPersist(t, ctx, s, "s1", 1, rec2, metadata.PersistOK); res.Revision != 2 {
		t.Fatalf("retried persist: revision %d, want 2", res.Revision)
	}
	// A different record at the same revision is someone else: conflict.
	mustPersist(t, ctx, s, "s1", 1, record(2, 20), metadata.PersistConflict)
	// Once another persist followed, the old retry is a conflict too.
	mustPersist(t, ctx, s, "s1", 2, record(2, 30), metadata.PersistOK)
	mustPersist(t, ctx, s, "s1", 1, rec2, metadata.PersistConflict)
}

// TestFirstPersistRace: writers racing to create the record; exactly one wins each round.
func TestFirstPersistRace(t *testing.T) {
	e := etcdtest.Start(t)
	s := etcdtest.Store(t, e)
	ctx := testCtx(t, 60*time.Second)
	const rounds, writers = 40, 4
	for round := range rounds {
		stream := fmt.Sprintf("race-%d", round)
		if err := s.Anchor(ctx, stream); err != nil {
			t.Fatal(err)
		}
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			recs    [writers]metadata.ManifestRecord
			results [writers]metadata.PersistResult
			errs    [writers]error
		)
		for w := range writers {
			recs[w] = record(uint64(1+w%2), uint64(w+1))
			wg.Go(func() {
				<-start
				results[w], errs[w] = s.Persist(ctx, stream, recs[w].Epoch, 0, recs[w])
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for w := range writers {
			if errs[w] != nil {
				t.Fatalf("round %d writer %d: %v", round, w, errs[w])
			}
			if results[w].Outcome == metadata.PersistOK {
				if winner >= 0 {
					t.Fatalf("round %d: writers %d and %d both created the record", round, winner, w)
				}
				winner = w
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody won: %+v", round, results)
		}
		for w := range writers {
			if w == winner {
				continue
			}
			r := results[w]
			if r.Outcome != metadata.PersistConflict || r.Stored != recs[winner] || r.Revision != 1 {
				t.Fatalf("round %d loser %d: %+v, want conflict naming the winner's record", round, w, r)
			}
		}
		if got, rev, _, _ := s.ReadManifest(ctx, stream); got != recs[winner] || rev != 1 {
			t.Fatalf("round %d: stored %+v rev %d, want the winner's at revision 1", round, got, rev)
		}
	}
}

func TestPersistBadInput(t *testing.T) {
	e := etcdtest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	cli.Close() // refused before I/O, so a closed client is never reached
	s := metadata.NewStore(cli, "")
	ctx := testCtx(t, 5*time.Second)
	for _, tc := range []struct {
		name  string
		epoch uint64
		rev   int64
		rec   metadata.ManifestRecord
	}{
		{"record of another epoch", 3, 0, metadata.ManifestRecord{Epoch: 2, FirstTimestamp: -1}},
		{"negative revision", 3, -1, metadata.ManifestRecord{Epoch: 3, FirstTimestamp: -1}},
		{"first above next", 3, 0, metadata.ManifestRecord{Epoch: 3, FirstOffset: 5, NextOffset: 4, FirstTimestamp: -1}},
		{"timestamp below -1", 3, 0, metadata.ManifestRecord{Epoch: 3, FirstTimestamp: -7}},
	} {
		_, err := s.Persist(ctx, "s1", tc.epoch, tc.rev, tc.rec)
		if !errors.Is(err, metadata.ErrInvalidArgument) || metadata.IsRetriable(err) {
			t.Errorf("%s: %v, want a non-retriable ErrInvalidArgument", tc.name, err)
		}
	}
}

func TestPersistGarbageEpoch(t *testing.T) {
	e, s, ctx := anchored(t, 10*time.Second)
	mustPersist(t, ctx, s, "s1", 0, record(3, 10), metadata.PersistOK)
	key := metadata.EpochKey(s.Prefix(), "s1")
	if _, err := e.Client().Put(ctx, key, "three"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Persist(ctx, "s1", 3, 1, record(3, 20))
	if !errors.Is(err, metadata.ErrCorruptRecord) || metadata.IsRetriable(err) {
		t.Fatalf("persist over a garbage epoch: %v, want a non-retriable corrupt record error", err)
	}
}

// TestPersistModel drives random persists, deletions and anchors against the real etcd and
// checks each outcome against a model: OK exactly when the stream is anchored, the revision
// matches and the epoch is not below the stored one; Deleted once the stream was deleted (and
// anchoring is then refused); NotFound when the records are otherwise missing; and the stored
// epoch never decreases.
func TestPersistModel(t *testing.T) {
	e := etcdtest.Start(t)
	s := etcdtest.Store(t, e)
	ctx := testCtx(t, 60*time.Second)
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		stream := fmt.Sprintf("model-%d", n)
		var (
			anchored bool
			deleted  bool
			version  int64 // 0: no record
			epoch    uint64
			stored   metadata.ManifestRecord
		)
		for range rapid.IntRange(1, 25).Draw(rt, "steps") {
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0:
				err := s.Anchor(ctx, stream)
				if deleted != errors.Is(err, metadata.ErrStreamDeleted) || (!deleted && err != nil) {
					rt.Fatalf("anchor (deleted %v): %v", deleted, err)
				}
				anchored = !deleted
			case 1:
				if err := s.DeleteStream(ctx, stream); err != nil {
					rt.Fatal(err)
				}
				anchored, deleted, version, epoch, stored = false, true, 0, 0, metadata.ManifestRecord{}
			default:
				we := rapid.Uint64Range(1, 4).Draw(rt, "epoch")
				rev := max(0, version+int64(rapid.IntRange(-2, 1).Draw(rt, "revDelta")))
				rec := record(we, uint64(rapid.IntRange(0, 100).Draw(rt, "next")))
				res, err := s.Persist(ctx, stream, we, rev, rec)
				if err != nil {
					rt.Fatal(err)
				}
				var want metadata.PersistOutcome
				switch {
				case deleted:
					want = metadata.PersistDeleted
				case !anchored || (rev > 0 && version == 0):
					want = metadata.PersistNotFound
				case rev == version && we >= epoch:
					want = metadata.PersistOK
				default:
					want = metadata.PersistConflict
				}
				if res.Outcome != want {
					rt.Fatalf("persist epoch %d rev %d over (anchored %v, version %d, epoch %d): %v, want %v", we, rev, anchored, version, epoch, res.Outcome, want)
				}
				switch want {
				case metadata.PersistOK:
					if we < epoch {
						rt.Fatalf("stored epoch would decrease from %d to %d", epoch, we)
					}
					version, epoch, stored = version+1, we, rec
					if res.Revision != version {
						rt.Fatalf("revision %d, want %d", res.Revision, version)
					}
				case metadata.PersistConflict:
					if res.Revision != version || res.StoredEpoch != epoch || res.Stored != stored {
						rt.Fatalf("conflict %+v, model (version %d, epoch %d, %+v)", res, version, epoch, stored)
					}
				}
			}
			got, v, found, err := s.ReadManifest(ctx, stream)
			if err != nil || found != (version > 0) || v != version || got != stored {
				rt.Fatalf("stored %+v v%d found %v (%v), model %+v v%d", got, v, found, err, stored, version)
			}
		}
	})
}
