package manifest

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"testing"
)

// handEntry appends one 48-byte entry as remote-format.md lays it out.
func handEntry(b []byte, first uint64, ts1, ts2 int64, size, uid uint64, kind byte) []byte {
	be := binary.BigEndian
	b = be.AppendUint64(b, first)
	b = be.AppendUint64(b, uint64(ts1))
	b = be.AppendUint64(b, uint64(ts2))
	b = be.AppendUint64(b, size)
	b = be.AppendUint64(b, uid)
	b = append(b, kind)
	return append(b, make([]byte, 7)...)
}

func handCRC(b []byte) []byte { return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b)) }

// v1Root is a version-1 root built byte by byte, not with EncodeRoot: a partly consumed
// group at the head and a fragment.
func v1Root(kind1 byte) []byte {
	be := binary.BigEndian
	b := []byte("OSIR")
	b = be.AppendUint32(b, 1)
	b = be.AppendUint64(b, 150)  // first offset
	b = be.AppendUint64(b, 400)  // next offset
	b = be.AppendUint64(b, 1500) // first timestamp
	b = be.AppendUint64(b, 1599) // first-last timestamp
	if kind1 == 4 {
		b = be.AppendUint64(b, 150) // total size: the live part of the group
	} else {
		b = be.AppendUint64(b, 250) // total size
	}
	b = be.AppendUint32(b, 2)
	b = handEntry(b, 100, 1000, 1999, 200, 0xdeadbeef, 1)
	if kind1 == 4 {
		b = handEntry(b, 200, -1, -1, 0, 0, 4)
	} else {
		b = handEntry(b, 200, 2000, 2999, 100, 7, kind1)
	}
	return handCRC(b)
}

// v1Group is a version-1 group of two fragments built byte by byte; the second entry's
// kind is kind1.
func v1Group(kind1 byte) []byte {
	be := binary.BigEndian
	b := []byte("OSIG")
	b = be.AppendUint32(b, 1)
	b = be.AppendUint32(b, 2)
	b = handEntry(b, 0, 1, 2, 3, 4, 0)
	if kind1 == 4 {
		b = handEntry(b, 10, -1, -1, 0, 0, 4)
	} else {
		b = handEntry(b, 10, 3, 4, 5, 6, kind1)
	}
	return handCRC(b)
}

func TestVersion1StillDecodes(t *testing.T) {
	m, err := DecodeRoot(v1Root(0))
	if err != nil {
		t.Fatalf("version-1 root: %v", err)
	}
	if !m.Equal(sampleRoot()) {
		t.Fatalf("version-1 root decoded as %+v", m)
	}
	// re-encoding writes version 2, the same bytes otherwise
	again := EncodeRoot(m)
	if v := binary.BigEndian.Uint32(again[4:]); v != 2 {
		t.Fatalf("re-encoded as version %d", v)
	}
	kind, es, err := DecodeGroup(v1Group(0))
	if err != nil || kind != KindGroup || len(es) != 2 || es[1] != frag(10, 3, 4, 5, 6) {
		t.Fatalf("version-1 group: %v %+v %v", kind, es, err)
	}
	// a gap in a version-1 object is corrupt, at the kind byte
	for name, c := range map[string]struct {
		b   []byte
		dec func([]byte) error
		at  int
	}{
		"root":  {v1Root(4), func(b []byte) error { _, err := DecodeRoot(b); return err }, 52 + 48 + 40},
		"group": {v1Group(4), func(b []byte) error { _, _, err := DecodeGroup(b); return err }, 12 + 48 + 40},
	} {
		err := c.dec(c.b)
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.At != c.at || !strings.Contains(err.Error(), "version 1 object cannot hold") {
			t.Errorf("%s: gap in version 1: %v", name, err)
		}
		// the same bytes as version 2 decode
		v2 := append([]byte(nil), c.b...)
		binary.BigEndian.PutUint32(v2[4:], 2)
		if err := c.dec(withCRC(v2)); err != nil {
			t.Errorf("%s: gap in version 2: %v", name, err)
		}
	}
}

// gapRoot is a valid root with a gap between fragments and a trailing gap.
func gapRoot() Manifest {
	return Manifest{
		FirstOffset: 0, NextOffset: 50, FirstTimestamp: 1, FirstLastTimestamp: 2, TotalSize: 30,
		Entries: []Entry{frag(0, 1, 2, 10, 1), GapEntry(10), frag(20, 3, 4, 20, 2), GapEntry(30)},
	}
}

