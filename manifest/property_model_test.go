package manifest

import (
	"errors"

	"pgregory.net/rapid"
)

// model is the flat truth the tree must agree with: every leaf ever appended (fragments
// and gaps), in order, as the tree holds them (a gap extended in the root is extended
// here; a gap declared after a group ending with a gap is a second leaf, as in the tree).
type model struct {
	leaves []FragmentRef
}

// live returns the leaves at or after first (the header always sits on a fragment start).
func (md *model) live(first uint64) []FragmentRef {
	for i, f := range md.leaves {
		if f.Entry.FirstOffset >= first {
			return md.leaves[i:]
		}
	}
	return nil
}

// fragments keeps the fragments of leaves.
func fragments(leaves []FragmentRef) []FragmentRef {
	var out []FragmentRef
	for _, l := range leaves {
		if !l.Gap {
			out = append(out, l)
		}
	}
	return out
}

// firstFragmentFrom is the first offset of the first fragment starting at or after from,
// or next when there is none: where retention lands when everything before goes.
func (md *model) firstFragmentFrom(from, next uint64) uint64 {
	for _, l := range md.leaves {
		if !l.Gap && l.Entry.FirstOffset >= from {
			return l.Entry.FirstOffset
		}
	}
	return next
}

// retainFlat applies the policy to the flat list: drop head fragments while the total
// exceeds max-bytes or the fragment's last timestamp is older than now - max-age; gaps
// never stop it (they go with what went before). It returns the new first offset (next
// when no fragment survives) and the new total.
func retainFlat(live []FragmentRef, total uint64, next uint64, p Policy, now int64) (uint64, uint64) {
	for _, f := range live {
		if f.Gap {
			continue
		}
		byBytes := p.MaxBytes > 0 && total > p.MaxBytes
		byAge := p.MaxAgeMillis > 0 && f.Entry.LastTimestamp < now-p.MaxAgeMillis
		if !byBytes && !byAge {
			return f.Entry.FirstOffset, total
		}
		total -= f.Entry.Size
	}
	return next, total
}

// gapOne declares a gap of 1 to 8 offsets and checks the edit's shape against the root's
// tail, mirroring it in the model.
func (s *machine) gapOne(t *rapid.T) {
	m := s.tr.m
	to := m.NextOffset + rapid.Uint64Range(1, 8).Draw(t, "gap-len")
	ed, err := s.tr.declareGap(to)
	if err != nil {
		t.Fatalf("gap to %d: %v\n%s", to, err, fmtRoot(m))
	}
	n := len(m.Entries)
	if !ed.SetNextOffset || ed.NextOffset != to || ed.SizeDelta != 0 {
		t.Fatalf("gap edit: %s", fmtEdit(ed))
	}
	switch {
	case n == 0:
		if len(ed.Insert) != 0 || ed.FirstOffset != to || s.tr.m.FirstOffset != to {
			t.Fatalf("gap on an empty manifest: %s", fmtEdit(ed))
		}
	case m.Entries[n-1].IsGap():
		last := &s.md.leaves[len(s.md.leaves)-1]
		if ed.At != n-1 || ed.Remove != 1 || !last.Gap || last.End != m.NextOffset {
			t.Fatalf("gap extension: %s; model's last leaf %+v", fmtEdit(ed), *last)
		}
		last.End = to
	default:
		if ed.At != n || ed.Remove != 0 || len(ed.Insert) != 1 || ed.Insert[0] != GapEntry(m.NextOffset) {
			t.Fatalf("gap append: %s", fmtEdit(ed))
		}
		s.md.leaves = append(s.md.leaves, FragmentRef{Entry: GapEntry(m.NextOffset), End: to, Gap: true})
	}
	if n > 0 && (ed.FirstOffset != m.FirstOffset || ed.FirstTimestamp != m.FirstTimestamp || ed.FirstLastTimestamp != m.FirstLastTimestamp) {
		t.Fatalf("gap edit moved the header: %s", fmtEdit(ed))
	}
	// the appended shape next to the (now) trailing gap is refused, and so is a replay
	if cur := s.tr.m; len(cur.Entries) > 0 && cur.Entries[len(cur.Entries)-1].IsGap() {
		bad := Edit{At: len(cur.Entries), Insert: []Entry{GapEntry(cur.NextOffset)}, SetNextOffset: true, NextOffset: cur.NextOffset + 1,
			FirstOffset: cur.FirstOffset, FirstTimestamp: cur.FirstTimestamp, FirstLastTimestamp: cur.FirstLastTimestamp}
		if _, err := cur.Apply(bad); !errors.Is(err, ErrBadEdit) {
			t.Fatalf("a gap appended next to the trailing gap applied: %v", err)
		}
	}
	if _, err := s.tr.m.Apply(ed); !errors.Is(err, ErrBadEdit) {
		t.Fatalf("a replayed gap edit applied: %v", err)
	}
}

