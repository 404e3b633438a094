package segments

import (
	"fmt"

	"github.com/streamtier/streamtier/chunk"
)

// ChunkHeader returns the header of the chunk whose id is id, committed or not: what a
// comparison with the remote tier needs (the data reader only hands out committed chunks).
// found is false when no chunk starts at id (id falls inside a chunk, or at or past the
// log's next offset). An id below the log's first offset is an *OffsetError (ErrBelowFirst):
// the chunk is gone, which is not the same as being different. A segment deleted meanwhile
// gives ErrSegmentGone.
func (l *Log) ChunkHeader(id uint64) (h chunk.Header, found bool, err error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return chunk.Header{}, false, ErrClosed
	}
	first := l.segs[0].first
	if id < first {
		next := l.nextID
		l.mu.Unlock()
		return chunk.Header{}, false, &OffsetError{Dir: l.dir, Offset: id, First: first, Next: next}
	}
	if id >= l.nextID {
		l.mu.Unlock()
		return chunk.Header{}, false, nil
	}
	seg := *l.segs[l.segmentAt(id)]
	l.mu.Unlock()

	var pos int64
	switch {
	case seg.chunks > 0 && id == seg.lastID:
		pos = seg.lastPos
	case seg.chunks > 0 && id > seg.lastID:
		return chunk.Header{}, false, nil // inside the segment's last chunk
	default:
		rec, _, err := searchIndex(l.dir, &seg, id)
		if err != nil {
			return chunk.Header{}, false, fmt.Errorf("chunk header %d: %w", id, err)
		}
		if rec.ChunkID != id {
			return chunk.Header{}, false, nil
		}
		pos = int64(rec.Position)
	}
	f, err := OpenSegment(l.dir, seg.name)
	if err != nil {
		return chunk.Header{}, false, fmt.Errorf("chunk header %d: %w", id, err)
	}
	defer f.Close()
	h, err = readHeaderAt(f, pos)
	if err != nil {
		return chunk.Header{}, false, fmt.Errorf("chunk header %d in %s: %w", id, seg.name, err)
	}
	if h.ChunkID != id {
		return chunk.Header{}, false, fmt.Errorf("chunk header %d: %s position %d holds chunk %d", id, seg.name, pos, h.ChunkID)
	}
	return h, true, nil
}
