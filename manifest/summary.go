package manifest

import "math/bits"

// Summary is what status shows of a stream's remote tier without reading any group object.
type Summary struct {
	FirstOffset     uint64
	NextOffset      uint64
	TotalSize       uint64 // live chunk-region bytes
	Fragments       uint64 // live fragments: exact for root fragment entries, estimated below groups
	OldestTimestamp int64  // first chunk held, -1 when none
}

// Summary summarises m. A group of kind k holds exactly threshold^k fragments when it was
// made with that threshold (rebalancing folds exactly threshold entries), so the count is
// exact for whole groups; for a head group partly consumed by retention it is scaled by
// the live share of the group's bytes, rounded up. A threshold below 2 means the default.
func (m Manifest) Summary(threshold int) Summary {
	if threshold < 2 {
		threshold = DefaultRebalanceThreshold
	}
	s := Summary{FirstOffset: m.FirstOffset, NextOffset: m.NextOffset, TotalSize: m.TotalSize, OldestTimestamp: m.FirstTimestamp}
	rest, _ := sumSizes(m.Entries[min(1, len(m.Entries)):])
	for i, e := range m.Entries {
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
