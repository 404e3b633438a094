package actors

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/segments"
)

// TestRestore: a tiered stream restored into an empty directory holds the chunks of the
// remote tier, byte for byte (ids, epochs, timestamps, CRCs), as the reference log has them;
// a non-empty target is refused.
func TestRestore(t *testing.T) {
	w := newWorld(t, worldOptions{})
	n, _, ref := tieredStream(t, w, "rs")
	p, _ := n.Cached("rs")
	dir := filepath.Join(t.TempDir(), "restored")
	src := read.OfflineSource{Store: w.Store, Meta: w.Meta, Stream: "rs"}
	rep, err := read.Restore(context.Background(), read.RestoreOptions{Source: src, Dir: dir, Segments: segments.Options{MaxSegmentBytes: 64 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.FirstOffset != p.Manifest.FirstOffset || rep.NextOffset != p.Manifest.NextOffset || rep.Segments < 2 {
		t.Fatalf("restored [%d, %d) in %d segments, the manifest holds [%d, %d)", rep.FirstOffset, rep.NextOffset, rep.Segments, p.Manifest.FirstOffset, p.Manifest.NextOffset)
	}
	refChunks := scanChunks(t, ref.Dir())
	got := scanChunks(t, dir)
	if len(got) != rep.Chunks {
		t.Fatalf("%d chunks scanned, the report says %d", len(got), rep.Chunks)
	}
	for i, c := range got {
		if !bytes.Equal(c, refChunks[i]) {
			t.Fatalf("restored chunk %d differs from the reference", i)
		}
	}
	if _, err := read.Restore(context.Background(), read.RestoreOptions{Source: src, Dir: dir}); !errors.Is(err, read.ErrTargetNotEmpty) {
		t.Fatalf("restore into a non-empty directory: %v", err)
	}
}

// scanChunks returns the bytes of every chunk of a stream directory, in order, checking
// each one's CRC.
func scanChunks(t *testing.T, dir string) [][]byte {
	t.Helper()
	var out [][]byte
	files := map[string][]byte{}
	if _, err := segments.Scan(dir, func(c segments.ScannedChunk) error {
		if !c.CRCOK {
			t.Errorf("%s chunk %d: bad CRC", dir, c.Header.ChunkID)
		}
		b, ok := files[c.Location.Segment]
		if !ok {
			var err error
			if b, err = os.ReadFile(filepath.Join(dir, c.Location.Segment)); err != nil {
				return err
			}
			files[c.Location.Segment] = b
		}
		out = append(out, b[c.Location.Position:c.Location.Position+c.Location.Size])
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}
