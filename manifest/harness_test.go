package manifest

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// tier is the test's stand-in for a stream's remote tier: the writer's in-memory manifest,
// the last persisted one with the edits captured since, and a map of objects standing in
// for S3 (group objects stored encoded, so that every fetch goes through DecodeGroup).
type tier struct {
	m         Manifest
	persisted Manifest
	edits     []Edit
	threshold int
	uid       uint64

	groups  map[uint64][]byte // encoded group objects by uid
	objects map[uint64]Entry  // every object in the store (fragments and groups) by uid
	deleted map[uint64]Entry  // objects deleted so far
	fetches int               // group downloads, to show in scenarios
}

func newTier(m Manifest, threshold int) *tier {
	return &tier{
		m:         m,
		persisted: m,
		threshold: threshold,
		groups:    map[uint64][]byte{},
		objects:   map[uint64]Entry{},
		deleted:   map[uint64]Entry{},
	}
}

func (t *tier) nextUID() uint64 {
	t.uid++
	return t.uid
}

// fetch downloads and decodes a group object, as the read path would.
func (t *tier) fetch(e Entry) ([]Entry, error) {
	t.fetches++
	b, ok := t.groups[e.UID]
	if !ok {
		return nil, fmt.Errorf("no object for %s uid %d", e.Kind, e.UID)
	}
	kind, children, err := DecodeGroup(b)
	if err != nil {
		return nil, err
	}
	if kind != e.Kind {
		return nil, fmt.Errorf("object uid %d is a %s, entry says %s", e.UID, kind, e.Kind)
	}
	return children, nil
}

// apply applies an edit to the in-memory manifest and captures it for the next persist.
func (t *tier) apply(ed Edit) error {
	nm, err := t.m.Apply(ed)
	if err != nil {
		return err
	}
	if nm.NextOffset < t.m.NextOffset {
		return fmt.Errorf("next offset went down from %d to %d", t.m.NextOffset, nm.NextOffset)
	}
	t.m = nm
	t.edits = append(t.edits, ed)
	return nil
}

// appendFragment uploads (records) a fragment and applies its append edit.
func (t *tier) appendFragment(first, next, size uint64, ts1, ts2 int64) (Edit, error) {
	e := Entry{FirstOffset: first, FirstTimestamp: ts1, LastTimestamp: ts2, Size: size, UID: t.uid + 1, Kind: KindFragment}
	ed, err := AppendEdit(t.m, e, next)
	if err != nil {
		return Edit{}, err
	}
	t.nextUID()
	if err := t.apply(ed); err != nil {
		return Edit{}, err
	}
	t.objects[e.UID] = e
	return ed, nil
}

// declareGap applies the gap edit declaring [next offset, to) lost.
func (t *tier) declareGap(to uint64) (Edit, error) {
	ed, err := GapEdit(t.m, to)
	if err != nil {
		return Edit{}, err
	}
	if err := t.apply(ed); err != nil {
		return Edit{}, err
	}
	return ed, nil
}

// truncate cuts the tier back to at with TruncateTail, deletes what it drops (expanded
// with TruncateResult.Objects, refusing to delete anything twice), and makes the result the
// new base of the edit fold: a truncation is not an edit; the writer persists the new root
// (with the prefix fragment's append) and syncs replicas with it.
func (t *tier) truncate(at uint64) (TruncateResult, []Entry, error) {
	res, err := TruncateTail(t.m, at, t.fetch)
	if err != nil {
		return res, nil, err
	}
	objs, err := res.Objects(t.fetch)
	if err != nil {
		return res, nil, err
	}
	if err := t.remove(objs); err != nil {
		return res, objs, err
	}
	t.m, t.persisted, t.edits = res.Manifest, res.Manifest, nil
	return res, objs, nil
}

// rebalanceOnce uploads the next due group object and applies the replace edit.
func (t *tier) rebalanceOnce() (Rebalance, Edit, bool, error) {
	r, ok := FindRebalance(t.m, t.threshold)
	if !ok {
		return Rebalance{}, Edit{}, false, nil
	}
	if err := r.Matches(t.m); err != nil {
		return r, Edit{}, true, err
	}
	uid := t.nextUID()
	obj := r.Object()
	kind, back, err := DecodeGroup(obj)
	if err != nil || kind != r.Kind || !entriesEqual(back, r.Children) {
		return r, Edit{}, true, fmt.Errorf("group object does not round-trip: %v", err)
	}
	g := r.Group(uid)
	if err := CheckGroup(g, r.Children); err != nil {
		return r, Edit{}, true, err
	}
	t.groups[uid] = obj
	t.objects[uid] = g
	ed := r.Edit(t.m, uid)
	if err := t.apply(ed); err != nil {
		return r, ed, true, err
	}
	return r, ed, true, nil
}

