// Package manifest is the remote tier's index: the root manifest, its entries and group
// objects, the edits that change it, rebalancing, remote retention and lookup. It is pure:
// no I/O, no clock, no goroutines; time and object fetches come in as arguments.
package manifest

import (
	"errors"
	"fmt"
	"math/bits"
)

// Kind is an entry's height in the tree: what kind of object its uid names.
type Kind uint8

// Entry kinds; a group holds fragments, a kilo-group groups, a mega-group kilo-groups.
const (
	KindFragment  Kind = 0
	KindGroup     Kind = 1
	KindKiloGroup Kind = 2
	KindMegaGroup Kind = 3
	// KindGap is a declared hole (format version 2): a range the local log lost before it
	// could be uploaded. It names no object; it is a leaf, like a fragment.
	KindGap Kind = 4
)

// String names the kind as it appears in keys and logs.
func (k Kind) String() string {
	switch k {
	case KindFragment:
		return "fragment"
	case KindGroup:
		return "group"
	case KindKiloGroup:
		return "kgroup"
	case KindMegaGroup:
		return "mgroup"
	case KindGap:
		return "gap"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Entry points at one object of the remote tier: a fragment or a group of a lower level.
type Entry struct {
	FirstOffset    uint64 // first offset covered; the entry ends where the next one starts
	FirstTimestamp int64  // timestamp of the first chunk below it
	LastTimestamp  int64  // timestamp of the last chunk below it
	Size           uint64 // chunk-region bytes of everything below it
	UID            uint64 // random, fresh for every object
	Kind           Kind
}

// IsGap reports whether e declares a gap rather than naming an object.
func (e Entry) IsGap() bool { return e.Kind == KindGap }

// IsLeaf reports whether e is a fragment or a gap: what groups of kind 1 hold.
func (e Entry) IsLeaf() bool { return e.Kind == KindFragment || e.Kind == KindGap }

// GapEntry is the entry declaring that the range starting at first will never be held
// remotely: size 0, uid 0, both timestamps -1.
func GapEntry(first uint64) Entry {
	return Entry{FirstOffset: first, FirstTimestamp: -1, LastTimestamp: -1, Kind: KindGap}
}

// Manifest is the root of a stream's remote tier: header values and entries sorted by
// first offset, oldest first.
type Manifest struct {
	FirstOffset        uint64 // first offset held remotely; equals NextOffset when nothing is
	NextOffset         uint64 // one past the last offset uploaded; where uploading resumes
	FirstTimestamp     int64  // oldest chunk held, -1 when none
	FirstLastTimestamp int64  // last timestamp of the oldest live fragment, -1 when none
	TotalSize          uint64 // sum of live fragments' chunk-region bytes
	Entries            []Entry
}

// Empty is the manifest of a stream that never uploaded anything.
func Empty() Manifest {
	return Manifest{FirstTimestamp: -1, FirstLastTimestamp: -1}
}

// EmptyAt is a manifest with nothing held remotely whose uploading resumes at next: the
// result of a reset to the local log's first offset.
func EmptyAt(next uint64) Manifest {
	return Manifest{FirstOffset: next, NextOffset: next, FirstTimestamp: -1, FirstLastTimestamp: -1}
}

// NeverUploaded tells "never uploaded" (next offset 0, no entries) from "all retained away".
func (m Manifest) NeverUploaded() bool { return m.NextOffset == 0 && len(m.Entries) == 0 }

// Clone returns a copy that shares no memory with m.
func (m Manifest) Clone() Manifest {
	c := m
	c.Entries = append([]Entry(nil), m.Entries...)
	return c
}

// Edit is one change to the root: a splice on the entry array plus the absolute new header
// values, so that the writer and its replicas apply the same change the same way.
type Edit struct {
	At     int     // index of the splice
	Remove int     // entries removed at At
	Insert []Entry // entries inserted at At

	FirstOffset        uint64
	FirstTimestamp     int64
	FirstLastTimestamp int64
	SetNextOffset      bool // NextOffset applies only when set
	NextOffset         uint64
	SizeDelta          int64
}

// ErrBadEdit marks an edit that does not fit the manifest it is applied to: a bug in the
// writer, or a replica out of step. It is never applied partly.
var ErrBadEdit = errors.New("edit does not apply")

// Apply returns the manifest with e applied, or ErrBadEdit (wrapped, saying why) when the
// splice is out of range, the edit moves next offset without being a tail append that
// starts exactly there (so a replayed append is refused), or the result breaks the
// manifest's invariants (see Check). m is not changed.
func (m Manifest) Apply(e Edit) (Manifest, error) {
	if e.At < 0 || e.Remove < 0 || e.At > len(m.Entries) || e.Remove > len(m.Entries)-e.At {
		return m, fmt.Errorf("%w: splice at %d removing %d of %d entries", ErrBadEdit, e.At, e.Remove, len(m.Entries))
	}
	var size uint64
	if e.SizeDelta < 0 {
		dec := uint64(-(e.SizeDelta + 1)) + 1 // -SizeDelta without overflow at MinInt64
		if dec > m.TotalSize {
			return m, fmt.Errorf("%w: total size %d%+d is negative", ErrBadEdit, m.TotalSize, e.SizeDelta)
		}
		size = m.TotalSize - dec
	} else {
		var carry uint64
		size, carry = bits.Add64(m.TotalSize, uint64(e.SizeDelta), 0)
		if carry != 0 {
			return m, fmt.Errorf("%w: total size %d%+d overflows", ErrBadEdit, m.TotalSize, e.SizeDelta)
		}
	}
	if e.SetNextOffset {
		// only an append moves next offset: at the tail, starting at the current next offset
		switch {
		case e.NextOffset <= m.NextOffset:
			return m, fmt.Errorf("%w: next offset would go from %d to %d (it only grows)", ErrBadEdit, m.NextOffset, e.NextOffset)
		case e.At != len(m.Entries) || e.Remove != 0 || len(e.Insert) == 0:
			return m, fmt.Errorf("%w: an edit that moves next offset must append at the tail", ErrBadEdit)
		case e.Insert[0].FirstOffset != m.NextOffset:
			return m, fmt.Errorf("%w: append at %d, manifest next offset is %d", ErrBadEdit, e.Insert[0].FirstOffset, m.NextOffset)
		}
	}
	out := Manifest{
		FirstOffset:        e.FirstOffset,
		NextOffset:         m.NextOffset,
		FirstTimestamp:     e.FirstTimestamp,
		FirstLastTimestamp: e.FirstLastTimestamp,
		TotalSize:          size,
		Entries:            make([]Entry, 0, len(m.Entries)-e.Remove+len(e.Insert)),
	}
	if e.SetNextOffset {
		out.NextOffset = e.NextOffset
	}
	out.Entries = append(out.Entries, m.Entries[:e.At]...)
	out.Entries = append(out.Entries, e.Insert...)
	out.Entries = append(out.Entries, m.Entries[e.At+e.Remove:]...)
	if err := out.Check(); err != nil {
		return m, fmt.Errorf("%w: %v", ErrBadEdit, err)
	}
	return out, nil
}

// Check verifies what the root alone can show: entries of known kinds, sorted and below
// next offset; the first offset not above next offset and inside the first entry (readers
// skip entries below it); and a header that agrees with the head entry: with no entries the
// first offset equals next offset, timestamps are -1 and the size is 0; a fragment at the
// head is wholly live (first offset, both timestamps and its size are the header's); a
// group at the head may be partly consumed, so the total size lies between the size of the
// entries after it and the size of all entries, and equals the latter when the first offset
// is the group's own.
func (m Manifest) Check() error {
	if m.FirstOffset > m.NextOffset {
		return fmt.Errorf("first offset %d above next offset %d", m.FirstOffset, m.NextOffset)
	}
	for i, e := range m.Entries {
		if e.Kind > KindMegaGroup {
			return fmt.Errorf("entry %d: unknown kind %d", i, e.Kind)
		}
		if e.FirstOffset >= m.NextOffset {
			return fmt.Errorf("entry %d starts at %d, not below next offset %d", i, e.FirstOffset, m.NextOffset)
		}
		if i > 0 && e.FirstOffset <= m.Entries[i-1].FirstOffset {
			return fmt.Errorf("entry %d starts at %d, not after entry %d at %d", i, e.FirstOffset, i-1, m.Entries[i-1].FirstOffset)
		}
	}
	if len(m.Entries) == 0 {
		if m.FirstOffset != m.NextOffset {
			return fmt.Errorf("no entries but first offset %d differs from next offset %d", m.FirstOffset, m.NextOffset)
		}
		if m.FirstTimestamp != -1 || m.FirstLastTimestamp != -1 {
			return fmt.Errorf("no entries but timestamps %d/%d are not -1", m.FirstTimestamp, m.FirstLastTimestamp)
		}
		if m.TotalSize != 0 {
			return fmt.Errorf("no entries but total size %d", m.TotalSize)
		}
		return nil
	}
	head := m.Entries[0]
	if m.FirstOffset < head.FirstOffset {
		return fmt.Errorf("first offset %d below the first entry's %d", m.FirstOffset, head.FirstOffset)
	}
	if end := m.EntryEnd(0); m.FirstOffset >= end {
		return fmt.Errorf("first offset %d past the first entry (it ends at %d)", m.FirstOffset, end)
	}
	rest, ok := sumSizes(m.Entries[1:])
	if !ok {
		return fmt.Errorf("entry sizes overflow")
	}
	all, carry := bits.Add64(rest, head.Size, 0)
	if carry != 0 {
		return fmt.Errorf("entry sizes overflow")
	}
	whole := m.FirstOffset == head.FirstOffset // nothing of the head entry consumed
	if head.Kind == KindFragment && !whole {
		return fmt.Errorf("first offset %d inside fragment entry 0 at %d (fragments go whole)", m.FirstOffset, head.FirstOffset)
	}
	if head.Kind == KindFragment && m.FirstLastTimestamp != head.LastTimestamp {
		return fmt.Errorf("first-last timestamp %d differs from fragment entry 0's last timestamp %d", m.FirstLastTimestamp, head.LastTimestamp)
	}
	if whole && m.FirstTimestamp != head.FirstTimestamp {
		return fmt.Errorf("first timestamp %d differs from entry 0's %d", m.FirstTimestamp, head.FirstTimestamp)
	}
	if whole && m.TotalSize != all {
		return fmt.Errorf("total size %d differs from the entries' %d", m.TotalSize, all)
	}
	if m.TotalSize < rest || m.TotalSize > all {
		return fmt.Errorf("total size %d outside [%d, %d] that the entries allow", m.TotalSize, rest, all)
	}
	return nil
}

// sumSizes adds the entries' sizes, reporting false on overflow.
func sumSizes(es []Entry) (uint64, bool) {
	var sum, carry uint64
	for _, e := range es {
		sum, carry = bits.Add64(sum, e.Size, 0)
		if carry != 0 {
			return 0, false
		}
	}
	return sum, true
}

// Equal reports whether two manifests hold the same header and entries (a nil and an
// empty entry slice are equal).
func (m Manifest) Equal(o Manifest) bool {
	if m.FirstOffset != o.FirstOffset || m.NextOffset != o.NextOffset ||
		m.FirstTimestamp != o.FirstTimestamp || m.FirstLastTimestamp != o.FirstLastTimestamp ||
		m.TotalSize != o.TotalSize || len(m.Entries) != len(o.Entries) {
		return false
	}
	for i := range m.Entries {
		if m.Entries[i] != o.Entries[i] {
			return false
		}
	}
	return true
}

// EntryEnd is the first offset after entry i: the next entry's start, or the root's next
// offset for the last entry.
func (m Manifest) EntryEnd(i int) uint64 {
	if i+1 < len(m.Entries) {
		return m.Entries[i+1].FirstOffset
	}
	return m.NextOffset
}

// AppendEdit is the edit that appends a newly uploaded fragment covering [e.FirstOffset,
// next). The fragment must start exactly at the manifest's next offset; anything else is a
// bug and is refused.
func AppendEdit(m Manifest, e Entry, next uint64) (Edit, error) {
	if e.Kind != KindFragment {
		return Edit{}, fmt.Errorf("%w: append of a %s entry", ErrBadEdit, e.Kind)
	}
	if e.FirstOffset != m.NextOffset {
		return Edit{}, fmt.Errorf("%w: append at %d, manifest next offset is %d", ErrBadEdit, e.FirstOffset, m.NextOffset)
	}
	if next <= e.FirstOffset {
		return Edit{}, fmt.Errorf("%w: append of empty range [%d, %d)", ErrBadEdit, e.FirstOffset, next)
	}
	ed := Edit{
		At:                 len(m.Entries),
		Insert:             []Entry{e},
		FirstOffset:        m.FirstOffset,
		FirstTimestamp:     m.FirstTimestamp,
		FirstLastTimestamp: m.FirstLastTimestamp,
		SetNextOffset:      true,
		NextOffset:         next,
		SizeDelta:          int64(e.Size),
	}
	if len(m.Entries) == 0 {
		ed.FirstOffset = e.FirstOffset
		ed.FirstTimestamp = e.FirstTimestamp
		ed.FirstLastTimestamp = e.LastTimestamp
	}
	return ed, nil
}

// ApplyAll folds edits over m in order, stopping at the first that does not apply.
func (m Manifest) ApplyAll(edits []Edit) (Manifest, error) {
	for i, e := range edits {
		var err error
		if m, err = m.Apply(e); err != nil {
			return m, fmt.Errorf("edit %d of %d: %w", i+1, len(edits), err)
		}
	}
	return m, nil
}
