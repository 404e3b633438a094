package manifest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// sampleRoot is a valid root whose head group is partly consumed.
func sampleRoot() Manifest {
	return Manifest{
		FirstOffset: 150, NextOffset: 400, FirstTimestamp: 1500, FirstLastTimestamp: 1599, TotalSize: 250,
		Entries: []Entry{
			{FirstOffset: 100, FirstTimestamp: 1000, LastTimestamp: 1999, Size: 200, UID: 0xdeadbeef, Kind: KindGroup},
			{FirstOffset: 200, FirstTimestamp: 2000, LastTimestamp: 2999, Size: 100, UID: 7, Kind: KindFragment},
		},
	}
}

func TestEncodeRootLayout(t *testing.T) {
	b := EncodeRoot(sampleRoot())
	if len(b) != 52+2*48+4 {
		t.Fatalf("length %d", len(b))
	}
	be := binary.BigEndian
	checks := []struct {
		name string
		got  uint64
		want uint64
	}{
		{"version", uint64(be.Uint32(b[4:])), 2},
		{"first offset", be.Uint64(b[8:]), 150},
		{"next offset", be.Uint64(b[16:]), 400},
		{"first timestamp", be.Uint64(b[24:]), 1500},
		{"first-last timestamp", be.Uint64(b[32:]), 1599},
		{"total size", be.Uint64(b[40:]), 250},
		{"entry count", uint64(be.Uint32(b[48:])), 2},
		{"entry 0 first offset", be.Uint64(b[52:]), 100},
		{"entry 0 first timestamp", be.Uint64(b[60:]), 1000},
		{"entry 0 last timestamp", be.Uint64(b[68:]), 1999},
		{"entry 0 size", be.Uint64(b[76:]), 200},
		{"entry 0 uid", be.Uint64(b[84:]), 0xdeadbeef},
		{"entry 0 kind", uint64(b[92]), 1},
		{"entry 1 first offset", be.Uint64(b[100:]), 200},
		{"entry 1 kind", uint64(b[140]), 0},
		{"crc", uint64(be.Uint32(b[148:])), uint64(crc32.ChecksumIEEE(b[:148]))},
	}
	if string(b[:4]) != "OSIR" {
		t.Errorf("magic %q", b[:4])
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.name, c.got, c.want)
		}
	}
	if !bytes.Equal(b[93:100], make([]byte, 7)) {
		t.Errorf("reserved bytes not zero: %x", b[93:100])
	}
	// -1 timestamps are two's complement
	e := EncodeRoot(EmptyAt(9))
	if be.Uint64(e[24:]) != ^uint64(0) || be.Uint64(e[32:]) != ^uint64(0) {
		t.Errorf("empty root timestamps not -1: %x", e[24:40])
	}
	m, err := DecodeRoot(b)
	if err != nil || !m.Equal(sampleRoot()) {
		t.Fatalf("decode: %+v, %v", m, err)
	}
}

func TestEncodeGroupLayout(t *testing.T) {
	children := []Entry{
		{FirstOffset: 5, FirstTimestamp: 1, LastTimestamp: 2, Size: 3, UID: 4, Kind: KindGroup},
		{FirstOffset: 9, FirstTimestamp: 3, LastTimestamp: 4, Size: 5, UID: 6, Kind: KindGroup},
	}
	for kind, magic := range map[Kind]string{KindGroup: "OSIG", KindKiloGroup: "OSIK", KindMegaGroup: "OSIM"} {
		cs := append([]Entry(nil), children...)
		for i := range cs {
			cs[i].Kind = kind - 1
		}
		b := EncodeGroup(kind, cs)
		if string(b[:4]) != magic || binary.BigEndian.Uint32(b[4:]) != 2 || binary.BigEndian.Uint32(b[8:]) != 2 || len(b) != 12+96+4 {
			t.Fatalf("%s: header %q %x, length %d", kind, b[:4], b[4:12], len(b))
		}
		if binary.BigEndian.Uint64(b[12:]) != 5 || b[12+40] != byte(kind-1) {
			t.Errorf("%s: first entry misplaced", kind)
		}
		k, got, err := DecodeGroup(b)
		if err != nil || k != kind || !entriesEqual(got, cs) {
			t.Fatalf("%s: decode %v %+v %v", kind, k, got, err)
		}
	}
	if _, _, err := DecodeGroup(EncodeGroup(KindFragment, nil)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("group of kind 0 decoded: %v", err)
	}
}

// withCRC recomputes the trailing CRC so that a test reaches the check after it.
func withCRC(b []byte) []byte {
	binary.BigEndian.PutUint32(b[len(b)-4:], crc32.ChecksumIEEE(b[:len(b)-4]))
	return b
}

