package fragment

// The fragment object codec: "OSIF" + u32 version 1, the chunk region (chunks copied byte for
// byte from the segment files), then one 20-byte index record per chunk. Everything here is
// pure: s3io streams objects built from a Description and reads them back with ParseObject.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
	"path"
	"sync"

	"github.com/streamtier/streamtier/chunk"
)

// ObjectMagic opens every fragment object.
const ObjectMagic = "OSIF"

// ObjectVersion is the fragment object format version this code writes and reads.
const ObjectVersion = 1

// segmentHeaderSize is the "OSIL" + version header of a segment file; no chunk starts before it.
const segmentHeaderSize = 8

// ErrCorrupt marks bytes that do not form a valid fragment (object or local chunk): a bad
// magic, a broken chunk walk, an index that disagrees with the chunks, a data CRC mismatch.
// Retrying cannot fix it, so error classification treats it as non-transient.
var ErrCorrupt = errors.New("corrupt fragment")

// ErrBadDescription marks a fragment Description that is not internally consistent; it is a
// programming error upstream (the assembly), reported before any I/O.
var ErrBadDescription = errors.New("inconsistent fragment description")

// IndexRecord is one 20-byte record of a fragment object's index: the chunk's id, its
// timestamp and the position of its header counted from the start of the object.
type IndexRecord struct {
	ChunkID   uint64
	Timestamp int64
	Position  uint32
}

// AppendObjectHeader appends the 8-byte object header ("OSIF" + u32 version) to dst.
func AppendObjectHeader(dst []byte) []byte {
	dst = append(dst, ObjectMagic...)
	return binary.BigEndian.AppendUint32(dst, ObjectVersion)
}

// ParseObjectHeader checks the first 8 bytes of a fragment object.
func ParseObjectHeader(b []byte) error {
	if len(b) < ObjectHeaderSize {
		return fmt.Errorf("%w: object header: %d bytes, need %d", ErrCorrupt, len(b), ObjectHeaderSize)
	}
	if string(b[:4]) != ObjectMagic {
		return fmt.Errorf("%w: object header: magic %q, want %q", ErrCorrupt, b[:4], ObjectMagic)
	}
	if v := binary.BigEndian.Uint32(b[4:8]); v != ObjectVersion {
		return fmt.Errorf("%w: object header: version %d, want %d", ErrCorrupt, v, ObjectVersion)
	}
	return nil
}

// AppendIndexRecord appends the 20-byte encoding of r to dst.
func AppendIndexRecord(dst []byte, r IndexRecord) []byte {
	dst = binary.BigEndian.AppendUint64(dst, r.ChunkID)
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.Timestamp))
	return binary.BigEndian.AppendUint32(dst, r.Position)
}

// ParseIndexRecord decodes one 20-byte index record.
func ParseIndexRecord(b []byte) (IndexRecord, error) {
	if len(b) < IndexRecordSize {
		return IndexRecord{}, fmt.Errorf("%w: index record: %d bytes, need %d", ErrCorrupt, len(b), IndexRecordSize)
	}
	return IndexRecord{
		ChunkID:   binary.BigEndian.Uint64(b[0:8]),
		Timestamp: int64(binary.BigEndian.Uint64(b[8:16])),
		Position:  binary.BigEndian.Uint32(b[16:20]),
	}, nil
}

// IndexRecord is the index record the object carries for this chunk.
func (c Chunk) IndexRecord() IndexRecord {
	return IndexRecord{ChunkID: c.Header.ChunkID, Timestamp: c.Header.Timestamp, Position: c.Position}
}

