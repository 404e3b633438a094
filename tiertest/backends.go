package tiertest

import (
	"context"
	"testing"

	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
)

// Backends are what most integration tests open with: an embedded etcd and a store on it, a
// real S3 server and a fresh bucket on it, all stopped when the test ends.
type Backends struct {
	Etcd  *metadata.Embedded
	Meta  *metadata.Store
	S3    *s3test.Server
	Store *s3io.Store
	// Faults is the fault injector the store talks to the server through (nil unless asked).
	Faults *s3test.Injector
}

// StartBackends starts the backends of one test; with faults, the store's requests go
// through a fault injector in front of the S3 server.
func StartBackends(ctx context.Context, t testing.TB, faults bool) Backends {
	t.Helper()
	b := Backends{Etcd: etcdtest.Start(t)}
	b.Meta = etcdtest.Store(t, b.Etcd)
	b.S3 = s3test.Start(t, s3test.Options{})
	cfg := b.S3.NewBucket(t)
	if faults {
		b.Faults = s3test.NewInjector(t, b.S3)
		bucket := cfg.Bucket
		cfg = b.Faults.Config()
		cfg.Bucket = bucket
	}
	store, err := s3io.NewStore(ctx, cfg)
	if err != nil {
		t.Fatalf("store on %s: %v", cfg.Endpoint, err)
	}
	b.Store = store
	return b
}
