package metadata_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
)

func benchPersist(b *testing.B, e *metadata.Embedded) {
	s := metadata.NewStore(e.Client(), "")
	ctx := context.Background()
	if err := s.Anchor(ctx, "bench"); err != nil {
		b.Fatal(err)
	}
	rev := int64(0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		res, err := s.Persist(ctx, "bench", 1, rev, record(1, uint64(i)))
		if err != nil || res.Outcome != metadata.PersistOK {
			b.Fatalf("persist: %+v %v", res, err)
		}
		rev = res.Revision
	}
}

// BenchmarkPersist: one writer's persist transaction against the test member (no fsync).
func BenchmarkPersist(b *testing.B) { benchPersist(b, etcdtest.Start(b)) }

// BenchmarkPersistFsync: the same against the production embedded member (fsync on).
func BenchmarkPersistFsync(b *testing.B) {
	e, err := metadata.StartEmbedded(context.Background(), filepath.Join(b.TempDir(), "etcd"))
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	benchPersist(b, e)
}

// BenchmarkPersistConflict: a persist that fails and decides from its read-back.
func BenchmarkPersistConflict(b *testing.B) {
	e := etcdtest.Start(b)
	s := metadata.NewStore(e.Client(), "")
	ctx := context.Background()
	if err := s.Anchor(ctx, "bench"); err != nil {
		b.Fatal(err)
	}
	if _, err := s.Persist(ctx, "bench", 5, 0, record(5, 1)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		res, err := s.Persist(ctx, "bench", 4, 1, record(4, 2))
		if err != nil || res.Outcome != metadata.PersistConflict {
			b.Fatalf("persist: %+v %v", res, err)
		}
	}
}

func BenchmarkReadManifest(b *testing.B) {
	e := etcdtest.Start(b)
	s := metadata.NewStore(e.Client(), "")
	ctx := context.Background()
	if err := s.Anchor(ctx, "bench"); err != nil {
		b.Fatal(err)
	}
	if _, err := s.Persist(ctx, "bench", 1, 0, record(1, 1)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, found, err := s.ReadManifest(ctx, "bench"); err != nil || !found {
			b.Fatal(found, err)
		}
	}
}

func BenchmarkManifestRecordEncode(b *testing.B) {
	rec := record(7, 123456789)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rec.MarshalJSON(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkManifestRecordDecode(b *testing.B) {
	doc, err := record(7, 123456789).MarshalJSON()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := metadata.DecodeManifestRecord("k", doc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEmbeddedStart: start and close a test member (what etcdtest.Start costs a test).
func BenchmarkEmbeddedStart(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		e, err := metadata.StartEmbeddedConfig(ctx, etcdtest.Config(b))
		if err != nil {
			b.Fatal(err)
		}
		if err := e.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
