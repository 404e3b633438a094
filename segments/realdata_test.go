package segments

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/streamtier/streamtier/chunk"
)

// The README of the RabbitMQ directory states these numbers.
const (
	realChunks     = 456
	realUser       = 450
	realSnapshots  = 6
	realNextOffset = 25006
	realEpoch1     = 341
	realEpoch2     = 115
	realSegments   = 7
)

func TestRealDirectoryScan(t *testing.T) {
	golden := loadGolden(t)
	if len(golden) != realChunks {
		t.Fatalf("golden listing has %d chunks", len(golden))
	}
	var i, user, snap, e1, e2 int
	segFirst := map[string]chunk.Type{}
	sum, err := Scan(realDir, func(c ScannedChunk) error {
		checkGolden(t, golden[i], c.Header, c.Location)
		if !c.CRCOK {
			t.Errorf("chunk %d: CRC not ok", c.Header.ChunkID)
		}
		switch c.Header.Type {
		case chunk.TypeUser:
			user++
		case chunk.TypeTrackingSnapshot:
			snap++
			if c.Header.Records != 1 {
				t.Errorf("snapshot chunk %d uses %d offsets", c.Header.ChunkID, c.Header.Records)
			}
		}
		switch c.Header.Epoch {
		case 1:
			e1++
		case 2:
			e2++
		}
		if _, ok := segFirst[c.Location.Segment]; !ok {
			segFirst[c.Location.Segment] = c.Header.Type
		}
		i++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if i != realChunks || user != realUser || snap != realSnapshots || e1 != realEpoch1 || e2 != realEpoch2 {
		t.Fatalf("%d chunks (%d user, %d snapshots), %d in epoch 1, %d in epoch 2", i, user, snap, e1, e2)
	}
	if sum.FirstOffset != 0 || sum.NextOffset != realNextOffset || sum.Chunks != realChunks || sum.Segments != realSegments || len(sum.Skipped) != 0 {
		t.Fatalf("summary %+v", sum)
	}
	// Every rolled segment starts with the tracking snapshot osiris writes at a roll.
	for name, typ := range segFirst {
		if name != SegmentName(0) && typ != chunk.TypeTrackingSnapshot {
			t.Errorf("%s starts with a %s chunk", name, typ)
		}
	}
	var files int64
	for name := range segFirst {
		st, err := os.Stat(filepath.Join(realDir, name))
		if err != nil {
			t.Fatal(err)
		}
		files += st.Size() - FileHeaderSize
	}
	if sum.Bytes != files {
		t.Fatalf("summary bytes %d, segment files hold %d chunk bytes", sum.Bytes, files)
	}
}

func TestRealDirectoryReader(t *testing.T) {
	golden := loadGolden(t)
	dir := copyDir(t, realDir)
	l := mustOpen(t, dir, Options{})
	// Opening a clean osiris directory changes nothing.
	sameFiles(t, realDir, dir)
	if l.FirstOffset() != 0 || l.NextOffset() != realNextOffset || l.Epoch() != 2 {
		t.Fatalf("first %d next %d epoch %d", l.FirstOffset(), l.NextOffset(), l.Epoch())
	}
	if id, ok := l.LastChunkID(); !ok || id != golden[len(golden)-1].chunkID {
		t.Fatalf("last chunk id %d %v", id, ok)
	}
	segs := l.Segments()
	if len(segs) != realSegments || !segs[6].Active || segs[6].FirstOffset != 22366 || segs[6].NextOffset != realNextOffset || segs[0].Chunks != 129 {
		t.Fatalf("segments %+v", segs)
	}
	for i, s := range segs {
		st, err := os.Stat(filepath.Join(dir, s.Name))
		if err != nil || st.Size() != s.Size {
			t.Fatalf("segment %s size %d, file %v %v", s.Name, s.Size, st, err)
		}
		if i > 0 && segs[i-1].NextOffset != s.FirstOffset {
			t.Fatalf("segments do not run on: %+v", segs)
		}
	}

	r, err := l.NewReader(0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, _, err := r.Next(); !errors.Is(err, ErrEndOfStream) {
		t.Fatalf("Next before any commit: %v, want end of stream", err)
	}
	if err := l.SetCommitted(golden[len(golden)-1].chunkID); err != nil {
		t.Fatal(err)
	}
	if l.CommittedNext() != realNextOffset {
		t.Fatalf("committed next %d", l.CommittedNext())
	}
	for i, g := range golden {
		h, loc, err := r.Next()
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		checkGolden(t, g, h, loc)
		b, vh, err := l.ReadChunk(loc)
		if err != nil || vh != h || int64(len(b)) != loc.Size {
			t.Fatalf("ReadChunk %+v: %v", loc, err)
		}
	}
	if _, _, err := r.Next(); !errors.Is(err, ErrEndOfStream) {
		t.Fatalf("Next after the last chunk: %v", err)
	}

	// Readers from inside chunks and segments start at the chunk holding the offset.
	for _, g := range golden {
		for _, from := range []uint64{g.chunkID, g.chunkID + g.records - 1} {
			r, err := l.NewReader(from)
			if err != nil {
				t.Fatal(err)
			}
			h, loc, err := r.Next()
			r.Close()
			if err != nil {
				t.Fatalf("reader from %d: %v", from, err)
			}
			checkGolden(t, g, h, loc)
		}
	}
}

// The writer, given the chunks of the RabbitMQ log, writes the same files byte for byte:
// chunk layout, index records and rolling (osiris rolled at 1,000,000 bytes here).
func TestWriterReproducesRabbitMQFiles(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{MaxSegmentBytes: 1_000_000})
	files := dirFiles(t, realDir)
	_, err := Scan(realDir, func(c ScannedChunk) error {
		raw := files[c.Location.Segment][c.Location.Position : c.Location.Position+c.Location.Size]
		h := c.Header
		data := raw[chunk.HeaderSize : chunk.HeaderSize+int64(h.DataLen)]
		entries, records, err := DecodeEntries(data)
		if err != nil {
			return err
		}
		if records != h.Records || len(entries) != int(h.Entries) {
			t.Fatalf("chunk %d: decoded %d entries %d records, header says %d and %d", h.ChunkID, len(entries), records, h.Entries, h.Records)
		}
		spec := ChunkSpec{Type: h.Type, Epoch: h.Epoch, Timestamp: h.Timestamp, Entries: entries, Trailer: raw[chunk.HeaderSize+int64(h.DataLen):]}
		got, loc, err := l.Append(spec)
		if err != nil {
			return err
		}
		if got != h || loc != c.Location {
			t.Fatalf("appended %+v at %+v, RabbitMQ has %+v at %+v", got, loc, h, c.Location)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, realDir, dir)
}
