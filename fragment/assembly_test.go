package fragment

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/segments"
)

// chunkAt builds a header of total on-disk size size (>= 48) and its location.
func chunkAt(id uint64, records uint32, size int64, ts int64, seg string, pos int64) (chunk.Header, chunk.Location) {
	h := chunk.Header{Records: records, Timestamp: ts, ChunkID: id, DataLen: uint32(size - chunk.HeaderSize)}
	return h, chunk.Location{Segment: seg, Position: pos, Size: h.Size()}
}

func mustAssembly(t *testing.T, target uint64) *Assembly {
	t.Helper()
	a, err := NewAssembly(target)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestAssemblyCutsAtTargetWithCrossingChunk(t *testing.T) {
	a := mustAssembly(t, 1000)
	pos := int64(8)
	var cuts []bool
	for i, size := range []int64{400, 400, 300} { // 400, 800, 1100: the third crosses
		h, loc := chunkAt(uint64(i*10), 10, size, int64(100+i), "0.segment", pos)
		pos += size
		cut, err := a.Add(h, loc)
		if err != nil {
			t.Fatal(err)
		}
		cuts = append(cuts, cut)
	}
	if fmt.Sprint(cuts) != "[false false true]" {
		t.Fatalf("cut decisions %v, want only the crossing chunk to cut", cuts)
	}
	d, ok := a.Cut()
	if !ok {
		t.Fatal("cut of a full assembly returned nothing")
	}
	if d.FirstOffset != 0 || d.NextOffset != 30 || d.Size != 1100 || d.FirstTimestamp != 100 || d.LastTimestamp != 102 {
		t.Fatalf("description %+v", d)
	}
	if got := []uint32{d.Chunks[0].Position, d.Chunks[1].Position, d.Chunks[2].Position}; fmt.Sprint(got) != "[8 408 808]" {
		t.Fatalf("object positions %v, want [8 408 808]", got)
	}
	if len(d.Spans) != 1 || d.Spans[0] != (Span{"0.segment", 8, 1108}) {
		t.Fatalf("spans %+v", d.Spans)
	}
	if d.ObjectSize() != 8+1100+3*20 {
		t.Fatalf("object size %d", d.ObjectSize())
	}
	if !a.Empty() || a.Size() != 0 {
		t.Fatal("assembly not empty after the cut")
	}
	if _, ok := a.Cut(); ok {
		t.Fatal("cut of an empty assembly returned a fragment")
	}
}

func TestAssemblyExactTargetCuts(t *testing.T) {
	a := mustAssembly(t, 1000)
	h, loc := chunkAt(5, 1, 500, 1, "s", 8)
	if cut, _ := a.Add(h, loc); cut {
		t.Fatal("cut below target")
	}
	h, loc = chunkAt(6, 1, 500, 2, "s", 508)
	if cut, _ := a.Add(h, loc); !cut {
		t.Fatal("no cut at exactly the target size")
	}
}

func TestAssemblyOversizedChunkIsItsOwnFragment(t *testing.T) {
	a := mustAssembly(t, 100)
	h, loc := chunkAt(0, 3, 5000, 9, "s", 8)
	cut, err := a.Add(h, loc)
	if err != nil || !cut {
		t.Fatalf("cut=%v err=%v, want a cut", cut, err)
	}
	d, _ := a.Cut()
	if len(d.Chunks) != 1 || d.Size != 5000 || d.NextOffset != 3 {
		t.Fatalf("description %+v", d)
	}
}

func TestAssemblySpansAcrossSegmentRoll(t *testing.T) {
	a := mustAssembly(t, 1<<20)
	add := func(id uint64, size int64, seg string, pos int64) {
		t.Helper()
		h, loc := chunkAt(id, 1, size, int64(id), seg, pos)
		if _, err := a.Add(h, loc); err != nil {
			t.Fatal(err)
		}
	}
	add(10, 100, "10.segment", 900) // fragment starts mid-segment
	add(11, 100, "10.segment", 1000)
	add(12, 200, "12.segment", 8) // roll
	add(13, 50, "12.segment", 208)
	add(14, 60, "14.segment", 8) // another roll
	d, _ := a.Cut()
	want := []Span{{"10.segment", 900, 1100}, {"12.segment", 8, 258}, {"14.segment", 8, 68}}
	if fmt.Sprint(d.Spans) != fmt.Sprint(want) {
		t.Fatalf("spans %v, want %v", d.Spans, want)
	}
	var spanBytes int64
	for _, s := range d.Spans {
		spanBytes += s.End - s.Start
	}
	if uint64(spanBytes) != d.Size || d.Size != 510 {
		t.Fatalf("span bytes %d, size %d", spanBytes, d.Size)
	}
	if p := d.Chunks[4].Position; p != 8+450 {
		t.Fatalf("last chunk position %d, want 458", p)
	}
}

func TestAssemblyRefusesBadChunks(t *testing.T) {
	cases := []struct {
		name string
		prep func(a *Assembly)
		h    chunk.Header
		loc  chunk.Location
		want string
	}{
		{"zero records", nil, chunk.Header{ChunkID: 1}, chunk.Location{Segment: "s", Position: 8, Size: 48}, "uses no offset"},
		{"no segment", nil, chunk.Header{ChunkID: 1, Records: 1}, chunk.Location{Position: 8, Size: 48}, "no segment file"},
		{"size mismatch", nil, chunk.Header{ChunkID: 1, Records: 1, DataLen: 10}, chunk.Location{Segment: "s", Position: 8, Size: 48}, "location size 48, header says 58"},
		{"inside segment header", nil, chunk.Header{ChunkID: 1, Records: 1}, chunk.Location{Segment: "s", Position: 4, Size: 48}, "inside the segment header"},
		{"offset overflow", nil, chunk.Header{ChunkID: ^uint64(0), Records: 1}, chunk.Location{Segment: "s", Position: 8, Size: 48}, "overflows"},
		{"object beyond 32 bits", nil, chunk.Header{ChunkID: 1, Records: 1, DataLen: 1<<32 - 40}, chunk.Location{Segment: "s", Position: 8, Size: 1<<32 + 8}, "32-bit index positions"},
		{"gap in offsets", func(a *Assembly) { h, l := chunkAt(0, 5, 100, 0, "s", 8); a.Add(h, l) },
			chunk.Header{ChunkID: 6, Records: 1}, chunk.Location{Segment: "s", Position: 108, Size: 48}, "chunk 6 does not follow offset 5"},
		{"gap in segment", func(a *Assembly) { h, l := chunkAt(0, 5, 100, 0, "s", 8); a.Add(h, l) },
			chunk.Header{ChunkID: 5, Records: 1}, chunk.Location{Segment: "s", Position: 200, Size: 48}, "expected 108"},
		{"roll not at start", func(a *Assembly) { h, l := chunkAt(0, 5, 100, 0, "s", 8); a.Add(h, l) },
			chunk.Header{ChunkID: 5, Records: 1}, chunk.Location{Segment: "t", Position: 60, Size: 48}, "a rolled segment starts at 8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := mustAssembly(t, 1000)
			if c.prep != nil {
				c.prep(a)
			}
			before := a.Snapshot()
			cut, err := a.Add(c.h, c.loc)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one containing %q", err, c.want)
			}
			if cut {
				t.Fatal("refused chunk reported a cut")
			}
			after := a.Snapshot()
			if after.Size != before.Size || len(after.Chunks) != len(before.Chunks) || after.NextOffset != before.NextOffset {
				t.Fatal("refused chunk changed the assembly")
			}
		})
	}
}

