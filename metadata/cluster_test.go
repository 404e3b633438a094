package metadata_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
)

var (
	idA = strings.Repeat("a1", 16)
	idB = strings.Repeat("b2", 16)
)

func TestClusterRecord(t *testing.T) {
	e := etcdtest.Start(t)
	s := etcdtest.Store(t, e)
	ctx := testCtx(t, 20*time.Second)
	if _, _, found, err := s.ReadCluster(ctx); err != nil || found {
		t.Fatalf("an empty etcd: %v %v", found, err)
	}
	a := metadata.ClusterRecord{ClusterID: idA, Generation: 1}
	got, rev, created, err := s.CreateCluster(ctx, a)
	if err != nil || !created || got != a {
		t.Fatalf("create: %+v %v %v", got, created, err)
	}
	// A node that loses the race adopts the winner's id.
	got, rev2, created, err := s.CreateCluster(ctx, metadata.ClusterRecord{ClusterID: idB, Generation: 1})
	if err != nil || created || got != a || rev2 != rev {
		t.Fatalf("second create: %+v rev %d/%d %v %v", got, rev2, rev, created, err)
	}
	claimed := a
	claimed.Claimed = true
	rev3, err := s.UpdateCluster(ctx, rev, claimed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateCluster(ctx, rev, claimed); !errors.Is(err, metadata.ErrClusterChanged) {
		t.Fatalf("an update from a stale read: %v", err)
	}
	got, rev4, found, err := s.ReadCluster(ctx)
	if err != nil || !found || got != claimed || rev4 != rev3 {
		t.Fatalf("read: %+v %d %v %v", got, rev4, found, err)
	}
}

func TestClusterRecordCodec(t *testing.T) {
	b, err := metadata.EncodeClusterRecord(metadata.ClusterRecord{ClusterID: idA, Generation: 3, Claimed: true})
	if err != nil || string(b) != `{"cluster_id":"`+idA+`","generation":3,"claimed":true}` {
		t.Fatalf("%s %v", b, err)
	}
	for _, bad := range []metadata.ClusterRecord{{ClusterID: "x", Generation: 1}, {ClusterID: idA}} {
		if _, err := metadata.EncodeClusterRecord(bad); !errors.Is(err, metadata.ErrInvalidArgument) {
			t.Errorf("%+v encoded: %v", bad, err)
		}
	}
	for _, doc := range []string{`{}`, `{"cluster_id":"` + idA + `","generation":0,"claimed":true}`, `{"cluster_id":"` + idA + `","generation":1}`, `[`} {
		if _, err := metadata.DecodeClusterRecord("/p/cluster", []byte(doc)); !errors.Is(err, metadata.ErrCorruptRecord) || !strings.Contains(err.Error(), "/p/cluster") {
			t.Errorf("%s: %v", doc, err)
		}
	}
}

func TestCheckClaim(t *testing.T) {
	rec := func(id string, gen uint64, claimed bool) *metadata.ClusterRecord {
		return &metadata.ClusterRecord{ClusterID: id, Generation: gen, Claimed: claimed}
	}
	claim := func(id string, gen uint64) *metadata.BucketClaim {
		return &metadata.BucketClaim{ClusterID: id, Generation: gen, EtcdPrefix: "/other", Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	}
	for _, c := range []struct {
		name  string
		f     metadata.ClaimFacts
		want  metadata.ClaimAction
		names []string
	}{
		{"a new cluster", metadata.ClaimFacts{PrefixEmpty: true}, metadata.ClaimCreate, nil},
		{"a creation that crashed before the claim", metadata.ClaimFacts{Cluster: rec(idA, 1, false)}, metadata.ClaimComplete, nil},
		{"a creation that crashed after the claim", metadata.ClaimFacts{Cluster: rec(idA, 1, false), Claim: claim(idA, 1)}, metadata.ClaimComplete, nil},
		{"the claim was deleted", metadata.ClaimFacts{Cluster: rec(idA, 1, true)}, metadata.ClaimRefuse, []string{idA, "deleted"}},
		{"an upgrade from version 2", metadata.ClaimFacts{FirstPageStreams: []string{"s1", "s2"}}, metadata.ClaimCreate, nil},
		{"another cluster's unclaimed prefix", metadata.ClaimFacts{FirstPageStreams: []string{"s1", "s2"}, Unanchored: []string{"s2"}}, metadata.ClaimRefuse, []string{"s2", "node recover --claim"}},
		{"objects that are not streams", metadata.ClaimFacts{}, metadata.ClaimRefuse, []string{"not streams"}},
		{"an empty etcd on a claimed bucket", metadata.ClaimFacts{Claim: claim(idA, 2)}, metadata.ClaimRefuse, []string{idA, "node recover", "another key prefix", "/other", "2026-01-02T03:04:05Z"}},
		{"two clusters", metadata.ClaimFacts{Cluster: rec(idB, 1, true), Claim: claim(idA, 1)}, metadata.ClaimRefuse, []string{idA, idB}},
		{"an older generation (fenced)", metadata.ClaimFacts{Cluster: rec(idA, 1, true), Claim: claim(idA, 2)}, metadata.ClaimRefuse, []string{"generation 2", "generation 1"}},
		{"agreement", metadata.ClaimFacts{Cluster: rec(idA, 2, true), Claim: claim(idA, 2)}, metadata.ClaimOpen, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.f.KeyPrefix, c.f.EtcdPrefix = "streams", "/streamtier"
			d := metadata.CheckClaim(c.f)
			if d.Action != c.want {
				t.Fatalf("%v, want %v: %s", d.Action, c.want, d.Reason)
			}
			for _, n := range append(c.names, `"streams"`) {
				if !strings.Contains(d.Reason, n) {
					t.Errorf("reason %q does not name %q", d.Reason, n)
				}
			}
		})
	}
	if !metadata.SameClaim(*rec(idA, 2, true), *rec(idA, 2, false)) || metadata.SameClaim(*rec(idA, 2, true), *rec(idA, 3, true)) {
		t.Fatal("SameClaim")
	}
}
