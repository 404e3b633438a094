package manifest

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// twoGroups is a tier with groups [0,40) and [40,80) of four 10-offset fragments of 100
// bytes (timestamps 1000+10i .. 1009+10i), and a fragment [80,90).
func twoGroups(t *testing.T) *tier {
	t.Helper()
	tr := newTier(Empty(), 4)
	for i := uint64(0); i < 9; i++ {
		if _, err := tr.appendFragment(10*i, 10*i+10, 100, int64(1000+10*i), int64(1009+10*i)); err != nil {
			t.Fatal(err)
		}
	}
	for {
		_, _, ok, err := tr.rebalanceOnce()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return tr
		}
	}
}

func TestRetentionPolicyEdges(t *testing.T) {
	tr := twoGroups(t)
	if !(Policy{}).IsZero() || !(Policy{MaxAgeMillis: -5}).IsZero() || (Policy{MaxBytes: 1}).IsZero() {
		t.Fatalf("IsZero")
	}
	// negative age is no limit; a cutoff below MinInt64 saturates instead of wrapping
	for _, c := range []struct {
		p   Policy
		now int64
	}{{Policy{MaxAgeMillis: -5}, 1 << 40}, {Policy{MaxAgeMillis: math.MaxInt64}, math.MinInt64 + 3}} {
		r := EvaluateRetention(tr.m, c.p, c.now)
		if r.Changed || r.Fetch != nil || r.Err != nil {
			t.Errorf("%+v at %d: %+v", c.p, c.now, r)
		}
	}
	// an invalid manifest decides nothing and says why
	bad := tr.m.Clone()
	bad.TotalSize++
	if r := EvaluateRetention(bad, Policy{MaxBytes: 1}, 0); r.Err == nil || r.Changed || r.Fetch != nil {
		t.Errorf("invalid manifest: %+v", r)
	}
	if _, err := EvaluateRetentionWith(bad, Policy{MaxBytes: 1}, 0, tr.fetch); err == nil {
		t.Errorf("EvaluateRetentionWith on an invalid manifest")
	}
	if _, err := EvaluateRetentionWith(tr.m, Policy{MaxAgeMillis: 1}, 1<<40, nil); err == nil || !strings.Contains(err.Error(), "no group fetcher") {
		t.Errorf("no fetcher: %v", err)
	}
}

func TestRetentionRejectsWrongGroupObject(t *testing.T) {
	tr := twoGroups(t)
	p, now := Policy{MaxAgeMillis: 1000}, int64(2025)
	r := EvaluateRetention(tr.m, p, now)
	if r.Fetch == nil {
		t.Fatalf("no fetch")
	}
	// the second group's entries handed in for the first group
	other, _ := tr.fetch(tr.m.Entries[1])
	if _, err := r.Resume(other); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("wrong children: %v", err)
	}
	if _, err := EvaluateRetentionInGroup(tr.m, tr.m.Entries[1], other, p, now); err == nil {
		t.Fatalf("a group other than the one asked for was accepted")
	}
	fetchErr := errors.New("503 slow down")
	_, err := EvaluateRetentionWith(tr.m, p, now, func(Entry) ([]Entry, error) { return nil, fetchErr })
	if !errors.Is(err, fetchErr) {
		t.Fatalf("fetch error lost: %v", err)
	}
	// children below the first offset that do not add up are refused, not trusted
	tr2 := twoGroups(t)
	if _, _, err := tr2.retain(p, now, nil); err != nil {
		t.Fatal(err)
	}
	bad := tr2.m.Clone()
	bad.TotalSize = 499 // below the 500 of the entries after the head: Check refuses
	if r := EvaluateRetention(bad, Policy{MaxBytes: 1}, 0); r.Err == nil {
		t.Fatalf("inconsistent size accepted")
	}
}

func TestRetentionInGroupWithoutFetchNeeded(t *testing.T) {
	tr := twoGroups(t)
	// max-bytes 50 consumes both groups from sizes alone, then the last fragment: the
	// children passed are not needed and ignored
	g := tr.m.Entries[0]
	children, _ := tr.fetch(g)
	r, err := EvaluateRetentionInGroup(tr.m, g, children, Policy{MaxBytes: 50}, 0)
	if err != nil || !r.Changed || r.Edit.Remove != 3 || r.Edit.FirstOffset != 90 || r.Edit.SizeDelta != -900 || r.Fetch != nil {
		t.Fatalf("%+v, %v", r, err)
	}
	// at 100 the second group cannot go by size alone (100 bytes after it are not above
	// 100): it is the group to open, not the head one
	if _, err := EvaluateRetentionInGroup(tr.m, g, children, Policy{MaxBytes: 100}, 0); err == nil || !strings.Contains(err.Error(), "not the group to open first") {
		t.Fatalf("head group accepted when the second is the one to open: %v", err)
	}
}

