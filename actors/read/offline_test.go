package read

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/streamtier/streamtier/manifest"
)

// TestOpenOfflineFromBucket reads a stream with no metadata store at all (FromBucket, Meta
// nil): every chunk once, in order, byte for byte, as through etcd; and a stream the bucket
// does not hold is ErrNoManifest, by name.
func TestOpenOfflineFromBucket(t *testing.T) {
	f := newRemoteFixture(t, 40)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	readAll := func(src OfflineSource) [][]byte {
		t.Helper()
		r, err := OpenOffline(ctx, src, From{Kind: AtFirst})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var out [][]byte
		for {
			it, err := r.Next(ctx)
			if errors.Is(err, io.EOF) {
				return out
			}
			if err != nil {
				t.Fatal(err)
			}
			if it.Kind == ItemChunk {
				out = append(out, bytes.Clone(it.Chunk))
			}
		}
	}
	viaEtcd := readAll(OfflineSource{Store: f.w.Store, Meta: f.w.Meta, Stream: f.st.ID})
	fromBucket := readAll(OfflineSource{Store: f.w.Store, Stream: f.st.ID, FromBucket: true, KeyPrefix: manifest.DefaultKeyPrefix})
	if len(fromBucket) != len(f.order) || len(viaEtcd) != len(f.order) {
		t.Fatalf("chunks: %d from the bucket, %d through etcd, %d written", len(fromBucket), len(viaEtcd), len(f.order))
	}
	for i, id := range f.order {
		if !bytes.Equal(fromBucket[i], f.chunks[id]) || !bytes.Equal(viaEtcd[i], f.chunks[id]) {
			t.Fatalf("chunk %d differs", id)
		}
	}
	if _, err := OpenOffline(ctx, OfflineSource{Store: f.w.Store, Stream: "absent", FromBucket: true}, From{Kind: AtFirst}); !errors.Is(err, ErrNoManifest) {
		t.Fatalf("an absent stream from the bucket: %v", err)
	}
	if _, err := OpenOffline(ctx, OfflineSource{Store: f.w.Store, Stream: f.st.ID}, From{Kind: AtFirst}); err == nil {
		t.Fatal("no metadata store and no FromBucket: want an error")
	}
}

// TestRestoreFromBucket restores a stream with no metadata store at all (FromBucket, Meta
// nil): the default start (the last run) is found from the bucket too. It panicked on the
// nil metadata store before: the last run's lookup read etcd whatever the source said.
func TestRestoreFromBucket(t *testing.T) {
	f := newRemoteFixture(t, 40)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "restored")
	rep, err := Restore(ctx, RestoreOptions{Source: OfflineSource{Store: f.w.Store, Stream: f.st.ID, FromBucket: true}, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Chunks != len(f.order) || rep.AfterGap != nil {
		t.Fatalf("restored %d chunks (after gap %v), want the %d written", rep.Chunks, rep.AfterGap, len(f.order))
	}
}
