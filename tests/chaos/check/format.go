// Package check is the chaos soak's checker. It knows nothing of streamtier's code: it reads
// the bucket and the etcd records directly, decodes roots, groups and fragments with its own
// decoder (this file, written from remote-format.md), computes the expected bytes of every
// chunk from the deterministic load generator, and judges what it finds against what was
// acknowledged as persisted over time.
package check

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Entry kinds (remote-format.md, byte 40 of an entry).
const (
	KindFragment  = 0
	KindGroup     = 1
	KindKiloGroup = 2
	KindMegaGroup = 3
	KindGap       = 4
)

const (
	entrySize      = 48
	rootHeaderSize = 52
	lineageSize    = 40 // a version 3 root's identity and lineage, right after the version
	groupHeader    = 12
	chunkHeader    = 48
	indexRecord    = 20
	objectHeader   = 8
)

// Entry is one 48-byte manifest entry.
type Entry struct {
	First   uint64
	FirstTS int64
	LastTS  int64
	Size    uint64
	UID     uint64
	Kind    uint8
}

// RootLineage is a version 3 root's identity and place in the stream's lineage (bytes 8..47):
// zero for a version 1 or 2 root.
type RootLineage struct {
	Seq       uint64 // the root's place in the lineage; its key carries it too
	Epoch     uint64 // the epoch of the writer that made it
	UID       uint64 // random, drawn for this root; the manifest record names (Seq, UID)
	ParentSeq uint64 // the persisted manifest it was built on (0: none)
	ParentUID uint64 // that manifest's root uid (0: none; a version 1 or 2 parent's uid when ParentSeq is 0)
}

// String is the lineage for messages.
func (l RootLineage) String() string {
	return fmt.Sprintf("seq %d (epoch %d, uid %016x, parent seq %d uid %016x)", l.Seq, l.Epoch, l.UID, l.ParentSeq, l.ParentUID)
}

// Root is a decoded root object.
type Root struct {
	Version     uint32
	Lineage     RootLineage // version 3 only
	First, Next uint64
	FirstTS     int64
	FirstLastTS int64
	Total       uint64
	Entries     []Entry
}

// Group is a decoded group, kilo-group or mega-group object.
type Group struct {
	Kind    uint8
	Version uint32
	Entries []Entry
}

// Chunk is one chunk found in a fragment object.
type Chunk struct {
	ID      uint64
	Records uint32
	TS      int64
	Epoch   uint64
	Type    uint8
	Pos     int // position of the header in the object
	Size    int // header + bloom + data + trailer
}

// Fragment is a decoded fragment object.
type Fragment struct {
	Region uint64 // S: chunk-region bytes
	Chunks []Chunk
}

// End is one past the last offset the fragment's chunks use.
func (f Fragment) End() uint64 {
	last := f.Chunks[len(f.Chunks)-1]
	return last.ID + uint64(last.Records)
}

func checkCRC(what string, b []byte) error {
	n := len(b)
	want := binary.BigEndian.Uint32(b[n-4:])
	if got := crc32.ChecksumIEEE(b[:n-4]); got != want {
		return fmt.Errorf("%s: CRC-32 %08x of the first %d bytes, the object says %08x", what, got, n-4, want)
	}
	return nil
}

func decodeEntry(b []byte) (Entry, error) {
	e := Entry{
		First:   binary.BigEndian.Uint64(b[0:]),
		FirstTS: int64(binary.BigEndian.Uint64(b[8:])),
		LastTS:  int64(binary.BigEndian.Uint64(b[16:])),
		Size:    binary.BigEndian.Uint64(b[24:]),
		UID:     binary.BigEndian.Uint64(b[32:]),
		Kind:    b[40],
	}
	for _, z := range b[41:48] {
		if z != 0 {
			return e, fmt.Errorf("entry at %d: reserved bytes 41..47 not zero", e.First)
		}
	}
	if e.Kind > KindGap {
		return e, fmt.Errorf("entry at %d: unknown kind %d", e.First, e.Kind)
	}
	if e.Kind == KindGap && (e.Size != 0 || e.UID != 0 || e.FirstTS != -1 || e.LastTS != -1) {
		return e, fmt.Errorf("gap entry at %d: size %d, uid %x, timestamps %d/%d (want 0, 0, -1, -1)", e.First, e.Size, e.UID, e.FirstTS, e.LastTS)
	}
	return e, nil
}

