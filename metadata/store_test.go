package metadata_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
)

func TestAnchorIsIdempotent(t *testing.T) {
	e := etcdtest.Start(t)
	s := etcdtest.Store(t, e)
	ctx := testCtx(t, 10*time.Second)
	for _, lin := range []bool{true, false} {
		if ok, err := s.HasAnchor(ctx, "s1", lin); err != nil || ok {
			t.Fatalf("HasAnchor(linearizable=%v) before anchoring = %v, %v", lin, ok, err)
		}
	}
	for range 3 {
		if err := s.Anchor(ctx, "s1"); err != nil {
			t.Fatal(err)
		}
	}
	for _, lin := range []bool{true, false} {
		if ok, err := s.HasAnchor(ctx, "s1", lin); err != nil || !ok {
			t.Fatalf("HasAnchor(linearizable=%v) after anchoring = %v, %v", lin, ok, err)
		}
	}
	resp, err := e.Client().Get(ctx, metadata.AnchorKey(s.Prefix(), "s1"))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("anchor key: %v, %v", resp, err)
	}
	if v := resp.Kvs[0].Version; v != 1 {
		t.Fatalf("anchoring three times wrote the anchor %d times, want once", v)
	}
	if ok, _ := s.HasAnchor(ctx, "s", true); ok {
		t.Fatal("anchor of s1 seen as anchor of s")
	}
}

// hostileIDs are stream ids that must be refused before any I/O.
var hostileIDs = []string{"", "../x", "a/b", "a..b", ".hidden", "-a", "a b", "a\x00b", "é", strings.Repeat("a", 201), "a/../../b"}

func TestInvalidStreamIDRefusedBeforeIO(t *testing.T) {
	e := etcdtest.Start(t)
	// A closed client: any request would fail with a connection error, so getting the
	// stream id error proves the id was refused first.
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	cli.Close()
	s := metadata.NewStore(cli, "")
	ctx := testCtx(t, 5*time.Second)
	rec := metadata.ManifestRecord{Epoch: 1, FirstTimestamp: -1}
	for _, id := range hostileIDs {
		calls := map[string]error{
			"Anchor":       s.Anchor(ctx, id),
			"DeleteStream": s.DeleteStream(ctx, id),
		}
		_, calls["HasAnchor"] = s.HasAnchor(ctx, id, true)
		_, _, _, calls["ReadManifest"] = s.ReadManifest(ctx, id)
		_, _, _, calls["ReadForResolution"] = s.ReadForResolution(ctx, id)
		_, _, calls["ReadTombstone"] = s.ReadTombstone(ctx, id)
		_, calls["Persist"] = s.Persist(ctx, id, 1, 0, rec)
		_, _, calls["GetPlacement"] = s.GetPlacement(ctx, id)
		calls["PutPlacement"] = s.PutPlacement(ctx, metadata.Placement{Stream: id, Writer: "n1"})
		for name, err := range calls {
			if !errors.Is(err, manifest.ErrInvalidStreamID) {
				t.Errorf("%s(%q) = %v, want ErrInvalidStreamID", name, id, err)
			}
			if metadata.IsRetriable(err) {
				t.Errorf("%s(%q): invalid stream id classified retriable", name, id)
			}
		}
	}
}

func TestReadManifestGarbage(t *testing.T) {
	e := etcdtest.Start(t)
	s := etcdtest.Store(t, e)
	ctx := testCtx(t, 10*time.Second)
	key := metadata.ManifestKey(s.Prefix(), "s1")
	if _, err := e.Client().Put(ctx, key, "this is not a manifest record"); err != nil {
		t.Fatal(err)
	}
	_, _, found, err := s.ReadManifest(ctx, "s1")
	if !errors.Is(err, metadata.ErrCorruptRecord) || found {
		t.Fatalf("ReadManifest of garbage = found %v, %v; want ErrCorruptRecord", found, err)
	}
	if !strings.Contains(err.Error(), key) {
		t.Fatalf("error %q does not name the key %s", err, key)
	}
	if metadata.IsRetriable(err) {
		t.Fatalf("garbage record classified retriable: %v", err)
	}
}

func TestStorePrefixesAreDisjoint(t *testing.T) {
	e := etcdtest.Start(t)
	ctx := testCtx(t, 10*time.Second)
	a := metadata.NewStore(e.Client(), "/a/")
	b := metadata.NewStore(e.Client(), "/a/b")
	def := metadata.NewStore(e.Client(), "")
	if a.Prefix() != "/a" || def.Prefix() != metadata.DefaultPrefix {
		t.Fatalf("prefixes %q %q", a.Prefix(), def.Prefix())
	}
	if err := b.Anchor(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.HasAnchor(ctx, "s", true); err != nil || ok {
		t.Fatalf("anchor under /a/b seen under /a: %v %v", ok, err)
	}
	// Deleting stream "s" must not touch stream "s1" (the stream prefix ends in "/").
	if err := a.Anchor(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteStream(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.HasAnchor(ctx, "s1", true); err != nil || !ok {
		t.Fatalf("deleting s removed s1's anchor: %v %v", ok, err)
	}
}

// readBoth reads the manifest and epoch keys in one request (one revision) and checks that
// they were written together: same mod revision, and the record's epoch is the stored epoch.
func readBoth(t *testing.T, ctx context.Context, cli *clientv3.Client, s *metadata.Store, stream string) (rec metadata.ManifestRecord, version int64, epoch uint64, found bool) {
	t.Helper()
	resp, err := cli.Get(ctx, metadata.StreamPrefix(s.Prefix(), stream), clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("read records: %v", err)
	}
	var m, ep *struct {
		mod, ver int64
		val      []byte
	}
	for _, kv := range resp.Kvs {
		v := &struct {
			mod, ver int64
			val      []byte
		}{kv.ModRevision, kv.Version, kv.Value}
		switch string(kv.Key) {
		case metadata.ManifestKey(s.Prefix(), stream):
			m = v
		case metadata.EpochKey(s.Prefix(), stream):
			ep = v
		}
	}
	if (m == nil) != (ep == nil) {
		t.Fatalf("half-written record: manifest present %v, epoch present %v", m != nil, ep != nil)
	}
	if m == nil {
		return metadata.ManifestRecord{}, 0, 0, false
	}
	if m.mod != ep.mod {
		t.Fatalf("manifest (mod revision %d) and epoch (mod revision %d) were not written together", m.mod, ep.mod)
	}
	rec, err = metadata.DecodeManifestRecord("manifest", m.val)
	if err != nil {
		t.Fatal(err)
	}
	epoch, err = metadata.ParseEpoch("epoch", ep.val)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Epoch != epoch {
		t.Fatalf("record epoch %d, stored epoch %d", rec.Epoch, epoch)
	}
	return rec, m.ver, epoch, true
}
