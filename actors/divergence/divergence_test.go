package divergence

import (
	"fmt"
	"math/bits"
	"sort"
	"testing"

	"pgregory.net/rapid"

	"github.com/streamtier/streamtier/manifest"
)

// history is one timeline of chunks: ids and ends in offset order, with the epoch and CRC
// each chunk was written with.
type history []Chunk

func (h history) at(id uint64) (Chunk, bool) {
	i := sort.Search(len(h), func(i int) bool { return h[i].ID >= id })
	if i < len(h) && h[i].ID == id {
		return h[i], true
	}
	return Chunk{}, false
}

// world is a remote tier built from one timeline and a local log holding a range of another
// that shares the first one's chunks below diverge.
type world struct {
	remote   history
	local    history
	lf, ln   uint64
	m        manifest.Manifest
	children map[uint64][]manifest.Entry
	frags    map[uint64]history // fragment uid -> its chunks
	fetches  int
}

func (w *world) Children(g manifest.Entry) ([]manifest.Entry, error) {
	w.fetches++
	c, ok := w.children[g.UID]
	if !ok {
		return nil, fmt.Errorf("no group %d", g.UID)
	}
	return c, nil
}

func (w *world) Index(f manifest.Entry) ([]IndexEntry, error) {
	cs, ok := w.frags[f.UID]
	if !ok {
		return nil, fmt.Errorf("no fragment %d", f.UID)
	}
	out := make([]IndexEntry, len(cs))
	pos := uint32(8)
	for i, c := range cs {
		out[i] = IndexEntry{ID: c.ID, Timestamp: int64(c.ID), Position: pos}
		pos += uint32(c.Size)
	}
	return out, nil
}

func (w *world) Chunk(f manifest.Entry, pos uint32) (Chunk, error) {
	idx, err := w.Index(f)
	if err != nil {
		return Chunk{}, err
	}
	for i, r := range idx {
		if r.Position == pos {
			return w.frags[f.UID][i], nil
		}
	}
	return Chunk{}, fmt.Errorf("fragment %d: no chunk at %d", f.UID, pos)
}

type localSide struct{ w *world }

func (l localSide) Chunk(id uint64) (Chunk, bool, error) {
	if id < l.w.lf {
		return Chunk{}, false, fmt.Errorf("chunk %d below the local first offset %d", id, l.w.lf)
	}
	c, ok := l.w.local.at(id)
	if !ok || id >= l.w.ln {
		return Chunk{}, false, nil
	}
	return c, true, nil
}

// timeline draws chunks from start up to at least end, written at epoch.
func timeline(t *rapid.T, label string, start, end uint64, epoch uint64) history {
	var h history
	for id := start; id < end; {
		n := rapid.Uint64Range(1, 4).Draw(t, label)
		c := Chunk{ID: id, Next: id + n, Epoch: epoch, CRC: uint32(id*2654435761) ^ uint32(epoch*40503), Size: int64(48 + n*10)}
		h = append(h, c)
		id += n
	}
	return h
}

func drawWorld(t *rapid.T) *world {
	w := &world{children: map[uint64][]manifest.Entry{}, frags: map[uint64]history{}}
	remoteEnd := rapid.Uint64Range(1, 300).Draw(t, "remote-end")
	w.remote = timeline(t, "remote-records", 0, remoteEnd, 1)
	rn := w.remote[len(w.remote)-1].Next
	// The local log shares the remote chunks below diverge (a chunk boundary), then follows
	// its own timeline (a higher epoch) or simply ends there (a lost tail).
	k := rapid.IntRange(0, len(w.remote)).Draw(t, "shared-chunks")
	shared := append(history(nil), w.remote[:k]...)
	diverge := uint64(0)
	if k > 0 {
		diverge = shared[k-1].Next
	}
	w.local = shared
	if rapid.Bool().Draw(t, "local-continues") {
		w.local = append(w.local, timeline(t, "local-records", diverge, diverge+rapid.Uint64Range(1, 300).Draw(t, "local-more"), 2)...)
	}
	if rapid.Bool().Draw(t, "foreign") && len(w.local) > 0 {
		for i := range w.local { // a foreign directory: same offsets, other data
			w.local[i].CRC ^= 0x5a5a5a5a
		}
	}
	if len(w.local) == 0 {
		w.local = timeline(t, "local-records", 0, 1+rapid.Uint64Range(0, 50).Draw(t, "local-only"), 2)
	}
	w.ln = w.local[len(w.local)-1].Next
	w.lf = w.local[rapid.IntRange(0, len(w.local)-1).Draw(t, "local-first-chunk")].ID

	// Cut the remote chunks into fragments, group some of them, drop a retained prefix.
	var leaves []manifest.Entry
	uid := uint64(1)
	for i := 0; i < len(w.remote); {
		n := rapid.IntRange(1, 6).Draw(t, "chunks-per-fragment")
		j := min(i+n, len(w.remote))
		cs := w.remote[i:j]
		var size uint64
		for _, c := range cs {
			size += uint64(c.Size)
		}
		e := manifest.Entry{FirstOffset: cs[0].ID, FirstTimestamp: int64(cs[0].ID), LastTimestamp: int64(cs[len(cs)-1].ID), Size: size, UID: uid, Kind: manifest.KindFragment}
		w.frags[uid] = cs
		uid++
		leaves = append(leaves, e)
		i = j
	}
	drop := rapid.IntRange(0, len(leaves)-1).Draw(t, "retained-fragments")
	leaves = leaves[drop:]
	var root []manifest.Entry
	for i := 0; i < len(leaves); {
		g := rapid.IntRange(0, 3).Draw(t, "group-size")
		if g < 2 || i+g > len(leaves) {
			root = append(root, leaves[i])
			i++
			continue
		}
		kids := leaves[i : i+g]
		var size uint64
		for _, c := range kids {
			size += c.Size
		}
		ge := manifest.Entry{FirstOffset: kids[0].FirstOffset, FirstTimestamp: kids[0].FirstTimestamp, LastTimestamp: kids[len(kids)-1].LastTimestamp, Size: size, UID: uid, Kind: manifest.KindGroup}
		uid++
		w.children[ge.UID] = append([]manifest.Entry(nil), kids...)
		root = append(root, ge)
		i += g
	}
	var total uint64
	for _, e := range root {
		total += e.Size
	}
	w.m = manifest.Manifest{FirstOffset: root[0].FirstOffset, NextOffset: rn, FirstTimestamp: root[0].FirstTimestamp,
		FirstLastTimestamp: leaves[0].LastTimestamp, TotalSize: total, Entries: root}
	if err := w.m.Check(); err != nil {
		t.Fatalf("drawn manifest: %v", err)
	}
	return w
}

