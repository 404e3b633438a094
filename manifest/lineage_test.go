package manifest

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

func sampleLineage() Lineage {
	return Lineage{Seq: 7, Epoch: 3, UID: 0xfeedface01020304, ParentSeq: 6, ParentUID: 0x0102030405060708}
}

// fuzzSeedRootsV3 are version 3 roots: empty, with entries, the first of a stream that had
// a version 2 root (parent seq 0, parent uid set), truncated and with a bad lineage.
func fuzzSeedRootsV3() [][]byte {
	full := EncodeRootV3(sampleLineage(), sampleRoot())
	bad := append([]byte(nil), full...)
	binary.BigEndian.PutUint64(bad[8:], 0) // seq 0
	return [][]byte{
		EncodeRootV3(Lineage{Seq: 1, Epoch: 1, UID: 9}, Empty()),
		full,
		EncodeRootV3(Lineage{Seq: 1, Epoch: 4, UID: 9, ParentUID: 77}, gapRoot()),
		full[:len(full)-1], full[:92], withCRC(bad),
	}
}

func TestRootV3RoundTrip(t *testing.T) {
	cases := map[string]struct {
		l Lineage
		m Manifest
	}{
		"empty first root":          {Lineage{Seq: 1, Epoch: 1, UID: 1}, Empty()},
		"entries and groups":        {sampleLineage(), sampleRoot()},
		"gaps":                      {Lineage{Seq: 2, Epoch: 2, UID: 5, ParentSeq: 1, ParentUID: 4}, gapRoot()},
		"child of a version 2 root": {Lineage{Seq: 1, Epoch: 9, UID: 5, ParentUID: 0xabc}, sampleRoot()},
		"all retained away":         {Lineage{Seq: 1 << 40, Epoch: 1 << 50, UID: ^uint64(0), ParentSeq: 1<<40 - 3, ParentUID: 1}, EmptyAt(1 << 40)},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			b := EncodeRootV3(c.l, c.m)
			if len(b) != LineageSize+RootSize(len(c.m.Entries)) {
				t.Fatalf("length %d, want %d", len(b), LineageSize+RootSize(len(c.m.Entries)))
			}
			if v := binary.BigEndian.Uint32(b[4:]); v != RootFormatVersion {
				t.Fatalf("version %d, want %d", v, RootFormatVersion)
			}
			if seq := binary.BigEndian.Uint64(b[8:]); seq != c.l.Seq {
				t.Fatalf("seq at byte 8 is %d, want %d", seq, c.l.Seq)
			}
			if first := binary.BigEndian.Uint64(b[48:]); first != c.m.FirstOffset {
				t.Fatalf("first offset at byte 48 is %d, want %d (shifted by 40)", first, c.m.FirstOffset)
			}
			r, err := DecodeRootObject(b)
			if err != nil {
				t.Fatal(err)
			}
			if r.Version != 3 || r.Lineage != c.l || !r.Manifest.Equal(c.m) {
				t.Fatalf("decoded %+v, want version 3 %v %+v", r, c.l, c.m)
			}
			m, err := DecodeRoot(b)
			if err != nil || !m.Equal(c.m) {
				t.Fatalf("DecodeRoot of a version 3 root: %+v, %v", m, err)
			}
		})
	}
}

func TestRootV2StillReadWithoutLineage(t *testing.T) {
	r, err := DecodeRootObject(EncodeRoot(sampleRoot()))
	if err != nil || r.Version != 2 || r.Lineage != (Lineage{}) || !r.Manifest.Equal(sampleRoot()) {
		t.Fatalf("version 2 root: %+v, %v", r, err)
	}
	r, err = DecodeRootObject(v1Root(0))
	if err != nil || r.Version != 1 {
		t.Fatalf("version 1 root: %+v, %v", r, err)
	}
}