func TestDecodeRootRejects(t *testing.T) {
	good := EncodeRoot(sampleRoot())
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := []struct {
		name string
		b    []byte
		at   int
		says string
	}{
		{"empty", nil, 0, "truncated"},
		{"short header", good[:40], 40, "truncated"},
		{"wrong magic", mod(func(b []byte) []byte { b[3] = 'G'; return b }), 0, "magic"},
		{"unknown version", mod(func(b []byte) []byte { b[7] = 4; return b }), 4, "unknown version 4"},
		{"version zero", mod(func(b []byte) []byte { b[7] = 0; return b }), 4, "unknown version 0"},
		{"truncated entry", good[:len(good)-10], 48, "truncated"},
		{"trailing bytes", append(append([]byte(nil), good...), 0), 48, "count and length disagree"},
		{"count too high", mod(func(b []byte) []byte { b[51] = 3; return b }), 48, "truncated"},
		{"bad crc", mod(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), len(good) - 4, "CRC-32 mismatch"},
		{"flipped data bit", mod(func(b []byte) []byte { b[60] ^= 0x10; return b }), len(good) - 4, "CRC-32 mismatch"},
		{"unknown kind", mod(func(b []byte) []byte { b[140] = 5; return withCRC(b) }), 140, "unknown kind 5"},
		{"reserved byte", mod(func(b []byte) []byte { b[95] = 1; return withCRC(b) }), 95, "reserved byte"},
		{"unsorted", mod(func(b []byte) []byte { binary.BigEndian.PutUint64(b[100:], 50); return withCRC(b) }), 100, "unsorted or overlapping"},
		{"overlapping", mod(func(b []byte) []byte { binary.BigEndian.PutUint64(b[100:], 100); return withCRC(b) }), 100, "unsorted or overlapping"},
		{"entry at next", mod(func(b []byte) []byte { binary.BigEndian.PutUint64(b[16:], 200); return withCRC(b) }), 100, "not below next offset"},
		{"first above next", mod(func(b []byte) []byte {
			binary.BigEndian.PutUint64(b[8:], 500)
			binary.BigEndian.PutUint64(b[16:], 450)
			return withCRC(b)
		}), 8, "above next offset"},
		{"first past head", mod(func(b []byte) []byte { binary.BigEndian.PutUint64(b[8:], 200); return withCRC(b) }), 8, "past the first entry"},
		{"size too big", mod(func(b []byte) []byte { binary.BigEndian.PutUint64(b[40:], 301); return withCRC(b) }), 8, "total size"},
		{"size too small", mod(func(b []byte) []byte { binary.BigEndian.PutUint64(b[40:], 99); return withCRC(b) }), 8, "total size"},
		{"empty with size", withCRC(func() []byte { b := EncodeRoot(EmptyAt(5)); binary.BigEndian.PutUint64(b[40:], 1); return b }()), 8, "no entries but total size"},
		{"empty with timestamps", withCRC(func() []byte { b := EncodeRoot(EmptyAt(5)); binary.BigEndian.PutUint64(b[24:], 3); return b }()), 8, "timestamps"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeRoot(c.b)
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("got %v, want a *CorruptError", err)
			}
			if ce.At != c.at || !strings.Contains(err.Error(), c.says) || ce.Object != "root" {
				t.Fatalf("got %q at byte %d, want %q at byte %d", err, ce.At, c.says, c.at)
			}
		})
	}
}

func TestDecodeGroupRejects(t *testing.T) {
	children := []Entry{
		{FirstOffset: 0, FirstTimestamp: 1, LastTimestamp: 2, Size: 3, UID: 4},
		{FirstOffset: 10, FirstTimestamp: 3, LastTimestamp: 4, Size: 5, UID: 6},
	}
	good := EncodeGroup(KindGroup, children)
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := []struct {
		name   string
		b      []byte
		at     int
		object string
		says   string
	}{
		{"short", good[:15], 15, "group", "truncated"},
		{"root magic", mod(func(b []byte) []byte { copy(b, "OSIR"); return b }), 0, "group", "magic"},
		{"unknown version", mod(func(b []byte) []byte { b[7] = 0; return b }), 4, "group", "unknown version 0"},
		{"version three", mod(func(b []byte) []byte { b[7] = 3; return b }), 4, "group", "unknown version 3"},
		{"truncated", good[:len(good)-1], 8, "group", "truncated"},
		{"trailing", append(append([]byte(nil), good...), 1, 2), 8, "group", "count and length disagree"},
		{"bad crc", mod(func(b []byte) []byte { b[20] ^= 0xff; return b }), len(good) - 4, "group", "CRC-32 mismatch"},
		{"no entries", EncodeGroup(KindGroup, nil), 8, "group", "no entries"},
		{"wrong child kind", mod(func(b []byte) []byte { b[12+48+40] = 1; return withCRC(b) }), 12 + 48 + 40, "group", "holds only fragments"},
		{"kgroup of fragments", mod(func(b []byte) []byte { copy(b, "OSIK"); return withCRC(b) }), 12 + 40, "kgroup", "holds only groups"},
		{"unsorted", mod(func(b []byte) []byte { binary.BigEndian.PutUint64(b[60:], 0); return withCRC(b) }), 60, "group", "unsorted or overlapping"},
		{"reserved byte", mod(func(b []byte) []byte { b[12+47] = 9; return withCRC(b) }), 12 + 47, "group", "reserved byte"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := DecodeGroup(c.b)
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("got %v, want a *CorruptError", err)
			}
			if ce.At != c.at || ce.Object != c.object || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("got %q (%s at byte %d), want %q (%s at byte %d)", err, ce.Object, ce.At, c.says, c.object, c.at)
			}
		})
	}
}

