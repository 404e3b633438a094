package segments

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/streamtier/streamtier/chunk"
)

// baseLog writes a closed log of 12 chunks in segments of 5 chunks, starting at offset
// 100, and returns its directory and the headers written.
func baseLog(t *testing.T) (string, []chunk.Header) {
	t.Helper()
	dir := t.TempDir()
	l, err := Open(dir, Options{MaxSegmentChunks: 5, FirstOffset: 100})
	if err != nil {
		t.Fatal(err)
	}
	hs := appendN(t, l, 12, 1)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, hs
}

func appendFile(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// Every kind of torn tail a crash leaves is repaired on open, keeping exactly the complete,
// indexed chunks with valid CRCs; the repaired log scans clean and takes appends.
func TestRecoveryFromTornTails(t *testing.T) {
	type damage func(t *testing.T, dir string, hs []chunk.Header)
	lastSeg := func(hs []chunk.Header) uint64 { return hs[10].ChunkID } // segments hold 5 chunks
	cases := []struct {
		name   string
		damage damage
		keep   int // chunks that survive
	}{
		{"clean", func(*testing.T, string, []chunk.Header) {}, 12},
		{"partial index record", func(t *testing.T, dir string, hs []chunk.Header) {
			appendFile(t, filepath.Join(dir, IndexName(lastSeg(hs))), []byte{0, 0, 0, 0, 0, 0, 1, 2, 3, 4})
		}, 12},
		{"zero tail records", func(t *testing.T, dir string, hs []chunk.Header) {
			appendFile(t, filepath.Join(dir, IndexName(lastSeg(hs))), make([]byte, 3*IndexRecordSize+7))
		}, 12},
		{"garbage tail record", func(t *testing.T, dir string, hs []chunk.Header) {
			rec := AppendIndexRecord(nil, IndexRecord{ChunkID: 999, Epoch: 1, Position: 1 << 20})
			appendFile(t, filepath.Join(dir, IndexName(lastSeg(hs))), rec)
		}, 12},
		{"torn chunk without index record", func(t *testing.T, dir string, hs []chunk.Header) {
			b, _, _ := EncodeChunk(nil, userChunk(1, 5, "torn"), hs[11].NextID())
			appendFile(t, filepath.Join(dir, SegmentName(lastSeg(hs))), b[:30])
		}, 12},
		{"torn chunk with its index record", func(t *testing.T, dir string, hs []chunk.Header) {
			seg := filepath.Join(dir, SegmentName(lastSeg(hs)))
			pos := fileSize(t, seg)
			b, h, _ := EncodeChunk(nil, userChunk(1, 5, "torn chunk body"), hs[11].NextID())
			appendFile(t, seg, b[:len(b)-3])
			appendFile(t, filepath.Join(dir, IndexName(lastSeg(hs))),
				AppendIndexRecord(nil, IndexRecord{ChunkID: h.ChunkID, Timestamp: h.Timestamp, Epoch: h.Epoch, Position: uint32(pos)}))
		}, 12},
		{"complete chunk not indexed", func(t *testing.T, dir string, hs []chunk.Header) {
			b, _, _ := EncodeChunk(nil, userChunk(1, 5, "unindexed"), hs[11].NextID())
			appendFile(t, filepath.Join(dir, SegmentName(lastSeg(hs))), b)
		}, 12},
		{"bad CRC in the last chunk", func(t *testing.T, dir string, hs []chunk.Header) {
			seg := filepath.Join(dir, SegmentName(lastSeg(hs)))
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)-2] ^= 0xff // inside the last chunk's data (no trailer)
			if err := os.WriteFile(seg, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}, 11},
		{"last index record lost, zeros instead", func(t *testing.T, dir string, hs []chunk.Header) {
			idx := filepath.Join(dir, IndexName(lastSeg(hs)))
			b, _ := os.ReadFile(idx)
			copy(b[len(b)-IndexRecordSize:], make([]byte, IndexRecordSize))
			os.WriteFile(idx, b, 0o644)
		}, 11},
		{"index holds only its header", func(t *testing.T, dir string, hs []chunk.Header) {
			os.Truncate(filepath.Join(dir, IndexName(lastSeg(hs))), FileHeaderSize)
		}, 10},
		{"segment without index after the last", func(t *testing.T, dir string, hs []chunk.Header) {
			appendFile(t, filepath.Join(dir, SegmentName(hs[11].NextID())), segmentFileHeader)
		}, 12},
		{"index without segment after the last", func(t *testing.T, dir string, hs []chunk.Header) {
			appendFile(t, filepath.Join(dir, IndexName(hs[11].NextID())), indexFileHeader)
		}, 12},
		{"segment without index before the first (retention cut short)", func(t *testing.T, dir string, hs []chunk.Header) {
			appendFile(t, filepath.Join(dir, SegmentName(50)), segmentFileHeader)
		}, 12},
		{"index without segment before the first", func(t *testing.T, dir string, hs []chunk.Header) {
			appendFile(t, filepath.Join(dir, IndexName(50)), indexFileHeader)
		}, 12},
		{"roll cut short: empty index, torn segment header", func(t *testing.T, dir string, hs []chunk.Header) {
			appendFile(t, filepath.Join(dir, SegmentName(hs[11].NextID())), segmentFileHeader[:3])
			appendFile(t, filepath.Join(dir, IndexName(hs[11].NextID())), nil)
		}, 12},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, hs := baseLog(t)
			c.damage(t, dir, hs)
			l, err := Open(dir, Options{MaxSegmentChunks: 5})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			want := hs[c.keep-1].NextID()
			if l.NextOffset() != want || l.FirstOffset() != 100 {
				t.Fatalf("recovered to [%d, %d), want [100, %d)", l.FirstOffset(), l.NextOffset(), want)
			}
			if h, ok := l.LastChunk(); !ok || h != hs[c.keep-1] {
				t.Fatalf("last chunk %+v, want %+v", h, hs[c.keep-1])
			}
			// The directory is a clean log again: every file accounted for, every CRC good.
			n := 0
			sum, err := Scan(dir, func(sc ScannedChunk) error {
				if !sc.CRCOK || sc.Header != hs[n] {
					t.Fatalf("after recovery chunk %+v", sc)
				}
				n++
				return nil
			})
			if err != nil || n != c.keep || len(sum.Skipped) != 0 || sum.NextOffset != want {
				t.Fatalf("scan after recovery: %v, %d chunks, %+v", err, n, sum)
			}
			h, loc, err := l.Append(userChunk(1, 9, "after recovery"))
			if err != nil || h.ChunkID != want {
				t.Fatalf("append after recovery: %+v %v", h, err)
			}
			segs := l.Segments()
			if act := segs[len(segs)-1]; loc.Segment != act.Name || loc.Position+loc.Size != act.Size {
				t.Fatalf("appended at %+v, active segment %+v", loc, act)
			}
			if err := l.SetCommitted(h.ChunkID); err != nil {
				t.Fatal(err)
			}
			r, err := l.NewReader(want)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if got, _, err := r.Next(); err != nil || got != h {
				t.Fatalf("read back %+v %v", got, err)
			}
		})
	}
}

