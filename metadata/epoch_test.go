package metadata_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
)

// TestReadEpoch: absent before the first persist, the persisting writer's epoch after each
// persist, absent after the stream is deleted, a corrupt value refused naming the key.
func TestReadEpoch(t *testing.T) {
	e, s, ctx := anchored(t, 10*time.Second)
	if ep, found, err := s.ReadEpoch(ctx, "s1"); err != nil || found || ep != 0 {
		t.Fatalf("before any persist: %d %t %v", ep, found, err)
	}
	rev := int64(0)
	for _, epoch := range []uint64{3, 3, 7} {
		rec := metadata.ManifestRecord{Epoch: epoch, RootUID: 1, FirstTimestamp: -1}
		res, err := s.Persist(ctx, "s1", epoch, rev, rec)
		if err != nil || res.Outcome != metadata.PersistOK {
			t.Fatalf("persist at %d: %+v %v", epoch, res, err)
		}
		rev = res.Revision
		if ep, found, err := s.ReadEpoch(ctx, "s1"); err != nil || !found || ep != epoch {
			t.Fatalf("after a persist at %d: %d %t %v", epoch, ep, found, err)
		}
	}
	if _, _, err := s.ReadEpoch(ctx, "../x"); !errors.Is(err, manifest.ErrInvalidStreamID) {
		t.Fatalf("hostile id: %v", err)
	}
	if err := s.DeleteStream(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, found, err := s.ReadEpoch(ctx, "s1"); err != nil || found {
		t.Fatalf("after delete: %t %v", found, err)
	}
	key := metadata.EpochKey(s.Prefix(), "s2")
	if _, err := e.Client().Put(ctx, key, "7"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ReadEpoch(ctx, "s2"); !errors.Is(err, metadata.ErrCorruptRecord) || !strings.Contains(err.Error(), key) {
		t.Fatalf("corrupt epoch: %v", err)
	}
}
