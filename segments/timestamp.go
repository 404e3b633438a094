package segments

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// OffsetAtTimestamp finds the chunk id of the first committed chunk whose timestamp is at
// or after ts (milliseconds): the first segment whose last chunk reaches ts, then a binary
// search of its index. found is false when no committed chunk is that recent. Like osiris it
// assumes timestamps do not go down along the log; where they do, the chunk returned is one
// at or after ts, not necessarily the first. A segment removed by retention meanwhile is
// ErrSegmentGone.
func (l *Log) OffsetAtTimestamp(ts int64) (offset uint64, found bool, err error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return 0, false, ErrClosed
	}
	visible := l.visible.Load()
	var seg segment
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].chunks > 0 && l.segs[i].lastTS >= ts })
	if i < len(l.segs) {
		seg = *l.segs[i]
	}
	l.mu.Unlock()
	if i == len(l.segs) || seg.first >= visible {
		return 0, false, nil
	}
	path := filepath.Join(l.dir, IndexName(seg.first))
	f, err := os.Open(path)
	if err != nil {
		return 0, false, fmt.Errorf("find timestamp %d: %w", ts, segmentGone(err, path))
	}
	defer f.Close()
	var rerr error
	k := sort.Search(seg.chunks, func(k int) bool {
		if rerr != nil {
			return true
		}
		r, err := readIndexRecord(f, k)
		if err != nil {
			rerr = err
			return true
		}
		return r.Timestamp >= ts
	})
	if rerr != nil {
		return 0, false, fmt.Errorf("find timestamp %d: %w", ts, rerr)
	}
	if k == seg.chunks { // timestamps went down inside the segment; its last chunk reaches ts
		k = seg.chunks - 1
	}
	r, err := readIndexRecord(f, k)
	if err != nil {
		return 0, false, fmt.Errorf("find timestamp %d: %w", ts, err)
	}
	if r.ChunkID >= visible {
		return 0, false, nil
	}
	return r.ChunkID, true, nil
}
