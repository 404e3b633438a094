package manifest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Byte layout constants of remote-format.md: every integer big-endian, one CRC-32 (IEEE) of
// every byte before it at the end of each object.
const (
	// FormatVersion is the version written after the magic of every new root and group
	// object: 2, whose entries may be gaps. The project writes version 2 everywhere.
	FormatVersion = 2
	// MinFormatVersion is the oldest version the decoders still read: 1, the same layout
	// without gap entries (a gap in a version 1 object is corrupt).
	MinFormatVersion = 1
	// EntrySize is the size of one entry, the same in the root and in groups.
	EntrySize = 48
	// RootHeaderSize is the root's bytes before its first entry.
	RootHeaderSize = 52
	// GroupHeaderSize is a group object's bytes before its first entry.
	GroupHeaderSize = 12
	// CRCSize is the trailing CRC-32 of root and group objects.
	CRCSize = 4
)

// Magics of the manifest objects.
const (
	RootMagic      = "OSIR"
	GroupMagic     = "OSIG"
	KiloGroupMagic = "OSIK"
	MegaGroupMagic = "OSIM"
)

// ErrCorrupt marks a root or group object that a decoder refuses: wrong magic, unknown
// version, bad CRC, truncation, entries out of order, a gap entry where none may stand, or
// a header that contradicts them.
// Such an object is never treated as empty.
var ErrCorrupt = errors.New("corrupt manifest object")

// CorruptError says which object a decoder refused, at which byte, and why. It matches
// ErrCorrupt with errors.Is.
type CorruptError struct {
	Object string // "root" or the group kind ("group", "kgroup", "mgroup")
	At     int    // byte position of the offending field
	Reason string
}

// Error names the object, the byte and the reason.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("%s: %s object at byte %d: %s", ErrCorrupt, e.Object, e.At, e.Reason)
}

// Unwrap lets errors.Is(err, ErrCorrupt) classify every decoder refusal.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

func corrupt(object string, at int, format string, args ...any) error {
	return &CorruptError{Object: object, At: at, Reason: fmt.Sprintf(format, args...)}
}

// RootSize is the encoded length of a root with n entries.
func RootSize(n int) int { return RootHeaderSize + EntrySize*n + CRCSize }

// GroupSize is the encoded length of a group object with n entries.
func GroupSize(n int) int { return GroupHeaderSize + EntrySize*n + CRCSize }

// EncodeRoot serialises the root manifest as remote-format.md lays it out, as version
// FormatVersion (2, no identity: what buckets of versions 1 and 2 hold; new roots are
// version 3, see EncodeRootV3). It encodes what it is given; callers keep m valid (Apply does).
func EncodeRoot(m Manifest) []byte { return encodeRoot(FormatVersion, Lineage{}, m) }

// encodeRoot lays out a root of the given version: version 3 puts the lineage's 40 bytes
// after the version and shifts every later field by 40.
func encodeRoot(version uint32, l Lineage, m Manifest) []byte {
	base := rootBase(version)
	b := make([]byte, base+RootSize(len(m.Entries)))
	copy(b, RootMagic)
	binary.BigEndian.PutUint32(b[4:], version)
	if version >= 3 {
		putLineage(b[8:], l)
	}
	h := b[base:]
	binary.BigEndian.PutUint64(h[8:], m.FirstOffset)
	binary.BigEndian.PutUint64(h[16:], m.NextOffset)
	binary.BigEndian.PutUint64(h[24:], uint64(m.FirstTimestamp))
	binary.BigEndian.PutUint64(h[32:], uint64(m.FirstLastTimestamp))
	binary.BigEndian.PutUint64(h[40:], m.TotalSize)
	binary.BigEndian.PutUint32(h[48:], uint32(len(m.Entries)))
	putEntries(h[RootHeaderSize:], m.Entries)
	putCRC(b)
	return b
}

