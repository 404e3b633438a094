package manifest

import (
	"errors"
	"testing"

	"pgregory.net/rapid"
)

// machine drives random sequences of appends, rebalances, retention runs and persists.
type machine struct {
	tr        *tier
	md        model
	clock     int64
	monotonic bool
	cache     map[uint64][]Entry
}

// fetchCached serves lookups from decoded groups (DecodeGroup is exercised by tr.fetch).
func (s *machine) fetchCached(e Entry) ([]Entry, error) {
	if c, ok := s.cache[e.UID]; ok {
		return c, nil
	}
	c, err := s.tr.fetch(e)
	if err != nil {
		return nil, err
	}
	s.cache[e.UID] = c
	return c, nil
}

func (s *machine) appendOne(t *rapid.T) {
	m := s.tr.m
	length := rapid.Uint64Range(1, 6).Draw(t, "len")
	size := rapid.Uint64Range(1, 60).Draw(t, "size")
	var ts1, ts2 int64
	if s.monotonic {
		ts1 = s.clock
		ts2 = ts1 + rapid.Int64Range(0, 5).Draw(t, "dur")
		s.clock = ts2 + rapid.Int64Range(0, 3).Draw(t, "gap")
	} else {
		ts1 = rapid.Int64Range(-50, 200).Draw(t, "ts1")
		ts2 = rapid.Int64Range(-50, 200).Draw(t, "ts2")
	}
	before := len(m.Entries)
	ed, err := s.tr.appendFragment(m.NextOffset, m.NextOffset+length, size, ts1, ts2)
	if err != nil {
		t.Fatalf("append at next offset %d: %v", m.NextOffset, err)
	}
	if !ed.SetNextOffset || ed.At != before || ed.Remove != 0 || len(ed.Insert) != 1 || ed.SizeDelta != int64(size) {
		t.Fatalf("append edit is not a tail append: %s", fmtEdit(ed))
	}
	if len(m.Entries) > 0 && (ed.FirstOffset != m.FirstOffset || ed.FirstTimestamp != m.FirstTimestamp || ed.FirstLastTimestamp != m.FirstLastTimestamp) {
		t.Fatalf("append to a non-empty manifest moved the header: %s", fmtEdit(ed))
	}
	e := s.tr.m.Entries[len(s.tr.m.Entries)-1]
	s.md.leaves = append(s.md.leaves, FragmentRef{Entry: e, End: m.NextOffset + length})
}

func (s *machine) badAppend(t *rapid.T) {
	m := s.tr.m
	first := rapid.Uint64Range(0, m.NextOffset+10).Filter(func(o uint64) bool { return o != m.NextOffset }).Draw(t, "bad-first")
	_, err := AppendEdit(m, Entry{FirstOffset: first, Size: 1}, first+1)
	if !errors.Is(err, ErrBadEdit) {
		t.Fatalf("append at %d with next offset %d: got %v, want ErrBadEdit", first, m.NextOffset, err)
	}
	if !s.tr.m.Equal(m) {
		t.Fatalf("refused append changed the manifest")
	}
}

func (s *machine) rebalance(t *rapid.T) {
	for {
		before := s.tr.m
		r, ed, ok, err := s.tr.rebalanceOnce()
		if err != nil {
			t.Fatalf("rebalance: %v", err)
		}
		if !ok {
			return
		}
		if len(r.Children) != s.tr.threshold || r.Kind == KindFragment || r.Kind > KindMegaGroup {
			t.Fatalf("rebalance of %d entries into a %s", len(r.Children), r.Kind)
		}
		if ed.SetNextOffset || ed.SizeDelta != 0 || len(ed.Insert) != 1 || ed.Remove != s.tr.threshold ||
			ed.FirstOffset != before.FirstOffset || ed.FirstTimestamp != before.FirstTimestamp || ed.FirstLastTimestamp != before.FirstLastTimestamp {
			t.Fatalf("replace edit changes more than the run: %s", fmtEdit(ed))
		}
	}
}

func (s *machine) drawPolicy(t *rapid.T) (Policy, int64) {
	m := s.tr.m
	var p Policy
	if rapid.Bool().Draw(t, "by-bytes") {
		p.MaxBytes = rapid.Uint64Range(1, m.TotalSize+30).Draw(t, "max-bytes")
	}
	if rapid.Bool().Draw(t, "by-age") {
		p.MaxAgeMillis = rapid.Int64Range(1, 100).Draw(t, "max-age")
	}
	now := s.clock + rapid.Int64Range(0, 120).Draw(t, "now-ahead")
	return p, now
}

