package fragment

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/streamtier/streamtier/chunk"
	"pgregory.net/rapid"
)

// memLog is an osiris log held in memory: segment name -> file bytes.
type memLog map[string][]byte

// read is the CRCReader over a memLog.
func (l memLog) read(seg string, off, n int64, crc uint32) (uint32, error) {
	b, ok := l[seg]
	if !ok {
		return 0, fmt.Errorf("no segment %s", seg)
	}
	if off+n > int64(len(b)) {
		return 0, fmt.Errorf("segment %s: %d bytes at %d beyond its %d", seg, n, off, len(b))
	}
	return crc32.Update(crc, crc32.IEEETable, b[off:off+n]), nil
}

// object builds the bytes of the object d describes from the log, independently of the
// code under test (plain appends).
func (l memLog) object(d Description) []byte {
	obj := []byte("OSIF\x00\x00\x00\x01")
	for _, s := range d.Spans {
		obj = append(obj, l[s.Segment][s.Start:s.End]...)
	}
	for _, c := range d.Chunks {
		var r [20]byte
		for i := 0; i < 8; i++ {
			r[i] = byte(c.Header.ChunkID >> (56 - 8*i))
			r[8+i] = byte(uint64(c.Header.Timestamp) >> (56 - 8*i))
		}
		for i := 0; i < 4; i++ {
			r[16+i] = byte(c.Position >> (24 - 8*i))
		}
		obj = append(obj, r[:]...)
	}
	return obj
}

// fataler is what the helpers need of *testing.T and *rapid.T.
type fataler interface {
	Fatalf(format string, args ...any)
}

// logChunk is a chunk and where it lives.
type logChunk struct {
	h   chunk.Header
	loc chunk.Location
}

// walk reads the chunk headers of every segment of l, in name order, from byte 8.
func (l memLog) walk(t fataler) []logChunk {
	names := make([]string, 0, len(l))
	for n := range l {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []logChunk
	for _, n := range names {
		b := l[n]
		for pos := int64(8); pos < int64(len(b)); {
			h, err := chunk.ParseHeader(b[pos:])
			if err != nil {
				t.Fatalf("%s at %d: %v", n, pos, err)
			}
			out = append(out, logChunk{h, chunk.Location{Segment: n, Position: pos, Size: h.Size()}})
			pos += h.Size()
		}
	}
	return out
}

// describe turns consecutive log chunks into one Description.
func describe(chunks []logChunk) Description {
	d := Description{FirstOffset: chunks[0].h.ChunkID, FirstTimestamp: chunks[0].h.Timestamp}
	for _, c := range chunks {
		if n := len(d.Spans); n > 0 && d.Spans[n-1].Segment == c.loc.Segment && d.Spans[n-1].End == c.loc.Position {
			d.Spans[n-1].End += c.loc.Size
		} else {
			d.Spans = append(d.Spans, Span{Segment: c.loc.Segment, Start: c.loc.Position, End: c.loc.Position + c.loc.Size})
		}
		d.Chunks = append(d.Chunks, Chunk{Header: c.h, Location: c.loc, Position: uint32(ObjectHeaderSize + d.Size)})
		d.Size += uint64(c.loc.Size)
		d.NextOffset = c.h.NextID()
		d.LastTimestamp = c.h.Timestamp
	}
	return d
}

// genLog draws a small random log of one or more segments.
func genLog(t *rapid.T) memLog {
	l := memLog{}
	id := rapid.Uint64Range(0, 1<<40).Draw(t, "first")
	nseg := rapid.IntRange(1, 3).Draw(t, "segments")
	for s := 0; s < nseg; s++ {
		name := fmt.Sprintf("%020d.segment", id)
		b := []byte("OSIL\x00\x00\x00\x01")
		for c, n := 0, rapid.IntRange(1, 5).Draw(t, "chunks"); c < n; c++ {
			data := rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, "data")
			trailer := rapid.SliceOfN(rapid.Byte(), 0, 40).Draw(t, "trailer")
			bloom := rapid.SliceOfN(rapid.Byte(), 0, 16).Draw(t, "bloom")
			h := chunk.Header{
				Type:       chunk.Type(rapid.IntRange(0, 2).Draw(t, "type")),
				Records:    rapid.Uint32Range(1, 100).Draw(t, "records"),
				Timestamp:  rapid.Int64().Draw(t, "ts"),
				Epoch:      rapid.Uint64Range(1, 9).Draw(t, "epoch"),
				ChunkID:    id,
				DataCRC:    crc32.ChecksumIEEE(data),
				DataLen:    uint32(len(data)),
				TrailerLen: uint32(len(trailer)),
				BloomSize:  uint8(len(bloom)),
			}
			b = chunk.AppendHeader(b, h)
			b = append(append(append(b, bloom...), data...), trailer...)
			id = h.NextID()
		}
		l[name] = b
	}
	return l
}

