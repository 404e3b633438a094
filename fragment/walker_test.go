package fragment

import (
	"errors"
	"testing"

	"pgregory.net/rapid"
)

// TestRegionWalkerAgreesWithParseObject: fed a fragment's chunk region in pieces of any
// size, the streaming walker finds exactly the chunks ParseObject finds; a flipped bit in a
// chunk's data, a region cut inside a chunk, and a chunk left out (ids not contiguous) are
// refused with ErrCorrupt.
func TestRegionWalkerAgreesWithParseObject(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := genLog(t)
		all := l.walk(t)
		lo := rapid.IntRange(0, len(all)-1).Draw(t, "lo")
		hi := rapid.IntRange(lo+1, len(all)).Draw(t, "hi")
		d := describe(all[lo:hi])
		obj := l.object(d)
		layout, err := ParseObject(obj)
		if err != nil {
			t.Fatal(err)
		}
		region := obj[ObjectHeaderSize : ObjectHeaderSize+d.Size]
		pieces := rapid.SliceOfN(rapid.IntRange(1, 200), 1, 50).Draw(t, "pieces")
		feed := func(w *RegionWalker, b []byte) error {
			for i := 0; len(b) > 0; i++ {
				n := min(pieces[i%len(pieces)], len(b))
				if _, err := w.Write(b[:n]); err != nil {
					return err
				}
				b = b[n:]
			}
			return nil
		}
		w := NewRegionWalker(ObjectHeaderSize)
		if err := feed(w, region); err != nil {
			t.Fatalf("walker: %v", err)
		}
		got, err := w.Done()
		if err != nil {
			t.Fatalf("walker done: %v", err)
		}
		if len(got) != len(layout.Chunks) {
			t.Fatalf("walker found %d chunks, ParseObject %d", len(got), len(layout.Chunks))
		}
		for i := range got {
			if got[i] != layout.Chunks[i] {
				t.Fatalf("chunk %d: walker %+v, ParseObject %+v", i, got[i], layout.Chunks[i])
			}
		}

		// cut inside a chunk
		if cut := rapid.IntRange(1, len(region)).Draw(t, "cut"); cut < len(region) {
			w := NewRegionWalker(ObjectHeaderSize)
			err := feed(w, region[:cut])
			if err == nil {
				_, err = w.Done()
			}
			atBoundary := false
			for _, c := range layout.Chunks {
				if c.Position-ObjectHeaderSize == int64(cut) {
					atBoundary = true
				}
			}
			if atBoundary != (err == nil) || (err != nil && !errors.Is(err, ErrCorrupt)) {
				t.Fatalf("region cut at %d (boundary %t): %v", cut, atBoundary, err)
			}
		}
		// a flipped bit in a data section
		for _, c := range layout.Chunks {
			if c.Header.DataLen == 0 {
				continue
			}
			bad := append([]byte(nil), region...)
			bad[c.Position-ObjectHeaderSize+48+int64(c.Header.BloomSize)] ^= 1
			w := NewRegionWalker(ObjectHeaderSize)
			err := feed(w, bad)
			if err == nil {
				_, err = w.Done()
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("flipped data bit in chunk %d: %v", c.Header.ChunkID, err)
			}
			break
		}
		// the first chunk left out of a region of several: ids do not follow
		if len(layout.Chunks) > 2 {
			first := layout.Chunks[0].Header.Size()
			second := layout.Chunks[1].Header.Size()
			skip := append(append([]byte(nil), region[:first]...), region[first+second:]...)
			w := NewRegionWalker(ObjectHeaderSize)
			err := feed(w, skip)
			if err == nil {
				_, err = w.Done()
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("a chunk left out: %v", err)
			}
		}
	})
}