// CheckDescription verifies that d can be streamed as an object: its chunks tile its spans in
// order, positions and sizes agree, chunk ids are contiguous and the object fits the u32
// positions of the index. The upload calls it before opening any file.
func CheckDescription(d Description) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: fragment at offset %d: %s", ErrBadDescription, d.FirstOffset, fmt.Sprintf(format, args...))
	}
	if len(d.Chunks) == 0 {
		return bad("no chunks")
	}
	if len(d.Spans) == 0 {
		return bad("no segment spans")
	}
	if d.ObjectSize() > math.MaxUint32 {
		return bad("object of %d bytes does not fit u32 index positions", d.ObjectSize())
	}
	var spanTotal uint64
	for i, s := range d.Spans {
		if s.Segment == "" || s.Segment != path.Base(s.Segment) {
			return bad("span %d: segment %q is not a plain file name", i, s.Segment)
		}
		if s.Start < segmentHeaderSize || s.End <= s.Start {
			return bad("span %d (%s): range [%d, %d) is empty or overlaps the segment header", i, s.Segment, s.Start, s.End)
		}
		spanTotal += uint64(s.End - s.Start)
	}
	if spanTotal != d.Size {
		return bad("spans hold %d bytes, size says %d", spanTotal, d.Size)
	}
	if first := d.Chunks[0].Header.ChunkID; first != d.FirstOffset {
		return bad("first chunk id %d, first offset %d", first, d.FirstOffset)
	}
	if next := d.Chunks[len(d.Chunks)-1].Header.NextID(); next != d.NextOffset {
		return bad("last chunk ends at %d, next offset %d", next, d.NextOffset)
	}
	span, cursor := 0, d.Spans[0].Start
	pos := int64(ObjectHeaderSize)
	for i, c := range d.Chunks {
		if i > 0 && c.Header.ChunkID != d.Chunks[i-1].Header.NextID() {
			return bad("chunk %d: id %d does not follow %d", i, c.Header.ChunkID, d.Chunks[i-1].Header.NextID())
		}
		if cursor == d.Spans[span].End {
			span++
			if span == len(d.Spans) {
				return bad("chunk %d (id %d) lies beyond the last span", i, c.Header.ChunkID)
			}
			cursor = d.Spans[span].Start
		}
		s := d.Spans[span]
		loc := c.Location
		if loc.Segment != s.Segment || loc.Position != cursor {
			return bad("chunk %d (id %d) at %s:%d, expected %s:%d", i, c.Header.ChunkID, loc.Segment, loc.Position, s.Segment, cursor)
		}
		if loc.Size != c.Header.Size() {
			return bad("chunk %d (id %d): location size %d, header says %d", i, c.Header.ChunkID, loc.Size, c.Header.Size())
		}
		if cursor+loc.Size > s.End {
			return bad("chunk %d (id %d) runs past the end of span %d (%s:%d)", i, c.Header.ChunkID, span, s.Segment, s.End)
		}
		if int64(c.Position) != pos {
			return bad("chunk %d (id %d): object position %d, expected %d", i, c.Header.ChunkID, c.Position, pos)
		}
		cursor += loc.Size
		pos += loc.Size
	}
	if span != len(d.Spans)-1 || cursor != d.Spans[span].End {
		return bad("chunks end at %s:%d, spans end at %s:%d", d.Spans[span].Segment, cursor, d.Spans[len(d.Spans)-1].Segment, d.Spans[len(d.Spans)-1].End)
	}
	return nil
}

// CRCReader adds to crc the CRC-32 of n bytes of segment file seg starting at off; it is the
// only I/O ObjectCRC needs (bloom filters and trailers, which no header checksums).
type CRCReader func(seg string, off, n int64, crc uint32) (uint32, error)