func TestNewAssemblyRefusesBadTarget(t *testing.T) {
	if _, err := NewAssembly(0); err == nil {
		t.Fatal("target 0 accepted")
	}
	if _, err := NewAssembly(MaxTargetSize + 1); err == nil || !strings.Contains(err.Error(), "32-bit") {
		t.Fatalf("oversized target: %v", err)
	}
}

func TestAssemblyDiscard(t *testing.T) {
	a := mustAssembly(t, 1000)
	h, loc := chunkAt(0, 1, 100, 0, "s", 8)
	a.Add(h, loc)
	if n := a.Discard(); n != 1 || !a.Empty() {
		t.Fatalf("discard returned %d, empty=%v", n, a.Empty())
	}
	// after a discard the assembly accepts any offset again (a reset jumps forward)
	h, loc = chunkAt(500, 1, 100, 0, "t", 8)
	if _, err := a.Add(h, loc); err != nil {
		t.Fatal(err)
	}
	if a.FirstOffset() != 500 || a.NextOffset() != 501 || a.Len() != 1 {
		t.Fatalf("after discard: first %d next %d len %d", a.FirstOffset(), a.NextOffset(), a.Len())
	}
}

// TestAssemblyProperties drives random chunk streams with segment rolls through the assembly
// and checks every fragment against the chunks that went in.
func TestAssemblyProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		target := rapid.Uint64Range(48, 5000).Draw(t, "target")
		a, err := NewAssembly(target)
		if err != nil {
			t.Fatal(err)
		}
		n := rapid.IntRange(1, 200).Draw(t, "chunks")
		var in []Chunk
		var out []Description
		id := rapid.Uint64Range(0, 1<<40).Draw(t, "first")
		seg, pos := fmt.Sprintf("%020d.segment", id), int64(8)
		for i := 0; i < n; i++ {
			if i > 0 && rapid.IntRange(0, 9).Draw(t, "roll") == 0 {
				seg, pos = fmt.Sprintf("%020d.segment", id), 8
			}
			records := rapid.Uint32Range(1, 100).Draw(t, "records")
			size := rapid.Int64Range(48, 2000).Draw(t, "size")
			h, loc := chunkAt(id, records, size, int64(i*3), seg, pos)
			cut, err := a.Add(h, loc)
			if err != nil {
				t.Fatal(err)
			}
			in = append(in, Chunk{Header: h, Location: loc})
			id, pos = h.NextID(), pos+size
			if cut || rapid.IntRange(0, 30).Draw(t, "force") == 0 {
				d, ok := a.Cut()
				if !ok {
					t.Fatal("cut returned nothing")
				}
				if cut && d.Size < target {
					t.Fatalf("cut at %d below target %d", d.Size, target)
				}
				out = append(out, d)
			}
		}
		if d, ok := a.Cut(); ok {
			out = append(out, d)
		}
		var got []Chunk
		for fi, d := range out {
			if err := CheckDescription(d); err != nil {
				t.Fatalf("fragment %d: %v", fi, err)
			}
			if d.Size >= target && d.Size-uint64(d.Chunks[len(d.Chunks)-1].Location.Size) >= target {
				t.Fatalf("fragment %d: size %d was already at target %d before its last chunk", fi, d.Size, target)
			}
			var sum uint64
			var spanBytes int64
			for _, s := range d.Spans {
				spanBytes += s.End - s.Start
			}
			for ci, c := range d.Chunks {
				if c.Position != uint32(ObjectHeaderSize+sum) {
					t.Fatalf("fragment %d chunk %d at %d, want %d", fi, ci, c.Position, ObjectHeaderSize+sum)
				}
				sum += uint64(c.Location.Size)
				got = append(got, c)
			}
			if sum != d.Size || uint64(spanBytes) != d.Size {
				t.Fatalf("fragment %d: size %d, chunk sum %d, span bytes %d", fi, d.Size, sum, spanBytes)
			}
			if d.FirstOffset != d.Chunks[0].Header.ChunkID || d.NextOffset != d.Chunks[len(d.Chunks)-1].Header.NextID() {
				t.Fatalf("fragment %d offsets [%d,%d)", fi, d.FirstOffset, d.NextOffset)
			}
			if d.FirstTimestamp != d.Chunks[0].Header.Timestamp || d.LastTimestamp != d.Chunks[len(d.Chunks)-1].Header.Timestamp {
				t.Fatalf("fragment %d timestamps", fi)
			}
			if fi > 0 && d.FirstOffset != out[fi-1].NextOffset {
				t.Fatalf("fragment %d starts at %d, previous ended at %d", fi, d.FirstOffset, out[fi-1].NextOffset)
			}
			for si := 1; si < len(d.Spans); si++ {
				if d.Spans[si].Segment == d.Spans[si-1].Segment || d.Spans[si].Start != 8 {
					t.Fatalf("fragment %d span %d: %+v", fi, si, d.Spans)
				}
			}
		}
		if len(got) != len(in) {
			t.Fatalf("%d chunks out, %d in", len(got), len(in))
		}
		for i := range in {
			if got[i].Header != in[i].Header || got[i].Location != in[i].Location {
				t.Fatalf("chunk %d differs", i)
			}
		}
	})
}