// checkRetention compares the outcome of a retention run with the flat model.
func (s *machine) checkRetention(t *rapid.T, before Manifest, r Retention, p Policy, now int64) {
	wantFirst, wantTotal := retainFlat(s.md.live(before.FirstOffset), before.TotalSize, before.NextOffset, p, now)
	m := s.tr.m
	if r.Changed {
		ed := r.Edit
		if ed.At != 0 || len(ed.Insert) != 0 || ed.SetNextOffset || ed.SizeDelta > 0 {
			t.Fatalf("retention edit is not a prefix truncation: %s", fmtEdit(ed))
		}
		if r.DeleteFrom != before.FirstOffset {
			t.Fatalf("delete-from %d, first offset before was %d", r.DeleteFrom, before.FirstOffset)
		}
	}
	if m.NextOffset != before.NextOffset && !r.Changed {
		t.Fatalf("next offset moved without an edit")
	}
	if m.FirstOffset != wantFirst {
		t.Fatalf("policy %+v now %d: first offset %d, the flat model says %d\nbefore:\n%s\nafter:\n%s", p, now, m.FirstOffset, wantFirst, fmtRoot(before), fmtRoot(m))
	}
	if m.TotalSize != wantTotal {
		t.Fatalf("total size %d, the flat model says %d", m.TotalSize, wantTotal)
	}
}

func (s *machine) retain(t *rapid.T) {
	before := s.tr.m
	p, now := s.drawPolicy(t)
	r, _, err := s.tr.retain(p, now, nil)
	if err != nil {
		t.Fatalf("retention %+v at %d: %v\n%s", p, now, err, fmtRoot(before))
	}
	if s.tr.m.NextOffset != before.NextOffset {
		t.Fatalf("retention moved next offset from %d to %d", before.NextOffset, s.tr.m.NextOffset)
	}
	s.checkRetention(t, before, r, p, now)
}

// retainInterleaved evaluates retention through EvaluateRetentionInGroup and Resume while
// fragments are appended at the tail between the fetches (what the writer does while a
// group download is in flight); the edit still applies and agrees with the model as of the
// manifest evaluated.
func (s *machine) retainInterleaved(t *rapid.T) {
	before := s.tr.m
	p, now := s.drawPolicy(t)
	wantFirst, wantTotal := retainFlat(s.md.live(before.FirstOffset), before.TotalSize, before.NextOffset, p, now)
	r := EvaluateRetention(before, p, now)
	if r.Err != nil {
		t.Fatalf("retention: %v", r.Err)
	}
	first := true
	var err error
	for r.Fetch != nil {
		for n := rapid.IntRange(0, 2).Draw(t, "appends-during-fetch"); n > 0; n-- {
			if rapid.IntRange(0, 3).Draw(t, "gap-during-fetch") == 0 {
				s.gapOne(t)
			} else {
				s.appendOne(t)
			}
		}
		g := *r.Fetch
		children, ferr := s.tr.fetch(g)
		if ferr != nil {
			t.Fatalf("fetch: %v", ferr)
		}
		if first {
			r, err = EvaluateRetentionInGroup(before, g, children, p, now)
			first = false
		} else {
			r, err = r.Resume(children)
		}
		if err != nil {
			t.Fatalf("retention %+v at %d: %v", p, now, err)
		}
	}
	grown := s.tr.m
	if r.Changed {
		ed, err := r.Rebase(grown)
		if err != nil {
			t.Fatalf("retention edit computed before %d appends does not rebase: %v", len(grown.Entries)-len(before.Entries), err)
		}
		if err := s.tr.apply(ed); err != nil {
			t.Fatalf("rebased retention edit does not apply: %v\n%s", err, fmtEdit(ed))
		}
		if _, err := s.tr.deleteObjects(r); err != nil {
			t.Fatalf("delete: %v", err)
		}
	}
	if wantFirst == before.NextOffset && len(before.Entries) > 0 {
		// everything evaluated went: the header lands on the next fragment appended since
		// (gaps declared since go too), or the manifest empties
		wantFirst = s.md.firstFragmentFrom(before.NextOffset, grown.NextOffset)
	}
	if m := s.tr.m; m.FirstOffset != wantFirst || m.TotalSize != grown.TotalSize-(before.TotalSize-wantTotal) {
		t.Fatalf("interleaved retention %+v at %d: first offset %d size %d, model says %d and %d",
			p, now, m.FirstOffset, m.TotalSize, wantFirst, grown.TotalSize-(before.TotalSize-wantTotal))
	}
}

func (s *machine) persist(t *rapid.T) {
	if err := s.tr.persist(); err != nil {
		t.Fatalf("persist: %v", err)
	}
}