func TestEncodeGapLayout(t *testing.T) {
	m := gapRoot()
	b := EncodeRoot(m)
	be := binary.BigEndian
	g := b[52+48:]
	if be.Uint32(b[4:]) != 2 || be.Uint64(g) != 10 || be.Uint64(g[8:]) != ^uint64(0) || be.Uint64(g[16:]) != ^uint64(0) ||
		be.Uint64(g[24:]) != 0 || be.Uint64(g[32:]) != 0 || g[40] != 4 {
		t.Fatalf("gap entry bytes %x", g[:48])
	}
	back, err := DecodeRoot(b)
	if err != nil || !back.Equal(m) {
		t.Fatalf("round trip: %v", err)
	}
	children := []Entry{GapEntry(0), frag(5, 1, 2, 3, 4), GapEntry(9)}
	k, es, err := DecodeGroup(EncodeGroup(KindGroup, children))
	if err != nil || k != KindGroup || !entriesEqual(es, children) {
		t.Fatalf("group with gaps: %v", err)
	}
}

func TestDecodeGapRejects(t *testing.T) {
	root := EncodeRoot(gapRoot())
	modRoot := func(f func(b []byte)) []byte { b := append([]byte(nil), root...); f(b); return withCRC(b) }
	g := 52 + 48 // the first gap entry
	be := binary.BigEndian
	rootCases := []struct {
		name string
		b    []byte
		at   int
		says string
	}{
		{"gap first timestamp", modRoot(func(b []byte) { be.PutUint64(b[g+8:], 5) }), g + 8, "gap with first timestamp 5"},
		{"gap last timestamp", modRoot(func(b []byte) { be.PutUint64(b[g+16:], 0) }), g + 16, "gap with last timestamp 0"},
		{"gap size", modRoot(func(b []byte) { be.PutUint64(b[g+24:], 1) }), g + 24, "gap with size 1"},
		{"gap uid", modRoot(func(b []byte) { be.PutUint64(b[g+32:], 9) }), g + 32, "gap with uid"},
		{"adjacent gaps", modRoot(func(b []byte) { copy(b[g+48:], handEntry(nil, 20, -1, -1, 0, 0, 4)) }), g + 48 + 40, "adjacent gaps"},
		{"head gap", func() []byte {
			b := EncodeRoot(sampleRoot())
			copy(b[52:], handEntry(nil, 100, -1, -1, 0, 0, 4))
			return withCRC(b)
		}(), 52 + 40, "entry 0 is a gap"},
		{"gap header", modRoot(func(b []byte) { be.PutUint64(b[40:], 31) }), 8, "total size"},
	}
	for _, c := range rootCases {
		_, err := DecodeRoot(c.b)
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.At != c.at || !strings.Contains(err.Error(), c.says) {
			t.Errorf("root %s: got %v, want %q at byte %d", c.name, err, c.says, c.at)
		}
	}
	group := func(kind Kind, es ...Entry) []byte { return EncodeGroup(kind, es) }
	groupCases := []struct {
		name string
		b    []byte
		at   int
		says string
	}{
		{"only a gap", group(KindGroup, GapEntry(0)), 12 + 40, "holds only gaps"},
		{"adjacent gaps", group(KindGroup, frag(0, 1, 1, 1, 1), GapEntry(5), GapEntry(7)), 12 + 96 + 40, "adjacent gaps"},
		{"gap in a kgroup", group(KindKiloGroup, Entry{FirstOffset: 0, Size: 1, UID: 1, Kind: KindGroup}, GapEntry(5)), 12 + 48 + 40, "a kgroup holds only groups"},
		{"gap with size", group(KindGroup, frag(0, 1, 1, 1, 1), Entry{FirstOffset: 5, FirstTimestamp: -1, LastTimestamp: -1, Size: 3, Kind: KindGap}), 12 + 48 + 24, "gap with size 3"},
		{"unknown kind", group(KindGroup, Entry{Kind: 5}), 12 + 40, "unknown kind 5"},
	}
	for _, c := range groupCases {
		_, _, err := DecodeGroup(c.b)
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.At != c.at || !strings.Contains(err.Error(), c.says) {
			t.Errorf("group %s: got %v, want %q at byte %d", c.name, err, c.says, c.at)
		}
	}
}
