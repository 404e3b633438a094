package manifest

import (
	"fmt"
	"sort"
)

// TruncateResult is a divergence truncation (invariants.md, "S3 ahead"): the manifest cut
// back to an offset, and the objects no longer referenced.
type TruncateResult struct {
	// Manifest is the truncated root: it passes Check, and its tree holds exactly the
	// leaves of the original below At. It is a new base, not an edit (next offset goes
	// down): persist it and sync replicas with it.
	Manifest Manifest
	// At is the offset truncated to.
	At uint64
	// Straddle is the fragment that held At inside it (its first offset below At, its end
	// StraddleEnd above), removed whole: Manifest then ends at Straddle.FirstOffset, and
	// the caller appends a prefix fragment [Straddle.FirstOffset, At) as an ordinary
	// append (persisting both together). Nil when At fell on a boundary or in a gap.
	Straddle    *Entry
	StraddleEnd uint64
	// Dropped lists every object the truncated tree no longer references, in offset
	// order, for the reaper to delete after the persist: fragments and groups wholly at or
	// above At (a group starting at or above At stands for its whole subtree, like a group
	// in Retention.Delete: expand it, e.g. with CollectForDelete(e, At, fetch)); every
	// group that held At and was expanded (starting below At: only its own object goes,
	// its children below At stay referenced by the new root); and Straddle. Gaps are never
	// listed. Objects returns the flat list.
	Dropped []Entry
}

// TruncateTail cuts m back to at, for m.FirstOffset <= at <= m.NextOffset (at ==
// m.FirstOffset removes everything; at == m.NextOffset changes nothing): every entry
// covering offsets at or above at goes; an entry of any level holding at inside it is
// replaced by its children below at (fetched through fetch, level by level), except a
// fragment, which goes whole (see TruncateResult.Straddle), and a gap, which stays and
// ends at the new next offset at. Children wholly below m.FirstOffset (already gone to
// retention) are not brought back. First offset, timestamps and total size are
// recomputed; the result may hold leaves after groups at its tail, which Check, rebalancing
// and retention accept. A bound outside [first, next] is ErrBadEdit; a group that cannot
// be fetched or does not match its entry, or an m that fails Check, is an error.
func TruncateTail(m Manifest, at uint64, fetch GroupFetcher) (TruncateResult, error) {
	if at < m.FirstOffset || at > m.NextOffset {
		return TruncateResult{}, fmt.Errorf("%w: truncate at %d outside [%d, %d]", ErrBadEdit, at, m.FirstOffset, m.NextOffset)
	}
	if err := m.Check(); err != nil {
		return TruncateResult{}, fmt.Errorf("truncate: %w", err)
	}
	t := truncator{m: m, at: at, fetch: fetch}
	kept, err := t.level(m.Entries, m.NextOffset, 1)
	if err != nil {
		return TruncateResult{}, fmt.Errorf("truncate at %d: %w", at, err)
	}
	next := at
	if t.straddle != nil {
		next = t.straddle.FirstOffset
	}
	if kept, _, err = t.openTail(kept, next, 1); err != nil {
		return TruncateResult{}, fmt.Errorf("truncate at %d: %w", at, err)
	}
	sort.SliceStable(t.dropped, func(i, j int) bool { return t.dropped[i].FirstOffset < t.dropped[j].FirstOffset })
	res := TruncateResult{At: at, Dropped: t.dropped}
	if t.straddle != nil {
		res.Straddle, res.StraddleEnd = t.straddle, t.straddleEnd
	}
	if t.removed > m.TotalSize {
		return TruncateResult{}, fmt.Errorf("truncate at %d: %w: %d bytes removed, the total is %d", at, ErrCorrupt, t.removed, m.TotalSize)
	}
	out := Manifest{
		FirstOffset:        m.FirstOffset,
		NextOffset:         next,
		FirstTimestamp:     m.FirstTimestamp,
		FirstLastTimestamp: m.FirstLastTimestamp,
		TotalSize:          m.TotalSize - t.removed,
		Entries:            kept,
	}
	if len(kept) == 0 {
		// the oldest live fragment went (or nothing was held): nothing remote is visible
		out.FirstOffset, out.FirstTimestamp, out.FirstLastTimestamp = next, -1, -1
	}
	if err := out.Check(); err != nil {
		return TruncateResult{}, fmt.Errorf("truncate at %d: %w: the result fails Check: %v", at, ErrCorrupt, err)
	}
	res.Manifest = out
	return res, nil
}