// expected works the answer out by brute force: the last remote chunk, at or above both
// first offsets, that the local log holds unchanged.
func (w *world) expected() (Kind, uint64) {
	if w.lf >= w.m.NextOffset {
		// Offsets lost between, and the local first chunk at a higher epoch than the remote
		// tier's last: possibly another timeline (EpochAhead).
		if lc, ok := w.local.at(w.lf); ok && w.lf > w.m.NextOffset && len(w.remote) > 0 && w.lf < w.ln &&
			w.remote[len(w.remote)-1].Next > w.m.FirstOffset && lc.Epoch > w.remote[len(w.remote)-1].Epoch {
			return NoCommon, 0
		}
		return NotCompared, 0
	}
	var last *Chunk
	for i := range w.remote {
		c := w.remote[i]
		if c.ID < w.m.FirstOffset || c.ID < w.lf || c.ID >= w.ln {
			continue
		}
		if lc, ok := w.local.at(c.ID); ok && lc == c {
			last = &w.remote[i]
		}
	}
	switch {
	case last == nil:
		return NoCommon, 0
	case last.Next == w.m.NextOffset:
		return Match, 0
	case last.Next >= w.ln:
		return Behind, 0 // the local log ends where the two part: a prefix, not a fork
	}
	return Diverged, last.Next
}

// TestFindAgainstBruteForce checks Find's verdict and cut against a brute-force search over
// random remote tiers (fragments, groups, retained prefixes) and local logs that share a
// prefix with them and then diverge (Diverged), end early (Behind: never cut), or share
// nothing.
func TestFindAgainstBruteForce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := drawWorld(t)
		res, err := Find(w.m, w.lf, w.ln, w, localSide{w})
		if err != nil {
			t.Fatalf("Find: %v", err)
		}
		kind, at := w.expected()
		if res.Kind != kind {
			t.Fatalf("verdict %s, want %s (remote [%d,%d), local [%d,%d))", res.Kind, kind, w.m.FirstOffset, w.m.NextOffset, w.lf, w.ln)
		}
		chunks := len(w.remote)
		if limit := 3*bits.Len(uint(chunks)) + 4; res.Probes > limit {
			t.Fatalf("%d probes for %d remote chunks (limit %d)", res.Probes, chunks, limit)
		}
		switch kind {
		case Diverged:
			tr := res.Truncation
			if tr == nil || tr.At != at {
				t.Fatalf("cut %+v, want at %d", tr, at)
			}
			checkCut(t, w, tr)
		case NoCommon:
			tr := res.Truncation
			if tr == nil {
				t.Fatalf("no operator cut prepared")
			}
			if tr.Straddle != nil {
				t.Fatalf("operator cut needs a copy: %+v", tr)
			}
			if tr.Manifest.NextOffset > max(w.lf, w.m.FirstOffset) {
				t.Fatalf("operator cut keeps [.., %d), above the local first offset %d", tr.Manifest.NextOffset, w.lf)
			}
			checkCut(t, w, tr)
		}
	})
}

