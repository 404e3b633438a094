package manifest

import (
	"errors"
	"fmt"
	"testing"
)

func TestTruncateTailRefuses(t *testing.T) {
	tr := gapTree(t) // root [G [0,40), gap [40,50), fragment [50,60)]
	m := tr.m
	for _, at := range []uint64{61, 1 << 40} {
		if _, err := TruncateTail(m, at, tr.fetch); !errors.Is(err, ErrBadEdit) {
			t.Errorf("truncate at %d above next %d: %v", at, m.NextOffset, err)
		}
	}
	r := EvaluateRetention(m, Policy{MaxBytes: 30}, 0)
	for r.Fetch != nil {
		c, _ := tr.fetch(*r.Fetch)
		r, _ = r.Resume(c)
	}
	after, err := m.Apply(r.Edit)
	if err != nil || after.FirstOffset != 20 {
		t.Fatalf("retention to 20: %+v, %v", after, err)
	}
	if _, err := TruncateTail(after, 19, tr.fetch); !errors.Is(err, ErrBadEdit) {
		t.Errorf("truncate below first: %v", err)
	}
	failing := func(Entry) ([]Entry, error) { return nil, errors.New("S3 down") }
	if _, err := TruncateTail(m, 25, failing); err == nil {
		t.Errorf("a fetch failure was ignored")
	}
	wrong := func(Entry) ([]Entry, error) { return []Entry{frag(0, 100, 139, 31, 9)}, nil }
	if _, err := TruncateTail(m, 25, wrong); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a group that does not match its entry: %v", err)
	}
	bad := m.Clone()
	bad.TotalSize++
	if _, err := TruncateTail(bad, 25, tr.fetch); err == nil {
		t.Errorf("an invalid manifest was truncated")
	}
}

func TestTruncateTailResult(t *testing.T) {
	tr := gapTree(t)
	m := tr.m
	// inside the group's gap: the group is expanded, its gap stays and ends at 15
	res, err := TruncateTail(m, 15, tr.fetch)
	if err != nil {
		t.Fatal(err)
	}
	want := Manifest{FirstOffset: 0, NextOffset: 15, FirstTimestamp: 100, FirstLastTimestamp: 109, TotalSize: 10,
		Entries: []Entry{frag(0, 100, 109, 10, 1), GapEntry(10)}}
	if !res.Manifest.Equal(want) || res.Straddle != nil || res.At != 15 {
		t.Fatalf("truncate at 15:\n%s", fmtRoot(res.Manifest))
	}
	if got := fmtObjects(res.Dropped); got != "fragment@20/uid=2 fragment@30/uid=3 group@0/uid=4 fragment@50/uid=5" {
		t.Errorf("dropped %s", got)
	}
	for _, d := range res.Dropped {
		if d.IsGap() {
			t.Errorf("a gap in Dropped")
		}
	}
	// inside the root fragment: it straddles, the gap before it is the tail
	res, err = TruncateTail(m, 55, tr.fetch)
	if err != nil || res.Straddle == nil || *res.Straddle != m.Entries[2] || res.StraddleEnd != 60 ||
		res.Manifest.NextOffset != 50 || len(res.Manifest.Entries) != 2 || res.Manifest.TotalSize != 30 {
		t.Fatalf("truncate at 55: %+v, %v", res, err)
	}
	objs, err := res.Objects(tr.fetch)
	if err != nil || fmtObjects(objs) != "fragment@50/uid=5" {
		t.Errorf("objects %s, %v", fmtObjects(objs), err)
	}
	// at next offset nothing changes; at first offset everything goes
	if res, err := TruncateTail(m, 60, tr.fetch); err != nil || !res.Manifest.Equal(m) || len(res.Dropped) != 0 {
		t.Errorf("truncate at next: %+v, %v", res, err)
	}
	res, err = TruncateTail(m, 0, tr.fetch)
	if err != nil || !res.Manifest.Equal(EmptyAt(0)) {
		t.Fatalf("truncate at first: %+v, %v", res, err)
	}
	// the group starts at the cut: it is dropped whole (not expanded), Objects expands it
	objs, err = res.Objects(tr.fetch)
	if err != nil || fmtObjects(objs) != "fragment@0/uid=1 fragment@20/uid=2 fragment@30/uid=3 group@0/uid=4 fragment@50/uid=5" {
		t.Errorf("objects at first: %s, %v", fmtObjects(objs), err)
	}
	if got := fmtObjects(res.Dropped); got != "group@0/uid=4 fragment@50/uid=5" {
		t.Errorf("dropped at first: %s", got)
	}
}