// retain evaluates retention step by step (Fetch, Resume), applies the edit, then "after
// the persist" deletes the objects it names, refusing to delete anything twice.
func (t *tier) retain(p Policy, now int64, onFetch func(Entry)) (Retention, []Entry, error) {
	r := EvaluateRetention(t.m, p, now)
	if r.Err != nil {
		return r, nil, r.Err
	}
	for r.Fetch != nil {
		if onFetch != nil {
			onFetch(*r.Fetch)
		}
		children, err := t.fetch(*r.Fetch)
		if err != nil {
			return r, nil, err
		}
		if r, err = r.Resume(children); err != nil {
			return r, nil, err
		}
	}
	if !r.Changed {
		return r, nil, nil
	}
	if err := t.apply(r.Edit); err != nil {
		return r, nil, err
	}
	objs, err := t.deleteObjects(r)
	return r, objs, err
}

// deleteObjects expands and deletes what a retention decision names.
func (t *tier) deleteObjects(r Retention) ([]Entry, error) {
	var objs []Entry
	for _, d := range r.Delete {
		list, err := CollectForDelete(d, r.DeleteFrom, t.fetch)
		if err != nil {
			return nil, err
		}
		objs = append(objs, list...)
	}
	return objs, t.remove(objs)
}

// remove deletes objects from the store, refusing gaps, unknown objects and objects
// deleted twice.
func (t *tier) remove(objs []Entry) error {
	for _, o := range objs {
		if o.IsGap() {
			return fmt.Errorf("gap at %d handed to the reaper", o.FirstOffset)
		}
		if _, gone := t.deleted[o.UID]; gone {
			return fmt.Errorf("%s uid %d at %d deleted twice", o.Kind, o.UID, o.FirstOffset)
		}
		if _, ok := t.objects[o.UID]; !ok {
			return fmt.Errorf("%s uid %d at %d is not in the store", o.Kind, o.UID, o.FirstOffset)
		}
		delete(t.objects, o.UID)
		t.deleted[o.UID] = o
	}
	for _, o := range objs {
		delete(t.groups, o.UID)
	}
	return nil
}

// persist checks that folding the captured edits over the last persisted manifest gives
// the in-memory one, and that the root round-trips through its codec.
func (t *tier) persist() error {
	folded, err := t.persisted.ApplyAll(t.edits)
	if err != nil {
		return fmt.Errorf("fold of %d edits: %w", len(t.edits), err)
	}
	if !folded.Equal(t.m) {
		return fmt.Errorf("fold of %d edits gives\n%s\nwant\n%s", len(t.edits), fmtRoot(folded), fmtRoot(t.m))
	}
	back, err := DecodeRoot(EncodeRoot(t.m))
	if err != nil {
		return fmt.Errorf("decode of encoded root: %w", err)
	}
	if !back.Equal(t.m) {
		return fmt.Errorf("root does not round-trip")
	}
	t.persisted = t.m
	t.edits = nil
	return nil
}

