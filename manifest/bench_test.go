package manifest

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// BenchmarkAppendEncode is the persist's CPU cost on a root that is one entry short of a
// rebalance: apply an append to a root of 1023 entries, then encode the 1024-entry root.
func BenchmarkAppendEncode(b *testing.B) {
	m := EmptyAt(0)
	for i := uint64(0); i < 1023; i++ {
		ed, err := AppendEdit(m, frag(i*100, int64(i), int64(i)+9, 64<<20, i+1), i*100+100)
		if err != nil {
			b.Fatal(err)
		}
		if m, err = m.Apply(ed); err != nil {
			b.Fatal(err)
		}
	}
	e := frag(m.NextOffset, 1e6, 1e6+9, 64<<20, 1e6)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		ed, err := AppendEdit(m, e, m.NextOffset+100)
		if err != nil {
			b.Fatal(err)
		}
		next, err := m.Apply(ed)
		if err != nil {
			b.Fatal(err)
		}
		if len(EncodeRoot(next)) != RootSize(1024) {
			b.Fatal("bad size")
		}
	}
}

// BenchmarkDecodeRoot decodes a 1024-entry root (what resolution and replicas pay).
func BenchmarkDecodeRoot(b *testing.B) {
	m := EmptyAt(0)
	for i := uint64(0); i < 1024; i++ {
		ed, _ := AppendEdit(m, frag(i*100, int64(i), int64(i)+9, 64<<20, i+1), i*100+100)
		m, _ = m.Apply(ed)
	}
	raw := EncodeRoot(m)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeRoot(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// benchTree is a tree built directly in maps: every group decoded (as a cache would hold
// them) and encoded (as S3 would).
type benchTree struct {
	m       Manifest
	decoded map[uint64][]Entry
	encoded map[uint64][]byte
	frags   uint64
}

// buildBenchTree makes a root whose head is one group of the given kind holding M^kind
// fragments of 100 offsets each, followed by a group and a few fragments.
func buildBenchTree(kind Kind, M int) *benchTree {
	t := &benchTree{decoded: map[uint64][]Entry{}, encoded: map[uint64][]byte{}}
	uid := uint64(0)
	var off uint64
	var build func(k Kind) Entry
	build = func(k Kind) Entry {
		uid++
		if k == KindFragment {
			e := frag(off, int64(off), int64(off)+99, 1<<20, uid)
			off += 100
			t.frags++
			return e
		}
		children := make([]Entry, M)
		for i := range children {
			children[i] = build(k - 1)
		}
		r := Rebalance{Kind: k, Children: children}
		uid++
		g := r.Group(uid)
		t.decoded[g.UID] = children
		t.encoded[g.UID] = EncodeGroup(k, children)
		return g
	}
	head := build(kind)
	second := build(KindGroup)
	tail := []Entry{build(KindFragment), build(KindFragment)}
	t.m = Manifest{FirstOffset: 0, NextOffset: off, FirstTimestamp: head.FirstTimestamp, Entries: append([]Entry{head, second}, tail...)}
	for _, e := range t.m.Entries {
		t.m.TotalSize += e.Size
	}
	first, _ := LookupOffset(t.m, 0, t.fetchDecoded)
	t.m.FirstLastTimestamp = first.Entry.LastTimestamp
	if err := t.m.Check(); err != nil {
		panic(err)
	}
	return t
}

func (t *benchTree) fetchDecoded(e Entry) ([]Entry, error) {
	c, ok := t.decoded[e.UID]
	if !ok {
		return nil, fmt.Errorf("no group %d", e.UID)
	}
	return c, nil
}

func (t *benchTree) fetchEncoded(e Entry) ([]Entry, error) {
	_, c, err := DecodeGroup(t.encoded[e.UID])
	return c, err
}

var (
	benchTreesOnce sync.Once
	benchTrees     map[string]*benchTree
)

// trees: a kilo-group of 1024 groups of 1024 fragments (2^20 fragments, ~100 MB of maps:
// root, kgroup, group, fragment) and a mega-group with M=64 (three group levels, the
// deepest lookup the format has).
func getBenchTrees() map[string]*benchTree {
	benchTreesOnce.Do(func() {
		benchTrees = map[string]*benchTree{
			"kgroup-M1024": buildBenchTree(KindKiloGroup, 1024),
			"mgroup-M64":   buildBenchTree(KindMegaGroup, 64),
		}
	})
	return benchTrees
}

func BenchmarkLookupOffset(b *testing.B) {
	for _, name := range []string{"kgroup-M1024", "mgroup-M64"} {
		tree := getBenchTrees()[name]
		for _, via := range []string{"cached", "decode"} {
			fetch := tree.fetchDecoded
			if via == "decode" {
				fetch = tree.fetchEncoded
			}
			b.Run(name+"/"+via, func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				b.ReportAllocs()
				for b.Loop() {
					off := rng.Uint64N(tree.m.NextOffset)
					ref, err := LookupOffset(tree.m, off, fetch)
					if err != nil || off < ref.Entry.FirstOffset || off >= ref.End {
						b.Fatalf("lookup %d: %+v %v", off, ref, err)
					}
				}
			})
		}
	}
}

func BenchmarkLookupTimestamp(b *testing.B) {
	for _, name := range []string{"kgroup-M1024", "mgroup-M64"} {
		tree := getBenchTrees()[name]
		b.Run(name+"/cached", func(b *testing.B) {
			rng := rand.New(rand.NewPCG(3, 4))
			b.ReportAllocs()
			for b.Loop() {
				ts := rng.Int64N(int64(tree.m.NextOffset))
				if _, err := LookupTimestamp(tree.m, ts, tree.fetchDecoded); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRetentionInGroup is a typical max-age run after a persist: the head is a
// 1024-fragment group, retention opens it and drops its oldest fragments.
func BenchmarkRetentionInGroup(b *testing.B) {
	tree := buildBenchTree(KindGroup, 1024)
	p := Policy{MaxAgeMillis: 1000}
	now := int64(50_000) // fragments ending before 49_000 go: 490 of the group's 1024
	b.ReportAllocs()
	for b.Loop() {
		r, err := EvaluateRetentionWith(tree.m, p, now, tree.fetchDecoded)
		if err != nil || !r.Changed || r.Edit.FirstOffset != 49_000 {
			b.Fatalf("%+v %v", r.Edit, err)
		}
	}
}
