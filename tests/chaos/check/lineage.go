package check

import (
	"fmt"

	"github.com/streamtier/streamtier/segments/loadgen"
)

// Lineage is the expected content of a stream across its timelines: the load written from
// offset 0, then, for every fork, another load written from the fork's offset on (what a
// new leader writes after an unclean failover: other chunks, a higher epoch, at offsets the
// old timeline had used). The chunk at an offset is that of the last timeline starting at
// or below it. A fork above the latest timeline's start is appended; a fork below it (a
// replica cutting a deposed leader's higher-epoch suffix away, then following a new leader)
// replaces every timeline that starts at or above it: their chunks are in no log any more.
// A Lineage is not safe for concurrent Fork calls: the checker guards its own with its
// lock, the harness's writer is one goroutine.
type Lineage struct {
	tls     mapping
	created int // timelines ever started, those replaced included
}

// mapping is a prefix of a lineage's timelines: which reference holds each offset.
type mapping []*Reference

// NewLineage returns a lineage holding only the load cfg describes, from offset 0.
func NewLineage(cfg loadgen.Config) (*Lineage, error) {
	r, err := NewReference(cfg)
	if err != nil {
		return nil, err
	}
	return &Lineage{tls: mapping{r}, created: 1}, nil
}

// Fork starts a new timeline at offset at, written by the load cfg describes. at must lie
// above offset 0 and be a chunk boundary of the timeline that holds it; the timelines
// starting at or above it are replaced (they were a deposed leader's). The mappings handed
// out before (Mapping) keep the old content.
func (l *Lineage) Fork(at uint64, cfg loadgen.Config) error {
	if at == 0 {
		return fmt.Errorf("check: fork at offset 0: a new stream, not a fork")
	}
	keep := len(l.tls)
	for keep > 1 && l.tls[keep-1].Base() >= at {
		keep--
	}
	holder := l.tls[keep-1]
	if _, ok := holder.Index(at); !ok {
		return fmt.Errorf("check: fork at %d, where no chunk of the timeline holding it (from %d) starts", at, holder.Base())
	}
	r, err := NewReferenceAt(cfg, at)
	if err != nil {
		return err
	}
	// A new backing array: a mapping handed out before keeps the replaced timelines.
	l.tls = append(l.tls[:keep:keep], r)
	l.created++
	return nil
}

// Created is how many timelines the lineage ever started (1 before any fork), those a
// deeper fork replaced included: the next fork's load is numbered after them, so that its
// epoch is above every epoch the log ever held.
func (l *Lineage) Created() int { return l.created }

// Mapping is the lineage's content now; a later fork leaves it as it is.
func (l *Lineage) Mapping() mapping { return l.tls }

// Latest is the newest timeline: the one the local log's end is written in.
func (l *Lineage) Latest() *Reference { return l.tls[len(l.tls)-1] }

// Timelines is how many timelines the lineage holds (1 before any fork).
func (l *Lineage) Timelines() int { return len(l.tls) }

// At is the timeline that holds offset off.
func (l *Lineage) At(off uint64) *Reference { return l.tls.at(off) }

// ChunkCovering is the chunk that holds offset off.
func (l *Lineage) ChunkCovering(off uint64) RefChunk { return l.tls.chunkCovering(off) }

// at is the reference holding off: the last whose base is at or below it.
func (m mapping) at(off uint64) *Reference {
	for i := len(m) - 1; i > 0; i-- {
		if m[i].Base() <= off {
			return m[i]
		}
	}
	return m[0]
}

// end is where piece i of the mapping stops (the next piece's base, or no end).
func (m mapping) end(i int) uint64 {
	if i+1 < len(m) {
		return m[i+1].Base()
	}
	return ^uint64(0)
}

func (m mapping) chunkCovering(off uint64) RefChunk { return m.at(off).ChunkCovering(off) }

// bytesBetween is the size on disk of the chunks that start in [from, to), each taken from
// the timeline that holds it.
func (m mapping) bytesBetween(from, to uint64) uint64 {
	var sum uint64
	for i, r := range m {
		lo, hi := max(from, r.Base()), min(to, m.end(i))
		if lo < hi {
			sum += r.BytesBetween(lo, hi)
		}
	}
	return sum
}

// run is a stretch of a fragment's chunks that one timeline holds: chunks [k, k+n) of the
// fragment, starting at the timeline's chunk idx.
type run struct {
	ref  *Reference
	k, n int
	idx  int
}

// runs splits chunks (by their first offsets, in order) into stretches each held by one
// timeline; ok is false when some stretch does not start where a chunk of its timeline
// starts (then bad is that offset).
func (m mapping) runs(ids []uint64) (out []run, bad uint64, ok bool) {
	for k, id := range ids {
		r := m.at(id)
		if len(out) > 0 && out[len(out)-1].ref == r {
			out[len(out)-1].n++
			continue
		}
		idx, found := r.Index(id)
		if !found {
			return nil, id, false
		}
		out = append(out, run{ref: r, k: k, n: 1, idx: idx})
	}
	return out, 0, true
}