// checkStore verifies invariant 9 as the store sees it: the objects not deleted are exactly
// those the tree references that still hold a live offset.
func (t *tier) checkStore() error {
	want := map[uint64]Entry{}
	var walk func(entries []Entry, end uint64) error
	walk = func(entries []Entry, end uint64) error {
		for i, e := range entries {
			eEnd := endOf(entries, i, end)
			if eEnd <= t.m.FirstOffset || e.IsGap() {
				continue
			}
			if e.UID == 0 {
				return fmt.Errorf("%s at %d has uid 0", e.Kind, e.FirstOffset)
			}
			want[e.UID] = e
			if e.Kind != KindFragment {
				children, err := t.fetch(e)
				if err != nil {
					return err
				}
				if err := walk(children, eEnd); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(t.m.Entries, t.m.NextOffset); err != nil {
		return err
	}
	for uid, e := range want {
		if _, ok := t.objects[uid]; !ok {
			return fmt.Errorf("live %s uid %d at %d is missing from the store", e.Kind, uid, e.FirstOffset)
		}
	}
	for uid, e := range t.objects {
		if _, ok := want[uid]; !ok {
			return fmt.Errorf("%s uid %d at %d is in the store but holds nothing live", e.Kind, uid, e.FirstOffset)
		}
	}
	return nil
}

func entriesEqual(a, b []Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// --- printing, for scenario files ---

func fmtTS(ts int64) string { return fmt.Sprint(ts) }

func fmtEntry(e Entry, end uint64) string {
	if e.IsGap() {
		return fmt.Sprintf("gap [%d,%d)", e.FirstOffset, end)
	}
	return fmt.Sprintf("%s [%d,%d) ts=%s..%s size=%d uid=%d", e.Kind, e.FirstOffset, end, fmtTS(e.FirstTimestamp), fmtTS(e.LastTimestamp), e.Size, e.UID)
}

func fmtHeader(m Manifest) string {
	return fmt.Sprintf("first=%d next=%d ts=%d first-last=%d size=%d", m.FirstOffset, m.NextOffset, m.FirstTimestamp, m.FirstLastTimestamp, m.TotalSize)
}

func fmtRoot(m Manifest) string {
	var b strings.Builder
	b.WriteString("root " + fmtHeader(m) + "\n")
	for i, e := range m.Entries {
		fmt.Fprintf(&b, "  %s\n", fmtEntry(e, m.EntryEnd(i)))
	}
	return b.String()
}

// fmtTree prints the root and every group below it, marking entries wholly below the
// first offset.
func (t *tier) fmtTree() string {
	var b strings.Builder
	m := t.m
	b.WriteString("root " + fmtHeader(m) + "\n")
	var walk func(entries []Entry, end uint64, indent string)
	walk = func(entries []Entry, end uint64, indent string) {
		for i, e := range entries {
			eEnd := endOf(entries, i, end)
			mark := ""
			if eEnd <= m.FirstOffset {
				mark = " (below first)"
			}
			fmt.Fprintf(&b, "%s%s%s\n", indent, fmtEntry(e, eEnd), mark)
			if !e.IsLeaf() && mark == "" {
				children, err := t.fetch(e)
				if err != nil {
					fmt.Fprintf(&b, "%s  error: %v\n", indent, err)
					continue
				}
				walk(children, eEnd, indent+"  ")
			}
		}
	}
	walk(m.Entries, m.NextOffset, "  ")
	return b.String()
}

func fmtEdit(ed Edit) string {
	var ins []string
	for _, e := range ed.Insert {
		if e.IsGap() {
			ins = append(ins, fmt.Sprintf("gap@%d", e.FirstOffset))
			continue
		}
		ins = append(ins, fmt.Sprintf("%s@%d uid=%d size=%d", e.Kind, e.FirstOffset, e.UID, e.Size))
	}
	next := "-"
	if ed.SetNextOffset {
		next = fmt.Sprint(ed.NextOffset)
	}
	return fmt.Sprintf("edit at=%d remove=%d insert=[%s] first=%d ts=%d first-last=%d next=%s size%+d",
		ed.At, ed.Remove, strings.Join(ins, " "), ed.FirstOffset, ed.FirstTimestamp, ed.FirstLastTimestamp, next, ed.SizeDelta)
}

// fmtRef prints a lookup or iteration result; a gap says it is one.
func fmtRef(ref FragmentRef) string {
	if ref.Gap {
		return fmtEntry(ref.Entry, ref.End) + " (declared lost)"
	}
	return fmtEntry(ref.Entry, ref.End)
}

func fmtObjects(objs []Entry) string {
	sorted := append([]Entry(nil), objs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].UID < sorted[j].UID })
	var parts []string
	for _, o := range sorted {
		parts = append(parts, fmt.Sprintf("%s@%d/uid=%d", o.Kind, o.FirstOffset, o.UID))
	}
	return strings.Join(parts, " ")
}

func errString(err error) string {
	var ce *CorruptError
	kind := ""
	switch {
	case errors.As(err, &ce):
		kind = " [corrupt]"
	case errors.Is(err, ErrBadEdit):
		kind = " [bad edit]"
	case errors.Is(err, ErrBelowFirst):
		kind = " [below first]"
	case errors.Is(err, ErrAboveNext):
		kind = " [above next]"
	}
	return "error" + kind + ": " + err.Error()
}
