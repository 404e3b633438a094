package manifest

import (
	"fmt"
	"math/bits"
	"sort"
)

// GroupFetcher downloads and decodes the group object e names and returns its entries. The
// read path, verify and garbage collection each pass their own (S3, a cache, a map in tests).
type GroupFetcher func(e Entry) ([]Entry, error)

// maxDepth bounds any descent: a root entry is at most a mega-group, three levels above
// fragments; CheckGroup makes each level exactly one kind lower, so this is a safety net.
const maxDepth = 4

// CheckGroup verifies that children are what group's entry promises: at least one, all of
// the kind one lower (fragments and gaps for a group of kind 1), sorted, legal gaps never
// adjacent and never all of them, the first starting at the group's first offset, the
// first and last fragment below carrying its first and last timestamps (gaps have none),
// and sizes adding up to its size (gaps count 0). A mismatch means a corrupt or wrong
// object and wraps ErrCorrupt.
func CheckGroup(group Entry, children []Entry) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s at offset %d (uid %016x): %s", ErrCorrupt, group.Kind, group.FirstOffset, group.UID, fmt.Sprintf(format, args...))
	}
	if group.IsLeaf() || group.Kind > KindMegaGroup {
		return bad("not a group entry")
	}
	if len(children) == 0 {
		return bad("no entries")
	}
	var sum, carry uint64
	firstTS, lastTS, leaves := int64(0), int64(0), 0
	for i, c := range children {
		if !childKindOK(group.Kind, c.Kind) {
			return bad("entry %d is a %s, want %s", i, c.Kind, childKinds(group.Kind))
		}
		if i > 0 && c.FirstOffset <= children[i-1].FirstOffset {
			return bad("entry %d starts at %d, not after entry %d at %d", i, c.FirstOffset, i-1, children[i-1].FirstOffset)
		}
		if c.IsGap() {
			if p := gapProblem(c); p != "" {
				return bad("entry %d: %s", i, p)
			}
			if i > 0 && children[i-1].IsGap() {
				return bad("entries %d and %d are adjacent gaps", i-1, i)
			}
			continue
		}
		if leaves == 0 {
			firstTS = c.FirstTimestamp
		}
		lastTS = c.LastTimestamp
		leaves++
		sum, carry = bits.Add64(sum, c.Size, 0)
		if carry != 0 {
			return bad("entry sizes overflow")
		}
	}
	if leaves == 0 {
		return bad("holds only gaps")
	}
	switch first := children[0]; {
	case first.FirstOffset != group.FirstOffset:
		return bad("first entry starts at %d", first.FirstOffset)
	case firstTS != group.FirstTimestamp:
		return bad("first timestamp %d, the entry says %d", firstTS, group.FirstTimestamp)
	case lastTS != group.LastTimestamp:
		return bad("last timestamp %d, the entry says %d", lastTS, group.LastTimestamp)
	case sum != group.Size:
		return bad("entry sizes add up to %d, the entry says %d", sum, group.Size)
	}
	return nil
}

// childKinds names what a group of kind k holds, for errors.
func childKinds(k Kind) string {
	if k == KindGroup {
		return "fragment or gap"
	}
	return (k - 1).String()
}

