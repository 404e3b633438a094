// Package manifest is the remote tier's index: the root manifest, its entries and group
// objects, the edits that change it, rebalancing, remote retention and lookup. It is pure:
// no I/O, no clock, no goroutines; time and object fetches come in as arguments.
package manifest

import (
	"errors"
	"fmt"
)

// Kind is an entry's height in the tree: what kind of object its uid names.
type Kind uint8

// Entry kinds; a group holds fragments, a kilo-group groups, a mega-group kilo-groups.
const (
	KindFragment  Kind = 0
	KindGroup     Kind = 1
	KindKiloGroup Kind = 2
	KindMegaGroup Kind = 3
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
// splice is out of range or the result breaks the manifest's invariants. m is not changed.
func (m Manifest) Apply(e Edit) (Manifest, error) {
	if e.At < 0 || e.Remove < 0 || e.At+e.Remove > len(m.Entries) {
		return m, fmt.Errorf("%w: splice at %d removing %d of %d entries", ErrBadEdit, e.At, e.Remove, len(m.Entries))
	}
	size := int64(m.TotalSize) + e.SizeDelta
	if size < 0 {
		return m, fmt.Errorf("%w: total size %d%+d is negative", ErrBadEdit, m.TotalSize, e.SizeDelta)
	}
	out := Manifest{
		FirstOffset:        e.FirstOffset,
		NextOffset:         m.NextOffset,
		FirstTimestamp:     e.FirstTimestamp,
		FirstLastTimestamp: e.FirstLastTimestamp,
		TotalSize:          uint64(size),
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

// Check verifies what the root alone can show: entries sorted and below next offset, the
// first offset not above next offset, inside the first entry (readers
// skip entries below it), and next offset never below the last entry's start.
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
	if len(m.Entries) > 0 {
		first := m.Entries[0].FirstOffset
		if m.FirstOffset < first {
			return fmt.Errorf("first offset %d below the first entry's %d", m.FirstOffset, first)
		}
		if len(m.Entries) > 1 && m.FirstOffset >= m.Entries[1].FirstOffset {
			return fmt.Errorf("first offset %d past the first entry (next entry starts at %d)", m.FirstOffset, m.Entries[1].FirstOffset)
		}
	} else if m.FirstOffset != m.NextOffset {
		return fmt.Errorf("no entries but first offset %d differs from next offset %d", m.FirstOffset, m.NextOffset)
	}
	return nil
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