func TestRebase(t *testing.T) {
	tr := newTier(Empty(), 4)
	for i := uint64(0); i < 2; i++ {
		if _, err := tr.appendFragment(10*i, 10*i+10, 100, int64(i), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	persisted := tr.m
	// retention empties the persisted manifest ...
	r := EvaluateRetention(persisted, Policy{MaxBytes: 1}, 0)
	if !r.Changed || r.Edit.FirstOffset != 20 {
		t.Fatalf("%+v", r)
	}
	if _, err := (Retention{}).Rebase(persisted); !errors.Is(err, ErrStaleRetention) {
		t.Fatalf("rebase of no decision: %v", err)
	}
	// ... while the in-memory one has grown: the raw edit does not fit it, the rebased one does
	if _, err := tr.appendFragment(20, 30, 7, 5, 6); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.m.Apply(r.Edit); !errors.Is(err, ErrBadEdit) {
		t.Fatalf("raw edit applied to a grown manifest: %v", err)
	}
	ed, err := r.Rebase(tr.m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tr.m.Apply(ed)
	if err != nil || got.FirstOffset != 20 || got.FirstTimestamp != 5 || got.FirstLastTimestamp != 6 || got.TotalSize != 7 || len(got.Entries) != 1 {
		t.Fatalf("rebased: %+v, %v", got, err)
	}
	// on the evaluated manifest itself it is the edit unchanged
	if same, err := r.Rebase(persisted); err != nil || same.FirstOffset != r.Edit.FirstOffset {
		t.Fatalf("rebase onto the evaluated manifest: %+v, %v", same, err)
	}
	// a head that changed is stale
	if _, err := r.Rebase(got); !errors.Is(err, ErrStaleRetention) {
		t.Fatalf("stale head: %v", err)
	}
	// the entry after the removed prefix folded into a group: its first fragment is unknown
	folded := tr.m.Clone()
	folded.Entries[2] = Entry{FirstOffset: 20, FirstTimestamp: 5, LastTimestamp: 6, Size: 7, UID: 99, Kind: KindGroup}
	if _, err := r.Rebase(folded); !errors.Is(err, ErrStaleRetention) {
		t.Fatalf("group after prefix: %v", err)
	}
	// a decision that stops inside the evaluated manifest needs that entry unchanged
	r2 := EvaluateRetention(persisted, Policy{MaxBytes: 150}, 0)
	if !r2.Changed || r2.Edit.Remove != 1 {
		t.Fatalf("%+v", r2)
	}
	if ed, err := r2.Rebase(tr.m); err != nil || ed.FirstOffset != 10 {
		t.Fatalf("%+v, %v", ed, err)
	}
	changed := tr.m.Clone()
	changed.Entries[1].UID = 1234
	if _, err := r2.Rebase(changed); !errors.Is(err, ErrStaleRetention) {
		t.Fatalf("changed landing entry: %v", err)
	}
}

func TestExpandForDelete(t *testing.T) {
	g := Entry{FirstOffset: 0, Kind: KindGroup}
	children := []Entry{{FirstOffset: 0, UID: 1}, {FirstOffset: 10, UID: 2}, {FirstOffset: 20, UID: 3}}
	uids := func(es []Entry) (out []uint64) {
		for _, e := range es {
			out = append(out, e.UID)
		}
		return out
	}
	for from, want := range map[uint64][]uint64{0: {1, 2, 3}, 9: {1, 2, 3}, 10: {2, 3}, 15: {2, 3}, 20: {3}, 25: {3}} {
		if got := uids(ExpandForDelete(g, children, from)); len(got) != len(want) || got[0] != want[0] {
			t.Errorf("from %d: %v, want %v", from, got, want)
		}
	}
	if _, err := CollectForDelete(Entry{Kind: KindGroup}, 0, nil); err == nil {
		t.Errorf("CollectForDelete without a fetcher")
	}
	if got, err := CollectForDelete(Entry{UID: 5}, 0, nil); err != nil || len(got) != 1 {
		t.Errorf("a fragment collects itself: %v %v", got, err)
	}
}

func TestLookupErrors(t *testing.T) {
	tr := twoGroups(t)
	fetchErr := errors.New("connection reset")
	failing := func(Entry) ([]Entry, error) { return nil, fetchErr }
	if _, err := LookupOffset(tr.m, 5, failing); !errors.Is(err, fetchErr) {
		t.Errorf("offset lookup lost the fetch error: %v", err)
	}
	if _, err := LookupTimestamp(tr.m, 0, failing); !errors.Is(err, fetchErr) {
		t.Errorf("timestamp lookup lost the fetch error: %v", err)
	}
	if _, err := LookupOffset(tr.m, 5, nil); err == nil {
		t.Errorf("no fetcher accepted")
	}
	// a fetcher serving the wrong object is caught by the entry it must match
	wrong := func(Entry) ([]Entry, error) { return tr.fetch(tr.m.Entries[1]) }
	if _, err := LookupOffset(tr.m, 5, wrong); !errors.Is(err, ErrCorrupt) {
		t.Errorf("wrong object: %v", err)
	}
	// fragment 85 is in the root: no fetch needed
	if ref, err := LookupOffset(tr.m, 85, failing); err != nil || ref.Entry.FirstOffset != 80 || ref.End != 90 {
		t.Errorf("root fragment: %+v %v", ref, err)
	}
	it := Iterate(tr.m, 0, failing)
	if _, ok, err := it.Next(); ok || !errors.Is(err, fetchErr) {
		t.Fatalf("iterator: %v %v", ok, err)
	}
	if _, _, err := it.Next(); !errors.Is(err, fetchErr) {
		t.Fatalf("iterator error is not sticky: %v", err)
	}
}

func TestSummaryPartlyConsumedGroup(t *testing.T) {
	tr := twoGroups(t)
	if s := tr.m.Summary(4); s.Fragments != 9 || s.TotalSize != 900 || s.OldestTimestamp != 1000 {
		t.Fatalf("%+v", s)
	}
	if _, _, err := tr.retain(Policy{MaxAgeMillis: 1000}, 2025, nil); err != nil {
		t.Fatal(err)
	}
	// two of the head group's four fragments are gone: 200 of 400 bytes live -> 2
	if s := tr.m.Summary(4); s.Fragments != 2+4+1 || s.FirstOffset != 20 || s.OldestTimestamp != 1020 {
		t.Fatalf("%+v", s)
	}
	if s := tr.m.Summary(0); s.Fragments != 512+1024+1 {
		t.Fatalf("default threshold: %+v", s)
	}
}
