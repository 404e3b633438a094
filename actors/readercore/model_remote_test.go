package readercore

import (
	"fmt"

	"github.com/streamtier/streamtier/actors/divergence"
	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/manifest"
)

// The model's remote tier: S3 objects, what reads them, and the shell's resolution, which
// compares the stored manifest with the local log through the real divergence.Find.

// resolve is the shell's resolution: the stored manifest, compared chunk by chunk with the
// local log by the real divergence.Find over the model's objects, with the straddling
// prefix copied when the log no longer holds it; then the log's bounds.
func (w *world) resolve() {
	m := w.stored.Clone()
	res, err := divergence.Find(m, w.logFirst, w.logNext, modelRemote{w}, modelLocal{w})
	if err != nil {
		w.t.Fatalf("compare the remote tier %s with the local log [%d,%d): %v", FormatManifest(m), w.logFirst, w.logNext, err)
	}
	if t := res.Truncation; res.Kind == divergence.Diverged && t.NeedsCopy(w.logFirst) {
		r := w.copyPrefix(t)
		t.Replacement = &r
	}
	modelStats["compare-"+res.Kind.String()]++
	w.cmp = res
	w.declaredIn = nil // the core knows the resolved root's gaps, and those it declares
	for i, e := range m.Entries {
		if e.IsGap() {
			w.declaredIn = append(w.declaredIn, gapSpan{e.FirstOffset, m.EntryEnd(i)})
		}
	}
	w.step(Resolved{Manifest: m, Revision: w.rev, Root: w.storedRoot, NextSeq: w.maxSeq + 1, Comparison: res})
	w.step(LogOpened{First: w.logFirst, Next: w.logNext, Epoch: w.logEpoch})
}

// copyPrefix writes the straddling fragment's chunks below the cut as a new object.
func (w *world) copyPrefix(t *divergence.Truncation) manifest.Entry {
	src := w.objs[t.Straddle.UID]
	if src == nil || src.deleted {
		w.t.Fatalf("the prefix of %s is to be copied, but the object is not in S3", FormatEntry(*t.Straddle))
	}
	n := len(t.Prefix)
	o := &mObject{kind: manifest.KindFragment, first: src.first, next: t.At, size: t.PrefixBytes,
		chunks: append([]mObjChunk(nil), src.chunks[:n]...)}
	uid := w.newUID()
	w.objs[uid] = o
	e := manifest.Entry{FirstOffset: src.first, FirstTimestamp: t.Prefix[0].Timestamp, LastTimestamp: t.PrefixLastTimestamp,
		Size: t.PrefixBytes, UID: uid, Kind: manifest.KindFragment}
	w.copies[uid] = e
	modelStats["prefix-copies"]++
	return e
}

// modelRemote and modelLocal answer the comparison from the model's objects and log.
type modelRemote struct{ w *world }

func (r modelRemote) Children(g manifest.Entry) ([]manifest.Entry, error) {
	o := r.w.objs[g.UID]
	if o == nil || o.deleted || o.kind != g.Kind {
		return nil, fmt.Errorf("%s: no such object", FormatEntry(g))
	}
	return o.children, nil
}

func (r modelRemote) Index(f manifest.Entry) ([]divergence.IndexEntry, error) {
	o := r.w.objs[f.UID]
	if o == nil || o.deleted || o.kind != manifest.KindFragment {
		return nil, fmt.Errorf("%s: no such object", FormatEntry(f))
	}
	out := make([]divergence.IndexEntry, len(o.chunks))
	for i, c := range o.chunks {
		out[i] = divergence.IndexEntry{ID: c.c.ID, Timestamp: c.ts, Position: c.pos}
	}
	return out, nil
}

func (r modelRemote) Chunk(f manifest.Entry, pos uint32) (divergence.Chunk, error) {
	o := r.w.objs[f.UID]
	if o == nil || o.deleted {
		return divergence.Chunk{}, fmt.Errorf("%s: no such object", FormatEntry(f))
	}
	for _, c := range o.chunks {
		if c.pos == pos {
			return c.c, nil
		}
	}
	return divergence.Chunk{}, fmt.Errorf("%s: no chunk at position %d", FormatEntry(f), pos)
}