// checkCut verifies a truncation: the remaining tree holds exactly the remote fragments
// wholly below the cut (plus the straddler's prefix, put back by the caller), everything
// else is dropped or expanded, and nothing below the cut is dropped.
func checkCut(t *rapid.T, w *world, tr *Truncation) {
	if err := tr.Manifest.Check(); err != nil {
		t.Fatalf("truncated manifest: %v", err)
	}
	kept := map[uint64]bool{}
	var walk func(es []manifest.Entry)
	walk = func(es []manifest.Entry) {
		for _, e := range es {
			if e.Kind == manifest.KindFragment {
				kept[e.UID] = true
			} else if !e.IsGap() {
				walk(w.children[e.UID])
			}
		}
	}
	walk(tr.Manifest.Entries)
	dropped := map[uint64]bool{}
	for _, e := range tr.Dropped {
		if e.Kind == manifest.KindFragment {
			dropped[e.UID] = true
		} else {
			var all func(es []manifest.Entry)
			all = func(es []manifest.Entry) {
				for _, c := range es {
					if c.Kind == manifest.KindFragment {
						dropped[c.UID] = true
					} else {
						all(w.children[c.UID])
					}
				}
			}
			all(w.children[e.UID])
		}
	}
	for uid, cs := range w.frags {
		first, end := cs[0].ID, cs[len(cs)-1].Next
		live := end > w.m.FirstOffset
		if !live {
			continue
		}
		switch {
		case end <= tr.At && first < tr.Manifest.NextOffset:
			if !kept[uid] || dropped[uid] {
				t.Fatalf("fragment [%d,%d) below the cut %d: kept=%v dropped=%v", first, end, tr.At, kept[uid], dropped[uid])
			}
		case first >= tr.At:
			if kept[uid] || !dropped[uid] {
				t.Fatalf("fragment [%d,%d) above the cut %d: kept=%v dropped=%v", first, end, tr.At, kept[uid], dropped[uid])
			}
		default: // straddles the cut
			if tr.Straddle == nil || tr.Straddle.UID != uid || kept[uid] || !dropped[uid] {
				t.Fatalf("fragment [%d,%d) straddles the cut %d: straddle=%+v kept=%v dropped=%v", first, end, tr.At, tr.Straddle, kept[uid], dropped[uid])
			}
			var bytes uint64
			for i, p := range tr.Prefix {
				if p.ID != cs[i].ID {
					t.Fatalf("prefix chunk %d is %d, want %d", i, p.ID, cs[i].ID)
				}
				bytes += uint64(cs[i].Size)
			}
			if last := cs[len(tr.Prefix)-1]; last.Next != tr.At || bytes != tr.PrefixBytes {
				t.Fatalf("prefix ends at %d with %d bytes, want %d with %d", last.Next, bytes, tr.At, tr.PrefixBytes)
			}
		}
	}
}

// TestFindLocalMovedIsAnError checks that a local chunk gone meanwhile (below the local first
// offset) is an error, never taken for a chunk that differs.
func TestFindLocalMovedIsAnError(t *testing.T) {
	w := &world{children: map[uint64][]manifest.Entry{}, frags: map[uint64]history{}}
	for id := uint64(0); id < 100; id += 10 {
		w.remote = append(w.remote, Chunk{ID: id, Next: id + 10, Epoch: 1, CRC: uint32(id), Size: 100})
	}
	w.frags[1] = w.remote[:5]
	w.frags[2] = w.remote[5:]
	w.m = manifest.Manifest{FirstOffset: 0, NextOffset: 100, FirstTimestamp: 0, FirstLastTimestamp: 40, TotalSize: 1000, Entries: []manifest.Entry{
		{FirstOffset: 0, FirstTimestamp: 0, LastTimestamp: 40, Size: 500, UID: 1},
		{FirstOffset: 50, FirstTimestamp: 50, LastTimestamp: 90, Size: 500, UID: 2},
	}}
	w.local = append(history(nil), w.remote[:8]...) // the log lost its tail at 80...
	w.local = append(w.local, Chunk{ID: 80, Next: 95, Epoch: 2, CRC: 7, Size: 100})
	w.lf, w.ln = 0, 95
	res, err := Find(w.m, w.lf, w.ln, w, localSide{w})
	if err != nil || res.Kind != Diverged || res.Truncation.At != 80 {
		t.Fatalf("got %+v, %v; want diverged at 80", res, err)
	}
	// ...and now retention removes the local chunks the search probes: Find must fail.
	lf := uint64(0)
	res, err = Find(w.m, lf, w.ln, w, movingLocal{w, 60})
	if err == nil {
		t.Fatalf("a local log that moved under the comparison gave %s, want an error", res.Kind)
	}
}

// movingLocal is a local log whose first offset is really above what the caller believed.
type movingLocal struct {
	w     *world
	first uint64
}

func (m movingLocal) Chunk(id uint64) (Chunk, bool, error) {
	if id < m.first {
		return Chunk{}, false, fmt.Errorf("chunk %d: gone", id)
	}
	return localSide{m.w}.Chunk(id)
}
