package segments

import (
	"fmt"
	"os"
	"path/filepath"
)

// searchIndex finds, in the index of seg, the record of the chunk holding offset off (the
// last record whose chunk id is at most off) by binary search over its first seg.chunks
// records, and returns it with that chunk's next offset. seg must hold off.
func searchIndex(dir string, seg *segment, off uint64) (IndexRecord, uint64, error) {
	path := filepath.Join(dir, IndexName(seg.first))
	f, err := os.Open(path)
	if err != nil {
		return IndexRecord{}, 0, fmt.Errorf("find offset %d: %w", off, segmentGone(err, path))
	}
	defer f.Close()
	read := func(k int) (IndexRecord, error) {
		r, err := readIndexRecord(f, k)
		if err != nil {
			return IndexRecord{}, fmt.Errorf("find offset %d: %w", off, err)
		}
		return r, nil
	}
	// Invariant: record lo holds an id <= off; records from hi on hold ids > off.
	lo, hi := 0, seg.chunks
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		r, err := read(mid)
		if err != nil {
			return IndexRecord{}, 0, err
		}
		if r.ChunkID <= off {
			lo = mid
		} else {
			hi = mid
		}
	}
	rec, err := read(lo)
	if err != nil {
		return IndexRecord{}, 0, err
	}
	if rec.ChunkID > off {
		return IndexRecord{}, 0, fmt.Errorf("find offset %d: %s starts at chunk %d", off, path, rec.ChunkID)
	}
	next := seg.next
	if lo+1 < seg.chunks {
		r, err := read(lo + 1)
		if err != nil {
			return IndexRecord{}, 0, err
		}
		next = r.ChunkID
	}
	return rec, next, nil
}