// truncator carries one truncation: what was removed and dropped so far.
type truncator struct {
	m           Manifest
	at          uint64
	fetch       GroupFetcher
	dropped     []Entry
	removed     uint64 // live bytes removed (everything removed is wholly live)
	straddle    *Entry
	straddleEnd uint64
}

// level returns what stays of entries (one tree level ending at end): entries wholly
// below at as they are, then, for the entry holding at inside it, what stays of it.
func (t *truncator) level(entries []Entry, end uint64, depth int) ([]Entry, error) {
	var kept []Entry
	for i, e := range entries {
		eEnd := endOf(entries, i, end)
		switch {
		case eEnd <= t.m.FirstOffset:
			// gone to retention already (a child of a partly consumed head group)
		case eEnd <= t.at:
			kept = append(kept, e)
		case e.FirstOffset >= t.at:
			// wholly at or above at, so wholly live: it goes with its whole subtree
			if !e.IsGap() {
				t.dropped = append(t.dropped, e)
				t.removed += e.Size
			}
		case e.IsGap():
			kept = append(kept, e) // it now ends at the new next offset, at
		case e.Kind == KindFragment:
			f := e
			t.straddle, t.straddleEnd = &f, eEnd
			t.dropped = append(t.dropped, e)
			t.removed += e.Size
		default:
			if depth >= maxDepth {
				return nil, fmt.Errorf("%s at offset %d: tree deeper than %d levels", e.Kind, e.FirstOffset, maxDepth)
			}
			children, err := fetchChildren(t.fetch, e, eEnd)
			if err != nil {
				return nil, err
			}
			if err := CheckGroup(e, children); err != nil {
				return nil, err
			}
			t.dropped = append(t.dropped, e) // its object goes; what stays of it is re-rooted
			below, err := t.level(children, eEnd, depth+1)
			if err != nil {
				return nil, err
			}
			kept = append(kept, below...)
		}
	}
	return kept, nil
}

// openTail opens the groups at the tail of entries (one tree level ending at end) whose
// last leaf is a gap: each such group is replaced by its live children, its own object
// goes (listed in dropped; its children stay referenced), and the gap becomes the root's
// trailing entry. A truncation that ends at such a group would otherwise leave a gap sealed
// in an immutable object at the new next offset, and the next gap declared there would
// stand beside it (remote-format.md: two gaps are never adjacent, not even across a group
// boundary); as a root entry the gap is extended instead. A group whose last leaf is a
// fragment stays whole. It fetches at most one group per level; gap reports whether the
// last leaf of entries is a gap.
func (t *truncator) openTail(entries []Entry, end uint64, depth int) (out []Entry, gap bool, err error) {
	n := len(entries)
	if n == 0 {
		return entries, false, nil
	}
	e := entries[n-1]
	if e.IsLeaf() {
		return entries, e.IsGap(), nil
	}
	if depth >= maxDepth {
		return nil, false, fmt.Errorf("%s at offset %d: tree deeper than %d levels", e.Kind, e.FirstOffset, maxDepth)
	}
	children, err := fetchChildren(t.fetch, e, end)
	if err != nil {
		return nil, false, err
	}
	if err := CheckGroup(e, children); err != nil {
		return nil, false, err
	}
	opened, gap, err := t.openTail(children, end, depth+1)
	if err != nil || !gap {
		return entries, false, err
	}
	t.dropped = append(t.dropped, e)
	out = append([]Entry(nil), entries[:n-1]...)
	for i, c := range opened {
		if endOf(opened, i, end) > t.m.FirstOffset { // not gone to retention already
			out = append(out, c)
		}
	}
	return out, true, nil
}

// Objects lists every object to delete for r, flat: the groups in Dropped that start at or
// above At are expanded (their descendants, then the group itself, with CollectForDelete),
// the expanded groups and fragments are listed as they are.
func (r TruncateResult) Objects(fetch GroupFetcher) ([]Entry, error) {
	var out []Entry
	for _, e := range r.Dropped {
		if e.Kind == KindFragment || e.FirstOffset < r.At {
			out = append(out, e)
			continue
		}
		list, err := CollectForDelete(e, r.At, fetch)
		if err != nil {
			return nil, err
		}
		out = append(out, list...)
	}
	return out, nil
}