// ObjectCRC computes the CRC-32 (IEEE) of the whole object d describes without reading any
// data section: chunk headers are re-encoded from d, each data section's CRC is the one its
// header carries (combined in with CombineCRC), and only bloom filter and trailer bytes are
// read through read. If a data byte on disk no longer matches its header's CRC, the result
// differs from the CRC of the bytes actually streamed, so the server refuses the upload.
func ObjectCRC(d Description, read CRCReader) (uint32, error) {
	var buf [chunk.HeaderSize]byte
	crc := crc32.Update(0, crc32.IEEETable, AppendObjectHeader(buf[:0]))
	var err error
	for _, c := range d.Chunks {
		h, loc := c.Header, c.Location
		crc = crc32.Update(crc, crc32.IEEETable, chunk.AppendHeader(buf[:0], h))
		off := loc.Position + chunk.HeaderSize
		if h.BloomSize > 0 {
			if crc, err = read(loc.Segment, off, int64(h.BloomSize), crc); err != nil {
				return 0, fmt.Errorf("bloom filter of chunk %d in %s at %d: %w", h.ChunkID, loc.Segment, loc.Position, err)
			}
			off += int64(h.BloomSize)
		}
		crc = CombineCRC(crc, h.DataCRC, int64(h.DataLen))
		off += int64(h.DataLen)
		if h.TrailerLen > 0 {
			if crc, err = read(loc.Segment, off, int64(h.TrailerLen), crc); err != nil {
				return 0, fmt.Errorf("trailer of chunk %d in %s at %d: %w", h.ChunkID, loc.Segment, loc.Position, err)
			}
		}
	}
	// The index, 100 records at a time (long updates take the fast CRC path).
	var idx [100 * IndexRecordSize]byte
	for i := 0; i < len(d.Chunks); i += 100 {
		b := idx[:0]
		for _, c := range d.Chunks[i:min(i+100, len(d.Chunks))] {
			b = AppendIndexRecord(b, c.IndexRecord())
		}
		crc = crc32.Update(crc, crc32.IEEETable, b)
	}
	return crc, nil
}

// crcPolyNormal is the IEEE polynomial in normal bit order, without its x^32 term.
const crcPolyNormal = 0x04c11db7

// reduceTable[v] is v(x) * x^32 modulo the polynomial, in normal bit order: one byte of a
// product's high half folded into its low half.
var reduceTable = func() (t [256]uint64) {
	for v := range t {
		r := uint64(v) << 32
		for bit := 39; bit >= 32; bit-- {
			if r>>bit&1 != 0 {
				r ^= (1<<32 | crcPolyNormal) << (bit - 32)
			}
		}
		t[v] = r
	}
	return t
}()

// multModP multiplies a and b modulo the CRC polynomial. Both are in the reflected bit
// order of CRC values (x^0 is 1<<31); the product is carry-less, four bits at a time, in
// normal order, then reduced a byte at a time.
func multModP(a, b uint32) uint32 {
	A, B := bits.Reverse32(a), uint64(bits.Reverse32(b))
	var t [16]uint64 // t[i] = B * i (carry-less)
	for i := 1; i < 16; i++ {
		t[i] = t[i>>1]<<1 ^ uint64(i&1)*B
	}
	var c uint64
	for k := 28; k >= 0; k -= 4 {
		c = c<<4 ^ t[A>>k&15]
	}
	for shift := 56; shift >= 32; shift -= 8 {
		v := c >> shift & 0xff
		c ^= v<<shift ^ reduceTable[v]<<(shift-32)
	}
	return bits.Reverse32(uint32(c))
}

// byteShifts[j][v] is x^(8 * v * 256^j) modulo the CRC polynomial: the factor that moves a
// CRC past v * 256^j zero bytes. With it, moving past n bytes costs one multiplication per
// non-zero byte of n (two or three for chunk sizes) instead of one per bit.
var byteShifts = sync.OnceValue(func() *[8][256]uint32 {
	var t [8][256]uint32
	x8 := uint32(1) << 23 // x^8
	for j := range t {
		t[j][0] = 1 << 31 // x^0
		t[j][1] = x8
		for v := 2; v < 256; v++ {
			t[j][v] = multModP(t[j][v-1], x8)
		}
		x8 = multModP(t[j][255], x8) // x^(8 * 256^(j+1))
	}
	return &t
})

// smallShifts[n] is x^(8n) modulo the CRC polynomial for every n below 64 Ki: the lengths
// of most chunks' data, so that moving a CRC past one (ObjectCRC does it for every chunk of
// a fragment) is one multiplication instead of three. 256 KiB, made at the first use.
var smallShifts = sync.OnceValue(func() *[1 << 16]uint32 {
	var t [1 << 16]uint32
	t[0] = 1 << 31 // x^0
	x8 := uint32(1) << 23
	for n := 1; n < len(t); n++ {
		t[n] = multModP(t[n-1], x8)
	}
	return &t
})

// shiftBytes is x^(8n) modulo the CRC polynomial.
func shiftBytes(n uint64) uint32 {
	if n < 1<<16 {
		return smallShifts()[n]
	}
	return shiftBytesByByte(n)
}

