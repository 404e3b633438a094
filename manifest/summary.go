package manifest

import (
	"fmt"
	"math/bits"
)

// Summary is what status shows of a stream's remote tier without reading any group object.
type Summary struct {
	FirstOffset     uint64
	NextOffset      uint64
	TotalSize       uint64 // live chunk-region bytes
	Fragments       uint64 // live fragments: exact for root fragment entries, estimated below groups
	OldestTimestamp int64  // first chunk held, -1 when none
	// GapEntries and GapOffsets count the gap entries of the root and the offsets they
	// declare lost. Gaps inside groups are not visible from the root (they are counted in
	// Fragments' estimate); CountGaps walks the groups for the exact figures.
	GapEntries uint64
	GapOffsets uint64
}

// Summary summarises m. A group of kind k holds exactly threshold^k leaves when it was
// made with that threshold (rebalancing folds exactly threshold entries), so the count is
// exact for whole groups without gaps (a gap inside a group counts as a fragment there);
// for a head group partly consumed by retention it is scaled by the live share of the
// group's bytes, rounded up. A threshold below 2 means the default. Root gap entries are
// counted apart (GapEntries, GapOffsets), never as fragments.
func (m Manifest) Summary(threshold int) Summary {
	if threshold < 2 {
		threshold = DefaultRebalanceThreshold
	}
	s := Summary{FirstOffset: m.FirstOffset, NextOffset: m.NextOffset, TotalSize: m.TotalSize, OldestTimestamp: m.FirstTimestamp}
	rest, _ := sumSizes(m.Entries[min(1, len(m.Entries)):])
	for i, e := range m.Entries {
		if e.IsGap() {
			s.GapEntries++
			s.GapOffsets = satAdd(s.GapOffsets, m.EntryEnd(i)-e.FirstOffset)
			continue
		}
		n := uint64(1)
		for range e.Kind {
			n = satMul(n, uint64(threshold))
		}
		if i == 0 && e.Kind != KindFragment && m.FirstOffset > e.FirstOffset && e.Size > 0 && m.TotalSize >= rest {
			live := m.TotalSize - rest
			hi, lo := bits.Mul64(n, live)
			if hi < e.Size { // the quotient fits in 64 bits
				q, r := bits.Div64(hi, lo, e.Size)
				if r > 0 {
					q++
				}
				n = q
			}
		}
		s.Fragments = satAdd(s.Fragments, n)
	}
	return s
}

// CountGaps counts the live gap entries of the whole tree below m and the offsets they
// declare lost, fetching every group that holds live offsets: the exact figures verify
// reports, where Summary sees the root's gaps only. Gaps below the first offset are gone.
func CountGaps(m Manifest, fetch GroupFetcher) (entries, offsets uint64, err error) {
	var walk func(es []Entry, end uint64, depth int) error
	walk = func(es []Entry, end uint64, depth int) error {
		for i, e := range es {
			eEnd := endOf(es, i, end)
			if eEnd <= m.FirstOffset {
				continue
			}
			if e.IsGap() {
				entries++
				offsets += eEnd - max(e.FirstOffset, m.FirstOffset)
				continue
			}
			if e.Kind == KindFragment {
				continue
			}
			if depth >= maxDepth {
				return fmt.Errorf("%s at offset %d: tree deeper than %d levels", e.Kind, e.FirstOffset, maxDepth)
			}
			children, err := fetchChildren(fetch, e, eEnd)
			if err != nil {
				return fmt.Errorf("count gaps: %w", err)
			}
			if err := walk(children, eEnd, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(m.Entries, m.NextOffset, 1); err != nil {
		return 0, 0, err
	}
	return entries, offsets, nil
}

func satMul(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return ^uint64(0)
	}
	return lo
}

func satAdd(a, b uint64) uint64 {
	s, c := bits.Add64(a, b, 0)
	if c != 0 {
		return ^uint64(0)
	}
	return s
}
