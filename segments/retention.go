package segments

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// RetentionPolicy says which segments may be deleted. Each rule picks a run of the
// oldest segments; the longest run is deleted. The active (last) segment is never deleted.
type RetentionPolicy struct {
	// MaxBytes, when > 0, deletes the oldest segments while the segment files together
	// (the active one included) exceed it.
	MaxBytes int64
	// MaxAge, when > 0, deletes the oldest segments while their last chunk is older than
	// now - MaxAge.
	MaxAge time.Duration
	// MayDelete, when set, is the caller's rule ("may this segment go?"), for example the
	// tiering layer's "every chunk is durable in S3 and outside the hot window". It is
	// asked about the oldest segments in turn and deletion stops at the first one it
	// refuses: a refused segment, and every segment after it, is kept by this rule. It
	// must not call the Log.
	MayDelete func(SegmentInfo) bool
}

// ApplyRetention deletes the segments p selects, oldest first, and returns their segment
// file names. The rules are independent: a segment goes if any rule reaches it, as the
// stream's own limits apply whatever the tiering rule says. Readers in a deleted segment
// get ErrSegmentGone from then on; ranged reads of it too.
func (l *Log) ApplyRetention(p RetentionPolicy, now time.Time) ([]string, error) {
	if l.opts.ReadOnly {
		// The writing process owns its files and its retention (a broker's consumers and
		// its in-memory segment list still use segments that are durable in S3).
		return nil, fmt.Errorf("retention of %s: %w", l.dir, ErrReadOnly)
	}
	l.retainMu.Lock()
	defer l.retainMu.Unlock()
	segs := l.Segments()
	n := retainCount(segs, p, now)
	if n == 0 {
		return nil, nil
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	// Only ApplyRetention removes segments and it holds retainMu, so the first n are still
	// the ones judged, and none is active: n < len(segs) and segments only grow at the end.
	gone := l.segs[:n:n]
	l.segs = l.segs[n:]
	l.firstSeg.Store(l.segs[0].first)
	l.mu.Unlock()

	deleted := make([]string, 0, n)
	var errs []error
	for _, s := range gone {
		// The segment first: a crash in between leaves an index without its segment
		// before the first pair, which Open removes as debris.
		for _, name := range []string{s.name, IndexName(s.first)} {
			if err := os.Remove(filepath.Join(l.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("retention in %s: %w", l.dir, err))
			}
		}
		deleted = append(deleted, s.name)
	}
	return deleted, errors.Join(errs...)
}

// retainCount is how many of the oldest segments p deletes; never the last one.
func retainCount(segs []SegmentInfo, p RetentionPolicy, now time.Time) int {
	limit := len(segs) - 1
	n := 0
	if p.MaxBytes > 0 {
		var total int64
		for _, s := range segs {
			total += s.Size
		}
		i := 0
		for ; i < limit && total > p.MaxBytes; i++ {
			total -= segs[i].Size
		}
		n = max(n, i)
	}
	if p.MaxAge > 0 {
		cutoff := now.Add(-p.MaxAge).UnixMilli()
		i := 0
		for i < limit && segs[i].Chunks > 0 && segs[i].LastTimestamp < cutoff {
			i++
		}
		n = max(n, i)
	}
	if p.MayDelete != nil {
		i := 0
		for i < limit && p.MayDelete(segs[i]) {
			i++
		}
		n = max(n, i)
	}
	return n
}

// DurableDeletable names the segments a tiering layer's local retention may delete: durable
// remotely (every chunk below persistedNext), not active, oldest first, beyond the hot
// window (windowBytes of durable segments kept, when > 0; segments whose last chunk is
// younger than windowAge kept, when > 0). The writer and a replica share it.
func DurableDeletable(segs []SegmentInfo, persistedNext uint64, windowBytes int64, windowAge time.Duration, now time.Time) map[string]bool {
	var durable []SegmentInfo
	var durableBytes int64
	for _, s := range segs {
		if s.Active || s.NextOffset > persistedNext {
			break
		}
		durable = append(durable, s)
		durableBytes += s.Size
	}
	out := make(map[string]bool)
	for _, s := range durable {
		if durableBytes <= windowBytes && windowBytes > 0 {
			break
		}
		if windowAge > 0 && s.LastTimestamp > now.Add(-windowAge).UnixMilli() {
			break
		}
		out[s.Name] = true
		durableBytes -= s.Size
	}
	return out
}
