package claim_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/streamtier/streamtier/claim"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func store(t *testing.T, cfg s3io.Config) *s3io.Store {
	t.Helper()
	s, err := s3io.NewStore(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOpen walks the claim's cases on a real etcd and versitygw: a new cluster, a second
// node, a node of a wiped etcd, a second cluster, a creation that crashed, an upgrade from
// version 2, another cluster's unclaimed prefix, and a store without conditional creates.
func TestOpen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := s3test.Start(t, s3test.Options{})
	st := store(t, srv.Config())
	meta := etcdtest.Store(t, etcdtest.Start(t))

	rec, err := claim.Open(ctx, claim.Options{Store: st, Meta: meta})
	if err != nil || !rec.Claimed || rec.Generation != 1 {
		t.Fatalf("a new cluster: %+v %v", rec, err)
	}
	c, found, err := st.ReadClaim(ctx, manifest.DefaultKeyPrefix)
	if err != nil || !found || c.ClusterID != rec.ClusterID || c.EtcdPrefix != meta.Prefix() {
		t.Fatalf("the bucket's claim: %+v %v %v", c, found, err)
	}
	again, err := claim.Open(ctx, claim.Options{Store: st, Meta: meta})
	if err != nil || again != rec {
		t.Fatalf("a second node: %+v %v", again, err)
	}
	if err := claim.Check(ctx, claim.Options{Store: st, Meta: meta}, rec); err != nil {
		t.Fatal(err)
	}

	// etcd wiped (a new empty one at the same place): refused, naming node recover.
	wiped := etcdtest.Store(t, etcdtest.Start(t))
	_, err = claim.Open(ctx, claim.Options{Store: st, Meta: wiped})
	if !errors.Is(err, claim.ErrRefused) || !strings.Contains(err.Error(), "node recover") || !strings.Contains(err.Error(), rec.ClusterID) {
		t.Fatalf("a wiped etcd: %v", err)
	}
	if err := claim.Check(ctx, claim.Options{Store: st, Meta: wiped}, rec); !errors.Is(err, claim.ErrChanged) {
		t.Fatalf("check on a wiped etcd: %v", err)
	}

	// A second cluster with its own claimed record: refused, naming both ids.
	other := etcdtest.Store(t, etcdtest.Start(t))
	otherID := strings.Repeat("7", 32)
	if _, _, _, err := other.CreateCluster(ctx, metadata.ClusterRecord{ClusterID: otherID, Generation: 1, Claimed: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := claim.Open(ctx, claim.Options{Store: st, Meta: other}); !errors.Is(err, claim.ErrRefused) || !strings.Contains(err.Error(), otherID) || !strings.Contains(err.Error(), rec.ClusterID) {
		t.Fatalf("a second cluster: %v", err)
	}

	// Another cluster took the key prefix over: it rewrote the bucket's claim, and cannot
	// reach this cluster's etcd, which still holds the record the node opened with.
	c, _, err = st.ReadClaim(ctx, manifest.DefaultKeyPrefix)
	if err != nil {
		t.Fatal(err)
	}
	taken := c
	taken.ClusterID, taken.Generation, taken.EtcdPrefix = otherID, 2, "/other"
	if err := st.ReplaceClaim(ctx, manifest.DefaultKeyPrefix, c, taken); err != nil {
		t.Fatal(err)
	}
	if err := claim.Check(ctx, claim.Options{Store: st, Meta: meta}, rec); !errors.Is(err, claim.ErrChanged) || !strings.Contains(err.Error(), otherID) || !strings.Contains(err.Error(), "took the key prefix over") {
		t.Fatalf("check after another cluster's takeover of the bucket: %v", err)
	}
	back, _, err := st.ReadClaim(ctx, manifest.DefaultKeyPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.ReplaceClaim(ctx, manifest.DefaultKeyPrefix, back, c); err != nil {
		t.Fatal(err)
	}
	if err := claim.Check(ctx, claim.Options{Store: st, Meta: meta}, rec); err != nil {
		t.Fatalf("check with the claim put back: %v", err)
	}

	// A takeover raised the generation: the old record is fenced.
	_, rev, _, _ := meta.ReadCluster(ctx)
	next := rec
	next.Generation = 2
	if _, err := meta.UpdateCluster(ctx, rev, next); err != nil {
		t.Fatal(err)
	}
	if err := claim.Check(ctx, claim.Options{Store: st, Meta: meta}, rec); !errors.Is(err, claim.ErrChanged) || !strings.Contains(err.Error(), "generation 2") {
		t.Fatalf("check after a takeover: %v", err)
	}
}

func TestOpenCompletesACrashedCreation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := s3test.Start(t, s3test.Options{})
	st := store(t, srv.Config())
	meta := etcdtest.Store(t, etcdtest.Start(t))
	id := strings.Repeat("3c", 16)
	if _, _, _, err := meta.CreateCluster(ctx, metadata.ClusterRecord{ClusterID: id, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	rec, err := claim.Open(ctx, claim.Options{Store: st, Meta: meta})
	if err != nil || rec.ClusterID != id || !rec.Claimed {
		t.Fatalf("completion: %+v %v", rec, err)
	}
	if c, found, _ := st.ReadClaim(ctx, manifest.DefaultKeyPrefix); !found || c.ClusterID != id {
		t.Fatalf("claim after completion: %+v", c)
	}
}

func TestOpenUpgradeAndForeignPrefix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := s3test.Start(t, s3test.Options{})
	st := store(t, srv.Config())
	meta := etcdtest.Store(t, etcdtest.Start(t))
	p := manifest.DefaultKeyPrefix
	if err := st.PutObject(ctx, manifest.FragmentKey(p, "s1", 0, 1, 7), []byte("x")); err != nil {
		t.Fatal(err)
	}
	// Another cluster's prefix (no anchor here): refused, naming the stream.
	if _, err := claim.Open(ctx, claim.Options{Store: st, Meta: meta}); !errors.Is(err, claim.ErrRefused) || !strings.Contains(err.Error(), "s1") {
		t.Fatalf("an unanchored prefix: %v", err)
	}
	// This cluster's version 2 prefix (anchored): an upgrade, claimed now.
	if err := meta.Anchor(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if rec, err := claim.Open(ctx, claim.Options{Store: st, Meta: meta}); err != nil || !rec.Claimed {
		t.Fatalf("an upgrade: %+v %v", rec, err)
	}
}

func TestOpenRefusesAStoreWithoutConditionalCreates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := s3test.Start(t, s3test.Options{})
	inj := s3test.NewInjector(t, srv)
	inj.Add(s3test.Rule{Method: "PUT", Fault: s3test.FaultIgnoreConditions})
	st := store(t, inj.Config())
	meta := etcdtest.Store(t, etcdtest.Start(t))
	if _, err := claim.Open(ctx, claim.Options{Store: st, Meta: meta}); !errors.Is(err, s3io.ErrNoConditionalCreate) {
		t.Fatalf("%v", err)
	}
	if _, _, found, _ := meta.ReadCluster(ctx); found {
		t.Fatal("a cluster record was created on a refused store")
	}
}
