package segments

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/streamtier/streamtier/chunk"
)

func TestOpenDefaultsAndEmptyLog(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "stream")
	l := mustOpen(t, dir, Options{})
	if l.opts.MaxSegmentBytes != 500_000_000 || l.opts.MaxSegmentChunks != 256_000 {
		t.Fatalf("defaults %+v", l.opts)
	}
	if l.FirstOffset() != 0 || l.NextOffset() != 0 || l.Epoch() != 0 {
		t.Fatalf("empty log: first %d next %d", l.FirstOffset(), l.NextOffset())
	}
	if _, ok := l.LastChunkID(); ok {
		t.Fatal("empty log has a last chunk")
	}
	files := dirFiles(t, dir)
	if !bytes.Equal(files[SegmentName(0)], segmentFileHeader) || !bytes.Equal(files[IndexName(0)], indexFileHeader) || len(files) != 2 {
		t.Fatalf("a new log holds %v", files)
	}
	segs := l.Segments()
	if len(segs) != 1 || !segs[0].Active || segs[0].Chunks != 0 || segs[0].Size != FileHeaderSize {
		t.Fatalf("segments %+v", segs)
	}

	l2 := mustOpen(t, t.TempDir(), Options{FirstOffset: 5000})
	h, loc, err := l2.Append(userChunk(1, 1, "a"))
	if err != nil || h.ChunkID != 5000 || loc.Segment != SegmentName(5000) || loc.Position != FileHeaderSize {
		t.Fatalf("first append of a log from 5000: %+v %+v %v", h, loc, err)
	}

	for _, bad := range []Options{{MaxSegmentBytes: -1}, {MaxSegmentBytes: 1 << 33}, {MaxSegmentChunks: -1}} {
		if _, err := Open(t.TempDir(), bad); err == nil {
			t.Errorf("Open with %+v: no error", bad)
		}
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(file, Options{}); err == nil {
		t.Error("Open of a file: no error")
	}
}

// Everything the writer writes reads back identically: through the reader, ranged reads,
// the scanner and a reopened log.
func TestWriterRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{MaxSegmentBytes: 600})
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte("\x00\x00\x00\x01a\x00\x00\x00\x01b"))
	zw.Close()
	sub, err := UncompressedSubBatch([][]byte{[]byte("one"), []byte("two"), []byte("three")})
	if err != nil {
		t.Fatal(err)
	}
	specs := []ChunkSpec{
		userChunk(1, 100, "first"),
		{Type: chunk.TypeUser, Epoch: 1, Timestamp: 101, Entries: []Entry{sub, SimpleEntry([]byte("after"))}, Trailer: []byte("trailer")},
		{Type: chunk.TypeTrackingDelta, Epoch: 1, Timestamp: 102, Entries: []Entry{SimpleEntry([]byte("delta"))}},
		{Type: chunk.TypeUser, Epoch: 2, Timestamp: 103, Entries: []Entry{CompressedSubBatch(CompressionGzip, 2, 10, z.Bytes())}},
		{Type: chunk.TypeTrackingSnapshot, Epoch: 2, Timestamp: 104, Entries: []Entry{SimpleEntry([]byte("snapshot"))}},
	}
	for range 6 {
		specs = append(specs, userChunk(2, 105, strings.Repeat("p", 150), "q"))
	}
	type written struct {
		h     chunk.Header
		loc   chunk.Location
		chunk []byte
	}
	var ws []written
	next := uint64(0)
	for _, s := range specs {
		h, loc, err := l.Append(s)
		if err != nil {
			t.Fatal(err)
		}
		want, wh, err := EncodeChunk(nil, s, next)
		if err != nil || h != wh {
			t.Fatalf("Append returned %+v, encoding gives %+v (%v)", h, wh, err)
		}
		next = h.NextID()
		ws = append(ws, written{h, loc, want})
	}
	if l.NextOffset() != next || len(l.Segments()) < 3 {
		t.Fatalf("next %d, %d segments", l.NextOffset(), len(l.Segments()))
	}
	check := func(l *Log) {
		t.Helper()
		if err := l.SetCommitted(ws[len(ws)-1].h.ChunkID); err != nil {
			t.Fatal(err)
		}
		r, err := l.NewReader(0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		for _, w := range ws {
			h, loc, err := r.Next()
			if err != nil || h != w.h || loc != w.loc {
				t.Fatalf("read %+v at %+v (%v), wrote %+v at %+v", h, loc, err, w.h, w.loc)
			}
			b, _, err := l.ReadChunk(loc)
			if err != nil || !bytes.Equal(b, w.chunk) {
				t.Fatalf("chunk %d bytes differ (%v)", h.ChunkID, err)
			}
		}
		if _, _, err := r.Next(); !errors.Is(err, ErrEndOfStream) {
			t.Fatalf("after the last chunk: %v", err)
		}
	}
	check(l)
	i := 0
	if _, err := Scan(dir, func(c ScannedChunk) error {
		if c.Header != ws[i].h || c.Location != ws[i].loc || !c.CRCOK {
			t.Fatalf("scan %+v, wrote %+v", c, ws[i])
		}
		i++
		return nil
	}); err != nil || i != len(ws) {
		t.Fatalf("scan: %v after %d chunks", err, i)
	}
	before := dirFiles(t, dir)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Append(specs[0]); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	l2 := mustOpen(t, dir, Options{MaxSegmentBytes: 600})
	sameFilesMap(t, before, dirFiles(t, dir))
	check(l2)
	if h, _ := l2.LastChunk(); h != ws[len(ws)-1].h {
		t.Fatalf("reopened last chunk %+v", h)
	}
}