// multModPBitwise is zlib's bit-at-a-time multiplication modulo the reflected IEEE
// polynomial, the reference for the table-driven multModP.
func multModPBitwise(a, b uint32) uint32 {
	if a == 0 {
		return 0 // zlib's loop assumes a != 0
	}
	m := uint32(1) << 31
	var p uint32
	for {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				return p
			}
		}
		m >>= 1
		if b&1 != 0 {
			b = b>>1 ^ 0xedb88320
		} else {
			b >>= 1
		}
	}
}

func TestMultModP(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b := rapid.Uint32().Draw(t, "a"), rapid.Uint32().Draw(t, "b")
		if got, want := multModP(a, b), multModPBitwise(a, b); got != want {
			t.Fatalf("multModP(%08x, %08x) = %08x, want %08x", a, b, got, want)
		}
	})
	for _, a := range []uint32{0, 1, 1 << 31, 0xffffffff} {
		for _, b := range []uint32{0, 1, 1 << 31, 0xffffffff, 0xedb88320} {
			if got, want := multModP(a, b), multModPBitwise(a, b); got != want {
				t.Fatalf("multModP(%08x, %08x) = %08x, want %08x", a, b, got, want)
			}
		}
	}
}

func TestCombineCRC(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := rapid.SliceOf(rapid.Byte()).Draw(t, "a")
		b := rapid.SliceOfN(rapid.Byte(), 0, 5000).Draw(t, "b")
		want := crc32.ChecksumIEEE(append(append([]byte{}, a...), b...))
		if got := CombineCRC(crc32.ChecksumIEEE(a), crc32.ChecksumIEEE(b), int64(len(b))); got != want {
			t.Fatalf("CombineCRC = %08x, want %08x", got, want)
		}
	})
	// Long lengths exercise the high bits of the shift.
	zeros := make([]byte, 3<<20)
	want := crc32.ChecksumIEEE(append([]byte("x"), zeros...))
	if got := CombineCRC(crc32.ChecksumIEEE([]byte("x")), crc32.ChecksumIEEE(zeros), int64(len(zeros))); got != want {
		t.Fatalf("CombineCRC over 3 MiB = %08x, want %08x", got, want)
	}
}

// The table of short shifts is the byte-wise shift at every length it holds, and the long
// lengths go on past it.
func TestShiftTableMatchesTheByteShifts(t *testing.T) {
	for n := uint64(0); n < 1<<16+300; n++ {
		if got, want := shiftBytes(n), shiftBytesByByte(n); got != want {
			t.Fatalf("shiftBytes(%d) = %08x, byte-wise %08x", n, got, want)
		}
	}
}

// BenchmarkObjectCRC times the whole-object CRC of a 64 MiB fragment of 2.5 KB chunks (the
// benchmark's load) with the table of short shifts and with the byte-wise shifts, the two
// alternating in every iteration; it reports the ratio table/byte-wise of their times.
func BenchmarkObjectCRC(b *testing.B) {
	var chunks []Chunk
	rnd := rand.New(rand.NewPCG(1, 2))
	for id, size := uint64(0), int64(0); size < 64<<20; id++ {
		n := 1000 + rnd.IntN(3000)
		chunks = append(chunks, Chunk{Header: chunk.Header{ChunkID: id, DataLen: uint32(n), DataCRC: rnd.Uint32()}})
		size += int64(n) + chunk.HeaderSize
	}
	run := func(shift func(uint64) uint32) time.Duration {
		start := time.Now()
		crc := crc32.Update(0, crc32.IEEETable, AppendObjectHeader(nil))
		var hdr []byte
		for _, c := range chunks {
			hdr = chunk.AppendHeader(hdr[:0], c.Header)
			crc = crc32.Update(crc, crc32.IEEETable, hdr)
			crc = multModP(shift(uint64(c.Header.DataLen)), crc) ^ c.Header.DataCRC // CombineCRC
		}
		sinkCRC = crc
		return time.Since(start)
	}
	var ratios []float64
	for range b.N {
		table := run(shiftBytes)
		byByte := run(shiftBytesByByte)
		ratios = append(ratios, table.Seconds()/byByte.Seconds())
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[0], "min-ratio")
	b.ReportMetric(ratios[len(ratios)/2], "median-ratio")
	b.ReportMetric(ratios[len(ratios)-1], "max-ratio")
}

var sinkCRC uint32

