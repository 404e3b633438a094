package manifest

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckGaps(t *testing.T) {
	if err := gapRoot().Check(); err != nil {
		t.Fatalf("gapRoot: %v", err)
	}
	cases := []struct {
		name string
		f    func(m *Manifest)
		says string
	}{
		{"gap size", func(m *Manifest) { m.Entries[1].Size = 1; m.TotalSize++ }, "gap with size 1"},
		{"gap uid", func(m *Manifest) { m.Entries[1].UID = 3 }, "gap with uid"},
		{"gap first ts", func(m *Manifest) { m.Entries[3].FirstTimestamp = 0 }, "gap with timestamps 0..-1"},
		{"gap last ts", func(m *Manifest) { m.Entries[3].LastTimestamp = 7 }, "gap with timestamps -1..7"},
		{"adjacent gaps", func(m *Manifest) {
			m.Entries = append(m.Entries[:2], GapEntry(15), m.Entries[2], m.Entries[3])
		}, "adjacent gaps at 10 and 15"},
		{"head gap", func(m *Manifest) {
			m.Entries = m.Entries[1:]
			m.FirstOffset, m.FirstTimestamp, m.FirstLastTimestamp, m.TotalSize = 10, -1, -1, 20
		}, "entry 0 is a gap"},
		{"only a gap", func(m *Manifest) {
			m.Entries = []Entry{GapEntry(10)}
			m.FirstOffset, m.FirstTimestamp, m.FirstLastTimestamp, m.TotalSize = 10, -1, -1, 0
		}, "entry 0 is a gap"},
		{"header ts from a gap", func(m *Manifest) { m.FirstLastTimestamp = -1 }, "first-last timestamp -1"},
		{"kind past gap", func(m *Manifest) { m.Entries[1].Kind = 5 }, "unknown kind 5"},
	}
	for _, c := range cases {
		m := gapRoot()
		c.f(&m)
		if err := m.Check(); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.says)
		}
	}
	// a partly consumed head group followed by a gap and leaves: a truncation's shape
	m := Manifest{FirstOffset: 5, NextOffset: 40, FirstTimestamp: 7, FirstLastTimestamp: 8, TotalSize: 12,
		Entries: []Entry{{FirstOffset: 0, FirstTimestamp: 1, LastTimestamp: 9, Size: 10, UID: 1, Kind: KindGroup}, GapEntry(10), frag(20, 9, 9, 5, 2), GapEntry(30)}}
	if err := m.Check(); err != nil {
		t.Errorf("group, gap, fragment, gap: %v", err)
	}
}

func TestGapEdit(t *testing.T) {
	// (c) an empty manifest moves on: nothing inserted, first = next = to
	m := Empty()
	ed, err := GapEdit(m, 100)
	if err != nil || len(ed.Insert) != 0 || ed.Remove != 0 || ed.At != 0 || !ed.SetNextOffset || ed.NextOffset != 100 || ed.FirstOffset != 100 || ed.SizeDelta != 0 {
		t.Fatalf("gap on empty: %s, %v", fmtEdit(ed), err)
	}
	if m, err = m.Apply(ed); err != nil || !m.Equal(EmptyAt(100)) || m.NeverUploaded() {
		t.Fatalf("apply gap on empty: %+v, %v", m, err)
	}
	for _, to := range []uint64{100, 99, 0} {
		if _, err := GapEdit(m, to); !errors.Is(err, ErrBadEdit) {
			t.Errorf("gap to %d with next offset 100: %v", to, err)
		}
	}
	// (a) after a fragment: a gap entry at the tail, header and size unchanged
	ap, _ := AppendEdit(m, frag(100, 1, 2, 10, 1), 110)
	m, _ = m.Apply(ap)
	ed, err = GapEdit(m, 120)
	if err != nil || ed.At != 1 || ed.Remove != 0 || len(ed.Insert) != 1 || ed.Insert[0] != GapEntry(110) ||
		ed.FirstOffset != 100 || ed.FirstTimestamp != 1 || ed.FirstLastTimestamp != 2 || ed.SizeDelta != 0 || ed.NextOffset != 120 {
		t.Fatalf("gap after a fragment: %s, %v", fmtEdit(ed), err)
	}
	if m, err = m.Apply(ed); err != nil || m.NextOffset != 120 || len(m.Entries) != 2 || m.TotalSize != 10 {
		t.Fatalf("apply: %+v, %v", m, err)
	}
	// (b) after a trailing gap: replace it by itself, next offset moves
	ed, err = GapEdit(m, 130)
	if err != nil || ed.At != 1 || ed.Remove != 1 || len(ed.Insert) != 1 || ed.Insert[0] != GapEntry(110) || ed.NextOffset != 130 {
		t.Fatalf("gap after a gap: %s, %v", fmtEdit(ed), err)
	}
	if m, err = m.Apply(ed); err != nil || m.NextOffset != 130 || len(m.Entries) != 2 || m.EntryEnd(1) != 130 {
		t.Fatalf("apply: %+v, %v", m, err)
	}
	// (a) after a group, even one whose last child is a gap
	g := Manifest{FirstOffset: 0, NextOffset: 20, FirstTimestamp: 1, FirstLastTimestamp: 1, TotalSize: 3,
		Entries: []Entry{{FirstOffset: 0, FirstTimestamp: 1, LastTimestamp: 2, Size: 3, UID: 9, Kind: KindGroup}}}
	if ed, err := GapEdit(g, 25); err != nil || ed.At != 1 || len(ed.Insert) != 1 || ed.Insert[0] != GapEntry(20) {
		t.Fatalf("gap after a group: %s, %v", fmtEdit(ed), err)
	} else if _, err := g.Apply(ed); err != nil {
		t.Fatalf("apply gap after a group: %v", err)
	}
}

