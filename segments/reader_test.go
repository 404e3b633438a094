package segments

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/chunk"
)

func TestReaderOffsetErrors(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{FirstOffset: 100})
	appendN(t, l, 3, 1)
	_, err := l.NewReader(99)
	var oe *OffsetError
	if !errors.Is(err, ErrBelowFirst) || !errors.As(err, &oe) || oe.First != 100 || oe.Next != l.NextOffset() || oe.Offset != 99 {
		t.Fatalf("reader below the first offset: %v", err)
	}
	_, err = l.NewReader(l.NextOffset() + 1)
	if !errors.Is(err, ErrAboveNext) || errors.Is(err, ErrBelowFirst) || !errors.As(err, &oe) || oe.Next != l.NextOffset() {
		t.Fatalf("reader above the next offset: %v", err)
	}
	if !strings.Contains(err.Error(), "offset 107") {
		t.Fatalf("error does not name the offset: %v", err)
	}
	r, err := l.NewReader(l.NextOffset())
	if err != nil {
		t.Fatalf("reader at the next offset: %v", err)
	}
	r.Close()
}

// A reader waiting at the end follows the writer into a new segment once the chunk is
// committed, and reports end of stream until then.
func TestReaderWaitsAndFollowsRolls(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{MaxSegmentChunks: 2})
	hs := appendN(t, l, 2, 1)
	l.SetCommitted(hs[1].ChunkID)
	r, err := l.NewReader(l.NextOffset())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, _, err := r.Next(); !errors.Is(err, ErrEndOfStream) {
		t.Fatalf("at the end: %v", err)
	}
	wake := l.NotifyWhenCommittedPast(r.NextOffset())
	more := appendN(t, l, 5, 1)
	if _, _, err := r.Next(); !errors.Is(err, ErrEndOfStream) {
		t.Fatalf("written but not committed: %v", err)
	}
	if fired(wake) {
		t.Fatal("listener fired before the commit")
	}
	l.SetCommitted(more[2].ChunkID)
	if !fired(wake) {
		t.Fatal("listener did not fire")
	}
	for i := range 3 {
		h, loc, err := r.Next()
		if err != nil || h != more[i] {
			t.Fatalf("chunk %d: %+v %v", i, h, err)
		}
		if want := l.Segments()[1+i/2].Name; loc.Segment != want {
			t.Fatalf("chunk %d in %s, want %s", i, loc.Segment, want)
		}
	}
	if _, _, err := r.Next(); !errors.Is(err, ErrEndOfStream) {
		t.Fatalf("past the commit: %v", err)
	}
	if r.NextOffset() != more[3].ChunkID {
		t.Fatalf("reader at %d", r.NextOffset())
	}
	l.SetCommitted(more[4].ChunkID)
	for i := 3; i < 5; i++ {
		if h, _, err := r.Next(); err != nil || h != more[i] {
			t.Fatalf("chunk %d: %+v %v", i, h, err)
		}
	}
}

