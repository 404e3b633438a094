package manifest

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func frag(first uint64, ts1, ts2 int64, size, uid uint64) Entry {
	return Entry{FirstOffset: first, FirstTimestamp: ts1, LastTimestamp: ts2, Size: size, UID: uid}
}

func TestEmptyAndNeverUploaded(t *testing.T) {
	if !Empty().NeverUploaded() || EmptyAt(5).NeverUploaded() {
		t.Fatalf("NeverUploaded: Empty %v, EmptyAt(5) %v", Empty().NeverUploaded(), EmptyAt(5).NeverUploaded())
	}
	for _, m := range []Manifest{Empty(), EmptyAt(5)} {
		if err := m.Check(); err != nil {
			t.Errorf("%+v: %v", m, err)
		}
	}
	// "all retained away" keeps next offset and is not "never uploaded"
	m := EmptyAt(0)
	ed, _ := AppendEdit(m, frag(0, 1, 2, 3, 1), 10)
	m, _ = m.Apply(ed)
	m, err := m.Apply(Edit{At: 0, Remove: 1, FirstOffset: 10, FirstTimestamp: -1, FirstLastTimestamp: -1, SizeDelta: -3})
	if err != nil || m.NeverUploaded() || m.NextOffset != 10 || len(m.Entries) != 0 {
		t.Fatalf("retained away: %+v, %v", m, err)
	}
}

func TestCloneSharesNothing(t *testing.T) {
	m := sampleRoot()
	c := m.Clone()
	c.Entries[0].UID = 1
	if m.Entries[0].UID == 1 || !m.Equal(sampleRoot()) {
		t.Fatalf("clone shares entries")
	}
	if !Empty().Equal(Manifest{FirstTimestamp: -1, FirstLastTimestamp: -1, Entries: []Entry{}}) {
		t.Fatalf("nil and empty entries differ")
	}
}

func TestCheckRejects(t *testing.T) {
	base := func() Manifest {
		return Manifest{FirstOffset: 0, NextOffset: 20, FirstTimestamp: 1, FirstLastTimestamp: 2, TotalSize: 30,
			Entries: []Entry{frag(0, 1, 2, 10, 1), frag(10, 3, 4, 20, 2)}}
	}
	cases := []struct {
		name string
		f    func(m *Manifest)
		says string
	}{
		{"unknown kind", func(m *Manifest) { m.Entries[1].Kind = 9 }, "unknown kind"},
		{"entry at next", func(m *Manifest) { m.NextOffset = 10 }, "not below next offset"},
		{"unsorted", func(m *Manifest) { m.Entries[1].FirstOffset = 0 }, "not after entry 0"},
		{"first below head", func(m *Manifest) { m.Entries[0].FirstOffset = 1; m.Entries[0].Kind = KindGroup }, "below the first entry"},
		{"first inside fragment", func(m *Manifest) { m.FirstOffset = 5 }, "inside fragment entry 0"},
		{"first past head", func(m *Manifest) { m.FirstOffset = 10 }, "past the first entry"},
		{"first past single head", func(m *Manifest) { m.Entries = m.Entries[:1]; m.NextOffset = 10; m.FirstOffset = 10; m.TotalSize = 10 }, "past the first entry"},
		{"header ts", func(m *Manifest) { m.FirstTimestamp = 0 }, "first timestamp"},
		{"header first-last ts", func(m *Manifest) { m.FirstLastTimestamp = 0 }, "first-last timestamp"},
		{"size", func(m *Manifest) { m.TotalSize = 29 }, "total size 29 differs"},
		{"empty with ts", func(m *Manifest) { *m = EmptyAt(3); m.FirstTimestamp = 0 }, "timestamps"},
		{"empty first", func(m *Manifest) { *m = EmptyAt(3); m.FirstOffset = 2 }, "differs from next offset"},
		{"first above next", func(m *Manifest) { *m = EmptyAt(3); m.FirstOffset = 4 }, "above next offset"},
		{"partly consumed group size", func(m *Manifest) {
			m.Entries[0].Kind = KindGroup
			m.FirstOffset = 5
			m.TotalSize = 31
		}, "outside [20, 30]"},
		{"sizes overflow", func(m *Manifest) { m.Entries[1].Size = math.MaxUint64 }, "overflow"},
	}
	if err := base().Check(); err != nil {
		t.Fatalf("base: %v", err)
	}
	for _, c := range cases {
		m := base()
		c.f(&m)
		if err := m.Check(); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.says)
		}
	}
}

