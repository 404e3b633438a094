package manifest

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// RootFormatVersion is the version of every new root object: 3, which carries the root's
// identity and lineage (Lineage) in 40 bytes after the version. Group objects stay at
// FormatVersion; roots of versions 1 and 2 are still read.
const RootFormatVersion = 3

// LineageSize is the bytes a version 3 root adds after its version, before the fields of
// version 2.
const LineageSize = 40

// Lineage is a version 3 root's identity and its place in the stream's history: the root
// it was built on (its parent) is a manifest that was persisted.
type Lineage struct {
	Seq   uint64 // this root's place in the lineage; its key root-<seq20>.manifest carries it too
	Epoch uint64 // epoch of the writer that made it
	UID   uint64 // random, drawn for this root; the manifest record names (Seq, UID)
	// ParentSeq is the seq of the persisted manifest this root was built on: 0 for none,
	// and for a root built on a version 1 or 2 root (which has no seq).
	ParentSeq uint64
	// ParentUID is the parent's root uid: 0 for none; for the first version 3 root of a
	// stream that had a version 1 or 2 root, that root's uid.
	ParentUID uint64
}

// Validate refuses a lineage no writer makes: seq 0 (seqs start at 1), a parent seq not
// below seq, a zero uid (0 means "none" in a parent uid), or a parent seq without a parent
// uid.
func (l Lineage) Validate() error {
	switch {
	case l.Seq == 0:
		return errors.New("lineage: seq 0 (seqs start at 1)")
	case l.ParentSeq >= l.Seq:
		return fmt.Errorf("lineage: parent seq %d not below seq %d", l.ParentSeq, l.Seq)
	case l.UID == 0:
		return fmt.Errorf("lineage: root of seq %d has uid 0 (0 names no root)", l.Seq)
	case l.ParentSeq > 0 && l.ParentUID == 0:
		return fmt.Errorf("lineage: root of seq %d names parent seq %d with uid 0", l.Seq, l.ParentSeq)
	}
	return nil
}

// IsChildOf reports whether this root was built on the persisted manifest whose root is
// (seq, uid): seq 0 with a uid names a version 1 or 2 root, seq 0 and uid 0 nothing.
func (l Lineage) IsChildOf(seq, uid uint64) bool { return l.ParentSeq == seq && l.ParentUID == uid }

// String renders the lineage for logs and errors.
func (l Lineage) String() string {
	return fmt.Sprintf("seq %d (epoch %d, uid %016x, parent seq %d uid %016x)", l.Seq, l.Epoch, l.UID, l.ParentSeq, l.ParentUID)
}

// Root is a decoded root object: its format version, its lineage (zero below version 3)
// and the manifest it holds.
type Root struct {
	Version  uint32
	Lineage  Lineage
	Manifest Manifest
}

// EncodeRootV3 serialises a version 3 root: m with the lineage l. It encodes what it is
// given; callers keep m valid and l valid (Lineage.Validate).
func EncodeRootV3(l Lineage, m Manifest) []byte { return encodeRoot(RootFormatVersion, l, m) }

// EncodeRootObject serialises r at its own version (a version 1 root is written as
// version 2, the same layout), so that a decoded root encodes back to its bytes.
func EncodeRootObject(r Root) []byte {
	if r.Version >= 3 {
		return EncodeRootV3(r.Lineage, r.Manifest)
	}
	return EncodeRoot(r.Manifest)
}

// rootBase is where a root of the given version puts what version 2 puts at byte 0.
func rootBase(version uint32) int {
	if version >= 3 {
		return LineageSize
	}
	return 0
}

func putLineage(b []byte, l Lineage) {
	binary.BigEndian.PutUint64(b[0:], l.Seq)
	binary.BigEndian.PutUint64(b[8:], l.Epoch)
	binary.BigEndian.PutUint64(b[16:], l.UID)
	binary.BigEndian.PutUint64(b[24:], l.ParentSeq)
	binary.BigEndian.PutUint64(b[32:], l.ParentUID)
}

func readLineage(b []byte) Lineage {
	return Lineage{
		Seq:       binary.BigEndian.Uint64(b[0:]),
		Epoch:     binary.BigEndian.Uint64(b[8:]),
		UID:       binary.BigEndian.Uint64(b[16:]),
		ParentSeq: binary.BigEndian.Uint64(b[24:]),
		ParentUID: binary.BigEndian.Uint64(b[32:]),
	}
}
