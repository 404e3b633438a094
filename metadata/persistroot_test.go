package metadata_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/metadata"
)

// claimedCluster anchors s1 and writes a claimed cluster record, as a node opens.
func claimedCluster(t *testing.T) (*metadata.Store, context.Context, metadata.ClusterRecord) {
	t.Helper()
	_, s, ctx := anchored(t, 30*time.Second)
	c := metadata.ClusterRecord{ClusterID: idA, Generation: 1, Claimed: true}
	if _, _, _, err := s.CreateCluster(ctx, c); err != nil {
		t.Fatal(err)
	}
	return s, ctx, c
}

func seqRecord(seq, epoch uint64) metadata.ManifestRecord {
	return metadata.ManifestRecord{Seq: seq, Epoch: epoch, RootUID: seq*100 + epoch, FirstOffset: 0, NextOffset: seq * 10, FirstTimestamp: -1}
}

func TestPersistRoot(t *testing.T) {
	s, ctx, c := claimedCluster(t)
	res, err := s.PersistRoot(ctx, "s1", metadata.RootPersist{WriterEpoch: 1, Record: seqRecord(1, 1), Cluster: c})
	if err != nil || res.Outcome != metadata.RootPersisted || res.Revision != 1 || res.StoredEpoch != 1 {
		t.Fatalf("first persist: %+v %v", res, err)
	}
	// The same attempt again (its reply was lost): persisted after all.
	res, err = s.PersistRoot(ctx, "s1", metadata.RootPersist{WriterEpoch: 1, Record: seqRecord(1, 1), Cluster: c})
	if err != nil || res.Outcome != metadata.RootPersisted {
		t.Fatalf("retried persist: %+v %v", res, err)
	}
	// Another writer at the same epoch expecting nothing: a conflict naming seq 1.
	res, err = s.PersistRoot(ctx, "s1", metadata.RootPersist{WriterEpoch: 1, Record: withUID(seqRecord(1, 1), 9), Cluster: c})
	if err != nil || res.Outcome != metadata.RootConflict || res.Stored.Seq != 1 || res.Revision != 1 {
		t.Fatalf("racing persist: %+v %v", res, err)
	}
	// Adoption of a root of a higher epoch: the stored epoch becomes the root's.
	res, err = s.PersistRoot(ctx, "s1", metadata.RootPersist{WriterEpoch: 1, Expected: 1, Record: seqRecord(2, 3), Cluster: c})
	if err != nil || res.Outcome != metadata.RootPersisted || res.StoredEpoch != 3 {
		t.Fatalf("adoption: %+v %v", res, err)
	}
	if e, _, _ := s.ReadEpoch(ctx, "s1"); e != 3 {
		t.Fatalf("stored epoch %d after adopting a root of epoch 3", e)
	}
	// The writer of epoch 1 is now fenced.
	res, err = s.PersistRoot(ctx, "s1", metadata.RootPersist{WriterEpoch: 1, Expected: 2, Record: seqRecord(3, 1), Cluster: c})
	if err != nil || res.Outcome != metadata.RootFenced || res.StoredEpoch != 3 {
		t.Fatalf("deposed writer: %+v %v", res, err)
	}
	// A takeover raises the generation: a node of the old one is refused, by name.
	_, rev, _, _ := s.ReadCluster(ctx)
	next := c
	next.Generation = 2
	if _, err := s.UpdateCluster(ctx, rev, next); err != nil {
		t.Fatal(err)
	}
	res, err = s.PersistRoot(ctx, "s1", metadata.RootPersist{WriterEpoch: 3, Expected: 2, Record: seqRecord(3, 3), Cluster: c})
	if err != nil || res.Outcome != metadata.RootClusterChanged || res.Cluster == nil || res.Cluster.Generation != 2 {
		t.Fatalf("old generation: %+v %v", res, err)
	}
	res, err = s.PersistRoot(ctx, "s1", metadata.RootPersist{WriterEpoch: 3, Expected: 2, Record: seqRecord(3, 3), Cluster: next})
	if err != nil || res.Outcome != metadata.RootPersisted {
		t.Fatalf("new generation: %+v %v", res, err)
	}
}

func withUID(r metadata.ManifestRecord, uid uint64) metadata.ManifestRecord {
	r.RootUID = uid
	return r
}