// TestApplyRefusesNextMoves shows every refusal of Apply's gatekeeping: only a fragment
// append, a gap append, a gap extension and an empty manifest moving on may move next
// offset, in exactly their shapes; replayed ones are refused.
func TestApplyRefusesNextMoves(t *testing.T) {
	withFrag := Manifest{FirstOffset: 0, NextOffset: 10, FirstTimestamp: 1, FirstLastTimestamp: 2, TotalSize: 10,
		Entries: []Entry{frag(0, 1, 2, 10, 1)}}
	withGap := withFrag.Clone()
	withGap.Entries = append(withGap.Entries, GapEntry(10))
	withGap.NextOffset = 20
	empty := EmptyAt(5)
	hdr := func(m Manifest, e Edit) Edit {
		e.FirstOffset, e.FirstTimestamp, e.FirstLastTimestamp = m.FirstOffset, m.FirstTimestamp, m.FirstLastTimestamp
		return e
	}
	cases := []struct {
		name string
		m    Manifest
		e    Edit
		says string
	}{
		{"gap appended next to the trailing gap", withGap, hdr(withGap, Edit{At: 2, Insert: []Entry{GapEntry(20)}, SetNextOffset: true, NextOffset: 30}), "next to the trailing gap"},
		{"gap appended below next", withFrag, hdr(withFrag, Edit{At: 1, Insert: []Entry{GapEntry(5)}, SetNextOffset: true, NextOffset: 30}), "gap appended at 5"},
		{"gap appended above next", withFrag, hdr(withFrag, Edit{At: 1, Insert: []Entry{GapEntry(12)}, SetNextOffset: true, NextOffset: 30}), "gap appended at 12"},
		{"illegal gap appended", withFrag, hdr(withFrag, Edit{At: 1, Insert: []Entry{{FirstOffset: 10, FirstTimestamp: -1, LastTimestamp: -1, UID: 4, Kind: KindGap}}, SetNextOffset: true, NextOffset: 30}), "gap with uid"},
		{"gap append with a size", withFrag, hdr(withFrag, Edit{At: 1, Insert: []Entry{GapEntry(10)}, SetNextOffset: true, NextOffset: 30, SizeDelta: 1}), "size delta +1"},
		{"gap append moving the header", withFrag, Edit{At: 1, Insert: []Entry{GapEntry(10)}, SetNextOffset: true, NextOffset: 30, FirstLastTimestamp: 2}, "changes the header"},
		{"gap appended to an empty manifest", empty, Edit{At: 0, Insert: []Entry{GapEntry(5)}, SetNextOffset: true, NextOffset: 9, FirstOffset: 5, FirstTimestamp: -1, FirstLastTimestamp: -1}, "would be its head"},
		{"gap appended inside", withGap, hdr(withGap, Edit{At: 1, Insert: []Entry{GapEntry(20)}, SetNextOffset: true, NextOffset: 30}), "must append at the tail"},
		{"gap extension with another entry", withGap, hdr(withGap, Edit{At: 1, Remove: 1, Insert: []Entry{GapEntry(11)}, SetNextOffset: true, NextOffset: 30}), "keep the trailing gap"},
		{"trailing gap replaced by a fragment", withGap, hdr(withGap, Edit{At: 1, Remove: 1, Insert: []Entry{frag(10, 3, 4, 5, 2)}, SetNextOffset: true, NextOffset: 30, SizeDelta: 5}), "keep the trailing gap"},
		{"trailing gap removed", withGap, hdr(withGap, Edit{At: 1, Remove: 1, SetNextOffset: true, NextOffset: 30}), "must append at the tail"},
		{"gap extension with a size", withGap, hdr(withGap, Edit{At: 1, Remove: 1, Insert: []Entry{GapEntry(10)}, SetNextOffset: true, NextOffset: 30, SizeDelta: 2}), "size delta +2"},
		{"gap extension moving the header", withGap, Edit{At: 1, Remove: 1, Insert: []Entry{GapEntry(10)}, SetNextOffset: true, NextOffset: 30, FirstTimestamp: 1, FirstLastTimestamp: 2, FirstOffset: 1}, "changes the header"},
		{"fragment 'extended' like a gap", withFrag, hdr(withFrag, Edit{At: 0, Remove: 1, Insert: []Entry{frag(0, 1, 2, 10, 1)}, SetNextOffset: true, NextOffset: 30}), "must append at the tail"},
		{"empty move without first", empty, Edit{At: 0, SetNextOffset: true, NextOffset: 9, FirstOffset: 5, FirstTimestamp: -1, FirstLastTimestamp: -1}, "must have first offset 9"},
		{"empty move with timestamps", empty, Edit{At: 0, SetNextOffset: true, NextOffset: 9, FirstOffset: 9, FirstTimestamp: 3, FirstLastTimestamp: -1}, "timestamps -1"},
		{"empty move with a size", empty, Edit{At: 0, SetNextOffset: true, NextOffset: 9, FirstOffset: 9, FirstTimestamp: -1, FirstLastTimestamp: -1, SizeDelta: 4}, "size delta +4"},
		{"non-empty moved without an entry", withFrag, hdr(withFrag, Edit{At: 1, SetNextOffset: true, NextOffset: 30}), "must append at the tail"},
		{"two entries appended", withFrag, hdr(withFrag, Edit{At: 1, Insert: []Entry{frag(10, 3, 4, 5, 2), GapEntry(15)}, SetNextOffset: true, NextOffset: 30, SizeDelta: 5}), "must append at the tail"},
		{"group appended", withFrag, hdr(withFrag, Edit{At: 1, Insert: []Entry{{FirstOffset: 10, Size: 5, UID: 2, Kind: KindGroup}}, SetNextOffset: true, NextOffset: 30, SizeDelta: 5}), "must append at the tail"},
		{"fragment append with a wrong size", withFrag, hdr(withFrag, Edit{At: 1, Insert: []Entry{frag(10, 3, 4, 5, 2)}, SetNextOffset: true, NextOffset: 30, SizeDelta: 4}), "size delta +4"},
		{"fragment append moving the header", withFrag, Edit{At: 1, Insert: []Entry{frag(10, 3, 4, 5, 2)}, SetNextOffset: true, NextOffset: 30, SizeDelta: 5, FirstTimestamp: 3, FirstLastTimestamp: 4, FirstOffset: 0}, "changes its header"},
	}
	for _, c := range cases {
		got, err := c.m.Apply(c.e)
		if !errors.Is(err, ErrBadEdit) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: got %v, want ErrBadEdit saying %q", c.name, err, c.says)
		}
		if !got.Equal(c.m) {
			t.Errorf("%s: refused edit changed the manifest", c.name)
		}
	}
	// a fragment appended after a trailing gap is fine
	ap, err := AppendEdit(withGap, frag(20, 3, 4, 5, 2), 25)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := withGap.Apply(ap); err != nil {
		t.Errorf("fragment after a gap: %v", err)
	}
	if _, err := AppendEdit(withFrag, GapEntry(10), 20); !errors.Is(err, ErrBadEdit) {
		t.Errorf("AppendEdit of a gap: %v", err)
	}
	// every gap shape replayed is refused
	for name, m := range map[string]Manifest{"empty": empty, "after a fragment": withFrag, "after a gap": withGap} {
		ed, err := GapEdit(m, 40)
		if err != nil {
			t.Fatal(err)
		}
		once, err := m.Apply(ed)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := once.Apply(ed); !errors.Is(err, ErrBadEdit) {
			t.Errorf("%s: a replayed gap edit applied twice: %v", name, err)
		}
	}
}