// DecodeRoot parses a root object of version 1, 2 or 3 and returns its manifest (a version
// 3 root's identity and lineage are checked and dropped: DecodeRootObject keeps them). It
// refuses (with a *CorruptError naming the byte) a wrong magic or version, a length that
// does not match the entry count, a bad CRC, an impossible lineage, entries of unknown
// kinds, with non-zero reserved bytes, unsorted or overlapping, gap entries in a version 1
// object, illegal (non-zero size or uid, timestamps not -1), adjacent or at the head, and a
// header that contradicts the entries (see Manifest.Check).
func DecodeRoot(b []byte) (Manifest, error) {
	r, err := DecodeRootObject(b)
	return r.Manifest, err
}

// DecodeRootObject parses a root object of any version this package reads (see DecodeRoot)
// and returns its version, its lineage (zero below version 3) and its manifest.
func DecodeRootObject(b []byte) (Root, error) {
	const obj = "root"
	if len(b) < RootSize(0) {
		return Root{}, corrupt(obj, len(b), "truncated: %d bytes, a root has at least %d", len(b), RootSize(0))
	}
	if string(b[:4]) != RootMagic {
		return Root{}, corrupt(obj, 0, "magic %q, want %q", b[:4], RootMagic)
	}
	v := binary.BigEndian.Uint32(b[4:])
	if v < MinFormatVersion || v > RootFormatVersion {
		return Root{}, corrupt(obj, 4, "unknown version %d (this decoder reads roots of versions %d to %d)", v, MinFormatVersion, RootFormatVersion)
	}
	base := rootBase(v)
	if len(b) < base+RootSize(0) {
		return Root{}, corrupt(obj, len(b), "truncated: %d bytes, a version %d root has at least %d", len(b), v, base+RootSize(0))
	}
	n := binary.BigEndian.Uint32(b[base+48:])
	if err := checkLength(obj, b, base+48, base+RootHeaderSize, n); err != nil {
		return Root{}, err
	}
	if err := checkCRC(obj, b); err != nil {
		return Root{}, err
	}
	r := Root{Version: v}
	if v >= 3 {
		r.Lineage = readLineage(b[8:])
		if err := r.Lineage.Validate(); err != nil {
			return Root{}, corrupt(obj, 8, "%v", err)
		}
	}
	h := b[base:]
	m := Manifest{
		FirstOffset:        binary.BigEndian.Uint64(h[8:]),
		NextOffset:         binary.BigEndian.Uint64(h[16:]),
		FirstTimestamp:     int64(binary.BigEndian.Uint64(h[24:])),
		FirstLastTimestamp: int64(binary.BigEndian.Uint64(h[32:])),
		TotalSize:          binary.BigEndian.Uint64(h[40:]),
	}
	entryVersion := min(v, FormatVersion) // a version 3 root's entries are those of version 2
	entries, err := readEntries(obj, b, base+RootHeaderSize, int(n), entryVersion, KindFragment)
	if err != nil {
		return Root{}, err
	}
	if len(entries) > 0 && entries[0].IsGap() {
		return Root{}, corrupt(obj, base+RootHeaderSize+40, "entry 0 is a gap (a leading gap goes with the prefix)")
	}
	m.Entries = entries
	for i, e := range entries {
		if e.FirstOffset >= m.NextOffset {
			return Root{}, corrupt(obj, base+RootHeaderSize+EntrySize*i, "entry %d starts at offset %d, not below next offset %d", i, e.FirstOffset, m.NextOffset)
		}
	}
	if err := m.Check(); err != nil {
		return Root{}, corrupt(obj, base+8, "header inconsistent with entries: %v", err)
	}
	r.Manifest = m
	return r, nil
}

// groupMagic is the magic of a group object of kind k; "OSI?" for a kind that has none,
// so that no decoder accepts it.
func groupMagic(k Kind) string {
	switch k {
	case KindGroup:
		return GroupMagic
	case KindKiloGroup:
		return KiloGroupMagic
	case KindMegaGroup:
		return MegaGroupMagic
	}
	return "OSI?"
}