type modelLocal struct{ w *world }

func (l modelLocal) Chunk(id uint64) (divergence.Chunk, bool, error) {
	if id < l.w.logFirst {
		return divergence.Chunk{}, false, fmt.Errorf("chunk %d below the local first offset %d", id, l.w.logFirst)
	}
	c, ok := l.w.chunks[id]
	if !ok {
		return divergence.Chunk{}, false, nil
	}
	return c.ident(), true, nil
}

func (w *world) newUID() uint64 {
	w.uid++
	return w.uid
}

// putFragment writes a transfer's object: the chunks its description names, as the
// segment holds them.
func (w *world) putFragment(d *fragment.Description) uint64 {
	uid := w.newUID()
	o := &mObject{kind: manifest.KindFragment, first: d.FirstOffset, next: d.NextOffset, size: d.Size}
	for _, c := range d.Chunks {
		h := c.Header
		o.chunks = append(o.chunks, mObjChunk{
			c:   divergence.Chunk{ID: h.ChunkID, Next: h.NextID(), Epoch: h.Epoch, CRC: h.DataCRC, Size: h.Size()},
			ts:  h.Timestamp,
			pos: c.Position,
		})
	}
	w.objs[uid] = o
	return uid
}

func (w *world) fetcher() manifest.GroupFetcher {
	return func(e manifest.Entry) ([]manifest.Entry, error) {
		o := w.objs[e.UID]
		if o == nil || o.deleted || o.kind != e.Kind {
			return nil, fmt.Errorf("%s: no such object", FormatEntry(e))
		}
		return o.children, nil
	}
}

// anyFetcher also reads deleted objects: to expand what a deletion names.
func (w *world) anyFetcher() manifest.GroupFetcher {
	return func(e manifest.Entry) ([]manifest.Entry, error) {
		o := w.objs[e.UID]
		if o == nil {
			return nil, fmt.Errorf("%s: unknown object", FormatEntry(e))
		}
		return o.children, nil
	}
}

// leaves lists m's live leaves (fragments and gaps) through the model's objects.
func (w *world) leaves(m manifest.Manifest, what string) []manifest.FragmentRef {
	var out []manifest.FragmentRef
	it := manifest.Iterate(m, m.FirstOffset, w.fetcher())
	for {
		f, ok, err := it.Next()
		if err != nil {
			w.t.Fatalf("%s %s: %v", what, FormatManifest(m), err)
		}
		if !ok {
			return out
		}
		out = append(out, f)
	}
}

// remoteChunk finds the chunk of m holding offset o, through the objects.
func (w *world) remoteChunk(m manifest.Manifest, o uint64) (divergence.Chunk, bool) {
	f, err := manifest.LookupOffset(m, o, w.fetcher())
	if err != nil || f.Gap {
		return divergence.Chunk{}, false
	}
	obj := w.objs[f.Entry.UID]
	if obj == nil || obj.deleted {
		return divergence.Chunk{}, false
	}
	for _, c := range obj.chunks {
		if c.c.ID <= o && o < c.c.Next {
			return c.c, true
		}
	}
	return divergence.Chunk{}, false
}

// declare records a gap a core declared.
func (w *world) declare(from, to uint64) {
	w.declared = append(w.declared, gapSpan{from, to})
	w.declaredIn = append(w.declaredIn, gapSpan{from, to})
}

// wasDeclared says whether some core declared every offset of [from, to) a gap.
func (w *world) wasDeclared(from, to uint64) bool { return covered(w.declared, from, to) }

func covered(spans []gapSpan, from, to uint64) bool {
	for from < to {
		found := false
		for _, g := range spans {
			if g.from <= from && from < g.to {
				from, found = g.to, true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