// TestObjectRoundTrip: for random logs and any run of their chunks, the description is
// consistent, ObjectCRC equals the CRC of the object's bytes, ParseObject recovers the
// chunks, the index parses, ranges walk, and the verifier accepts the region in any pieces.
func TestObjectRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := genLog(t)
		all := l.walk(t)
		lo := rapid.IntRange(0, len(all)-1).Draw(t, "lo")
		hi := rapid.IntRange(lo+1, len(all)).Draw(t, "hi")
		d := describe(all[lo:hi])
		obj := l.object(d)
		checkObject(t, l, d, obj)

		pieces := rapid.SliceOfN(rapid.IntRange(1, 200), 1, 50).Draw(t, "pieces")
		v := NewChunkVerifier(d.Chunks)
		region := obj[ObjectHeaderSize : ObjectHeaderSize+d.Size]
		for i := 0; len(region) > 0; i++ {
			n := min(pieces[i%len(pieces)], len(region))
			if _, err := v.Write(region[:n]); err != nil {
				t.Fatalf("verifier: %v", err)
			}
			region = region[n:]
		}
		if err := v.Done(); err != nil {
			t.Fatalf("verifier done: %v", err)
		}
	})
}

func checkObject(t fataler, l memLog, d Description, obj []byte) {
	if err := CheckDescription(d); err != nil {
		t.Fatalf("CheckDescription: %v", err)
	}
	if int64(len(obj)) != d.ObjectSize() {
		t.Fatalf("object is %d bytes, ObjectSize says %d", len(obj), d.ObjectSize())
	}
	crc, err := ObjectCRC(d, l.read)
	if err != nil {
		t.Fatalf("ObjectCRC: %v", err)
	}
	if want := crc32.ChecksumIEEE(obj); crc != want {
		t.Fatalf("ObjectCRC = %08x, CRC of the bytes = %08x", crc, want)
	}
	layout, err := ParseObject(obj)
	if err != nil {
		t.Fatalf("ParseObject: %v", err)
	}
	if layout.Size != d.Size || len(layout.Chunks) != len(d.Chunks) {
		t.Fatalf("layout: size %d, %d chunks; want %d, %d", layout.Size, len(layout.Chunks), d.Size, len(d.Chunks))
	}
	for i, c := range layout.Chunks {
		if c.Header != d.Chunks[i].Header || c.Position != int64(d.Chunks[i].Position) {
			t.Fatalf("chunk %d: got %+v at %d, want %+v at %d", i, c.Header, c.Position, d.Chunks[i].Header, d.Chunks[i].Position)
		}
	}
	recs, err := ParseIndex(obj[ObjectHeaderSize+d.Size:], int64(len(obj)), d.Size)
	if err != nil {
		t.Fatalf("ParseIndex: %v", err)
	}
	for i, r := range recs {
		if r != d.Chunks[i].IndexRecord() {
			t.Fatalf("index record %d: %+v, want %+v", i, r, d.Chunks[i].IndexRecord())
		}
	}
	// A range from chunk i to the end of the region, found through the index, walks.
	i := len(recs) / 2
	start := int64(recs[i].Position)
	chunks, err := WalkChunks(obj[start:ObjectHeaderSize+d.Size], start)
	if err != nil {
		t.Fatalf("WalkChunks from record %d: %v", i, err)
	}
	if len(chunks) != len(recs)-i || chunks[0].Position != start {
		t.Fatalf("WalkChunks: %d chunks from %d, want %d from %d", len(chunks), chunks[0].Position, len(recs)-i, start)
	}
}

// TestCorruptionDetected: a flipped bit anywhere in the object changes its CRC away from
// ObjectCRC (so the server refuses it); in the object header, a chunk header's checked
// fields, a data section or the index, ParseObject refuses it; in a chunk header or data
// section, the streaming verifier refuses it.
func TestCorruptionDetected(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := genLog(t)
		d := describe(l.walk(t))
		obj := l.object(d)
		crc, err := ObjectCRC(d, l.read)
		if err != nil {
			t.Fatal(err)
		}
		at := rapid.IntRange(0, len(obj)-1).Draw(t, "at")
		bit := byte(1) << rapid.IntRange(0, 7).Draw(t, "bit")
		bad := append([]byte{}, obj...)
		bad[at] ^= bit
		if crc32.ChecksumIEEE(bad) == crc {
			t.Fatalf("flip at %d keeps the object CRC", at)
		}
		part, field := classify(d, int64(at))
		if part == "object header" || part == "index" || part == "data" || (part == "chunk header" && field) {
			if _, err := ParseObject(bad); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("flip in %s at %d: ParseObject error %v, want ErrCorrupt", part, at, err)
			}
		}
		if part == "chunk header" || part == "data" {
			v := NewChunkVerifier(d.Chunks)
			_, err := v.Write(bad[ObjectHeaderSize : ObjectHeaderSize+d.Size])
			var ce *ChunkCheckError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("flip in %s at %d: verifier error %v, want a ChunkCheckError", part, at, err)
			}
		}
	})
}