// Chunks bigger and smaller than the read-ahead buffer, mixed, read back in order.
func TestReaderMixedChunkSizes(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{MaxSegmentBytes: 3 << 20})
	var hs []chunk.Header
	for i := range 200 {
		size := 10
		switch i % 7 {
		case 3:
			size = 40 << 10
		case 5:
			size = 200 << 10
		}
		h, _, err := l.Append(userChunk(1, int64(i), strings.Repeat("z", size)))
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	l.SetCommitted(hs[len(hs)-1].ChunkID)
	r, err := l.NewReader(0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i, want := range hs {
		h, loc, err := r.Next()
		if err != nil || h != want {
			t.Fatalf("chunk %d: %+v %v", i, h, err)
		}
		if _, _, err := l.ReadChunk(loc); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReaderCorruptHeader(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	hs := appendN(t, l, 3, 1)
	l.SetCommitted(hs[2].ChunkID)
	_, loc, _ := l.Append(userChunk(1, 1, "x"))
	f, err := os.OpenFile(filepath.Join(dir, loc.Segment), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Damage chunk 1's header magic.
	r0, _ := l.NewReader(hs[1].ChunkID)
	_, loc1, _ := r0.Next()
	r0.Close()
	f.WriteAt([]byte{0x51}, loc1.Position)
	f.Close()
	r, err := l.NewReader(0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	_, _, err = r.Next()
	if err == nil || !strings.Contains(err.Error(), loc1.Segment) || !strings.Contains(err.Error(), "position") {
		t.Fatalf("corrupt header: %v", err)
	}
}

func TestReaderAndRangedReadsAfterDeletion(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{MaxSegmentChunks: 3})
	hs := appendN(t, l, 10, 1)
	l.SetCommitted(hs[9].ChunkID)
	r, err := l.NewReader(0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, loc, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	deleted, err := l.ApplyRetention(RetentionPolicy{MayDelete: func(s SegmentInfo) bool { return s.NextOffset <= hs[6].ChunkID }}, time.Now())
	if err != nil || len(deleted) != 2 || deleted[0] != loc.Segment {
		t.Fatalf("retention deleted %v, %v", deleted, err)
	}
	if _, _, err := r.Next(); !errors.Is(err, ErrSegmentGone) || !strings.Contains(err.Error(), loc.Segment) {
		t.Fatalf("reader in a deleted segment: %v", err)
	}
	if _, err := l.ReadRange(loc.Segment, loc.Position, loc.Size); !errors.Is(err, ErrSegmentGone) {
		t.Fatalf("ranged read of a deleted segment: %v", err)
	}
	if _, _, err := l.ReadChunk(loc); !errors.Is(err, ErrSegmentGone) {
		t.Fatalf("chunk read of a deleted segment: %v", err)
	}
	if _, err := l.NewReader(0); !errors.Is(err, ErrBelowFirst) {
		t.Fatalf("new reader below the first offset: %v", err)
	}
	segs := l.Segments()
	if _, err := l.ReadRange(segs[0].Name, segs[0].Size-2, 3); err == nil || !strings.Contains(err.Error(), "past the end") {
		t.Fatalf("read past the end: %v", err)
	}
	if _, err := l.ReadRange("../x.segment", 0, 1); err == nil {
		t.Fatal("read of a path outside the directory: no error")
	}
	// A chunk whose bytes rot after the write is refused with ErrChunkCRC.
	r2, _ := l.NewReader(l.FirstOffset())
	_, loc2, _ := r2.Next()
	r2.Close()
	f, _ := os.OpenFile(filepath.Join(dir, loc2.Segment), os.O_WRONLY, 0)
	f.WriteAt([]byte{0xee}, loc2.Position+chunk.HeaderSize+5)
	f.Close()
	if _, _, err := l.ReadChunk(loc2); !errors.Is(err, ErrChunkCRC) || !strings.Contains(err.Error(), loc2.Segment) {
		t.Fatalf("rotten chunk: %v", err)
	}
}

// TestReaderMovesOnWhenItsReadSegmentIsDeleted: retention deletes the segment a reader has
// read to its end (everything in it is durable); the reader continues in the next segment
// instead of reporting it gone.
func TestReaderMovesOnWhenItsReadSegmentIsDeleted(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{MaxSegmentChunks: 3})
	hs := appendN(t, l, 9, 1)
	l.SetCommitted(hs[8].ChunkID)
	r, err := l.NewReader(0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := 0; i < 3; i++ { // the whole first segment
		if _, _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	}
	deleted, err := l.ApplyRetention(RetentionPolicy{MayDelete: func(s SegmentInfo) bool { return s.NextOffset <= hs[3].ChunkID }}, time.Now())
	if err != nil || len(deleted) != 1 {
		t.Fatalf("retention deleted %v, %v; want the first segment", deleted, err)
	}
	h, loc, err := r.Next()
	if err != nil || h.ChunkID != hs[3].ChunkID || loc.Segment != SegmentName(hs[3].ChunkID) {
		t.Fatalf("after its read segment was deleted the reader returned %+v at %+v, %v; want chunk %d", h, loc, err, hs[3].ChunkID)
	}
}

func TestReaderClosed(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{})
	hs := appendN(t, l, 2, 1)
	l.SetCommitted(hs[1].ChunkID)
	r, _ := l.NewReader(0)
	r2, _ := l.NewReader(0)
	r.Close()
	if _, _, err := r.Next(); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed reader: %v", err)
	}
	l.Close()
	if _, _, err := r2.Next(); !errors.Is(err, ErrClosed) {
		t.Fatalf("reader of a closed log: %v", err)
	}
	r2.Close()
	if _, err := l.NewReader(0); !errors.Is(err, ErrClosed) {
		t.Fatalf("new reader of a closed log: %v", err)
	}
}

func TestChunkHeaderFindsWrittenChunks(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{MaxSegmentChunks: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var hs []chunk.Header
	for i := 0; i < 8; i++ {
		h, _, err := l.Append(ChunkSpec{Type: chunk.TypeUser, Timestamp: int64(1000 + i), Epoch: 1, Entries: []Entry{SimpleEntry([]byte("a")), SimpleEntry([]byte("bc"))}})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	// nothing committed: the headers are still found
	for _, want := range hs {
		got, found, err := l.ChunkHeader(want.ChunkID)
		if err != nil || !found || got != want {
			t.Fatalf("chunk %d: got %+v found=%v err=%v, want %+v", want.ChunkID, got, found, err, want)
		}
		if _, found, err := l.ChunkHeader(want.ChunkID + 1); err != nil || found {
			t.Fatalf("offset %d inside a chunk: found=%v err=%v", want.ChunkID+1, found, err)
		}
	}
	if _, found, err := l.ChunkHeader(l.NextOffset()); err != nil || found {
		t.Fatalf("next offset: found=%v err=%v", found, err)
	}
}