func TestCheckGroupGaps(t *testing.T) {
	g := Entry{FirstOffset: 0, FirstTimestamp: 3, LastTimestamp: 4, Size: 2, UID: 5, Kind: KindGroup}
	good := []Entry{GapEntry(0), frag(5, 3, 4, 2, 2), GapEntry(8)}
	if err := CheckGroup(g, good); err != nil {
		t.Fatal(err)
	}
	mut := func(f func(c []Entry) []Entry) []Entry { return f(append([]Entry(nil), good...)) }
	cases := map[string]struct {
		c    []Entry
		says string
	}{
		"only gaps":        {[]Entry{GapEntry(0)}, "holds only gaps"},
		"adjacent gaps":    {mut(func(c []Entry) []Entry { return append(c, GapEntry(9)) }), "adjacent gaps"},
		"gap with a size":  {mut(func(c []Entry) []Entry { c[2].Size = 1; return c }), "gap with size 1"},
		"gap with a uid":   {mut(func(c []Entry) []Entry { c[0].UID = 1; return c }), "gap with uid"},
		"ts from the gap":  {mut(func(c []Entry) []Entry { c[1].FirstTimestamp = -1; return c }), "first timestamp -1"},
		"last ts":          {mut(func(c []Entry) []Entry { c[1].LastTimestamp = 9; return c }), "last timestamp 9"},
		"first offset":     {mut(func(c []Entry) []Entry { return c[1:] }), "first entry starts at 5"},
		"sizes":            {mut(func(c []Entry) []Entry { c[1].Size = 3; return c }), "add up to 3"},
		"unknown kind":     {mut(func(c []Entry) []Entry { c[2].Kind = 5; return c }), "want fragment or gap"},
		"group in a group": {mut(func(c []Entry) []Entry { c[1].Kind = KindGroup; return c }), "want fragment or gap"},
	}
	for name, c := range cases {
		if err := CheckGroup(g, c.c); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: got %v, want %q", name, err, c.says)
		}
	}
	k := Entry{FirstOffset: 0, FirstTimestamp: 3, LastTimestamp: 4, Size: 2, UID: 6, Kind: KindKiloGroup}
	if err := CheckGroup(k, []Entry{g, GapEntry(10)}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("gap in a kilo-group: %v", err)
	}
	if err := CheckGroup(GapEntry(0), good); !errors.Is(err, ErrCorrupt) {
		t.Errorf("gap as a group: %v", err)
	}
}