func sameFilesMap(t *testing.T, want, got map[string][]byte) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%d files, want %d", len(got), len(want))
	}
	for name, b := range want {
		if !bytes.Equal(got[name], b) {
			t.Fatalf("%s changed", name)
		}
	}
}

func TestRollingBySizeAndChunks(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{MaxSegmentChunks: 4})
	appendN(t, l, 10, 1)
	segs := l.Segments()
	if len(segs) != 3 || segs[0].Chunks != 4 || segs[1].Chunks != 4 || segs[2].Chunks != 2 {
		t.Fatalf("segments by chunks: %+v", segs)
	}

	const limit = 1000
	l = mustOpen(t, t.TempDir(), Options{MaxSegmentBytes: limit})
	hs := appendN(t, l, 60, 1)
	segs = l.Segments()
	if len(segs) < 3 {
		t.Fatalf("%d segments", len(segs))
	}
	sizes := map[uint64]int64{}
	for _, h := range hs {
		sizes[h.ChunkID] = h.Size()
	}
	for i, s := range segs {
		if s.Name != SegmentName(s.FirstOffset) || (i > 0 && segs[i-1].NextOffset != s.FirstOffset) {
			t.Fatalf("segment %+v", s)
		}
		if s.Active {
			continue
		}
		// Rolled once it reached the limit, not before: overshoot by at most the last chunk.
		lastSize := sizes[hs[0].ChunkID]
		for _, h := range hs {
			if h.ChunkID < s.NextOffset {
				lastSize = h.Size()
			}
		}
		if s.Size < limit || s.Size-lastSize >= limit {
			t.Fatalf("segment %s of %d bytes (last chunk %d) with limit %d", s.Name, s.Size, lastSize, limit)
		}
	}

	// A chunk bigger than the limit still gets a segment of its own, never an empty one.
	l = mustOpen(t, t.TempDir(), Options{MaxSegmentBytes: 10})
	appendN(t, l, 3, 1)
	for _, s := range l.Segments() {
		if s.Chunks != 1 {
			t.Fatalf("segments with a tiny limit: %+v", l.Segments())
		}
	}
}

func TestAppendRefusals(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{})
	if _, _, err := l.Append(userChunk(5, 1, "a")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Append(userChunk(4, 1, "a")); err == nil || !strings.Contains(err.Error(), "epoch 4") {
		t.Fatalf("append with a lower epoch: %v", err)
	}
	if _, _, err := l.Append(ChunkSpec{Type: chunk.TypeUser, Epoch: 5}); err == nil {
		t.Fatal("append of a chunk without records: no error")
	}
	if l.NextOffset() != 1 {
		t.Fatalf("refused appends moved the log to %d", l.NextOffset())
	}
	if _, _, err := l.Append(userChunk(6, 1, "b")); err != nil {
		t.Fatalf("append after refusals: %v", err)
	}
}
