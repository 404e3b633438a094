package segments

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/streamtier/streamtier/chunk"
)

// Seed corpora live in testdata/fuzz/<target>/; `go test` runs only them, `go test
// -fuzz=FuzzX ./segments/` explores further.

// A header that parses encodes back to the same 48 bytes; nothing panics.
func FuzzParseHeader(f *testing.F) {
	f.Add(chunk.AppendHeader(nil, chunk.Header{Type: chunk.TypeUser, Entries: 1, Records: 1, ChunkID: 7, DataLen: 5}))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := chunk.ParseHeader(b)
		if err != nil {
			return
		}
		if got := chunk.AppendHeader(nil, h); !bytes.Equal(got, b[:chunk.HeaderSize]) {
			t.Fatalf("parsed %+v re-encodes to\n% x\nfrom\n% x", h, got, b[:chunk.HeaderSize])
		}
		if h.Size() < chunk.HeaderSize || h.Records == 0 || h.Type > chunk.TypeTrackingSnapshot {
			t.Fatalf("accepted header %+v", h)
		}
	})
}

// An index that parses re-encodes to its valid prefix; the rest is a tolerated crash tail.
func FuzzParseIndex(f *testing.F) {
	f.Add(indexBytes(IndexRecord{ChunkID: 1, Epoch: 1, Position: 8}))
	f.Fuzz(func(t *testing.T, b []byte) {
		idx, err := ParseIndex("fuzz.index", b)
		if err != nil {
			return
		}
		if idx.ValidLen > int64(len(b)) {
			t.Fatalf("valid length %d of %d bytes", idx.ValidLen, len(b))
		}
		if got := indexBytes(idx.Records...); !bytes.Equal(got, b[:idx.ValidLen]) {
			t.Fatalf("records re-encode to\n% x\nfrom\n% x", got, b[:idx.ValidLen])
		}
		rest := b[idx.ValidLen:]
		if len(rest) >= IndexRecordSize && !isZero(rest) {
			t.Fatalf("accepted a non-zero tail of %d bytes", len(rest))
		}
	})
}

// Entries that decode encode back to the same data section.
func FuzzDecodeEntries(f *testing.F) {
	f.Add([]byte{0, 0, 0, 2, 'h', 'i'})
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, records, err := DecodeEntries(data)
		if err != nil {
			return
		}
		if len(entries) > 65535 {
			return // a valid byte sequence a chunk could not count
		}
		got, n, err := AppendData(nil, entries)
		if err != nil || n != records || !bytes.Equal(got, data) {
			t.Fatalf("re-encoded (%v, %d records vs %d)\n% x\nfrom\n% x", err, n, records, got, data)
		}
	})
}

// Whatever a crash appends to the active segment and index, Open either refuses with an
// error or recovers to a log that scans clean and keeps every chunk written before.
func FuzzRecoverTail(f *testing.F) {
	f.Add([]byte{}, []byte{})
	f.Add([]byte{0x50, 0, 0, 1}, make([]byte, IndexRecordSize))
	base := f.TempDir()
	l, err := Open(base, Options{MaxSegmentChunks: 3})
	if err != nil {
		f.Fatal(err)
	}
	hs := appendN(f, l, 4, 1)
	if err := l.Close(); err != nil {
		f.Fatal(err)
	}
	last := hs[3].ChunkID // the fourth chunk starts the second segment
	f.Fuzz(func(t *testing.T, segTail, idxTail []byte) {
		dir := copyDir(t, base)
		appendFile(t, filepath.Join(dir, SegmentName(last)), segTail)
		appendFile(t, filepath.Join(dir, IndexName(last)), idxTail)
		l, err := Open(dir, Options{MaxSegmentChunks: 3})
		if err != nil {
			return
		}
		defer l.Close()
		if l.NextOffset() < hs[3].NextID() {
			t.Fatalf("recovery lost written chunks: next %d, want at least %d", l.NextOffset(), hs[3].NextID())
		}
		if _, err := Scan(dir, func(c ScannedChunk) error {
			if !c.CRCOK {
				t.Fatalf("chunk %d with a bad CRC survived recovery", c.Header.ChunkID)
			}
			return nil
		}); err != nil {
			t.Fatalf("scan after recovery: %v", err)
		}
		if _, err := os.Stat(filepath.Join(dir, SegmentName(last))); err != nil {
			t.Fatal(err)
		}
	})
}