// gapTree is a tier whose root is [G [0,40), gap [40,50), fragment [50,60)], where the
// group G holds [fragment [0,10), gap [10,20), fragment [20,30), fragment [30,40)].
func gapTree(t *testing.T) *tier {
	t.Helper()
	tr := newTier(Empty(), 4)
	steps := []func() error{
		func() error { _, err := tr.appendFragment(0, 10, 10, 100, 109); return err },
		func() error { _, err := tr.declareGap(20); return err },
		func() error { _, err := tr.appendFragment(20, 30, 10, 120, 129); return err },
		func() error { _, err := tr.appendFragment(30, 40, 10, 130, 139); return err },
		func() error { _, _, _, err := tr.rebalanceOnce(); return err },
		func() error { _, err := tr.declareGap(50); return err },
		func() error { _, err := tr.appendFragment(50, 60, 10, 150, 159); return err },
	}
	for i, f := range steps {
		if err := f(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if len(tr.m.Entries) != 3 || tr.m.Entries[0].Kind != KindGroup || !tr.m.Entries[1].IsGap() {
		t.Fatalf("unexpected tree\n%s", tr.fmtTree())
	}
	return tr
}

func TestLookupGaps(t *testing.T) {
	tr := gapTree(t)
	if err := CheckTree(tr.m, tr.fetch); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		off        uint64
		gap        bool
		first, end uint64
	}{{0, false, 0, 10}, {10, true, 10, 20}, {19, true, 10, 20}, {20, false, 20, 30}, {45, true, 40, 50}, {55, false, 50, 60}} {
		ref, err := LookupOffset(tr.m, c.off, tr.fetch)
		if err != nil || ref.Gap != c.gap || ref.Entry.IsGap() != c.gap || ref.Entry.FirstOffset != c.first || ref.End != c.end {
			t.Errorf("lookup %d: %+v, %v", c.off, ref, err)
		}
	}
	for _, c := range []struct {
		ts    int64
		first uint64
	}{{-5, 0}, {109, 0}, {110, 20}, {139, 30}, {140, 50}, {159, 50}} {
		ref, err := LookupTimestamp(tr.m, c.ts, tr.fetch)
		if err != nil || ref.Gap || ref.Entry.Kind != KindFragment || ref.Entry.FirstOffset != c.first {
			t.Errorf("lookup ts %d: %+v, %v", c.ts, ref, err)
		}
	}
	if _, err := LookupTimestamp(tr.m, 160, tr.fetch); !errors.Is(err, ErrAboveNext) {
		t.Errorf("lookup past the newest chunk: %v", err)
	}
	var got []string
	it := Iterate(tr.m, 0, tr.fetch)
	for {
		ref, ok, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, fmtRef(ref))
	}
	want := "fragment [0,10) ts=100..109 size=10 uid=1|gap [10,20) (declared lost)|fragment [20,30) ts=120..129 size=10 uid=2|" +
		"fragment [30,40) ts=130..139 size=10 uid=3|gap [40,50) (declared lost)|fragment [50,60) ts=150..159 size=10 uid=5"
	if strings.Join(got, "|") != want {
		t.Errorf("iterate:\n%s\nwant\n%s", strings.Join(got, "|"), want)
	}
	s := tr.m.Summary(4)
	if s.GapEntries != 1 || s.GapOffsets != 10 || s.Fragments != 5 {
		t.Errorf("summary %+v", s)
	}
	n, offs, err := CountGaps(tr.m, tr.fetch)
	if err != nil || n != 2 || offs != 20 {
		t.Errorf("CountGaps: %d %d %v", n, offs, err)
	}
	if _, _, err := CountGaps(tr.m, nil); err == nil {
		t.Errorf("CountGaps without a fetcher")
	}
}