func decodeEntries(what string, b []byte, n int, version uint32) ([]Entry, error) {
	out := make([]Entry, 0, n)
	for i := range n {
		e, err := decodeEntry(b[i*entrySize : (i+1)*entrySize])
		if err != nil {
			return nil, fmt.Errorf("%s: entry %d: %w", what, i, err)
		}
		if e.Kind == KindGap && version < 2 {
			return nil, fmt.Errorf("%s: entry %d is a gap in a version %d object", what, i, version)
		}
		if i > 0 && e.First <= out[i-1].First {
			return nil, fmt.Errorf("%s: entry %d starts at %d, not after entry %d at %d", what, i, e.First, i-1, out[i-1].First)
		}
		if i > 0 && e.Kind == KindGap && out[i-1].Kind == KindGap {
			return nil, fmt.Errorf("%s: entries %d and %d are adjacent gaps", what, i-1, i)
		}
		out = append(out, e)
	}
	return out, nil
}

// DecodeRoot decodes a root object: magic OSIR, version 1, 2 or 3, (version 3) the 40
// bytes of identity and lineage, header, entries, CRC. A version 3 root must have a seq of
// at least 1, a uid other than 0 (0 names no root), a parent seq below its seq and, when it
// names a parent seq, a parent uid other than 0.
func DecodeRoot(b []byte) (Root, error) {
	if len(b) < 8 {
		return Root{}, fmt.Errorf("root: %d bytes, shorter than an empty root", len(b))
	}
	if string(b[:4]) != "OSIR" {
		return Root{}, fmt.Errorf("root: magic %q", b[:4])
	}
	r := Root{Version: binary.BigEndian.Uint32(b[4:])}
	base := 0
	switch r.Version {
	case 1, 2:
	case 3:
		base = lineageSize
	default:
		return Root{}, fmt.Errorf("root: version %d", r.Version)
	}
	if len(b) < base+rootHeaderSize+4 {
		return Root{}, fmt.Errorf("root: %d bytes, shorter than an empty version %d root", len(b), r.Version)
	}
	if r.Version == 3 {
		r.Lineage = RootLineage{
			Seq:       binary.BigEndian.Uint64(b[8:]),
			Epoch:     binary.BigEndian.Uint64(b[16:]),
			UID:       binary.BigEndian.Uint64(b[24:]),
			ParentSeq: binary.BigEndian.Uint64(b[32:]),
			ParentUID: binary.BigEndian.Uint64(b[40:]),
		}
	}
	h := b[base:]
	r.First = binary.BigEndian.Uint64(h[8:])
	r.Next = binary.BigEndian.Uint64(h[16:])
	r.FirstTS = int64(binary.BigEndian.Uint64(h[24:]))
	r.FirstLastTS = int64(binary.BigEndian.Uint64(h[32:]))
	r.Total = binary.BigEndian.Uint64(h[40:])
	n := int(binary.BigEndian.Uint32(h[48:]))
	if want := base + rootHeaderSize + entrySize*n + 4; len(b) != want {
		return Root{}, fmt.Errorf("root: %d bytes, %d entries need %d", len(b), n, want)
	}
	if err := checkCRC("root", b); err != nil {
		return Root{}, err
	}
	if r.Version == 3 {
		l := r.Lineage
		switch {
		case l.Seq == 0:
			return Root{}, fmt.Errorf("root: version 3 with seq 0 (seqs start at 1)")
		case l.UID == 0:
			return Root{}, fmt.Errorf("root: seq %d has uid 0 (0 names no root)", l.Seq)
		case l.ParentSeq >= l.Seq:
			return Root{}, fmt.Errorf("root: seq %d names parent seq %d, not below it", l.Seq, l.ParentSeq)
		case l.ParentSeq > 0 && l.ParentUID == 0:
			return Root{}, fmt.Errorf("root: seq %d names parent seq %d with uid 0", l.Seq, l.ParentSeq)
		}
	}
	var err error
	if r.Entries, err = decodeEntries("root", h[rootHeaderSize:], n, r.Version); err != nil {
		return Root{}, err
	}
	if r.First > r.Next {
		return Root{}, fmt.Errorf("root: first offset %d above next offset %d", r.First, r.Next)
	}
	return r, nil
}

// groupMagic is the magic of a group object of kind k.
func groupMagic(k uint8) string {
	switch k {
	case KindGroup:
		return "OSIG"
	case KindKiloGroup:
		return "OSIK"
	case KindMegaGroup:
		return "OSIM"
	}
	return ""
}