// EncodeGroup serialises a group object of the given kind (1 to 3) holding entries of kind
// one lower (fragments and gaps for kind 1), as version FormatVersion. It encodes what it
// is given; a kind outside 1..3 gets a magic no decoder accepts.
func EncodeGroup(kind Kind, entries []Entry) []byte {
	b := make([]byte, GroupSize(len(entries)))
	copy(b, groupMagic(kind))
	binary.BigEndian.PutUint32(b[4:], FormatVersion)
	binary.BigEndian.PutUint32(b[8:], uint32(len(entries)))
	putEntries(b[GroupHeaderSize:], entries)
	putCRC(b)
	return b
}

// DecodeGroup parses a group, kilo-group or mega-group object of version 1 or 2 and returns
// its kind and entries, refusing (with a *CorruptError naming the byte) a wrong magic or
// version, a length that does not match the count, a bad CRC, no entries, entries not of
// the kind one lower (a group holds fragments and, in version 2, gaps), with non-zero
// reserved bytes, unsorted or overlapping, and illegal, adjacent or only gaps.
func DecodeGroup(b []byte) (Kind, []Entry, error) {
	obj := "group"
	if len(b) < GroupSize(0) {
		return 0, nil, corrupt(obj, len(b), "truncated: %d bytes, a group has at least %d", len(b), GroupSize(0))
	}
	var kind Kind
	switch string(b[:4]) {
	case GroupMagic:
		kind = KindGroup
	case KiloGroupMagic:
		kind = KindKiloGroup
	case MegaGroupMagic:
		kind = KindMegaGroup
	default:
		return 0, nil, corrupt(obj, 0, "magic %q, want %q, %q or %q", b[:4], GroupMagic, KiloGroupMagic, MegaGroupMagic)
	}
	obj = kind.String()
	v, err := readVersion(obj, b)
	if err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(b[8:])
	if err := checkLength(obj, b, 8, GroupHeaderSize, n); err != nil {
		return 0, nil, err
	}
	if err := checkCRC(obj, b); err != nil {
		return 0, nil, err
	}
	if n == 0 {
		return 0, nil, corrupt(obj, 8, "no entries")
	}
	entries, err := readEntries(obj, b, GroupHeaderSize, int(n), v, kind)
	if err != nil {
		return 0, nil, err
	}
	if len(entries) == 1 && entries[0].IsGap() { // no two gaps are adjacent: one gap is all gaps
		return 0, nil, corrupt(obj, GroupHeaderSize+40, "holds only gaps (a group holds at least one fragment)")
	}
	return kind, entries, nil
}

// checkLength compares the object's length with what its entry count (at byte countAt)
// requires, so that truncation and stray bytes are named as such rather than as a CRC error.
func checkLength(obj string, b []byte, countAt, header int, n uint32) error {
	want := uint64(header) + EntrySize*uint64(n) + CRCSize
	switch {
	case uint64(len(b)) < want:
		return corrupt(obj, countAt, "truncated: %d entries need %d bytes, the object has %d", n, want, len(b))
	case uint64(len(b)) > want:
		return corrupt(obj, countAt, "%d entries need %d bytes, the object has %d (count and length disagree)", n, want, len(b))
	}
	return nil
}

func checkCRC(obj string, b []byte) error {
	at := len(b) - CRCSize
	stored := binary.BigEndian.Uint32(b[at:])
	if sum := crc32.ChecksumIEEE(b[:at]); sum != stored {
		return corrupt(obj, at, "CRC-32 mismatch: stored %08x, computed %08x", stored, sum)
	}
	return nil
}

func putCRC(b []byte) {
	at := len(b) - CRCSize
	binary.BigEndian.PutUint32(b[at:], crc32.ChecksumIEEE(b[:at]))
}

func putEntries(b []byte, entries []Entry) {
	for i, e := range entries {
		p := b[EntrySize*i : EntrySize*(i+1)]
		binary.BigEndian.PutUint64(p[0:], e.FirstOffset)
		binary.BigEndian.PutUint64(p[8:], uint64(e.FirstTimestamp))
		binary.BigEndian.PutUint64(p[16:], uint64(e.LastTimestamp))
		binary.BigEndian.PutUint64(p[24:], e.Size)
		binary.BigEndian.PutUint64(p[32:], e.UID)
		p[40] = byte(e.Kind)
		// bytes 41..47 stay zero
	}
}

