package segments

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/streamtier/streamtier/chunk"
)

// TestAppendRawRealDirectory copies every chunk of the RabbitMQ directory with AppendRaw
// into a new log starting at its first offset: the new directory scans to the same chunks,
// byte for byte, with the same ids, epochs, timestamps and types in its index.
func TestAppendRawRealDirectory(t *testing.T) {
	type raw struct {
		h chunk.Header
		b []byte
	}
	var chunks []raw
	if _, err := Scan(realDir, func(c ScannedChunk) error {
		b, err := os.ReadFile(filepath.Join(realDir, c.Location.Segment))
		if err != nil {
			return err
		}
		chunks = append(chunks, raw{c.Header, b[c.Location.Position : c.Location.Position+c.Location.Size]})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{FirstOffset: chunks[0].h.ChunkID, MaxSegmentChunks: 64})
	for _, c := range chunks {
		if _, _, err := l.AppendRaw(c.b); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	i := 0
	if _, err := Scan(dir, func(c ScannedChunk) error {
		b, err := os.ReadFile(filepath.Join(dir, c.Location.Segment))
		if err != nil {
			return err
		}
		if c.Header != chunks[i].h || !c.CRCOK || !bytes.Equal(b[c.Location.Position:c.Location.Position+c.Location.Size], chunks[i].b) {
			t.Errorf("chunk %d differs after AppendRaw", c.Header.ChunkID)
		}
		i++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if i != len(chunks) {
		t.Fatalf("%d chunks scanned, %d appended", i, len(chunks))
	}
	l2 := mustOpen(t, dir, Options{}) // reopens: the index files check out
	if l2.NextOffset() != realNextOffset {
		t.Fatalf("reopened at next offset %d", l2.NextOffset())
	}
}

func TestAppendRawRefuses(t *testing.T) {
	src := mustOpen(t, t.TempDir(), Options{})
	appendN(t, src, 3, 2)
	var bs [][]byte
	for _, s := range src.Segments() {
		b, err := os.ReadFile(filepath.Join(src.Dir(), s.Name))
		if err != nil {
			t.Fatal(err)
		}
		for pos := int64(FileHeaderSize); pos < int64(len(b)); {
			h, err := chunk.ParseHeader(b[pos:])
			if err != nil {
				t.Fatal(err)
			}
			bs = append(bs, b[pos:pos+h.Size()])
			pos += h.Size()
		}
	}
	l := mustOpen(t, t.TempDir(), Options{})
	if _, _, err := l.AppendRaw(bs[1]); err == nil || !strings.Contains(err.Error(), "next offset is 0") {
		t.Fatalf("out of order: %v", err)
	}
	bad := bytes.Clone(bs[0])
	bad[len(bad)-1] ^= 1
	if _, _, err := l.AppendRaw(bad); err == nil {
		t.Fatal("a corrupt chunk was appended")
	}
	if _, _, err := l.AppendRaw(bs[0]); err != nil {
		t.Fatal(err)
	}
	low := mustOpen(t, t.TempDir(), Options{})
	if _, _, err := low.Append(userChunk(3, 1, "a")); err != nil {
		t.Fatal(err)
	}
	cp := bytes.Clone(bs[0])
	copy(cp[24:32], []byte{0, 0, 0, 0, 0, 0, 0, 1})
	if _, _, err := low.AppendRaw(cp); err == nil || !strings.Contains(err.Error(), "epoch") {
		t.Fatalf("lower epoch: %v", err)
	}
}

func TestOffsetAtTimestamp(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{MaxSegmentChunks: 4})
	hs := appendN(t, l, 10, 1) // timestamps 1000..1009
	if _, found, _ := l.OffsetAtTimestamp(1000); found {
		t.Fatal("found a chunk before any commit")
	}
	if err := l.SetCommitted(hs[7].ChunkID); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ts    int64
		want  uint64
		found bool
	}{
		{0, hs[0].ChunkID, true}, {1000, hs[0].ChunkID, true}, {1005, hs[5].ChunkID, true},
		{1007, hs[7].ChunkID, true}, {1008, 0, false}, {5000, 0, false},
	} {
		got, found, err := l.OffsetAtTimestamp(c.ts)
		if err != nil || found != c.found || got != c.want {
			t.Errorf("ts %d: %d %t %v, want %d %t", c.ts, got, found, err, c.want, c.found)
		}
	}
}
