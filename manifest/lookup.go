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

// FragmentRef is a live fragment entry found in the tree and the first offset after it.
type FragmentRef struct {
	Entry Entry
	End   uint64
}

// LookupOffset finds the live fragment holding offset: a binary search per level, fetching
// one group per level below the root (at most three). It fails with ErrBelowFirst or
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
		if e.Kind == KindFragment {
			return FragmentRef{Entry: e, End: eEnd}, nil
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
// level. It assumes timestamps do not go down along the log, as one writer's chunk
// timestamps do; where they do, it still returns a live fragment whose last timestamp is at
// or after ts, not necessarily the first. It fails with ErrAboveNext when no live chunk is
// that recent (or nothing is held).
func LookupTimestamp(m Manifest, ts int64, fetch GroupFetcher) (FragmentRef, error) {
	if len(m.Entries) == 0 {
		return FragmentRef{}, fmt.Errorf("timestamp %d: nothing held: %w %d", ts, ErrAboveNext, m.NextOffset)
	}
	entries, end, lo := m.Entries, m.NextOffset, 0
	for depth := 1; ; depth++ {
		n := len(entries) - lo
		i := lo + sort.Search(n, func(k int) bool { return entries[lo+k].LastTimestamp >= ts })
		if i == len(entries) {
			if depth == 1 {
				return FragmentRef{}, fmt.Errorf("timestamp %d after the newest chunk held (%d): %w %d",
					ts, entries[len(entries)-1].LastTimestamp, ErrAboveNext, m.NextOffset)
			}
			return FragmentRef{}, fmt.Errorf("%w: no entry of a group reaches timestamp %d its entry promised", ErrCorrupt, ts)
		}
		e, eEnd := entries[i], endOf(entries, i, end)
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

// Iterator walks the live fragments from an offset in order, fetching a group only when
// the walk reaches it. Make one with Iterate.
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

// Iterate returns an iterator over the live fragments from the one holding from (or the
// first live one when from is below the first offset) up to next offset. Entries below the
// root's first offset are skipped. m must not change while the iterator is in use.
func Iterate(m Manifest, from uint64, fetch GroupFetcher) *Iterator {
	start := max(from, m.FirstOffset)
	it := &Iterator{fetch: fetch, from: start}
	if start < m.NextOffset && len(m.Entries) > 0 {
		it.stack = []iterFrame{{entries: m.Entries, i: max(containing(m.Entries, start), 0), end: m.NextOffset}}
	}
	return it
}

// Next returns the next fragment, false when the walk is done, or the error of a group
// that could not be fetched or does not match its entry (and the same error ever after).
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
		if e.Kind == KindFragment {
			return FragmentRef{Entry: e, End: eEnd}, true, nil
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
