package segments

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/streamtier/streamtier/chunk"
	"go.uber.org/goleak"
)

// dirHash is a digest of every file name and its bytes in dir.
func dirHash(t testing.TB, dir string) string {
	t.Helper()
	files := dirFiles(t, dir)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%s %d\n", n, len(files[n]))
		h.Write(files[n])
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// mustFollow opens dir read-only or fails the test.
func mustFollow(t testing.TB, dir string) *Log {
	t.Helper()
	l, err := Open(dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// mustRefresh refreshes l or fails the test.
func mustRefresh(t testing.TB, l *Log) FollowState {
	t.Helper()
	st, err := l.Refresh()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// readAll drains l from its first offset with a data reader, checking every chunk's bytes.
func readAll(t testing.TB, l *Log) []chunk.Header {
	t.Helper()
	r, err := l.NewReader(l.FirstOffset())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []chunk.Header
	for {
		h, loc, err := r.Next()
		if errors.Is(err, ErrEndOfStream) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, rh, err := l.ReadChunk(loc); err != nil || rh != h {
			t.Fatalf("chunk %d at %+v: %+v, %v", h.ChunkID, loc, rh, err)
		}
		out = append(out, h)
	}
}

// commitAll commits every chunk a follower sees, as the node's poller does.
func commitAll(t testing.TB, l *Log) {
	t.Helper()
	if id, ok := l.LastChunkID(); ok {
		if err := l.SetCommitted(id); err != nil {
			t.Fatal(err)
		}
	}
}

// A writer appends (rolling every 7 chunks) while a follower refreshes, commits and drains
// from another goroutine: the follower ends with exactly the writer's chunks, in order,
// each readable and CRC-checked, and never sees a chunk the writer has not written whole.
func TestFollowWhileWriterAppends(t *testing.T) {
	defer goleak.VerifyNone(t)
	const chunks = 600
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{MaxSegmentChunks: 7, IdleClose: -1})
	appendN(t, w, 3, 1)
	f := mustFollow(t, dir)
	if f.NextOffset() != w.NextOffset() {
		t.Fatalf("follower opens at %d, the writer is at %d", f.NextOffset(), w.NextOffset())
	}

	var mu sync.Mutex
	written := map[uint64]chunk.Header{}
	for _, h := range appendN(t, w, 0, 1) {
		written[h.ChunkID] = h
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	writerDone := make(chan uint64, 1)
	wg.Add(1)
	go func() { // the writer "in another process"
		defer wg.Done()
		var next uint64
		for i := range chunks {
			h, _, err := w.Append(userChunk(1, int64(5000+i), fmt.Sprintf("live %d", i), "more"))
			if err != nil {
				t.Error(err)
				break
			}
			mu.Lock()
			written[h.ChunkID] = h
			mu.Unlock()
			next = h.NextID()
		}
		writerDone <- next
	}()

	r, err := f.NewReader(f.FirstOffset())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []chunk.Header
	final := uint64(0)
	for final == 0 || r.NextOffset() < final {
		select {
		case final = <-writerDone:
		case <-ctx.Done():
			t.Fatalf("follower at %d, reader at %d: %v", f.NextOffset(), r.NextOffset(), ctx.Err())
		default:
		}
		st, err := f.Refresh()
		if err != nil {
			t.Fatal(err)
		}
		if st.Next != f.NextOffset() || st.Next > w.NextOffset() {
			t.Fatalf("refresh says next %d, the log %d, the writer %d", st.Next, f.NextOffset(), w.NextOffset())
		}
		commitAll(t, f)
		for {
			h, loc, err := r.Next()
			if errors.Is(err, ErrEndOfStream) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, rh, err := f.ReadChunk(loc); err != nil || rh != h {
				t.Fatalf("chunk %d: %+v, %v", h.ChunkID, rh, err)
			}
			got = append(got, h)
		}
	}
	wg.Wait()
	if len(got) != 3+chunks {
		t.Fatalf("follower read %d chunks, the writer wrote %d", len(got), 3+chunks)
	}
	for _, h := range got[3:] {
		if written[h.ChunkID] != h {
			t.Fatalf("chunk %d: follower %+v, writer %+v", h.ChunkID, h, written[h.ChunkID])
		}
	}
	if a, b := len(f.Segments()), len(w.Segments()); a != b {
		t.Fatalf("follower has %d segments, the writer %d", a, b)
	}
}

// A chunk written by hand in halves, and its index record after it, becomes visible only
// once all of it is there; before that Refresh reports the pending bytes and no error. The
// index record written before the chunk (the index leading) is not enough either.
func TestFollowTornTailInvisibleUntilComplete(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{})
	hs := appendN(t, w, 5, 2)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	next := hs[4].NextID()
	seg := w.Segments()[0]
	chunk, h, err := EncodeChunk(nil, userChunk(2, 9999, "a torn record", "and its sibling"), next)
	if err != nil {
		t.Fatal(err)
	}
	half := len(chunk) / 2
	appendFile(t, filepath.Join(dir, seg.Name), chunk[:half])
	before := dirHash(t, dir)

	f := mustFollow(t, dir)
	if f.NextOffset() != next || len(readAll(t, f)) != 0 {
		t.Fatalf("follower at %d, want %d", f.NextOffset(), next)
	}
	if st, err := f.LastRefresh(); err != nil || st.Next != next || st.PendingBytes != int64(half) {
		t.Fatalf("state at open: %+v, %v; want next %d and %d pending", st, err, next, half)
	}
	commitAll(t, f)
	if n := len(readAll(t, f)); n != 5 {
		t.Fatalf("read %d chunks, want 5", n)
	}
	if st := mustRefresh(t, f); st.Next != next || st.PendingBytes != int64(half) {
		t.Fatalf("refresh with half a chunk: %+v, want next %d and %d pending", st, next, half)
	}
	if after := dirHash(t, dir); after != before {
		t.Fatal("opening and refreshing read-only changed the directory")
	}

	appendFile(t, filepath.Join(dir, seg.Name), chunk[half:])
	if st := mustRefresh(t, f); st.Next != next {
		t.Fatalf("chunk whole but not indexed: visible (%+v)", st)
	}
	var rec []byte
	rec = AppendIndexRecord(rec, IndexRecord{ChunkID: h.ChunkID, Timestamp: h.Timestamp, Epoch: h.Epoch, Position: uint32(seg.Size), Type: h.Type})
	appendFile(t, filepath.Join(dir, IndexName(seg.FirstOffset)), rec[:10])
	if st := mustRefresh(t, f); st.Next != next {
		t.Fatalf("half an index record: visible (%+v)", st)
	}
	appendFile(t, filepath.Join(dir, IndexName(seg.FirstOffset)), rec[10:])
	if st := mustRefresh(t, f); st.Next != h.NextID() || st.PendingBytes != 0 {
		t.Fatalf("complete chunk and record: %+v, want next %d", st, h.NextID())
	}
	commitAll(t, f)
	got := readAll(t, f)
	if len(got) != 6 || got[5] != h {
		t.Fatalf("read %d chunks, last %+v, want %+v", len(got), got[len(got)-1], h)
	}

	// The index leading: a record for a chunk not yet in the segment.
	chunk2, h2, err := EncodeChunk(nil, userChunk(2, 10000, "next"), h.NextID())
	if err != nil {
		t.Fatal(err)
	}
	pos := seg.Size + int64(len(chunk))
	appendFile(t, filepath.Join(dir, IndexName(seg.FirstOffset)), AppendIndexRecord(nil, IndexRecord{ChunkID: h2.ChunkID, Timestamp: h2.Timestamp, Epoch: h2.Epoch, Position: uint32(pos), Type: h2.Type}))
	if st := mustRefresh(t, f); st.Next != h.NextID() {
		t.Fatalf("index record without its chunk: visible (%+v)", st)
	}
	// A chunk with a bad CRC stays invisible.
	bad := append([]byte(nil), chunk2...)
	bad[len(bad)-1] ^= 0xff
	appendFile(t, filepath.Join(dir, seg.Name), bad)
	if st := mustRefresh(t, f); st.Next != h.NextID() || st.PendingBytes != int64(len(bad)) {
		t.Fatalf("chunk with a bad CRC: %+v", st)
	}
}

// The writer rolls: a new segment file whose headers are half written, then one holding a
// chunk; the follower follows into it and reads across the roll.
func TestFollowNewSegmentFile(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{MaxSegmentChunks: 4})
	appendN(t, w, 4, 1)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f := mustFollow(t, dir)
	next := f.NextOffset()
	name, iname := SegmentName(next), IndexName(next)
	if err := os.WriteFile(filepath.Join(dir, name), segmentFileHeader[:3], 0o644); err != nil {
		t.Fatal(err)
	}
	if st := mustRefresh(t, f); st.Next != next || len(f.Segments()) != 1 {
		t.Fatalf("segment file being created, no index: %+v, %d segments", st, len(f.Segments()))
	}
	if err := os.WriteFile(filepath.Join(dir, iname), indexFileHeader[:5], 0o644); err != nil {
		t.Fatal(err)
	}
	if st := mustRefresh(t, f); st.Next != next || len(f.Segments()) != 1 {
		t.Fatalf("file headers half written: %+v, %d segments", st, len(f.Segments()))
	}
	appendFile(t, filepath.Join(dir, name), segmentFileHeader[3:])
	appendFile(t, filepath.Join(dir, iname), indexFileHeader[5:])
	if st := mustRefresh(t, f); st.Next != next || len(f.Segments()) != 1 {
		t.Fatalf("empty new segment: %+v, %d segments", st, len(f.Segments()))
	}
	// The writer takes over the segment it had started (Open accepts the empty pair).
	w = mustOpen(t, dir, Options{MaxSegmentChunks: 4})
	hs := appendN(t, w, 6, 1)
	st := mustRefresh(t, f)
	if st.Next != hs[5].NextID() || len(f.Segments()) != 3 {
		t.Fatalf("after 6 more chunks: %+v, %d segments, want next %d and 3", st, len(f.Segments()), hs[5].NextID())
	}
	commitAll(t, f)
	if n := len(readAll(t, f)); n != 10 {
		t.Fatalf("read %d chunks across the rolls, want 10", n)
	}
	for i, s := range f.Segments() {
		ws := w.Segments()[i]
		ws.Active = s.Active
		if s != ws {
			t.Fatalf("segment %d: follower %+v, writer %+v", i, s, ws)
		}
	}
}

// The writer truncated a tail the follower had seen (a shrink), or rewrote the last chunk
// seen in place at a higher epoch (same size): Refresh is ErrRewritten, naming the file and
// the offsets, and the view stays.
func TestFollowRewrittenTail(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{})
	hs := appendN(t, w, 6, 1)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f := mustFollow(t, dir)
	commitAll(t, f)
	seg := f.Segments()[0]
	if err := os.Truncate(filepath.Join(dir, seg.Name), seg.Size-1); err != nil {
		t.Fatal(err)
	}
	_, err := f.Refresh()
	var rw *RewrittenError
	if !errors.Is(err, ErrRewritten) || !errors.As(err, &rw) || rw.Next != hs[5].NextID() || rw.Last != hs[5].ChunkID || rw.Segment != seg.Name || !rw.Shrank {
		t.Fatalf("after a shrink: %v (%+v)", err, rw)
	}
	if _, err := f.LastRefresh(); !errors.Is(err, ErrRewritten) {
		t.Fatalf("last refresh error %v, want ErrRewritten", err)
	}
	if f.NextOffset() != hs[5].NextID() || f.CommittedNext() != hs[5].NextID() {
		t.Fatalf("view moved: next %d, committed next %d", f.NextOffset(), f.CommittedNext())
	}

	// The writer's recovery cuts the torn chunk; it writes chunk 5 again at epoch 2, same size.
	w = mustOpen(t, dir, Options{})
	if w.NextOffset() != hs[4].NextID() {
		t.Fatalf("writer recovered to %d, want %d", w.NextOffset(), hs[4].NextID())
	}
	bodies := make([]string, 1+5%3)
	for j := range bodies {
		bodies[j] = fmt.Sprintf("chunk-%d-record-%d-%s", 5, j, "xxxxx")
	}
	h, _, err := w.Append(userChunk(2, 1005, bodies...))
	if err != nil {
		t.Fatal(err)
	}
	if h.Size() != hs[5].Size() || h.ChunkID != hs[5].ChunkID {
		t.Fatalf("rewritten chunk %+v, want the size and id of %+v", h, hs[5])
	}
	_, err = f.Refresh()
	if !errors.Is(err, ErrRewritten) || !errors.As(err, &rw) || rw.Next != hs[5].NextID() || !rw.Shrank {
		t.Fatalf("after a rewrite in place: %v (%+v)", err, rw)
	}
	// A new follower sees the new timeline.
	g := mustFollow(t, dir)
	if last, _ := g.LastChunk(); last != h {
		t.Fatalf("new follower's last chunk %+v, want %+v", last, h)
	}
}

// A vanished last segment proves a rewrite only while an older segment of the view is still
// there (the writer truncated into it and deleted the later files): the writer's retention
// deletes the oldest first, so a view whose every segment vanished (retention ran past it
// all, the writer rolled on) is a rewrite for the follower, but not a proven one.
func TestFollowRewriteEvidence(t *testing.T) {
	build := func(t *testing.T) (string, *Log, []SegmentInfo) {
		dir := t.TempDir()
		w := mustOpen(t, dir, Options{MaxSegmentBytes: 300})
		appendN(t, w, 8, 1)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		f := mustFollow(t, dir)
		segs := f.Segments()
		if len(segs) < 3 {
			t.Fatalf("want at least 3 segments, got %d", len(segs))
		}
		return dir, f, segs
	}
	remove := func(t *testing.T, dir string, s SegmentInfo) {
		for _, name := range []string{s.Name, IndexName(s.FirstOffset)} {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Run("last-gone-older-kept", func(t *testing.T) {
		dir, f, segs := build(t)
		remove(t, dir, segs[len(segs)-1])
		var rw *RewrittenError
		if _, err := f.Refresh(); !errors.As(err, &rw) || !rw.Shrank || !strings.Contains(rw.Detail, segs[0].Name) {
			t.Fatalf("the last segment gone, the older ones kept: %v (%+v)", err, rw)
		}
	})
	t.Run("all-gone", func(t *testing.T) {
		dir, f, segs := build(t)
		for _, s := range segs {
			remove(t, dir, s)
		}
		var rw *RewrittenError
		if _, err := f.Refresh(); !errors.As(err, &rw) || rw.Shrank {
			t.Fatalf("every segment seen gone: %v (%+v), want a rewrite not proven", err, rw)
		}
	})
}

// Opening read-only, refreshing, reading and closing change no byte of the directory, on a
// copy of the RabbitMQ directory with a torn tail added; the follower sees exactly
// RabbitMQ's chunks. Append is refused; a writable log does not Refresh.
func TestFollowReadOnlyNeverWrites(t *testing.T) {
	dir := copyDir(t, realDir)
	golden := loadGolden(t)
	lastSeg := golden[len(golden)-1].segment
	appendFile(t, filepath.Join(dir, lastSeg), []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	appendFile(t, filepath.Join(dir, IndexName(mustParse(t, lastSeg))), make([]byte, 12))
	before := dirHash(t, dir)

	f := mustFollow(t, dir)
	mustRefresh(t, f)
	commitAll(t, f)
	got := readAll(t, f)
	if len(got) != len(golden) {
		t.Fatalf("follower read %d chunks, RabbitMQ wrote %d", len(got), len(golden))
	}
	for i, g := range golden {
		if got[i].ChunkID != g.chunkID || got[i].DataCRC != g.crc {
			t.Fatalf("chunk %d: %+v, golden %+v", i, got[i], g)
		}
	}
	if _, _, err := f.Append(userChunk(9, 1, "no")); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("append on a follower: %v", err)
	}
	if _, _, err := f.AppendRaw(make([]byte, 10)); err == nil {
		t.Fatal("raw append on a follower accepted")
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if after := dirHash(t, dir); after != before {
		t.Fatal("the read-only log changed the directory")
	}
	w := mustOpen(t, t.TempDir(), Options{})
	if _, err := w.Refresh(); err == nil {
		t.Fatal("refresh of a writable log accepted")
	}
	if _, err := Open(t.TempDir(), Options{ReadOnly: true}); err == nil {
		t.Fatal("follow of an empty directory accepted")
	}
	if _, err := Open(filepath.Join(t.TempDir(), "none"), Options{ReadOnly: true}); err == nil {
		t.Fatal("follow of a missing directory accepted")
	}
}

func mustParse(t testing.TB, segment string) uint64 {
	t.Helper()
	id, err := ParseSegmentName(segment)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// The writer's retention deletes its oldest segments: they leave the follower's view and a
// reader there gets ErrSegmentGone. The follower's own retention deletes nothing
// (ErrReadOnly): the files are the writer's.
func TestFollowSegmentsDeletedAndRetention(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{MaxSegmentChunks: 3})
	appendN(t, w, 12, 1)
	f := mustFollow(t, dir)
	commitAll(t, f)
	segs := f.Segments()
	if len(segs) != 4 {
		t.Fatalf("%d segments, want 4", len(segs))
	}
	r, err := f.NewReader(0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := w.ApplyRetention(RetentionPolicy{MayDelete: func(s SegmentInfo) bool { return s.FirstOffset < segs[1].NextOffset }}, time.Now()); err != nil {
		t.Fatal(err)
	}
	st := mustRefresh(t, f)
	if len(st.Dropped) != 2 || st.Dropped[0] != segs[0].Name || f.FirstOffset() != segs[2].FirstOffset {
		t.Fatalf("after the writer's retention: %+v, first %d", st, f.FirstOffset())
	}
	if _, _, err := r.Next(); !errors.Is(err, ErrSegmentGone) {
		t.Fatalf("reader in a deleted segment: %v", err)
	}
	// The follower deletes nothing: the writer's files are its own to trim.
	deleted, err := f.ApplyRetention(RetentionPolicy{MayDelete: func(SegmentInfo) bool { return true }}, time.Now())
	if !errors.Is(err, ErrReadOnly) || len(deleted) != 0 || len(f.Segments()) != 2 {
		t.Fatalf("follower's retention deleted %v, %v (%d segments left); want ErrReadOnly and nothing", deleted, err, len(f.Segments()))
	}
	if _, err := os.Stat(filepath.Join(dir, segs[2].Name)); err != nil {
		t.Fatalf("segment %s after the follower's retention: %v", segs[2].Name, err)
	}
	appendN(t, w, 1, 1)
	if st := mustRefresh(t, f); st.Next != w.NextOffset() || len(f.Segments()) != 3 {
		t.Fatalf("after one more chunk (a new segment): %+v, %d segments", st, len(f.Segments()))
	}
}

// One Refresh catches up on more chunks than one batch of index records holds, across
// segment rolls, and sees them all.
func TestFollowRefreshCatchesUpManyChunks(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{MaxSegmentChunks: 50_000, IdleClose: -1})
	appendN(t, w, 1, 1)
	f := mustFollow(t, dir)
	const n = scanBatch + 10_000
	for i := range n {
		if _, _, err := w.Append(userChunk(1, int64(i), "r")); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	st := mustRefresh(t, f)
	took := time.Since(start)
	if st.Next != w.NextOffset() || len(f.Segments()) != len(w.Segments()) {
		t.Fatalf("after one refresh: next %d, %d segments; the writer %d, %d", st.Next, len(f.Segments()), w.NextOffset(), len(w.Segments()))
	}
	t.Logf("one refresh saw %d chunks in %s (%.0f chunks/s)", n, took, float64(n)/took.Seconds())
	commitAll(t, f)
	if got := len(readAll(t, f)); got != n+1 {
		t.Fatalf("read %d chunks, want %d", got, n+1)
	}
}

// A follower that opens while the writer is rolling (the new segment's file header not yet
// whole) sees nothing there yet, and refreshing the unchanged files is not a rewrite; the
// headers completed, still nothing, then the writer's chunks. Before, the open recorded a
// whole header's size and the next Refresh reported "the segment shrank": the node would
// restart the stream at every look for as long as the roll lasted.
func TestFollowOpensDuringARoll(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{})
	appendN(t, w, 3, 1)
	next := w.NextOffset()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	seg, idx := filepath.Join(dir, SegmentName(next)), filepath.Join(dir, IndexName(next))
	if err := os.WriteFile(seg, segmentFileHeader[:3], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(idx, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f := mustFollow(t, dir)
	if f.NextOffset() != next {
		t.Fatalf("follower at %d, want %d", f.NextOffset(), next)
	}
	for range 3 {
		if st := mustRefresh(t, f); st.Next != next {
			t.Fatalf("refresh during the roll: %+v", st)
		}
	}
	if err := os.WriteFile(seg, segmentFileHeader, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(idx, indexFileHeader, 0o644); err != nil {
		t.Fatal(err)
	}
	if st := mustRefresh(t, f); st.Next != next {
		t.Fatalf("refresh after the headers: %+v", st)
	}
	w = mustOpen(t, dir, Options{})
	defer w.Close()
	appendN(t, w, 2, 1)
	if st := mustRefresh(t, f); st.Next != w.NextOffset() {
		t.Fatalf("refresh after two more chunks: %+v, want next %d", st, w.NextOffset())
	}
}

// The follower opened during a roll (the last segment holds no chunk yet); before it looks
// again, the writer truncates the previous segment's last chunk, writes it again at a
// higher epoch with as many records (so the next offset is the same) and rolls again to
// the same file name. Refresh is ErrRewritten naming the segment whose chunk changed.
// Before, every rewrite check was skipped while the last segment held no chunk seen, and
// the follower took the new segment's chunks on top of the replaced one.
func TestFollowRewriteDuringARoll(t *testing.T) {
	dir := t.TempDir()
	opts := Options{MaxSegmentChunks: 3}
	w := mustOpen(t, dir, opts)
	hs := appendN(t, w, 3, 1)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	next := hs[2].NextID()
	seg0 := w.Segments()[0]
	// The roll: the new segment's file headers are whole, no chunk yet.
	if err := os.WriteFile(filepath.Join(dir, SegmentName(next)), segmentFileHeader, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, IndexName(next)), indexFileHeader, 0o644); err != nil {
		t.Fatal(err)
	}
	f := mustFollow(t, dir)
	commitAll(t, f)
	if f.NextOffset() != next || len(f.Segments()) != 2 {
		t.Fatalf("follower at %d with %d segments, want %d and 2", f.NextOffset(), len(f.Segments()), next)
	}

	// The writer's truncation: the later segment goes, the last chunk is cut.
	for _, name := range []string{SegmentName(next), IndexName(next)} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Truncate(filepath.Join(dir, seg0.Name), seg0.Size-hs[2].Size()); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, IndexName(seg0.FirstOffset)), FileHeaderSize+2*IndexRecordSize); err != nil {
		t.Fatal(err)
	}
	w = mustOpen(t, dir, opts)
	bodies := make([]string, hs[2].Records)
	for j := range bodies {
		bodies[j] = fmt.Sprintf("epoch 2 record %d", j)
	}
	h, _, err := w.Append(userChunk(2, 2002, bodies...))
	if err != nil {
		t.Fatal(err)
	}
	if h.ChunkID != hs[2].ChunkID || h.NextID() != next || h == hs[2] {
		t.Fatalf("rewritten chunk %+v, want id %d, next %d and other contents than %+v", h, hs[2].ChunkID, next, hs[2])
	}
	more := appendN(t, w, 2, 2)
	if segs := w.Segments(); len(segs) != 2 || segs[1].Name != SegmentName(next) {
		t.Fatalf("writer segments %+v, want a second one named %s", segs, SegmentName(next))
	}

	_, err = f.Refresh()
	var rw *RewrittenError
	if !errors.Is(err, ErrRewritten) || !errors.As(err, &rw) || rw.Segment != seg0.Name || rw.Next != next || rw.Last != hs[2].ChunkID {
		t.Fatalf("refresh after the rewrite and the roll: %v (%+v); want ErrRewritten in %s", err, rw, seg0.Name)
	}
	if f.NextOffset() != next {
		t.Fatalf("view moved to %d", f.NextOffset())
	}
	// A new follower sees the new timeline.
	g := mustFollow(t, dir)
	if last, _ := g.LastChunk(); last != more[1] {
		t.Fatalf("new follower's last chunk %+v, want %+v", last, more[1])
	}
}
