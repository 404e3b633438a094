package manifest

import (
	"errors"
	"fmt"
	"sort"
)

// ErrBelowFirst marks a lookup below the manifest's first offset: retention removed it (or
// it never was remote).
var ErrBelowFirst = errors.New("below the manifest's first offset")

// ErrAboveNext marks a lookup at or past the manifest's next offset, or past its newest
// chunk for a timestamp: nothing remote holds it yet; the local tier may.
var ErrAboveNext = errors.New("at or above the manifest's next offset")

// FragmentRef is a live leaf found in the tree, a fragment or a gap, and the first offset
// after it.
type FragmentRef struct {
	Entry Entry
	End   uint64
	// Gap tells that [Entry.FirstOffset, End) is a declared gap: no object holds it and
	// none ever will. Report it to the consumer as a gap; never read Entry's object.
	Gap bool
}

// leafRef is the reference to a leaf entry ending at end.
func leafRef(e Entry, end uint64) FragmentRef {
	return FragmentRef{Entry: e, End: end, Gap: e.IsGap()}
}

// LookupOffset finds the live leaf holding offset: the fragment, or the gap (Gap set) when
// offset lies in a declared gap. It does a binary search per level, fetching one group per
// level below the root (at most three). It fails with ErrBelowFirst or
// ErrAboveNext outside [first offset, next offset), and with the fetch error or ErrCorrupt
// when a group cannot be had or does not match its entry. fetch should return what
// DecodeGroup returns (sorted entries of one kind): a lookup checks each group against its
// entry in constant time, not its sizes (CheckTree and retention do).
func LookupOffset(m Manifest, offset uint64, fetch GroupFetcher) (FragmentRef, error) {
	if offset < m.FirstOffset {
		return FragmentRef{}, fmt.Errorf("offset %d: %w %d", offset, ErrBelowFirst, m.FirstOffset)
	}
	if offset >= m.NextOffset || len(m.Entries) == 0 {
		return FragmentRef{}, fmt.Errorf("offset %d: %w %d", offset, ErrAboveNext, m.NextOffset)
	}
	entries, end := m.Entries, m.NextOffset
	for depth := 1; ; depth++ {
		i := containing(entries, offset)
		if i < 0 {
			return FragmentRef{}, fmt.Errorf("%w: offset %d below the first entry at %d", ErrCorrupt, offset, entries[0].FirstOffset)
		}
		e, eEnd := entries[i], endOf(entries, i, end)
		if e.IsLeaf() {
			return leafRef(e, eEnd), nil
		}
		if depth >= maxDepth {
			return FragmentRef{}, fmt.Errorf("%s at offset %d: tree deeper than %d levels", e.Kind, e.FirstOffset, maxDepth)
		}
		children, err := fetchChildren(fetch, e, eEnd)
		if err != nil {
			return FragmentRef{}, fmt.Errorf("offset %d: %w", offset, err)
		}
		entries, end = children, eEnd
	}
}