// fetchChildren fetches the children of group e, which ends at end, for a lookup. It
// checks in constant time what a wrong or stale object would break: the ends, kinds and
// timestamps against e (a gap at either end is passed over to the fragment next to it:
// gaps are never adjacent); sortedness and uniform kinds come from DecodeGroup, and
// CheckTree and retention (which use sizes) run the full CheckGroup.
func fetchChildren(fetch GroupFetcher, e Entry, end uint64) ([]Entry, error) {
	if fetch == nil {
		return nil, fmt.Errorf("%s at offset %d (uid %016x): no group fetcher given", e.Kind, e.FirstOffset, e.UID)
	}
	children, err := fetch(e)
	if err != nil {
		return nil, fmt.Errorf("fetch %s at offset %d (uid %016x): %w", e.Kind, e.FirstOffset, e.UID, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s at offset %d (uid %016x): %s", ErrCorrupt, e.Kind, e.FirstOffset, e.UID, fmt.Sprintf(format, args...))
	}
	if e.IsLeaf() || e.Kind > KindMegaGroup {
		return nil, bad("not a group entry")
	}
	n := len(children)
	if n == 0 {
		return nil, bad("no entries")
	}
	first, last := children[0], children[n-1]
	if !childKindOK(e.Kind, first.Kind) || !childKindOK(e.Kind, last.Kind) {
		return nil, bad("holds %ss and %ss, want %s", first.Kind, last.Kind, childKinds(e.Kind))
	}
	ff, lf := first, last // the first and last fragments (or groups)
	if ff.IsGap() {
		if n < 2 || children[1].IsGap() {
			return nil, bad("starts with a gap not followed by a fragment")
		}
		ff = children[1]
	}
	if lf.IsGap() {
		if n < 2 || children[n-2].IsGap() {
			return nil, bad("ends with a gap not preceded by a fragment")
		}
		lf = children[n-2]
	}
	switch {
	case first.FirstOffset != e.FirstOffset || ff.FirstTimestamp != e.FirstTimestamp:
		return nil, bad("first entry at %d (timestamp %d) does not match", first.FirstOffset, ff.FirstTimestamp)
	case lf.LastTimestamp != e.LastTimestamp:
		return nil, bad("last timestamp %d, the entry says %d", lf.LastTimestamp, e.LastTimestamp)
	case last.FirstOffset >= end:
		return nil, bad("last entry starts at %d, not below the group's end %d", last.FirstOffset, end)
	}
	return children, nil
}

// checkChildren is CheckGroup plus the end the parent level gives the group.
func checkChildren(e Entry, end uint64, children []Entry) error {
	if err := CheckGroup(e, children); err != nil {
		return err
	}
	if last := children[len(children)-1]; last.FirstOffset >= end {
		return fmt.Errorf("%w: %s at offset %d (uid %016x): last entry starts at %d, not below the group's end %d",
			ErrCorrupt, e.Kind, e.FirstOffset, e.UID, last.FirstOffset, end)
	}
	return nil
}

// containing is the index of the entry whose range holds offset: the last one starting at
// or below it (-1 when offset is below the first).
func containing(entries []Entry, offset uint64) int {
	return sort.Search(len(entries), func(i int) bool { return entries[i].FirstOffset > offset }) - 1
}

// endOf is the first offset after entries[i] at a level that ends at end.
func endOf(entries []Entry, i int, end uint64) uint64 {
	if i+1 < len(entries) {
		return entries[i+1].FirstOffset
	}
	return end
}

// CheckTree verifies the whole tree below m, fetching every group: m.Check, each group
// against its entry (CheckGroup) and its end, and then invariants 1 and 10 of the spec:
// the live leaves (fragments and gaps ending above the first offset) start exactly at the
// first offset with a fragment (a leading gap goes with the prefix) and tile [first offset,
// next offset) with no hole, the fragments' sizes add up to the total size, and the
// header's timestamps are the first live fragment's. Two gaps are never adjacent inside
// one level (Check, CheckGroup). Across a group boundary this writer never puts them
// either (FindRebalance keeps the root's trailing gap, TruncateTail opens a group ending in
// a gap at the cut), but a tree an earlier build wrote may hold such a pair; it reads
// correctly as two gaps, so CheckTree accepts it. It is for tests, verify and tools: it
// reads every group object.
func CheckTree(m Manifest, fetch GroupFetcher) error {
	if err := m.Check(); err != nil {
		return fmt.Errorf("root: %w", err)
	}
	var (
		live   uint64
		first  *Entry
		leaves int
		prev   = m.FirstOffset // where the next live leaf must start
	)
	var walk func(entries []Entry, end uint64, depth int) error
	walk = func(entries []Entry, end uint64, depth int) error {
		for i, e := range entries {
			eEnd := endOf(entries, i, end)
			if eEnd <= e.FirstOffset {
				return fmt.Errorf("%s at offset %d covers nothing (ends at %d)", e.Kind, e.FirstOffset, eEnd)
			}
			if eEnd <= m.FirstOffset {
				continue // wholly below the first offset: skipped by readers
			}
			if !e.IsLeaf() {
				if depth >= maxDepth {
					return fmt.Errorf("%s at offset %d: tree deeper than %d levels", e.Kind, e.FirstOffset, maxDepth)
				}
				children, err := fetchChildren(fetch, e, eEnd)
				if err != nil {
					return err
				}
				if err := CheckGroup(e, children); err != nil {
					return err
				}
				if err := walk(children, eEnd, depth+1); err != nil {
					return err
				}
				continue
			}
			if e.FirstOffset != prev {
				return fmt.Errorf("live %s at %d, expected a leaf at %d (hole or overlap)", e.Kind, e.FirstOffset, prev)
			}
			leaves++
			prev = eEnd
			if e.IsGap() {
				if leaves == 1 {
					return fmt.Errorf("the first live leaf is a gap at %d (a leading gap goes with the prefix)", e.FirstOffset)
				}
				continue
			}
			if first == nil {
				f := e
				first = &f
			}
			var carry uint64
			live, carry = bits.Add64(live, e.Size, 0)
			if carry != 0 {
				return fmt.Errorf("live sizes overflow")
			}
		}
		return nil
	}
	if err := walk(m.Entries, m.NextOffset, 1); err != nil {
		return err
	}
	if prev != m.NextOffset {
		return fmt.Errorf("live leaves end at %d, next offset is %d", prev, m.NextOffset)
	}
	if live != m.TotalSize {
		return fmt.Errorf("live fragments hold %d bytes, total size says %d", live, m.TotalSize)
	}
	if first != nil && (first.FirstTimestamp != m.FirstTimestamp || first.LastTimestamp != m.FirstLastTimestamp) {
		return fmt.Errorf("first live fragment has timestamps %d..%d, header says %d and %d",
			first.FirstTimestamp, first.LastTimestamp, m.FirstTimestamp, m.FirstLastTimestamp)
	}
	return nil
}
