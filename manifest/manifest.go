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

// Entry points at one object of the remote tier (a fragment or a group of a lower level),
// or declares a gap: a range no object will ever hold.
type Entry struct {
	FirstOffset    uint64 // first offset covered; the entry ends where the next one starts
	FirstTimestamp int64  // timestamp of the first chunk below it (gaps below are skipped); -1 for a gap
	LastTimestamp  int64  // timestamp of the last chunk below it (gaps below are skipped); -1 for a gap
	Size           uint64 // chunk-region bytes of everything below it; 0 for a gap
	UID            uint64 // random, fresh for every object; 0 for a gap
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
	TotalSize          uint64 // sum of live fragments' chunk-region bytes (gaps count 0)
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
// splice is out of range, the edit moves next offset without being one of the four shapes
// that may (see checkNextMove: a fragment append, a gap append, a gap extension, the move
// of an empty manifest; so a replayed one is refused), or the result breaks the manifest's
// invariants (see Check). m is not changed. Replicas replay edits: Apply is their gatekeeper.
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
		if e.NextOffset <= m.NextOffset {
			return m, fmt.Errorf("%w: next offset would go from %d to %d (it only grows)", ErrBadEdit, m.NextOffset, e.NextOffset)
		}
		if err := checkNextMove(m, e); err != nil {
			return m, fmt.Errorf("%w: %v", ErrBadEdit, err)
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

// checkNextMove accepts exactly the edits that may move next offset up (the caller has
// checked that it grows): (1) a fragment append, one fragment at the tail starting at next
// offset with its size as the delta; (2) a gap append, GapEntry(next offset) at the tail
// of a manifest whose last entry is not a gap; (3) a gap extension, the trailing gap
// replaced by itself; (4) an empty manifest moving on, nothing inserted and first offset
// moving with next offset. Except for an append to an empty manifest, the header stays.
func checkNextMove(m Manifest, e Edit) error {
	n := len(m.Entries)
	keepsHeader := e.FirstOffset == m.FirstOffset && e.FirstTimestamp == m.FirstTimestamp && e.FirstLastTimestamp == m.FirstLastTimestamp
	switch {
	case e.At == n && e.Remove == 0 && len(e.Insert) == 1 && e.Insert[0].Kind == KindFragment:
		f := e.Insert[0]
		switch {
		case f.FirstOffset != m.NextOffset:
			return fmt.Errorf("append at %d, manifest next offset is %d", f.FirstOffset, m.NextOffset)
		case e.SizeDelta < 0 || uint64(e.SizeDelta) != f.Size:
			return fmt.Errorf("append of a %d-byte fragment with size delta %+d", f.Size, e.SizeDelta)
		case n > 0 && !keepsHeader:
			return fmt.Errorf("an append to a non-empty manifest changes its header")
		}
		return nil
	case e.At == n && e.Remove == 0 && len(e.Insert) == 1 && e.Insert[0].IsGap():
		switch g := e.Insert[0]; {
		case n == 0:
			return fmt.Errorf("a gap appended to an empty manifest would be its head (move the empty manifest instead)")
		case m.Entries[n-1].IsGap():
			return fmt.Errorf("a gap appended next to the trailing gap at %d (extend it instead)", m.Entries[n-1].FirstOffset)
		case g.FirstOffset != m.NextOffset:
			return fmt.Errorf("gap appended at %d, manifest next offset is %d", g.FirstOffset, m.NextOffset)
		case g != GapEntry(g.FirstOffset):
			return fmt.Errorf("gap entry at %d: %s", g.FirstOffset, gapProblem(g))
		}
	case n > 0 && e.At == n-1 && e.Remove == 1 && len(e.Insert) == 1 && m.Entries[n-1].IsGap():
		if e.Insert[0] != m.Entries[n-1] {
			return fmt.Errorf("a gap extension must keep the trailing gap at %d as it is", m.Entries[n-1].FirstOffset)
		}
	case n == 0 && e.At == 0 && e.Remove == 0 && len(e.Insert) == 0:
		if e.FirstOffset != e.NextOffset || e.FirstTimestamp != -1 || e.FirstLastTimestamp != -1 {
			return fmt.Errorf("an empty manifest moving to %d must have first offset %d and timestamps -1", e.NextOffset, e.NextOffset)
		}
		keepsHeader = true // the header is new by design; Check verifies the rest
	default:
		return fmt.Errorf("an edit that moves next offset must append at the tail (a fragment or a gap), extend the trailing gap, or move an empty manifest")
	}
	if e.SizeDelta != 0 {
		return fmt.Errorf("a gap edit with size delta %+d (gaps hold nothing)", e.SizeDelta)
	}
	if !keepsHeader {
		return fmt.Errorf("a gap edit changes the header")
	}
	return nil
}

// gapProblem says what makes e an illegal gap entry ("" when e is a legal one): a gap
// names no object and holds no chunk, so its size and uid are 0 and its timestamps -1.
func gapProblem(e Entry) string {
	switch {
	case e.Size != 0:
		return fmt.Sprintf("gap with size %d (a gap holds nothing)", e.Size)
	case e.UID != 0:
		return fmt.Sprintf("gap with uid %016x (a gap names no object)", e.UID)
	case e.FirstTimestamp != -1 || e.LastTimestamp != -1:
		return fmt.Sprintf("gap with timestamps %d..%d (a gap has none: -1)", e.FirstTimestamp, e.LastTimestamp)
	}
	return ""
}

// Check verifies what the root alone can show: entries of known kinds, sorted and below
// next offset; gap entries legal (size 0, uid 0, timestamps -1), never two in a row and
// never the head (a leading gap goes with the prefix); the first offset not above next
// offset and inside the first entry (readers skip entries below it); and a header that
// agrees with the head entry: with no entries the first offset equals next offset,
// timestamps are -1 and the size is 0; a fragment at the head is wholly live (first
// offset, both timestamps and its size are the header's); a group at the head may be
// partly consumed, so the total size lies between the size of the entries after it and
// the size of all entries, and equals the latter when the first offset is the group's
// own. Gaps count 0 in every size; header timestamps are always a fragment's.
func (m Manifest) Check() error {
	if m.FirstOffset > m.NextOffset {
		return fmt.Errorf("first offset %d above next offset %d", m.FirstOffset, m.NextOffset)
	}
	for i, e := range m.Entries {
		if e.Kind > KindGap {
			return fmt.Errorf("entry %d: unknown kind %d", i, e.Kind)
		}
		if e.FirstOffset >= m.NextOffset {
			return fmt.Errorf("entry %d starts at %d, not below next offset %d", i, e.FirstOffset, m.NextOffset)
		}
		if i > 0 && e.FirstOffset <= m.Entries[i-1].FirstOffset {
			return fmt.Errorf("entry %d starts at %d, not after entry %d at %d", i, e.FirstOffset, i-1, m.Entries[i-1].FirstOffset)
		}
		if !e.IsGap() {
			continue
		}
		if p := gapProblem(e); p != "" {
			return fmt.Errorf("entry %d: %s", i, p)
		}
		if i == 0 {
			return fmt.Errorf("entry 0 is a gap at %d (a leading gap goes with the prefix)", e.FirstOffset)
		}
		if m.Entries[i-1].IsGap() {
			return fmt.Errorf("entries %d and %d are adjacent gaps at %d and %d (they are one gap)", i-1, i, m.Entries[i-1].FirstOffset, e.FirstOffset)
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

// EntryAt is the index of the root entry whose range holds offset: the last one starting at
// or below it (-1 when offset lies below the first entry).
func (m Manifest) EntryAt(offset uint64) int { return containing(m.Entries, offset) }

// AppendEdit is the edit that appends a newly uploaded fragment covering [e.FirstOffset,
// next). The fragment must start exactly at the manifest's next offset; anything else is a
// bug and is refused. Gaps are declared with GapEdit.
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

// GapEdit is the edit declaring [m.NextOffset, to) lost: the local log dropped it before
// it was uploaded (local ahead), so the remote tier will never hold it. It has one of three
// shapes: after a fragment or group, GapEntry(m.NextOffset) is appended at the tail; after
// a trailing gap, that gap is replaced by itself and simply ends at to (adjacent gaps
// merge); on a manifest with no entries nothing is inserted and first and next offset both
// move to to (a leading gap is never kept). Next offset becomes to, size delta 0, the
// header otherwise unchanged. to must be above m.NextOffset, else ErrBadEdit.
func GapEdit(m Manifest, to uint64) (Edit, error) {
	if to <= m.NextOffset {
		return Edit{}, fmt.Errorf("%w: gap [%d, %d) is empty or goes back", ErrBadEdit, m.NextOffset, to)
	}
	n := len(m.Entries)
	ed := Edit{
		At:                 n,
		FirstOffset:        m.FirstOffset,
		FirstTimestamp:     m.FirstTimestamp,
		FirstLastTimestamp: m.FirstLastTimestamp,
		SetNextOffset:      true,
		NextOffset:         to,
	}
	switch {
	case n == 0:
		ed.FirstOffset, ed.FirstTimestamp, ed.FirstLastTimestamp = to, -1, -1
	case m.Entries[n-1].IsGap():
		ed.At, ed.Remove, ed.Insert = n-1, 1, []Entry{m.Entries[n-1]}
	default:
		ed.Insert = []Entry{GapEntry(m.NextOffset)}
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