// check runs after every step: invariants 1, 3, 8, 10 (CheckTree and the model), the store
// (invariant 9), codecs, lookups and the iterator.
func (s *machine) check(t *rapid.T, full bool) {
	m := s.tr.m
	if err := CheckTree(m, s.fetchCached); err != nil {
		t.Fatalf("CheckTree: %v\n%s", err, s.tr.fmtTree())
	}
	if err := s.tr.checkStore(); err != nil {
		t.Fatalf("store: %v", err)
	}
	back, err := DecodeRoot(EncodeRoot(m))
	if err != nil || !back.Equal(m) {
		t.Fatalf("root round trip: %v", err)
	}
	live := s.md.live(m.FirstOffset) // fragments and gaps
	frags := fragments(live)
	var total uint64
	for _, f := range frags {
		total += f.Entry.Size
	}
	if total != m.TotalSize {
		t.Fatalf("total size %d, model's live fragments hold %d", m.TotalSize, total)
	}
	if len(frags) == 0 && (m.FirstOffset != m.NextOffset || len(m.Entries) != 0) {
		t.Fatalf("no live fragment but first offset %d, next %d, %d entries", m.FirstOffset, m.NextOffset, len(m.Entries))
	}
	// the iterator yields exactly the model's live leaves (gaps as gaps)
	from := m.FirstOffset
	if m.NextOffset > 0 {
		from = rapid.Uint64Range(0, m.NextOffset).Draw(t, "iterate-from")
	}
	want := live
	for len(want) > 0 && want[0].End <= from {
		want = want[1:]
	}
	s.checkLeaves(t, live)
	it := Iterate(m, from, s.fetchCached)
	for i := 0; ; i++ {
		ref, ok, err := it.Next()
		if err != nil {
			t.Fatalf("iterate: %v", err)
		}
		if !ok {
			if i != len(want) {
				t.Fatalf("iterate from %d: %d fragments, model has %d", from, i, len(want))
			}
			break
		}
		if i >= len(want) || ref != want[i] {
			t.Fatalf("iterate from %d: fragment %d is %+v", from, i, ref)
		}
	}
	// lookups: every live offset on full checks, boundaries otherwise; an offset in a gap
	// finds the gap
	for _, f := range live {
		offs := []uint64{f.Entry.FirstOffset, f.End - 1}
		if full {
			offs = offs[:0]
			for o := f.Entry.FirstOffset; o < f.End; o++ {
				offs = append(offs, o)
			}
		}
		for _, o := range offs {
			ref, err := LookupOffset(m, o, s.fetchCached)
			if err != nil || ref != f {
				t.Fatalf("lookup %d: %+v, %v; want %+v", o, ref, err, f)
			}
		}
		if f.Gap {
			continue
		}
		ts := []int64{f.Entry.FirstTimestamp, f.Entry.LastTimestamp, f.Entry.LastTimestamp + 1}
		for _, x := range ts {
			ref, err := LookupTimestamp(m, x, s.fetchCached)
			s.checkTimestampLookup(t, frags, x, ref, err)
		}
	}
	if m.FirstOffset > 0 {
		if _, err := LookupOffset(m, m.FirstOffset-1, s.fetchCached); !errors.Is(err, ErrBelowFirst) {
			t.Fatalf("lookup below first: %v", err)
		}
	}
	if _, err := LookupOffset(m, m.NextOffset, s.fetchCached); !errors.Is(err, ErrAboveNext) {
		t.Fatalf("lookup at next: %v", err)
	}
}

func (s *machine) checkTimestampLookup(t *rapid.T, live []FragmentRef, ts int64, ref FragmentRef, err error) {
	if s.monotonic {
		for _, f := range live {
			if f.Entry.LastTimestamp >= ts {
				if err != nil || ref != f {
					t.Fatalf("lookup ts %d: %+v, %v; want %+v", ts, ref, err, f)
				}
				return
			}
		}
		if !errors.Is(err, ErrAboveNext) {
			t.Fatalf("lookup ts %d past every chunk: %+v, %v", ts, ref, err)
		}
		return
	}
	if err != nil {
		if !errors.Is(err, ErrAboveNext) {
			t.Fatalf("lookup ts %d: %v", ts, err)
		}
		return
	}
	found := false
	for _, f := range live {
		found = found || f == ref
	}
	if !found || ref.Gap || ref.Entry.LastTimestamp < ts {
		t.Fatalf("lookup ts %d returned %+v: not a live fragment reaching it", ts, ref)
	}
}

