package manifest

import "fmt"

// DefaultRebalanceThreshold is M, the entries folded into one group object.
const DefaultRebalanceThreshold = 1024

// Rebalance is one fold: the run of Children (threshold entries of kind Kind-1, or leaves:
// fragments and gaps for a group, starting at root index At) becomes one group object of
// kind Kind.
type Rebalance struct {
	At       int     // index in the root of the first entry of the run
	Kind     Kind    // kind of the group object to create (children are Kind-1)
	Children []Entry // exactly threshold entries; the group object's content
}

// FindRebalance returns the next fold due in m, if any. A run is a maximal sequence of
// consecutive root entries of one kind below mega-groups, a gap counting as a fragment
// (both are leaves); the first run, scanning from the head, that holds at least threshold
// entries is due, and its first threshold entries are folded (a run of leaves never holds
// only gaps: no two are adjacent). Scanning from the head folds the highest due level
// first, which keeps the root's kinds non-increasing from head to tail. Cascading works by
// applying the replace edit and calling again. A threshold below 2 disables rebalancing.
// A fold that would take the root's trailing gap is not due: that gap stays in the root
// until something follows it, so that a gap declared next extends it (a group object is
// immutable and could not), and two gaps never stand side by side (remote-format.md).
func FindRebalance(m Manifest, threshold int) (Rebalance, bool) {
	if threshold < 2 {
		return Rebalance{}, false
	}
	for start := 0; start < len(m.Entries); {
		k := runKind(m.Entries[start])
		end := start + 1
		for end < len(m.Entries) && runKind(m.Entries[end]) == k {
			end++
		}
		if k < KindMegaGroup && end-start >= threshold {
			if last := start + threshold; last == len(m.Entries) && m.Entries[last-1].IsGap() {
				return Rebalance{}, false // the fold waits for the next append
			}
			children := append([]Entry(nil), m.Entries[start:start+threshold]...)
			return Rebalance{At: start, Kind: k + 1, Children: children}, true
		}
		start = end
	}
	return Rebalance{}, false
}

// runKind is the kind an entry counts as in a run: gaps are leaves like fragments.
func runKind(e Entry) Kind {
	if e.IsGap() {
		return KindFragment
	}
	return e.Kind
}

// Group is the root entry of the new group object: the first child's first offset, the
// first timestamp of the first child and the last timestamp of the last child that are
// not gaps (gaps have none), and the sum of the children's sizes (gaps count 0).
func (r Rebalance) Group(uid uint64) Entry {
	g := Entry{UID: uid, Kind: r.Kind}
	if len(r.Children) == 0 {
		return g
	}
	g.FirstOffset = r.Children[0].FirstOffset
	seen := false
	for _, c := range r.Children {
		if c.IsGap() {
			continue
		}
		if !seen {
			g.FirstTimestamp, seen = c.FirstTimestamp, true
		}
		g.LastTimestamp = c.LastTimestamp
		g.Size += c.Size
	}
	return g
}

// Object is the encoded group object to upload before the replace edit is applied.
func (r Rebalance) Object() []byte { return EncodeGroup(r.Kind, r.Children) }

// Edit is the replace edit once the group object named uid is uploaded: remove the run,
// insert the group entry; header, next offset and total size unchanged. It must be applied
// to the manifest the fold was found in (nothing else changes the head meanwhile); Matches
// tells whether it still fits.
func (r Rebalance) Edit(m Manifest, uid uint64) Edit {
	return Edit{
		At:                 r.At,
		Remove:             len(r.Children),
		Insert:             []Entry{r.Group(uid)},
		FirstOffset:        m.FirstOffset,
		FirstTimestamp:     m.FirstTimestamp,
		FirstLastTimestamp: m.FirstLastTimestamp,
	}
}

// Matches reports, with the reason, whether m still holds the run at At: a rebalance found
// before another head change (retention) must be looked for again.
func (r Rebalance) Matches(m Manifest) error {
	if r.At < 0 || r.At+len(r.Children) > len(m.Entries) {
		return fmt.Errorf("rebalance of %d entries at %d: root has %d entries", len(r.Children), r.At, len(m.Entries))
	}
	for i, c := range r.Children {
		if m.Entries[r.At+i] != c {
			return fmt.Errorf("rebalance at %d: root entry %d is no longer the run's child %d", r.At, r.At+i, i)
		}
	}
	return nil
}