// DecodeGroup decodes a group object of kind (1, 2 or 3): magic, version, count, entries of
// the kind one lower (fragments and gaps for kind 1), CRC.
func DecodeGroup(b []byte, kind uint8) (Group, error) {
	what := fmt.Sprintf("group of kind %d", kind)
	if len(b) < groupHeader+4 {
		return Group{}, fmt.Errorf("%s: %d bytes, too short", what, len(b))
	}
	if m := groupMagic(kind); m == "" || string(b[:4]) != m {
		return Group{}, fmt.Errorf("%s: magic %q, want %q", what, b[:4], m)
	}
	g := Group{Kind: kind, Version: binary.BigEndian.Uint32(b[4:])}
	if g.Version != 1 && g.Version != 2 {
		return Group{}, fmt.Errorf("%s: version %d", what, g.Version)
	}
	n := int(binary.BigEndian.Uint32(b[8:]))
	if want := groupHeader + entrySize*n + 4; len(b) != want || n == 0 {
		return Group{}, fmt.Errorf("%s: %d bytes and %d entries (want %d bytes, at least one entry)", what, len(b), n, want)
	}
	if err := checkCRC(what, b); err != nil {
		return Group{}, err
	}
	var err error
	if g.Entries, err = decodeEntries(what, b[groupHeader:], n, g.Version); err != nil {
		return Group{}, err
	}
	for i, e := range g.Entries {
		ok := e.Kind == kind-1 || (kind == KindGroup && e.Kind == KindGap)
		if !ok {
			return Group{}, fmt.Errorf("%s: entry %d has kind %d", what, i, e.Kind)
		}
	}
	return g, nil
}

// DecodeFragment decodes a fragment object: "OSIF" version 1, the chunk region walked
// header by header (each chunk's magic and data CRC checked) until 8 + walked + 20 x chunks
// is the object's length, then one index record per chunk that must agree with the chunk.
func DecodeFragment(b []byte) (Fragment, error) {
	if len(b) < objectHeader || string(b[:4]) != "OSIF" {
		return Fragment{}, fmt.Errorf("fragment: bad header")
	}
	if v := binary.BigEndian.Uint32(b[4:]); v != 1 {
		return Fragment{}, fmt.Errorf("fragment: version %d", v)
	}
	var f Fragment
	pos := objectHeader
	for pos+indexRecord*len(f.Chunks) != len(b) {
		if pos+chunkHeader > len(b) {
			return Fragment{}, fmt.Errorf("fragment: chunk %d at byte %d: header runs past the object (%d bytes)", len(f.Chunks), pos, len(b))
		}
		c, err := parseChunk(b[pos:], pos)
		if err != nil {
			return Fragment{}, fmt.Errorf("fragment: chunk %d at byte %d: %w", len(f.Chunks), pos, err)
		}
		if n := len(f.Chunks); n > 0 {
			prev := f.Chunks[n-1]
			if c.ID != prev.ID+uint64(prev.Records) {
				return Fragment{}, fmt.Errorf("fragment: chunk %d has id %d, the previous chunk ends at %d", n, c.ID, prev.ID+uint64(prev.Records))
			}
		}
		f.Chunks = append(f.Chunks, c)
		pos += c.Size
	}
	if len(f.Chunks) == 0 {
		return Fragment{}, fmt.Errorf("fragment: no chunk")
	}
	f.Region = uint64(pos - objectHeader)
	for i, c := range f.Chunks {
		r := b[pos+i*indexRecord:]
		id, ts, at := binary.BigEndian.Uint64(r), int64(binary.BigEndian.Uint64(r[8:])), binary.BigEndian.Uint32(r[16:])
		if id != c.ID || ts != c.TS || int(at) != c.Pos {
			return Fragment{}, fmt.Errorf("fragment: index record %d says chunk %d ts %d at %d, the chunk is %d ts %d at %d", i, id, ts, at, c.ID, c.TS, c.Pos)
		}
	}
	return f, nil
}

// parseChunk reads the chunk whose header starts b (at object position pos) and checks its
// magic, its length against b and the CRC of its data section.
func parseChunk(b []byte, pos int) (Chunk, error) {
	if b[0] != 0x50 {
		return Chunk{}, fmt.Errorf("magic/version byte %#x", b[0])
	}
	c := Chunk{
		Type:    b[1],
		Records: binary.BigEndian.Uint32(b[4:]),
		TS:      int64(binary.BigEndian.Uint64(b[8:])),
		Epoch:   binary.BigEndian.Uint64(b[16:]),
		ID:      binary.BigEndian.Uint64(b[24:]),
		Pos:     pos,
	}
	crc := binary.BigEndian.Uint32(b[32:])
	data, trailer, bloom := int(binary.BigEndian.Uint32(b[36:])), int(binary.BigEndian.Uint32(b[40:])), int(b[44])
	c.Size = chunkHeader + bloom + data + trailer
	if c.Type > 2 || c.Records == 0 {
		return Chunk{}, fmt.Errorf("chunk %d: type %d, %d records", c.ID, c.Type, c.Records)
	}
	if c.Size > len(b) {
		return Chunk{}, fmt.Errorf("chunk %d: %d bytes run past the object", c.ID, c.Size)
	}
	if got := crc32.ChecksumIEEE(b[chunkHeader+bloom : chunkHeader+bloom+data]); got != crc {
		return Chunk{}, fmt.Errorf("chunk %d: data CRC %08x, the header says %08x", c.ID, got, crc)
	}
	return c, nil
}