// classify says which part of the object position at falls in and, for chunk headers,
// whether the byte is one ParseObject checks (magic, id and timestamp against the index,
// CRC, lengths, reserved, records through the next id) rather than one it cannot.
func classify(d Description, at int64) (string, bool) {
	switch {
	case at < ObjectHeaderSize:
		return "object header", true
	case at >= ObjectHeaderSize+int64(d.Size):
		return "index", true
	}
	for i, c := range d.Chunks {
		off := at - int64(c.Position)
		if off < 0 || off >= c.Location.Size {
			continue
		}
		h := c.Header
		switch {
		case off < chunk.HeaderSize:
			// Type (0 and 1 are both valid), entries and epoch are not cross-checked; the
			// record count only through the next chunk's id.
			last := i == len(d.Chunks)-1
			free := off >= 1 && off < 4 || off >= 16 && off < 24 || last && off >= 4 && off < 8
			return "chunk header", !free
		case off < chunk.HeaderSize+int64(h.BloomSize):
			return "bloom", false
		case off < chunk.HeaderSize+int64(h.BloomSize)+int64(h.DataLen):
			return "data", true
		default:
			return "trailer", false
		}
	}
	panic("position outside every chunk")
}

func TestParseObjectRejects(t *testing.T) {
	l := memLog{}
	data := []byte("0123456789")
	h := chunk.Header{Records: 3, ChunkID: 100, DataCRC: crc32.ChecksumIEEE(data), DataLen: uint32(len(data)), Timestamp: 5, Epoch: 1}
	seg := chunk.AppendHeader([]byte("OSIL\x00\x00\x00\x01"), h)
	seg = append(seg, data...)
	h2 := h
	h2.ChunkID = 103
	seg = append(chunk.AppendHeader(seg, h2), data...)
	l["00000000000000000100.segment"] = seg
	d := describe(l.walk(t))
	obj := l.object(d)
	if _, err := ParseObject(obj); err != nil {
		t.Fatalf("good object: %v", err)
	}
	for _, tc := range []struct {
		name string
		obj  []byte
	}{
		{"empty", nil},
		{"short header", obj[:5]},
		{"header only", obj[:8]},
		{"bad magic", append([]byte("OSIX"), obj[4:]...)},
		{"bad version", append([]byte("OSIF\x00\x00\x00\x02"), obj[8:]...)},
		{"truncated index", obj[:len(obj)-1]},
		{"extra byte", append(append([]byte{}, obj...), 0)},
		{"no index", obj[:8+d.Size]},
		{"extra record", append(append([]byte{}, obj...), obj[len(obj)-20:]...)},
	} {
		if _, err := ParseObject(tc.obj); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: error %v, want ErrCorrupt", tc.name, err)
		}
	}
	// Chunk ids must be contiguous: the second chunk claiming id 104 breaks it (its index
	// record is rewritten to agree, so only continuity can catch it).
	gap := append([]byte{}, obj...)
	gap[8+int(h.Size())+31] = 104
	gap[len(gap)-20+7] = 104
	if _, err := ParseObject(gap); !errors.Is(err, ErrCorrupt) {
		t.Errorf("id gap: error %v, want ErrCorrupt", err)
	}
}

func TestParseIndexRejects(t *testing.T) {
	rec := func(id uint64, pos uint32) []byte {
		return AppendIndexRecord(nil, IndexRecord{ChunkID: id, Position: pos})
	}
	good := append(rec(1, 8), rec(5, 100)...)
	if _, err := ParseIndex(good, 8+200+40, 200); err != nil {
		t.Fatalf("good index: %v", err)
	}
	for _, tc := range []struct {
		name   string
		index  []byte
		objLen int64
		size   uint64
	}{
		{"length mismatch", good[:20], 8 + 200 + 40, 200},
		{"not a multiple", good, 8 + 200 + 39, 200},
		{"no records", nil, 208, 200},
		{"object too small", good, 100, 200},
		{"first not at 8", append(rec(1, 9), rec(5, 100)...), 248, 200},
		{"positions not increasing", append(rec(1, 8), rec(5, 8)...), 248, 200},
		{"ids not increasing", append(rec(5, 8), rec(1, 100)...), 248, 200},
		{"header past region", append(rec(1, 8), rec(5, 170)...), 248, 200},
	} {
		if _, err := ParseIndex(tc.index, tc.objLen, tc.size); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: error %v, want ErrCorrupt", tc.name, err)
		}
	}
}