// genManifest draws a valid root: sorted entries with kinds not increasing from the head,
// gaps (never the head, never adjacent), possibly a partly consumed head group, and a
// header that agrees.
func genManifest(t *rapid.T) Manifest {
	n := rapid.IntRange(0, 12).Draw(t, "entries")
	off := rapid.Uint64Range(0, 1<<50).Draw(t, "base")
	if n == 0 {
		if rapid.Bool().Draw(t, "never-uploaded") {
			return Empty()
		}
		return EmptyAt(off)
	}
	kind := Kind(rapid.IntRange(0, 3).Draw(t, "head-kind"))
	var m Manifest
	for i := 0; i < n; i++ {
		if kind > 0 && rapid.Bool().Draw(t, "lower") {
			kind--
		}
		if i > 0 && !m.Entries[i-1].IsGap() && rapid.IntRange(0, 3).Draw(t, "gap") == 0 {
			m.Entries = append(m.Entries, GapEntry(off)) // never the head, never two in a row
		} else {
			ts := rapid.Int64().Draw(t, "ts")
			m.Entries = append(m.Entries, Entry{
				FirstOffset: off, FirstTimestamp: ts, LastTimestamp: ts + rapid.Int64Range(0, 1000).Draw(t, "dur"),
				Size: rapid.Uint64Range(0, 1<<40).Draw(t, "size"), UID: rapid.Uint64().Draw(t, "uid"), Kind: kind,
			})
		}
		off += rapid.Uint64Range(1, 1<<20).Draw(t, "len")
	}
	m.NextOffset = off
	head := m.Entries[0]
	rest, _ := sumSizes(m.Entries[1:])
	m.FirstOffset, m.FirstTimestamp, m.FirstLastTimestamp, m.TotalSize = head.FirstOffset, head.FirstTimestamp, head.LastTimestamp, rest+head.Size
	if head.Kind != KindFragment && m.EntryEnd(0) > head.FirstOffset+1 && rapid.Bool().Draw(t, "partly-consumed") {
		m.FirstOffset = rapid.Uint64Range(head.FirstOffset+1, m.EntryEnd(0)-1).Draw(t, "first")
		m.FirstTimestamp = rapid.Int64().Draw(t, "first-ts")
		m.FirstLastTimestamp = rapid.Int64().Draw(t, "first-last-ts")
		m.TotalSize = rest + rapid.Uint64Range(0, head.Size).Draw(t, "live")
	}
	return m
}

func TestCodecRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := genManifest(t)
		if err := m.Check(); err != nil {
			t.Fatalf("generator made an invalid root: %v", err)
		}
		b := EncodeRoot(m)
		got, err := DecodeRoot(b)
		if err != nil || !got.Equal(m) {
			t.Fatalf("root round trip: %v", err)
		}
		if len(m.Entries) > 0 {
			kind := Kind(rapid.IntRange(1, 3).Draw(t, "group-kind"))
			es := append([]Entry(nil), m.Entries...)
			for i := range es {
				if kind != KindGroup || !es[i].IsGap() { // groups keep their gaps
					es[i].Kind = kind - 1
				}
			}
			k, back, err := DecodeGroup(EncodeGroup(kind, es))
			if err != nil || k != kind || !entriesEqual(back, es) {
				t.Fatalf("group round trip: %v", err)
			}
		}
		// any single flipped bit is refused (CRC-32 catches every 1-bit error)
		i := rapid.IntRange(0, len(b)*8-1).Draw(t, "bit")
		c := append([]byte(nil), b...)
		c[i/8] ^= 1 << (i % 8)
		if _, err := DecodeRoot(c); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flipped bit %d accepted: %v", i, err)
		}
	})
}