// readVersion reads the version after the magic: MinFormatVersion to FormatVersion.
func readVersion(obj string, b []byte) (uint32, error) {
	v := binary.BigEndian.Uint32(b[4:])
	if v < MinFormatVersion || v > FormatVersion {
		return 0, corrupt(obj, 4, "unknown version %d (this decoder reads %d to %d)", v, MinFormatVersion, FormatVersion)
	}
	return v, nil
}

// childKindOK reports whether an entry of kind c may stand in a group of kind parent (a
// group holds leaves: fragments and gaps), or in the root when parent is KindFragment.
func childKindOK(parent, c Kind) bool {
	switch parent {
	case KindFragment:
		return c <= KindGap
	case KindGroup:
		return c == KindFragment || c == KindGap
	}
	return c == parent-1
}

// readEntries decodes n entries of an object of the given version starting at byte start,
// checking kinds (those a group of kind parent holds, or any for the root: parent
// KindFragment), gaps (version 2 only, legal, never adjacent), reserved bytes and strictly
// increasing first offsets.
func readEntries(obj string, b []byte, start, n int, version uint32, parent Kind) ([]Entry, error) {
	if n == 0 {
		return nil, nil
	}
	entries := make([]Entry, n)
	for i := range entries {
		at := start + EntrySize*i
		p := b[at : at+EntrySize]
		e := Entry{
			FirstOffset:    binary.BigEndian.Uint64(p[0:]),
			FirstTimestamp: int64(binary.BigEndian.Uint64(p[8:])),
			LastTimestamp:  int64(binary.BigEndian.Uint64(p[16:])),
			Size:           binary.BigEndian.Uint64(p[24:]),
			UID:            binary.BigEndian.Uint64(p[32:]),
			Kind:           Kind(p[40]),
		}
		if e.Kind > KindGap {
			return nil, corrupt(obj, at+40, "entry %d has unknown kind %d", i, p[40])
		}
		if e.IsGap() && version < 2 {
			return nil, corrupt(obj, at+40, "entry %d is a gap, which a version %d object cannot hold (gaps came with version 2)", i, version)
		}
		if !childKindOK(parent, e.Kind) {
			want := parent - 1
			if parent == KindGroup {
				return nil, corrupt(obj, at+40, "entry %d is a %s, a %s holds only fragments and gaps", i, e.Kind, obj)
			}
			return nil, corrupt(obj, at+40, "entry %d is a %s, a %s holds only %ss", i, e.Kind, obj, want)
		}
		for j := 41; j < EntrySize; j++ {
			if p[j] != 0 {
				return nil, corrupt(obj, at+j, "entry %d: reserved byte %d is %#x, not zero", i, j, p[j])
			}
		}
		if e.IsGap() {
			switch {
			case e.FirstTimestamp != -1:
				return nil, corrupt(obj, at+8, "entry %d: gap with first timestamp %d (a gap has none: -1)", i, e.FirstTimestamp)
			case e.LastTimestamp != -1:
				return nil, corrupt(obj, at+16, "entry %d: gap with last timestamp %d (a gap has none: -1)", i, e.LastTimestamp)
			case e.Size != 0:
				return nil, corrupt(obj, at+24, "entry %d: gap with size %d (a gap holds nothing)", i, e.Size)
			case e.UID != 0:
				return nil, corrupt(obj, at+32, "entry %d: gap with uid %016x (a gap names no object)", i, e.UID)
			case i > 0 && entries[i-1].IsGap():
				return nil, corrupt(obj, at+40, "entry %d is a gap right after the gap entry %d (adjacent gaps are one gap)", i, i-1)
			}
		}
		if i > 0 && e.FirstOffset <= entries[i-1].FirstOffset {
			return nil, corrupt(obj, at, "entry %d starts at offset %d, not after entry %d at %d (unsorted or overlapping)", i, e.FirstOffset, i-1, entries[i-1].FirstOffset)
		}
		entries[i] = e
	}
	return entries, nil
}