func TestApplyRejects(t *testing.T) {
	m := EmptyAt(0)
	ed, err := AppendEdit(m, frag(0, 1, 2, 10, 1), 10)
	if err != nil {
		t.Fatal(err)
	}
	m, _ = m.Apply(ed)
	cases := []struct {
		name string
		e    Edit
		says string
	}{
		{"splice past end", Edit{At: 1, Remove: 1}, "splice"},
		{"negative", Edit{At: -1}, "splice"},
		{"huge remove", Edit{At: 1, Remove: math.MaxInt}, "splice"},
		{"negative size", Edit{At: 1, FirstOffset: 0, FirstTimestamp: 1, FirstLastTimestamp: 2, SizeDelta: -11}, "negative"},
		{"min size delta", Edit{At: 1, SizeDelta: math.MinInt64}, "negative"},
		{"next down", Edit{At: 1, Insert: []Entry{frag(10, 3, 4, 1, 2)}, SetNextOffset: true, NextOffset: 5}, "only grows"},
		{"replayed append", Edit{At: 1, Insert: []Entry{frag(0, 1, 2, 10, 1)}, SetNextOffset: true, NextOffset: 20, FirstTimestamp: 1, FirstLastTimestamp: 2, SizeDelta: 10}, "append at 0"},
		{"next moved without append", Edit{At: 0, Remove: 1, SetNextOffset: true, NextOffset: 20, FirstOffset: 20, FirstTimestamp: -1, FirstLastTimestamp: -1, SizeDelta: -10}, "must append at the tail"},
		{"result invalid", Edit{At: 0, Remove: 1, FirstOffset: 5, FirstTimestamp: -1, FirstLastTimestamp: -1, SizeDelta: -10}, "differs from next offset"},
	}
	for _, c := range cases {
		got, err := m.Apply(c.e)
		if !errors.Is(err, ErrBadEdit) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: got %v, want ErrBadEdit saying %q", c.name, err, c.says)
		}
		if !got.Equal(m) {
			t.Errorf("%s: refused edit changed the manifest", c.name)
		}
	}
	if _, err := AppendEdit(m, Entry{FirstOffset: 10, Kind: KindGroup}, 20); !errors.Is(err, ErrBadEdit) {
		t.Errorf("append of a group entry: %v", err)
	}
	if _, err := m.ApplyAll([]Edit{{At: 1, FirstTimestamp: 1, FirstLastTimestamp: 2}, {At: 5}}); err == nil || !strings.Contains(err.Error(), "edit 2 of 2") {
		t.Errorf("ApplyAll names the failing edit: %v", err)
	}
}

func TestFindRebalanceEdges(t *testing.T) {
	m := EmptyAt(0)
	for i := uint64(0); i < 4; i++ {
		ed, _ := AppendEdit(m, frag(10*i, int64(i), int64(i), 1, i+1), 10*i+10)
		m, _ = m.Apply(ed)
	}
	for _, th := range []int{-1, 0, 1, 5} {
		if _, ok := FindRebalance(m, th); ok {
			t.Errorf("threshold %d folded", th)
		}
	}
	r, ok := FindRebalance(m, 4)
	if !ok || r.At != 0 || r.Kind != KindGroup || len(r.Children) != 4 {
		t.Fatalf("threshold 4: %+v %v", r, ok)
	}
	g := r.Group(99)
	if g != (Entry{FirstOffset: 0, FirstTimestamp: 0, LastTimestamp: 3, Size: 4, UID: 99, Kind: KindGroup}) {
		t.Fatalf("group entry %+v", g)
	}
	if err := r.Matches(m); err != nil {
		t.Fatal(err)
	}
	after, err := m.Apply(r.Edit(m, 99))
	if err != nil || len(after.Entries) != 1 || after.TotalSize != m.TotalSize || after.NextOffset != m.NextOffset {
		t.Fatalf("replace edit: %+v %v", after, err)
	}
	if err := r.Matches(after); err == nil {
		t.Fatalf("a folded run still matches")
	}
	// mega-group runs never fold
	mg := Manifest{NextOffset: 40, FirstTimestamp: 0, FirstLastTimestamp: 0}
	for i := uint64(0); i < 4; i++ {
		mg.Entries = append(mg.Entries, Entry{FirstOffset: 10 * i, Size: 1, Kind: KindMegaGroup})
	}
	mg.TotalSize = 4
	if _, ok := FindRebalance(mg, 2); ok {
		t.Fatalf("mega-groups folded")
	}
}

func TestCheckGroupRejects(t *testing.T) {
	g := Entry{FirstOffset: 0, FirstTimestamp: 1, LastTimestamp: 4, Size: 3, UID: 5, Kind: KindGroup}
	good := []Entry{frag(0, 1, 2, 1, 1), frag(5, 3, 4, 2, 2)}
	if err := CheckGroup(g, good); err != nil {
		t.Fatal(err)
	}
	mut := func(f func(c []Entry) []Entry) []Entry { return f(append([]Entry(nil), good...)) }
	cases := map[string][]Entry{
		"none":       nil,
		"kind":       mut(func(c []Entry) []Entry { c[1].Kind = KindGroup; return c }),
		"unsorted":   mut(func(c []Entry) []Entry { c[1].FirstOffset = 0; return c }),
		"first":      mut(func(c []Entry) []Entry { c[0].FirstOffset = 1; return c }),
		"first ts":   mut(func(c []Entry) []Entry { c[0].FirstTimestamp = 0; return c }),
		"last ts":    mut(func(c []Entry) []Entry { c[1].LastTimestamp = 9; return c }),
		"size":       mut(func(c []Entry) []Entry { c[1].Size = 5; return c }),
		"size wraps": mut(func(c []Entry) []Entry { c[1].Size = math.MaxUint64; return c }),
	}
	for name, c := range cases {
		if err := CheckGroup(g, c); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := CheckGroup(good[0], good); !errors.Is(err, ErrCorrupt) {
		t.Errorf("fragment as group: %v", err)
	}
}