// shiftBytesByByte is x^(8n) modulo the CRC polynomial, one multiplication per non-zero
// byte of n.
func shiftBytesByByte(n uint64) uint32 {
	t := byteShifts()
	p := uint32(1) << 31
	for j := 0; n > 0; j, n = j+1, n>>8 {
		if v := n & 0xff; v != 0 {
			p = multModP(t[j][v], p)
		}
	}
	return p
}

// CombineCRC returns the CRC-32 (IEEE) of A followed by B given crcA, crcB and B's length,
// without the bytes (zlib's crc32_combine, with byte-indexed tables of powers of x).
func CombineCRC(crcA, crcB uint32, lenB int64) uint32 {
	if lenB <= 0 {
		return crcA
	}
	return multModP(shiftBytes(uint64(lenB)), crcA) ^ crcB
}

// LayoutChunk is one chunk found in a fragment object: its header and the position of the
// header counted from the start of the object.
type LayoutChunk struct {
	Header   chunk.Header
	Position int64
}

// Layout is what a fragment object's bytes say about themselves: the chunk region's size S
// and its chunks in order.
type Layout struct {
	Size   uint64
	Chunks []LayoutChunk
}

// ParseObject validates a whole fragment object: the header, the chunk walk (which recovers
// S), the index records against the chunk headers, contiguous chunk ids, and every chunk's
// data CRC. Errors wrap ErrCorrupt and name the position that is wrong.
func ParseObject(obj []byte) (Layout, error) {
	if err := ParseObjectHeader(obj); err != nil {
		return Layout{}, err
	}
	total := int64(len(obj))
	var chunks []LayoutChunk
	pos := int64(ObjectHeaderSize)
	for pos+IndexRecordSize*int64(len(chunks)) != total {
		// A chunk header plus its own index record must still fit.
		if pos+chunk.HeaderSize+IndexRecordSize*int64(len(chunks)+1) > total {
			return Layout{}, fmt.Errorf("%w: object of %d bytes: chunk walk reached %d after %d chunks without meeting the index", ErrCorrupt, total, pos, len(chunks))
		}
		c, err := checkChunkAt(obj, pos, total-IndexRecordSize*int64(len(chunks)+1))
		if err != nil {
			return Layout{}, err
		}
		if n := len(chunks); n > 0 && c.Header.ChunkID != chunks[n-1].Header.NextID() {
			return Layout{}, fmt.Errorf("%w: chunk at object position %d: id %d does not follow %d", ErrCorrupt, pos, c.Header.ChunkID, chunks[n-1].Header.NextID())
		}
		chunks = append(chunks, c)
		pos += c.Header.Size()
	}
	if len(chunks) == 0 {
		return Layout{}, fmt.Errorf("%w: object of %d bytes holds no chunk", ErrCorrupt, total)
	}
	recs, err := ParseIndex(obj[pos:], total, uint64(pos-ObjectHeaderSize))
	if err != nil {
		return Layout{}, err
	}
	for i, r := range recs {
		c := chunks[i]
		if r.ChunkID != c.Header.ChunkID || r.Timestamp != c.Header.Timestamp || int64(r.Position) != c.Position {
			return Layout{}, fmt.Errorf("%w: index record %d (id %d, ts %d, pos %d) disagrees with chunk (id %d, ts %d, pos %d)",
				ErrCorrupt, i, r.ChunkID, r.Timestamp, r.Position, c.Header.ChunkID, c.Header.Timestamp, c.Position)
		}
	}
	return Layout{Size: uint64(pos - ObjectHeaderSize), Chunks: chunks}, nil
}