// truncate cuts the tier back to a random offset in [first, next] with TruncateTail and
// appends the straddling fragment's prefix, checking the result against the model.
func (s *machine) truncate(t *rapid.T) {
	m := s.tr.m
	at := rapid.Uint64Range(m.FirstOffset, m.NextOffset).Draw(t, "truncate-at")
	res, objs, err := s.tr.truncate(at)
	if err != nil {
		t.Fatalf("truncate at %d: %v\n%s", at, err, fmtRoot(m))
	}
	for _, o := range objs {
		if o.IsGap() {
			t.Fatalf("truncation deletes a gap")
		}
	}
	// the model: leaves ending at or below at stay, a straddling gap ends at at
	var kept []FragmentRef
	var straddle *FragmentRef
	for _, l := range s.md.leaves {
		switch {
		case l.End <= at:
			kept = append(kept, l)
		case l.Entry.FirstOffset >= at:
		case l.Gap:
			l.End = at
			kept = append(kept, l)
		default:
			f := l
			straddle = &f
		}
	}
	s.md.leaves = kept
	got := s.tr.m
	wantNext := at
	if straddle != nil {
		wantNext = straddle.Entry.FirstOffset
		if res.Straddle == nil || *res.Straddle != straddle.Entry || res.StraddleEnd != straddle.End {
			t.Fatalf("truncate at %d: straddle %+v, the model says %+v", at, res.Straddle, *straddle)
		}
	} else if res.Straddle != nil {
		t.Fatalf("truncate at %d: straddle %+v, the model has none", at, *res.Straddle)
	}
	if got.NextOffset != wantNext || res.At != at {
		t.Fatalf("truncate at %d: next offset %d, want %d", at, got.NextOffset, wantNext)
	}
	if got.NextOffset > m.NextOffset {
		t.Fatalf("truncation raised next offset")
	}
	if straddle == nil || !rapid.Bool().Draw(t, "append-prefix") {
		return
	}
	// the caller's replacement: the prefix [straddle start, at) as an ordinary append
	e := straddle.Entry
	ts2 := e.FirstTimestamp
	if e.LastTimestamp > ts2 {
		ts2 = rapid.Int64Range(e.FirstTimestamp, e.LastTimestamp).Draw(t, "prefix-ts")
	}
	size := rapid.Uint64Range(1, max(e.Size, 1)).Draw(t, "prefix-size")
	if _, err := s.tr.appendFragment(e.FirstOffset, at, size, e.FirstTimestamp, ts2); err != nil {
		t.Fatalf("prefix append [%d, %d): %v", e.FirstOffset, at, err)
	}
	pe := s.tr.m.Entries[len(s.tr.m.Entries)-1]
	s.md.leaves = append(s.md.leaves, FragmentRef{Entry: pe, End: at})
}

// checkLeaves verifies coverage against the model: the live leaves tile [first, next)
// exactly, starting with a fragment; the iterator yields exactly them (gaps as gaps); and
// the gap counts of Summary and CountGaps agree with them.
func (s *machine) checkLeaves(t *rapid.T, live []FragmentRef) {
	m := s.tr.m
	prev := m.FirstOffset
	var gaps, gapOffs uint64
	for i, l := range live {
		if l.Entry.FirstOffset != prev || l.End <= l.Entry.FirstOffset || l.Gap != l.Entry.IsGap() {
			t.Fatalf("model leaf %d %+v does not continue at %d", i, l, prev)
		}
		if i == 0 && l.Gap {
			t.Fatalf("the first live leaf is a gap")
		}
		if l.Gap && i > 0 && live[i-1].Gap {
			// not even across a group boundary (remote-format.md): a truncation that
			// ends at a group whose last leaf is a gap opens that group
			t.Fatalf("model leaves %d and %d are adjacent gaps at %d and %d\n%s", i-1, i, live[i-1].Entry.FirstOffset, l.Entry.FirstOffset, s.tr.fmtTree())
		}
		if l.Gap {
			gaps++
			gapOffs += l.End - l.Entry.FirstOffset
		}
		prev = l.End
	}
	if prev != m.NextOffset {
		t.Fatalf("live leaves end at %d, next offset is %d", prev, m.NextOffset)
	}
	n, offs, err := CountGaps(m, s.fetchCached)
	if err != nil || n != gaps || offs != gapOffs {
		t.Fatalf("CountGaps: %d entries, %d offsets, %v; the model has %d and %d", n, offs, err, gaps, gapOffs)
	}
	sum := m.Summary(s.tr.threshold)
	if sum.GapEntries > gaps || sum.GapOffsets > gapOffs {
		t.Fatalf("summary counts %d root gaps of %d offsets, the tree holds %d of %d", sum.GapEntries, sum.GapOffsets, gaps, gapOffs)
	}
	if len(m.Entries) > 0 && (m.Entries[0].Kind == KindFragment || m.Entries[0].FirstOffset == m.FirstOffset) {
		// whole groups: M^k leaves each, root gaps apart
		if got := sum.Fragments + sum.GapEntries; got != uint64(len(live)) {
			t.Fatalf("summary counts %d fragments and %d root gaps, %d leaves are live", sum.Fragments, sum.GapEntries, len(live))
		}
	}
}