// TestTruncateTailOpensGroupEndingInGap: a cut at the end of a group whose last leaf is a
// gap (the gap was sealed once a fragment followed it, the fragment now cut away) opens the
// group, so that the gap is the root's trailing entry and a gap declared next extends it:
// two gaps never stand side by side, not even across a group boundary. A group ending with
// a fragment stays whole, and so does the group above when only a lower level ends in a gap.
func TestTruncateTailOpensGroupEndingInGap(t *testing.T) {
	tr := newTier(Empty(), 2)
	steps := []func() error{
		func() error { _, err := tr.appendFragment(0, 10, 10, 100, 109); return err },
		func() error { _, err := tr.declareGap(20); return err },
		func() error { _, err := tr.appendFragment(20, 30, 10, 120, 129); return err },
		func() error { _, _, _, err := tr.rebalanceOnce(); return err }, // G{f0, gap10}, f20
	}
	for i, f := range steps {
		if err := f(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if n := len(tr.m.Entries); n != 2 || tr.m.Entries[0].Kind != KindGroup {
		t.Fatalf("unexpected tree\n%s", tr.fmtTree())
	}
	group := tr.m.Entries[0]
	res, err := TruncateTail(tr.m, 20, tr.fetch)
	if err != nil {
		t.Fatal(err)
	}
	want := Manifest{FirstOffset: 0, NextOffset: 20, FirstTimestamp: 100, FirstLastTimestamp: 109, TotalSize: 10,
		Entries: []Entry{frag(0, 100, 109, 10, 1), GapEntry(10)}}
	if !res.Manifest.Equal(want) || res.Straddle != nil {
		t.Fatalf("truncate at 20:\n%s", fmtRoot(res.Manifest))
	}
	if got := fmtObjects(res.Dropped); got != fmt.Sprintf("fragment@20/uid=2 group@0/uid=%d", group.UID) {
		t.Errorf("dropped %s", got)
	}
	ed, err := GapEdit(res.Manifest, 25)
	if err != nil {
		t.Fatal(err)
	}
	after, err := res.Manifest.Apply(ed)
	if err != nil || len(after.Entries) != 2 || !after.Entries[1].IsGap() || after.NextOffset != 25 {
		t.Fatalf("gap after the cut: %v\n%s", err, fmtRoot(after))
	}
	// a cut inside the straddling fragment f20 ends at 20 too: the same opening
	res, err = TruncateTail(tr.m, 25, tr.fetch)
	if err != nil || res.Straddle == nil || len(res.Manifest.Entries) != 2 || !res.Manifest.Entries[1].IsGap() {
		t.Fatalf("truncate at 25: %v\n%s", err, fmtRoot(res.Manifest))
	}
	// a group ending with a fragment is kept whole at a cut at its end
	tr2 := newTier(Empty(), 2)
	for i, f := range []func() error{
		func() error { _, err := tr2.appendFragment(0, 10, 10, 100, 109); return err },
		func() error { _, err := tr2.appendFragment(10, 20, 10, 110, 119); return err },
		func() error { _, err := tr2.appendFragment(20, 30, 10, 120, 129); return err },
		func() error { _, _, _, err := tr2.rebalanceOnce(); return err },
	} {
		if err := f(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	res, err = TruncateTail(tr2.m, 20, tr2.fetch)
	if err != nil || len(res.Manifest.Entries) != 1 || res.Manifest.Entries[0].Kind != KindGroup || fmtObjects(res.Dropped) != "fragment@20/uid=3" {
		t.Fatalf("truncate at 20 of a group ending with a fragment: %v, dropped %s\n%s", err, fmtObjects(res.Dropped), fmtRoot(res.Manifest))
	}
}