// TestTreeProperties runs random sequences of appends, gaps, rebalances (threshold 2 to 4,
// so that kilo- and mega-groups appear), retention runs, divergence truncations and
// persists, checking after every step that the tree agrees with a flat model of fragments
// and gaps, and at every persist that folding the captured edits over the last persisted
// manifest (or the last truncation's result, a new base) gives the in-memory one.
func TestTreeProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		threshold := rapid.IntRange(2, 4).Draw(t, "threshold")
		start := rapid.SampledFrom([]uint64{0, 0, 7, 1 << 40}).Draw(t, "start")
		m := Empty()
		if start > 0 {
			m = EmptyAt(start)
		}
		s := &machine{tr: newTier(m, threshold), monotonic: rapid.Float64().Draw(t, "p-monotonic") < 0.8, cache: map[uint64][]Entry{}}
		steps := rapid.IntRange(5, 150).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			switch op := rapid.IntRange(0, 14).Draw(t, "op"); {
			case op <= 4:
				for n := rapid.IntRange(1, 4).Draw(t, "appends"); n > 0; n-- {
					if rapid.IntRange(0, 4).Draw(t, "gap-instead") == 0 {
						s.gapOne(t)
					} else {
						s.appendOne(t)
					}
				}
				if rapid.Bool().Draw(t, "auto-rebalance") {
					s.rebalance(t)
				}
			case op == 5:
				s.badAppend(t)
			case op == 6:
				s.rebalance(t)
			case op == 7 || op == 8:
				s.retain(t)
			case op == 9:
				s.retainInterleaved(t)
			case op == 10 || op == 11:
				s.gapOne(t)
			case op == 12:
				s.truncate(t)
			default:
				s.persist(t)
			}
			s.check(t, i%15 == 14)
		}
		s.check(t, true)
		s.persist(t)
	})
}

// TestEditFoldProperty checks that a replica folding the writer's edits in batches (one
// batch per persist) always holds exactly the persisted manifest, and that an edit applied
// out of order is refused rather than applied.
func TestEditFoldProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := &machine{tr: newTier(Empty(), 2), monotonic: true, cache: map[uint64][]Entry{}}
		replica := Empty()
		var batches [][]Edit
		for i, n := 0, rapid.IntRange(1, 40).Draw(t, "steps"); i < n; i++ {
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0, 1:
				s.appendOne(t)
			case 2:
				s.rebalance(t)
			case 3:
				s.gapOne(t)
			case 4:
				// a truncation is no edit: the writer syncs replicas with the new base (the
				// prefix append, if any, goes out with the next persist); edits of the old
				// timeline are not replayed onto it
				s.truncate(t)
				replica, batches = s.tr.persisted, nil
			default:
				s.retain(t)
			}
			if rapid.Bool().Draw(t, "persist") {
				batches = append(batches, s.tr.edits)
				s.persist(t)
				var err error
				if replica, err = replica.ApplyAll(batches[len(batches)-1]); err != nil {
					t.Fatalf("replica: %v", err)
				}
				if !replica.Equal(s.tr.persisted) {
					t.Fatalf("replica differs from the persisted manifest")
				}
			}
		}
		// A batch replayed twice must not silently apply: appends and gaps carry their start
		// or their end.
		if len(batches) > 0 {
			for _, ed := range batches[len(batches)-1] {
				if ed.SetNextOffset {
					if _, err := replica.Apply(ed); err == nil {
						t.Fatalf("a replayed next-offset edit applied twice:\n%s", fmtEdit(ed))
					}
				}
			}
		}
	})
}

func TestRetentionDoesNotLoop(t *testing.T) {
	// A kilo-group whose first child group is consumed by age, then the next one opened:
	// feeding the second Fetch to EvaluateRetentionInGroup (instead of Resume) is refused
	// with an error rather than asking for the first group again forever.
	tr := newTier(Empty(), 2)
	for i := 0; i < 5; i++ {
		if _, err := tr.appendFragment(uint64(10*i), uint64(10*i+10), 10, int64(100+10*i), int64(109+10*i)); err != nil {
			t.Fatal(err)
		}
	}
	for {
		_, _, ok, err := tr.rebalanceOnce()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
	}
	p, now := Policy{MaxAgeMillis: 100}, int64(235)
	r := EvaluateRetention(tr.m, p, now)
	if r.Fetch == nil || r.Fetch.Kind != KindKiloGroup {
		t.Fatalf("want a fetch of the kilo-group, got %+v", r)
	}
	k := *r.Fetch
	kc, _ := tr.fetch(k)
	r, err := EvaluateRetentionInGroup(tr.m, k, kc, p, now)
	if err != nil || r.Fetch == nil || r.Fetch.Kind != KindGroup {
		t.Fatalf("want a fetch of the first group, got %+v, %v", r, err)
	}
	g := *r.Fetch
	gc, _ := tr.fetch(g)
	if _, err := EvaluateRetentionInGroup(tr.m, g, gc, p, now); err == nil {
		t.Fatalf("EvaluateRetentionInGroup accepted a group that is not the first to open")
	}
	if _, err := (Retention{}).Resume(nil); !errors.Is(err, ErrNoFetch) {
		t.Fatalf("Resume without Fetch: %v", err)
	}
	got, err := EvaluateRetentionWith(tr.m, p, now, tr.fetch)
	if err != nil || !got.Changed || got.Edit.FirstOffset != 30 {
		t.Fatalf("EvaluateRetentionWith: %+v, %v", got, err)
	}
}