func TestCheckDescriptionRejects(t *testing.T) {
	l := genLogFixed()
	good := describe(l.walk(t))
	if len(good.Spans) < 2 {
		t.Fatal("fixture should span two segments")
	}
	if err := CheckDescription(good); err != nil {
		t.Fatalf("good description: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(d *Description)
	}{
		{"no chunks", func(d *Description) { d.Chunks = nil }},
		{"no spans", func(d *Description) { d.Spans = nil }},
		{"size", func(d *Description) { d.Size++ }},
		{"first offset", func(d *Description) { d.FirstOffset++ }},
		{"next offset", func(d *Description) { d.NextOffset++ }},
		{"span into segment header", func(d *Description) { d.Spans[0].Start = 4 }},
		{"path in segment name", func(d *Description) { d.Spans[0].Segment = "../x.segment" }},
		{"empty span", func(d *Description) { d.Spans[1].End = d.Spans[1].Start }},
		{"chunk position", func(d *Description) { d.Chunks[1].Position++ }},
		{"chunk location", func(d *Description) { d.Chunks[1].Location.Position++ }},
		{"chunk segment", func(d *Description) { d.Chunks[len(d.Chunks)-1].Location.Segment = d.Spans[0].Segment }},
		{"chunk size", func(d *Description) { d.Chunks[0].Location.Size++ }},
		{"id gap", func(d *Description) {
			for i := 1; i < len(d.Chunks); i++ {
				d.Chunks[i].Header.ChunkID++
			}
			d.NextOffset++
		}},
		{"spans longer than chunks", func(d *Description) {
			d.Spans[len(d.Spans)-1].End += 10
			d.Size += 10
		}},
	} {
		d := good
		d.Spans = append([]Span(nil), good.Spans...)
		d.Chunks = append([]Chunk(nil), good.Chunks...)
		tc.mutate(&d)
		if err := CheckDescription(d); !errors.Is(err, ErrBadDescription) {
			t.Errorf("%s: error %v, want ErrBadDescription", tc.name, err)
		}
	}
}

// genLogFixed is a two-segment log of three chunks each.
func genLogFixed() memLog {
	l := memLog{}
	id := uint64(10)
	for s := 0; s < 2; s++ {
		name := fmt.Sprintf("%020d.segment", id)
		b := []byte("OSIL\x00\x00\x00\x01")
		for c := 0; c < 3; c++ {
			data := bytes.Repeat([]byte{byte(c)}, 20+c)
			h := chunk.Header{Records: 2, ChunkID: id, Timestamp: int64(id), Epoch: 1, DataCRC: crc32.ChecksumIEEE(data), DataLen: uint32(len(data)), TrailerLen: 3}
			b = append(append(chunk.AppendHeader(b, h), data...), 'a', 'b', 'c')
			id = h.NextID()
		}
		l[name] = b
	}
	return l
}

// TestRabbitMQLog builds one object from all 456 chunks of the real RabbitMQ directory
// (7 segments, so 7 spans) and checks it end to end.
func TestRabbitMQLog(t *testing.T) {
	dir := filepath.Join("..", "segments", "testdata", "rabbitmq-3.10.8-amqp")
	names, err := filepath.Glob(filepath.Join(dir, "*.segment"))
	if err != nil || len(names) != 7 {
		t.Fatalf("segments: %v (%d files)", err, len(names))
	}
	l := memLog{}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		l[filepath.Base(n)] = b
	}
	all := l.walk(t)
	if len(all) != 456 {
		t.Fatalf("%d chunks, want 456", len(all))
	}
	d := describe(all)
	if len(d.Spans) != 7 || d.FirstOffset != 0 || d.NextOffset != 25006 {
		t.Fatalf("description: %d spans, offsets %d-%d", len(d.Spans), d.FirstOffset, d.NextOffset)
	}
	checkObject(t, l, d, l.object(d))
}

func FuzzParseObject(f *testing.F) {
	l := genLogFixed()
	f.Add(l.object(describe(l.walk(f))))
	f.Add([]byte("OSIF\x00\x00\x00\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		layout, err := ParseObject(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if want := ObjectHeaderSize + int64(layout.Size) + IndexRecordSize*int64(len(layout.Chunks)); want != int64(len(b)) {
			t.Fatalf("layout accounts for %d bytes of %d", want, len(b))
		}
	})
}