func TestRootV3Refusals(t *testing.T) {
	good := EncodeRootV3(sampleLineage(), sampleRoot())
	mut := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return withCRC(b)
	}
	cases := map[string]struct {
		b    []byte
		want string
	}{
		"seq 0":               {mut(func(b []byte) { binary.BigEndian.PutUint64(b[8:], 0) }), "seq 0"},
		"parent not below":    {mut(func(b []byte) { binary.BigEndian.PutUint64(b[32:], 7) }), "parent seq 7 not below seq 7"},
		"uid 0":               {mut(func(b []byte) { binary.BigEndian.PutUint64(b[24:], 0) }), "uid 0"},
		"parent seq, no uid":  {mut(func(b []byte) { binary.BigEndian.PutUint64(b[40:], 0) }), "parent seq 6 with uid 0"},
		"version 4":           {mut(func(b []byte) { binary.BigEndian.PutUint32(b[4:], 4) }), "unknown version 4"},
		"truncated lineage":   {good[:60], "truncated"},
		"bad crc":             {append(append([]byte(nil), good[:len(good)-1]...), good[len(good)-1]^1), "CRC-32 mismatch"},
		"v2 length as v3":     {mut(func(b []byte) { binary.BigEndian.PutUint32(b[4:], 3) })[:len(good)], ""},
		"v3 bytes labelled 2": {withCRC(append(append([]byte(nil), good[:4]...), append([]byte{0, 0, 0, 2}, good[8:]...)...)), "entries need"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeRootObject(c.b)
			if c.want == "" {
				return // only must not panic
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want ErrCorrupt naming %q", err, c.want)
			}
		})
	}
}

// Groups stay at version 2: a version 3 group is refused.
func TestGroupVersion3Refused(t *testing.T) {
	b := EncodeGroup(KindGroup, []Entry{{FirstOffset: 1, Size: 2, UID: 3}})
	binary.BigEndian.PutUint32(b[4:], 3)
	if _, _, err := DecodeGroup(withCRC(b)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a version 3 group decoded: %v", err)
	}
}

func TestLineageIsChildOf(t *testing.T) {
	l := Lineage{Seq: 5, Epoch: 1, UID: 9, ParentSeq: 4, ParentUID: 8}
	if !l.IsChildOf(4, 8) || l.IsChildOf(4, 7) || l.IsChildOf(3, 8) {
		t.Fatal("IsChildOf")
	}
	first := Lineage{Seq: 1, Epoch: 1, UID: 9, ParentUID: 0x77}
	if !first.IsChildOf(0, 0x77) || first.IsChildOf(0, 0) {
		t.Fatal("child of a version 2 root")
	}
}

func TestBucketKeys(t *testing.T) {
	sp := StreamPrefix("p", "s")
	if k := SeqRootKey("p", "s", 42); k != sp+"meta/root-00000000000000000042.manifest" {
		t.Fatalf("SeqRootKey %q", k)
	}
	if k := RootsStartAfter("p", "s", 42); k != sp+"meta/root-00000000000000000042" || !(k < SeqRootKey("p", "s", 42)) || !(SeqRootKey("p", "s", 41) < k) {
		t.Fatalf("RootsStartAfter %q does not sort between seq 41 and 42", k)
	}
	if !strings.HasPrefix(SeqRootKey("p", "s", 1), RootsPrefix("p", "s")) || !strings.HasPrefix(RootKey("p", "s", 1, 2), RootsPrefix("p", "s")) {
		t.Fatal("RootsPrefix does not hold both root layouts")
	}
	if MarkerKey("p", "s") != sp+"deleted" || ClaimKey("p") != "p/claim" {
		t.Fatal("marker or claim key")
	}
}

func TestParseKeyVersion3(t *testing.T) {
	k, err := ParseKey("p", SeqRootKey("p", "s", 42))
	if err != nil || k.Kind != ObjectRoot || k.KeyVersion != 3 || k.Seq != 42 || k.Stream != "s" || k.Epoch != 0 {
		t.Fatalf("v3 root key: %+v %v", k, err)
	}
	k, err = ParseKey("p", RootKey("p", "s", 3, 0xab))
	if err != nil || k.KeyVersion != 2 || k.Epoch != 3 || k.UID != 0xab || k.Seq != 0 {
		t.Fatalf("v2 root key: %+v %v", k, err)
	}
	k, err = ParseKey("p", MarkerKey("p", "s"))
	if err != nil || k.Kind != ObjectMarker || k.Stream != "s" {
		t.Fatalf("marker key: %+v %v", k, err)
	}
	if _, ok := k.EntryKind(); ok {
		t.Fatal("a marker names an entry")
	}
	x := NewKeyIndex("p")
	if _, err := x.Add(MarkerKey("p", "s")); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		StreamPrefix("p", "s") + "meta/root-00000000000000000000.manifest",
		StreamPrefix("p", "s") + "meta/root-42.manifest",
		"p/0000/s/deleted",
		StreamPrefix("p", "s") + "deleted2",
		ClaimKey("p"),
	} {
		if _, err := ParseKey("p", bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