// LookupTimestamp finds the first live fragment whose last timestamp is at or after ts (the
// fragment holding the first chunk at or after ts): a binary search on last timestamps per
// level. Gaps have no timestamps and are never returned: a gap counts as the entry before
// it in the search. It assumes timestamps do not go down along the log, as one writer's
// chunk timestamps do; where they do, it still returns a live fragment whose last
// timestamp is at or after ts, not necessarily the first. It fails with ErrAboveNext when
// no live chunk is that recent (or nothing is held).
func LookupTimestamp(m Manifest, ts int64, fetch GroupFetcher) (FragmentRef, error) {
	if len(m.Entries) == 0 {
		return FragmentRef{}, fmt.Errorf("timestamp %d: nothing held: %w %d", ts, ErrAboveNext, m.NextOffset)
	}
	entries, end, lo := m.Entries, m.NextOffset, 0
	for depth := 1; ; depth++ {
		n := len(entries) - lo
		i := lo + sort.Search(n, func(k int) bool { return reaches(entries, lo, lo+k, ts) })
		if i == len(entries) {
			if depth == 1 {
				newest := entries[len(entries)-1]
				if newest.IsGap() && len(entries) > 1 {
					newest = entries[len(entries)-2]
				}
				return FragmentRef{}, fmt.Errorf("timestamp %d after the newest chunk held (%d): %w %d",
					ts, newest.LastTimestamp, ErrAboveNext, m.NextOffset)
			}
			return FragmentRef{}, fmt.Errorf("%w: no entry of a group reaches timestamp %d its entry promised", ErrCorrupt, ts)
		}
		e, eEnd := entries[i], endOf(entries, i, end)
		if e.IsGap() {
			return FragmentRef{}, fmt.Errorf("%w: timestamp search landed on the gap at %d", ErrCorrupt, e.FirstOffset)
		}
		if e.Kind == KindFragment {
			return FragmentRef{Entry: e, End: eEnd}, nil
		}
		if depth >= maxDepth {
			return FragmentRef{}, fmt.Errorf("%s at offset %d: tree deeper than %d levels", e.Kind, e.FirstOffset, maxDepth)
		}
		children, err := fetchChildren(fetch, e, eEnd)
		if err != nil {
			return FragmentRef{}, fmt.Errorf("timestamp %d: %w", ts, err)
		}
		entries, end, lo = children, eEnd, 0
		if e.FirstOffset < m.FirstOffset {
			lo = containing(children, m.FirstOffset) // skip what retention removed
		}
	}
}

// reaches is the timestamp search's predicate for entries[k] (searching from lo): its last
// timestamp is at or after ts. A gap has none and counts as the entry before it (gaps are
// never adjacent), or as not reaching when it is the first searched, so that the search is
// as monotonic as the timestamps and never stops on a gap.
func reaches(entries []Entry, lo, k int, ts int64) bool {
	if entries[k].IsGap() {
		if k == lo {
			return false
		}
		k--
	}
	return entries[k].LastTimestamp >= ts
}

// Iterator walks the live leaves from an offset in order, fragments and gaps (a gap comes
// as a FragmentRef with Gap set), fetching a group only when the walk reaches it. Make one
// with Iterate.
type Iterator struct {
	fetch GroupFetcher
	from  uint64
	stack []iterFrame
	err   error
}

type iterFrame struct {
	entries []Entry
	i       int
	end     uint64
}

// Iterate returns an iterator over the live leaves from the one holding from (or the first
// live one when from is below the first offset) up to next offset: fragments, and gaps
// (Gap set) that consumers report as gaps. Entries below the root's first offset are
// skipped. m must not change while the iterator is in use.
func Iterate(m Manifest, from uint64, fetch GroupFetcher) *Iterator {
	start := max(from, m.FirstOffset)
	it := &Iterator{fetch: fetch, from: start}
	if start < m.NextOffset && len(m.Entries) > 0 {
		it.stack = []iterFrame{{entries: m.Entries, i: max(containing(m.Entries, start), 0), end: m.NextOffset}}
	}
	return it
}

// Next returns the next leaf (a fragment, or a gap with Gap set), false when the walk is
// done, or the error of a group that could not be fetched or does not match its entry (and
// the same error ever after).
func (it *Iterator) Next() (FragmentRef, bool, error) {
	if it.err != nil {
		return FragmentRef{}, false, it.err
	}
	for len(it.stack) > 0 {
		top := &it.stack[len(it.stack)-1]
		if top.i >= len(top.entries) {
			it.stack = it.stack[:len(it.stack)-1]
			continue
		}
		e, eEnd := top.entries[top.i], endOf(top.entries, top.i, top.end)
		top.i++
		if eEnd <= it.from {
			continue
		}
		if e.IsLeaf() {
			return leafRef(e, eEnd), true, nil
		}
		if len(it.stack) >= maxDepth {
			it.err = fmt.Errorf("%s at offset %d: tree deeper than %d levels", e.Kind, e.FirstOffset, maxDepth)
			return FragmentRef{}, false, it.err
		}
		children, err := fetchChildren(it.fetch, e, eEnd)
		if err != nil {
			it.err = fmt.Errorf("iterate from %d: %w", it.from, err)
			return FragmentRef{}, false, it.err
		}
		it.stack = append(it.stack, iterFrame{entries: children, i: max(containing(children, it.from), 0), end: eEnd})
	}
	return FragmentRef{}, false, nil
}