// ParseIndex validates an object's index region (its tail) given the object's length and the
// chunk region size S (from the manifest entry): the record count follows from them, the
// first record is at position 8, positions and chunk ids increase and stay inside the chunk
// region. It lets a reader find chunks with one ranged GET of the tail.
func ParseIndex(index []byte, objectLen int64, size uint64) ([]IndexRecord, error) {
	if size > math.MaxInt64-ObjectHeaderSize || objectLen < ObjectHeaderSize+int64(size) {
		return nil, fmt.Errorf("%w: object of %d bytes cannot hold a chunk region of %d", ErrCorrupt, objectLen, size)
	}
	idxLen := objectLen - ObjectHeaderSize - int64(size)
	if idxLen%IndexRecordSize != 0 || idxLen == 0 {
		return nil, fmt.Errorf("%w: index of %d bytes (object %d, chunk region %d) is not a positive multiple of %d", ErrCorrupt, idxLen, objectLen, size, IndexRecordSize)
	}
	if int64(len(index)) != idxLen {
		return nil, fmt.Errorf("%w: index: got %d bytes, object layout says %d", ErrCorrupt, len(index), idxLen)
	}
	end := int64(ObjectHeaderSize) + int64(size)
	recs := make([]IndexRecord, idxLen/IndexRecordSize)
	for i := range recs {
		r, _ := ParseIndexRecord(index[i*IndexRecordSize:])
		switch {
		case i == 0 && r.Position != ObjectHeaderSize:
			return nil, fmt.Errorf("%w: index record 0 at position %d, want %d", ErrCorrupt, r.Position, ObjectHeaderSize)
		case i > 0 && (r.Position <= recs[i-1].Position || r.ChunkID <= recs[i-1].ChunkID):
			return nil, fmt.Errorf("%w: index record %d (id %d, pos %d) does not follow record %d (id %d, pos %d)", ErrCorrupt, i, r.ChunkID, r.Position, i-1, recs[i-1].ChunkID, recs[i-1].Position)
		case int64(r.Position)+chunk.HeaderSize > end:
			return nil, fmt.Errorf("%w: index record %d at position %d: no room for a chunk header before the index at %d", ErrCorrupt, i, r.Position, end)
		}
		recs[i] = r
	}
	return recs, nil
}

// WalkChunks walks whole chunks in region, a slice of an object's chunk region that starts
// at a chunk header at object position base (as found through the index), checking each
// chunk's header and data CRC and that ids are contiguous. The region must end at a chunk
// boundary.
func WalkChunks(region []byte, base int64) ([]LayoutChunk, error) {
	var chunks []LayoutChunk
	for off := int64(0); off < int64(len(region)); {
		c, err := checkChunkAt(region, off, int64(len(region)))
		if err != nil {
			return nil, fmt.Errorf("range at object position %d: %w", base, err)
		}
		c.Position += base
		if n := len(chunks); n > 0 && c.Header.ChunkID != chunks[n-1].Header.NextID() {
			return nil, fmt.Errorf("%w: chunk at object position %d: id %d does not follow %d", ErrCorrupt, c.Position, c.Header.ChunkID, chunks[n-1].Header.NextID())
		}
		chunks = append(chunks, c)
		off += c.Header.Size()
	}
	if len(chunks) == 0 {
		return nil, fmt.Errorf("%w: empty range at object position %d", ErrCorrupt, base)
	}
	return chunks, nil
}

// checkChunkAt parses the chunk header at b[pos:], checks that the chunk ends by limit and
// that its data CRC matches.
func checkChunkAt(b []byte, pos, limit int64) (LayoutChunk, error) {
	if pos+chunk.HeaderSize > limit {
		return LayoutChunk{}, fmt.Errorf("%w: chunk header at position %d: only %d bytes left", ErrCorrupt, pos, limit-pos)
	}
	h, err := chunk.ParseHeader(b[pos : pos+chunk.HeaderSize])
	if err != nil {
		return LayoutChunk{}, fmt.Errorf("%w: at position %d: %w", ErrCorrupt, pos, err)
	}
	if pos+h.Size() > limit {
		return LayoutChunk{}, fmt.Errorf("%w: chunk %d at position %d: %d bytes overrun the region ending at %d", ErrCorrupt, h.ChunkID, pos, h.Size(), limit)
	}
	data := pos + chunk.HeaderSize + int64(h.BloomSize)
	if got := crc32.ChecksumIEEE(b[data : data+int64(h.DataLen)]); got != h.DataCRC {
		return LayoutChunk{}, fmt.Errorf("%w: chunk %d at position %d: data CRC %08x, header says %08x", ErrCorrupt, h.ChunkID, pos, got, h.DataCRC)
	}
	return LayoutChunk{Header: h, Position: pos}, nil
}

