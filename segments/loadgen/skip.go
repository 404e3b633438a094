package loadgen

import (
	"fmt"

	"github.com/streamtier/streamtier/segments"
)

// Records is the number of offsets a chunk spec uses once appended (what the log adds to
// its next offset): the sum of its entries' record counts.
func Records(spec segments.ChunkSpec) uint64 {
	var n uint64
	for _, e := range spec.Entries {
		n += uint64(e.RecordCount())
	}
	return n
}

// Skip advances the generator past n chunks without returning them, exactly as n calls
// of Next would: the chunk after them is the one a run that wrote them would write next.
func (g *Generator) Skip(n int64) {
	for range n {
		g.Next()
	}
}

// SkipToOffset advances the generator past the chunks of a log whose first chunk has id
// first and whose next offset is next, so that a load written into that log resumes after
// a restart with the chunk that would have come next. It returns the number of chunks
// skipped, or an error when no chunk boundary falls at next (the log was not written by
// this load: another seed or configuration).
func (g *Generator) SkipToOffset(first, next uint64) (int64, error) {
	if next < first {
		return 0, fmt.Errorf("loadgen: skip to offset %d: below the first offset %d", next, first)
	}
	off := first
	var chunks int64
	for off < next {
		off += Records(g.Next())
		chunks++
	}
	if off != next {
		return chunks, fmt.Errorf("loadgen: skip to offset %d: the load's chunk %d ends at %d (the log was written by another load)", next, chunks, off)
	}
	return chunks, nil
}