// What recovery must not guess about is refused with an error naming the file.
func TestRecoveryRefusesDamagedLogs(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string, hs []chunk.Header)
		want   string
	}{
		{"segment without index in the middle", func(t *testing.T, dir string, hs []chunk.Header) {
			os.Remove(filepath.Join(dir, IndexName(hs[5].ChunkID)))
		}, SegmentName(hs0(5))},
		{"bad segment file header", func(t *testing.T, dir string, hs []chunk.Header) {
			f, _ := os.OpenFile(filepath.Join(dir, SegmentName(hs[10].ChunkID)), os.O_WRONLY, 0)
			f.WriteAt([]byte("XXXX"), 0)
			f.Close()
		}, "file header"},
		{"sealed segment shorter than its index says", func(t *testing.T, dir string, hs []chunk.Header) {
			os.Truncate(filepath.Join(dir, SegmentName(hs[0].ChunkID)), 100)
		}, SegmentName(hs0(0)) + " is 100 bytes, but its index"},
		{"sealed segment with extra bytes", func(t *testing.T, dir string, hs []chunk.Header) {
			appendFile(t, filepath.Join(dir, SegmentName(hs[5].ChunkID)), []byte{1})
		}, SegmentName(hs0(5))},
		// A segment without its index that holds chunks is not what a crash leaves (at most
		// a file header): deleting it as debris would throw its chunks away.
		{"segment with chunks, without index, after the last", func(t *testing.T, dir string, hs []chunk.Header) {
			copyFile(t, filepath.Join(dir, SegmentName(hs[0].ChunkID)), filepath.Join(dir, SegmentName(hs[11].NextID())))
		}, SegmentName(hs0(12))},
		{"segment with chunks, without index, before the first", func(t *testing.T, dir string, hs []chunk.Header) {
			copyFile(t, filepath.Join(dir, SegmentName(hs[0].ChunkID)), filepath.Join(dir, SegmentName(50)))
		}, SegmentName(50)},
		{"debris beside a segment with chunks: nothing removed", func(t *testing.T, dir string, hs []chunk.Header) {
			appendFile(t, filepath.Join(dir, IndexName(50)), indexFileHeader)
			copyFile(t, filepath.Join(dir, SegmentName(hs[0].ChunkID)), filepath.Join(dir, SegmentName(hs[11].NextID())))
		}, SegmentName(hs0(12))},
		{"segments only: a copy without its index files", func(t *testing.T, dir string, hs []chunk.Header) {
			for _, h := range hs {
				os.Remove(filepath.Join(dir, IndexName(h.ChunkID)))
			}
		}, SegmentName(hs0(0))},
		{"a segment-named file that is no segment, alone", func(t *testing.T, dir string, hs []chunk.Header) {
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				os.Remove(filepath.Join(dir, e.Name()))
			}
			os.WriteFile(filepath.Join(dir, SegmentName(0)), []byte("not an osiris segment, but somebody's data"), 0o644)
		}, SegmentName(0)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, hs := baseLog(t)
			c.damage(t, dir, hs)
			before := dirContents(t, dir)
			_, err := Open(dir, Options{MaxSegmentChunks: 5})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one naming %q", err, c.want)
			}
			// A refused open changes nothing (the lock file aside).
			after := dirContents(t, dir)
			delete(before, LockFileName)
			delete(after, LockFileName)
			if !maps.Equal(before, after) {
				t.Fatalf("the refused open changed the directory: files before %v, after %v", slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
			}
		})
	}
}

// dirContents maps every file of dir to its contents.
func dirContents(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

// copyFile copies the file at from to a new file at to.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// hs0 is the chunk id of chunk i of baseLog (one to three records per chunk, from 100).
func hs0(i int) uint64 {
	id := uint64(100)
	for j := range i {
		id += uint64(1 + j%3)
	}
	return id
}