// ChunkCheckError names the local chunk whose bytes did not match its description while
// they streamed: the segment, the chunk id and its position in the segment.
type ChunkCheckError struct {
	Segment  string
	ChunkID  uint64
	Position int64
	Reason   string
}

// Error says which chunk and why.
func (e *ChunkCheckError) Error() string {
	return fmt.Sprintf("corrupt local chunk %d in %s at %d: %s", e.ChunkID, e.Segment, e.Position, e.Reason)
}

// Unwrap makes a ChunkCheckError an ErrCorrupt.
func (e *ChunkCheckError) Unwrap() error { return ErrCorrupt }

// ChunkVerifier checks the chunk region of a fragment as it streams past, in order and in
// pieces of any size: each chunk header must equal the description's (byte for byte) and
// each data section must match its header's CRC. Memory is constant: 48 bytes.
type ChunkVerifier struct {
	chunks      []Chunk
	i           int    // current chunk
	off         int64  // offset inside the current chunk
	hdr         []byte // expected header bytes of the current chunk
	crc         uint32 // running CRC of the current chunk's data section
	dataChecked bool
	buf         [chunk.HeaderSize]byte
	err         error
}

// NewChunkVerifier returns a verifier for the chunks of a description (already checked with
// CheckDescription).
func NewChunkVerifier(chunks []Chunk) *ChunkVerifier {
	v := &ChunkVerifier{chunks: chunks}
	v.start()
	return v
}

func (v *ChunkVerifier) start() {
	v.off, v.crc, v.dataChecked = 0, 0, false
	if v.i < len(v.chunks) {
		v.hdr = chunk.AppendHeader(v.buf[:0], v.chunks[v.i].Header)
	}
}

func (v *ChunkVerifier) fail(reason string, args ...any) error {
	c := v.chunks[v.i]
	v.err = &ChunkCheckError{Segment: c.Location.Segment, ChunkID: c.Header.ChunkID, Position: c.Location.Position, Reason: fmt.Sprintf(reason, args...)}
	return v.err
}

// Write feeds the next bytes of the chunk region; it fails on the first mismatch and keeps
// failing afterwards.
func (v *ChunkVerifier) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if v.err != nil {
			return 0, v.err
		}
		if v.i >= len(v.chunks) {
			v.err = fmt.Errorf("%w: chunk region: %d bytes beyond the last chunk", ErrCorrupt, len(p))
			return 0, v.err
		}
		h := v.chunks[v.i].Header
		dataStart := chunk.HeaderSize + int64(h.BloomSize)
		dataEnd := dataStart + int64(h.DataLen)
		var take int64
		switch {
		case v.off < chunk.HeaderSize:
			take = min(int64(len(p)), chunk.HeaderSize-v.off)
			for k := range take {
				if p[k] != v.hdr[v.off+k] {
					return 0, v.fail("header byte %d is 0x%02x on disk, 0x%02x when drained", v.off+k, p[k], v.hdr[v.off+k])
				}
			}
		case v.off < dataStart:
			take = min(int64(len(p)), dataStart-v.off)
		case v.off < dataEnd:
			take = min(int64(len(p)), dataEnd-v.off)
			v.crc = crc32.Update(v.crc, crc32.IEEETable, p[:take])
		default:
			take = min(int64(len(p)), h.Size()-v.off)
		}
		v.off += take
		p = p[take:]
		if !v.dataChecked && v.off >= dataEnd {
			v.dataChecked = true
			if v.crc != h.DataCRC {
				return 0, v.fail("data CRC %08x, header says %08x", v.crc, h.DataCRC)
			}
		}
		if v.off == h.Size() {
			v.i++
			v.start()
		}
	}
	return n, nil
}

// Done reports whether every chunk was seen whole; call it after the last Write.
func (v *ChunkVerifier) Done() error {
	if v.err != nil {
		return v.err
	}
	if v.i != len(v.chunks) {
		return fmt.Errorf("%w: chunk region ended inside chunk %d of %d", ErrCorrupt, v.i, len(v.chunks))
	}
	return nil
}
