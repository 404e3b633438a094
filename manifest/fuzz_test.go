package manifest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// asVersion2 is b (a decoded object) as this package encodes it: a version 1 object as
// version 2, CRC redone; versions 2 and 3 as they are.
func asVersion2(b []byte) []byte {
	if binary.BigEndian.Uint32(b[4:]) != 1 {
		return b
	}
	c := append([]byte(nil), b...)
	binary.BigEndian.PutUint32(c[4:], FormatVersion)
	return withCRC(c)
}

func fuzzSeedRoots() [][]byte {
	roots := [][]byte{
		EncodeRoot(Empty()),
		EncodeRoot(EmptyAt(1 << 40)),
		EncodeRoot(sampleRoot()),
	}
	tr := newTier(Empty(), 2)
	for i := uint64(0); i < 7; i++ {
		if _, err := tr.appendFragment(10*i, 10*i+10, 5, int64(i), int64(i)); err != nil {
			panic(err)
		}
	}
	for {
		if _, _, ok, err := tr.rebalanceOnce(); err != nil || !ok {
			break
		}
	}
	roots = append(roots, EncodeRoot(tr.m))
	// gaps in the root and in the groups, and version-1 objects built by hand
	if _, err := tr.declareGap(80); err != nil {
		panic(err)
	}
	if _, err := tr.appendFragment(80, 90, 5, 8, 8); err != nil {
		panic(err)
	}
	roots = append(roots, EncodeRoot(tr.m), EncodeRoot(gapRoot()), v1Root(0), v1Root(4))
	full := EncodeRoot(sampleRoot())
	roots = append(roots, full[:len(full)-1], full[:60], []byte("OSIR"), nil)
	return roots
}

// FuzzDecodeRoot: no input panics; whatever decodes is a valid root that encodes back to
// the same bytes (version 1 input re-encodes as version 2: the same bytes but the version
// and the CRC; version 3 keeps its lineage); every refusal is classified as ErrCorrupt.
func FuzzDecodeRoot(f *testing.F) {
	for _, b := range fuzzSeedRoots() {
		f.Add(b)
	}
	for _, b := range fuzzSeedRootsV3() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRootObject(b)
		m := r.Manifest
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("refusal not classified as corrupt: %v", err)
			}
			return
		}
		if err := m.Check(); err != nil {
			t.Fatalf("decoded an invalid root: %v", err)
		}
		for i, e := range m.Entries {
			if e.IsGap() && binary.BigEndian.Uint32(b[4:]) < 2 {
				t.Fatalf("entry %d: a gap decoded from a version-1 root", i)
			}
		}
		if r.Version >= 3 {
			if err := r.Lineage.Validate(); err != nil {
				t.Fatalf("decoded an invalid lineage: %v", err)
			}
		} else if r.Lineage != (Lineage{}) {
			t.Fatalf("a version %d root decoded with lineage %v", r.Version, r.Lineage)
		}
		if again := EncodeRootObject(r); !bytes.Equal(again, asVersion2(b)) {
			t.Fatalf("decode then encode changed the bytes")
		}
		back, err := DecodeRootObject(EncodeRootObject(r))
		if err != nil || !back.Manifest.Equal(m) || back.Lineage != r.Lineage {
			t.Fatalf("decode(encode(r)) != r: %v", err)
		}
	})
}

// FuzzDecodeGroup: no input panics; whatever decodes has entries of the kind one lower,
// sorted, and encodes back to the same bytes.
func FuzzDecodeGroup(f *testing.F) {
	f.Add(EncodeGroup(KindGroup, []Entry{{FirstOffset: 1, Size: 2, UID: 3}, {FirstOffset: 5, Size: 1, UID: 4}}))
	f.Add(EncodeGroup(KindKiloGroup, []Entry{{FirstOffset: 0, Size: 9, UID: 1, Kind: KindGroup}}))
	f.Add(EncodeGroup(KindMegaGroup, []Entry{{FirstOffset: 7, LastTimestamp: -1, Size: 9, UID: 1, Kind: KindKiloGroup}}))
	f.Add(EncodeGroup(KindGroup, nil))
	f.Add([]byte("OSIG\x00\x00\x00\x01"))
	f.Add(EncodeGroup(KindGroup, []Entry{GapEntry(0), {FirstOffset: 5, Size: 1, UID: 4}, GapEntry(7)}))
	f.Add(EncodeGroup(KindGroup, []Entry{GapEntry(0)}))
	f.Add(v1Group(0))
	f.Add(v1Group(4))
	f.Fuzz(func(t *testing.T, b []byte) {
		kind, entries, err := DecodeGroup(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("refusal not classified as corrupt: %v", err)
			}
			return
		}
		if kind < KindGroup || kind > KindMegaGroup || len(entries) == 0 {
			t.Fatalf("decoded kind %d with %d entries", kind, len(entries))
		}
		for i, e := range entries {
			if !childKindOK(kind, e.Kind) || (i > 0 && e.FirstOffset <= entries[i-1].FirstOffset) {
				t.Fatalf("entry %d out of place: %+v", i, e)
			}
			if e.IsGap() && (gapProblem(e) != "" || binary.BigEndian.Uint32(b[4:]) < 2 || (i > 0 && entries[i-1].IsGap())) {
				t.Fatalf("entry %d is a gap that may not stand there: %+v", i, e)
			}
		}
		if again := EncodeGroup(kind, entries); !bytes.Equal(again, asVersion2(b)) {
			t.Fatalf("decode then encode changed the bytes")
		}
	})
}