// Lost metadata is never "deleted": the anchor, the record or the cluster record gone
// without a tombstone is metadata_missing; a tombstone is deleted.
func TestPersistRootLostMetadata(t *testing.T) {
	for _, c := range []struct {
		name string
		drop func(prefix string) string
		want metadata.RootOutcome
	}{
		{"record", func(p string) string { return metadata.ManifestKey(p, "s1") }, metadata.RootMetadataMissing},
		{"anchor", func(p string) string { return metadata.AnchorKey(p, "s1") }, metadata.RootMetadataMissing},
		{"cluster", func(p string) string { return metadata.ClusterKey(p) }, metadata.RootMetadataMissing},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, ctx, cl := claimedCluster(t)
			if _, err := s.PersistRoot(ctx, "s1", metadata.RootPersist{WriterEpoch: 1, Record: seqRecord(1, 1), Cluster: cl}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Client().Delete(ctx, c.drop(s.Prefix())); err != nil {
				t.Fatal(err)
			}
			res, err := s.PersistRoot(ctx, "s1", metadata.RootPersist{WriterEpoch: 1, Expected: 1, Record: seqRecord(2, 1), Cluster: cl})
			if err != nil || res.Outcome != c.want {
				t.Fatalf("%+v %v, want %v", res, err, c.want)
			}
		})
	}
	t.Run("tombstone", func(t *testing.T) {
		s, ctx, cl := claimedCluster(t)
		if _, err := s.Client().Put(ctx, metadata.TombstoneKey(s.Prefix(), "s1"), "x"); err != nil {
			t.Fatal(err)
		}
		res, err := s.PersistRoot(ctx, "s1", metadata.RootPersist{WriterEpoch: 1, Record: seqRecord(1, 1), Cluster: cl})
		if err != nil || res.Outcome != metadata.RootDeleted {
			t.Fatalf("%+v %v", res, err)
		}
	})
}

func TestPersistRootRefusesBadInput(t *testing.T) {
	s, ctx, c := claimedCluster(t)
	for _, p := range []metadata.RootPersist{
		{WriterEpoch: 1, Record: metadata.ManifestRecord{Epoch: 1, RootUID: 1}, Cluster: c}, // seq 0
		{WriterEpoch: 0, Record: seqRecord(1, 1), Cluster: c},
		{WriterEpoch: 1, Expected: -1, Record: seqRecord(1, 1), Cluster: c},
		{WriterEpoch: 1, Record: seqRecord(1, 1)}, // no cluster
	} {
		if _, err := s.PersistRoot(ctx, "s1", p); !errors.Is(err, metadata.ErrInvalidArgument) {
			t.Errorf("%+v: %v", p, err)
		}
	}
}

// Recovery writes the records from the bucket conditional on what it read, and refuses
// when etcd changed meanwhile (a live writer persisted).
func TestRecoverRecords(t *testing.T) {
	s, ctx, c := claimedCluster(t)
	rec, _, anchor, tomb, read, err := s.ReadForRecovery(ctx, "s2")
	if err != nil || rec != nil || anchor || tomb {
		t.Fatalf("an unknown stream: %v %v %v %v", rec, anchor, tomb, err)
	}
	if err := s.RecoverRecords(ctx, "s2", read, seqRecord(4, 2), 2); err != nil {
		t.Fatal(err)
	}
	got, rev, found, err := s.ReadManifest(ctx, "s2")
	if err != nil || !found || got != seqRecord(4, 2) || rev != 1 {
		t.Fatalf("recovered record %+v rev %d %v %v", got, rev, found, err)
	}
	if ok, _ := s.HasAnchor(ctx, "s2", true); !ok {
		t.Fatal("no anchor after recovery")
	}
	// A writer resumes on it.
	if res, err := s.PersistRoot(ctx, "s2", metadata.RootPersist{WriterEpoch: 2, Expected: 1, Record: seqRecord(5, 2), Cluster: c}); err != nil || res.Outcome != metadata.RootPersisted {
		t.Fatalf("resume after recovery: %+v %v", res, err)
	}
	// A recovery that read before that persist is refused.
	if err := s.RecoverRecords(ctx, "s2", read, seqRecord(4, 2), 2); !errors.Is(err, metadata.ErrRecoveryRace) {
		t.Fatalf("stale recovery: %v", err)
	}
	// A tombstone blocks recovery whatever was read.
	if _, err := s.Client().Put(ctx, metadata.TombstoneKey(s.Prefix(), "s3"), "x", clientv3.WithPrevKV()); err != nil {
		t.Fatal(err)
	}
	if err := s.RecoverRecords(ctx, "s3", metadata.RecoveryRead{}, seqRecord(1, 1), 1); !errors.Is(err, metadata.ErrRecoveryRace) {
		t.Fatalf("recovery over a tombstone: %v", err)
	}
}