// TestAssemblyOverRealRabbitMQLog assembles the chunks of a real osiris stream directory
// (seven rolled segments) and checks that the spans, read back from the files, hold the
// chunks byte for byte with valid data CRCs at the recorded object positions.
func TestAssemblyOverRealRabbitMQLog(t *testing.T) {
	dir := filepath.Join("..", "segments", "testdata", "rabbitmq-3.10.8-amqp")
	names, err := filepath.Glob(filepath.Join(dir, "*.segment"))
	if err != nil || len(names) != 7 {
		t.Fatalf("segments: %v (%d files)", err, len(names))
	}
	sort.Strings(names)
	a := mustAssembly(t, 300_000) // several fragments, some crossing rolls
	var frags []Description
	chunks := 0
	for _, path := range names {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(path)
		for pos := int64(8); pos < int64(len(data)); {
			h, err := chunk.ParseHeader(data[pos:])
			if err != nil {
				t.Fatalf("%s at %d: %v", name, pos, err)
			}
			cut, err := a.Add(h, chunk.Location{Segment: name, Position: pos, Size: h.Size()})
			if err != nil {
				t.Fatal(err)
			}
			chunks++
			pos += h.Size()
			if cut {
				d, _ := a.Cut()
				frags = append(frags, d)
			}
		}
	}
	if d, ok := a.Cut(); ok {
		frags = append(frags, d)
	}
	if chunks != 456 {
		t.Fatalf("%d chunks, the log holds 456", chunks)
	}
	if frags[0].FirstOffset != 0 || frags[len(frags)-1].NextOffset != 25006 {
		t.Fatalf("fragments cover [%d,%d), want [0,25006)", frags[0].FirstOffset, frags[len(frags)-1].NextOffset)
	}
	crossing := 0
	for _, d := range frags {
		if err := CheckDescription(d); err != nil {
			t.Fatal(err)
		}
		if len(d.Spans) > 1 {
			crossing++
		}
		// the chunk region as an upload would stream it: the spans read from the files
		var region bytes.Buffer
		for _, s := range d.Spans {
			f, err := segments.OpenSegment(dir, s.Segment)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(&region, io.NewSectionReader(f, s.Start, s.End-s.Start)); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		if uint64(region.Len()) != d.Size {
			t.Fatalf("fragment [%d,%d): region %d bytes, size %d", d.FirstOffset, d.NextOffset, region.Len(), d.Size)
		}
		b := region.Bytes()
		for _, c := range d.Chunks {
			at := int64(c.Position) - ObjectHeaderSize
			h, err := chunk.ParseHeader(b[at:])
			if err != nil || h != c.Header {
				t.Fatalf("chunk %d at object position %d: %v", c.Header.ChunkID, c.Position, err)
			}
			body := b[at+chunk.HeaderSize+int64(h.BloomSize) : at+chunk.HeaderSize+int64(h.BloomSize)+int64(h.DataLen)]
			if crc32.ChecksumIEEE(body) != h.DataCRC {
				t.Fatalf("chunk %d: data CRC mismatch", h.ChunkID)
			}
		}
	}
	if crossing == 0 {
		t.Fatal("no fragment crossed a segment roll; the test lost its point")
	}
	_, err = segments.OpenSegment(dir, "00000000000000099999.segment")
	if !errors.Is(err, segments.ErrSegmentGone) {
		t.Fatalf("missing segment: %v", err)
	}
}

func BenchmarkAssemblyAdd(b *testing.B) {
	a, _ := NewAssembly(64 << 20)
	h, loc := chunkAt(0, 10, 1000, 1, "00000000000000000000.segment", 8)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		cut, err := a.Add(h, loc)
		if err != nil {
			b.Fatal(err)
		}
		if cut {
			a.Cut()
			loc.Segment = fmt.Sprintf("%020d.segment", h.NextID())
			loc.Position = 8
			h.ChunkID = h.NextID()
			continue
		}
		h.ChunkID = h.NextID()
		loc.Position += loc.Size
	}
}