func TestFetchChildrenGapEnds(t *testing.T) {
	tr := gapTree(t)
	for name, children := range map[string][]Entry{
		"only a gap":         {GapEntry(0)},
		"two gaps at start":  {GapEntry(0), GapEntry(5), frag(20, 120, 139, 20, 2)},
		"wrong first ts":     {frag(0, 101, 109, 10, 1), GapEntry(10), frag(20, 120, 139, 10, 2)},
		"wrong last ts":      {frag(0, 100, 109, 10, 1), GapEntry(10), frag(20, 120, 138, 10, 2)},
		"gap last, wrong ts": {frag(0, 100, 109, 10, 1), frag(20, 120, 138, 10, 2), GapEntry(30)},
	} {
		fetch := func(Entry) ([]Entry, error) { return children, nil }
		if _, err := LookupOffset(tr.m, 5, fetch); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestRebaseOverGaps: a retention decision that empties the evaluated manifest, rebased
// onto one that grew by a gap and a fragment, lands on the fragment (the gap goes too);
// rebased onto one that grew by a gap only, it empties it.
func TestRebaseOverGaps(t *testing.T) {
	tr := newTier(Empty(), 4)
	if _, err := tr.appendFragment(0, 10, 10, 1, 2); err != nil {
		t.Fatal(err)
	}
	ev := tr.m
	r := EvaluateRetention(ev, Policy{MaxBytes: 1}, 0)
	if !r.Changed || r.Edit.Remove != 1 {
		t.Fatalf("retention: %+v", r)
	}
	if _, err := tr.declareGap(20); err != nil {
		t.Fatal(err)
	}
	onlyGap := tr.m
	ed, err := r.Rebase(onlyGap)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := onlyGap.Apply(ed); err != nil || !m.Equal(EmptyAt(20)) {
		t.Fatalf("rebased onto a trailing gap: %+v, %v", m, err)
	}
	if _, err := tr.appendFragment(20, 30, 5, 3, 4); err != nil {
		t.Fatal(err)
	}
	ed, err = r.Rebase(tr.m)
	if err != nil {
		t.Fatal(err)
	}
	m, err := tr.m.Apply(ed)
	if err != nil || m.FirstOffset != 20 || len(m.Entries) != 1 || m.TotalSize != 5 || m.FirstTimestamp != 3 {
		t.Fatalf("rebased onto gap and fragment: %+v, %v", m, err)
	}
	// the evaluated manifest ended with a gap that was extended since
	tr = newTier(Empty(), 4)
	_, _ = tr.appendFragment(0, 10, 10, 1, 2)
	_, _ = tr.declareGap(20)
	r = EvaluateRetention(tr.m, Policy{MaxBytes: 1}, 0)
	_, _ = tr.declareGap(30)
	_, _ = tr.appendFragment(30, 40, 5, 3, 4)
	ed, err = r.Rebase(tr.m)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := tr.m.Apply(ed); err != nil || m.FirstOffset != 30 || len(m.Entries) != 1 {
		t.Fatalf("rebased past an extended gap: %+v, %v", m, err)
	}
}
