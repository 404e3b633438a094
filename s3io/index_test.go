package s3io_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
)

// TestReadFragmentIndexTail: without the object's length, the index is one GET of the
// object's tail after the chunk region (no HEAD first: a reader asks for the index of every
// fragment it reads). An object that does not match the region size the manifest gives is
// refused as corrupt, whether it ends inside the region or its tail cannot be an index.
func TestReadFragmentIndexTail(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	st := newStore(t, srv.Config())
	ctx := context.Background()
	dir, frags := genLog(t, s3test.LogSpec{Seed: 9, Chunks: 40, MinData: 100, MaxData: 3000, MaxTrailer: 20}, 1<<20)
	d := frags[0]
	key := keyFor("index-tail", 0)
	if _, err := st.PutFragment(ctx, key, dir, d); err != nil {
		t.Fatal(err)
	}
	heads, gets := requests(st, s3io.OpHead), requests(st, s3io.OpGetRange)
	recs, err := st.ReadFragmentIndex(ctx, key, 0, d.Size)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(d.Chunks) || recs[0].ChunkID != d.FirstOffset || recs[len(recs)-1].Position != d.Chunks[len(d.Chunks)-1].Position {
		t.Fatalf("index: %d records from %+v, want %d from %d", len(recs), recs[0], len(d.Chunks), d.FirstOffset)
	}
	if h, g := requests(st, s3io.OpHead)-heads, requests(st, s3io.OpGetRange)-gets; h != 0 || g != 1 {
		t.Fatalf("reading the index took %d HEADs and %d range GETs, want 0 and 1", h, g)
	}
	indexLen := uint64(len(d.Chunks) * fragment.IndexRecordSize)
	for _, c := range []struct {
		name string
		size uint64
		want string
	}{
		{"the object ends inside the region", d.Size + indexLen + 100, "ends within its chunk region"},
		{"the object ends where the region does", d.Size + indexLen, "ends within its chunk region"},
		{"a tail that is not whole records", d.Size - 7, "index"},
		{"a tail longer than the region can index", 100, "can index"},
		{"records that do not start the region", d.Size - fragment.IndexRecordSize, "index"},
	} {
		_, err := st.ReadFragmentIndex(ctx, key, 0, c.size)
		if !errors.Is(err, fragment.ErrCorrupt) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), key) {
			t.Errorf("%s (size %d): got %v, want a corrupt error naming the key and %q", c.name, c.size, err, c.want)
		}
		if s3io.Classify(err) != s3io.ClassNonTransient {
			t.Errorf("%s: class %v, want non-transient", c.name, s3io.Classify(err))
		}
	}
}
