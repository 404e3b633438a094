package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
	"github.com/streamtier/streamtier/tests/chaos/check"
)

// streamLog is one stream's local log as the broker (this harness) writes it: appended
// with the deterministic load (by a live writer while the node runs, see writer.go; a fork
// while it is down), cut back (a lost tail) or trimmed at its head (the broker's
// retention) on the soak's orders, with the node down. It is used by one goroutine at a
// time: an open live writer's while it is open.
type streamLog struct {
	id       string
	dir      string
	segBytes int64
	lin      *check.Lineage // private: its references hand out generators
	// end is the log's next offset as the broker last left it (appended or cut), 0 before
	// the first append: what the harness awaits during a node run, without opening the
	// log under the node.
	end uint64
}

// bounds opens the log (recovering it as any opener would) and reports its first and next
// offsets and its segments.
func (s *streamLog) bounds() (first, next uint64, segs []segments.SegmentInfo, err error) {
	lg, err := segments.Open(s.dir, segments.Options{MaxSegmentBytes: s.segBytes})
	if err != nil {
		return 0, 0, nil, err
	}
	first, next, segs = lg.FirstOffset(), lg.NextOffset(), lg.Segments()
	return first, next, segs, lg.Close()
}

// openAtLoad opens the log for appending and returns the load's generator positioned at
// its end (the latest timeline's chunk that starts there).
func (s *streamLog) openAtLoad() (*segments.Log, *loadgen.Generator, error) {
	lg, err := segments.Open(s.dir, segments.Options{MaxSegmentBytes: s.segBytes})
	if err != nil {
		return nil, nil, err
	}
	next := lg.NextOffset()
	ref := s.lin.Latest()
	if next < ref.Base() {
		return nil, nil, errors.Join(fmt.Errorf("stream %s: the log ends at %d, below its latest timeline's start %d", s.id, next, ref.Base()), lg.Close())
	}
	idx, ok := ref.Index(next)
	if !ok {
		return nil, nil, errors.Join(fmt.Errorf("stream %s: the log ends at %d, where no chunk of the load starts", s.id, next), lg.Close())
	}
	return lg, ref.Generator(idx), nil
}

// appendBytes appends the load's next chunks until at least n record bytes more are in
// the log, and returns the new next offset.
func (s *streamLog) appendBytes(n int64) (uint64, error) {
	lg, g, err := s.openAtLoad()
	if err != nil {
		return 0, err
	}
	var written int64
	for written < n {
		before := g.Bytes()
		if _, _, err := lg.Append(g.Next()); err != nil {
			return 0, errors.Join(fmt.Errorf("stream %s: append: %w", s.id, err), lg.Close())
		}
		written += g.Bytes() - before
	}
	next := lg.NextOffset()
	if err := lg.Sync(); err != nil {
		return 0, errors.Join(err, lg.Close())
	}
	s.end = next
	return next, lg.Close()
}

// chunkStarts lists the chunk ids of the segment's index file.
func chunkStarts(dir string, seg segments.SegmentInfo) ([]segments.IndexRecord, error) {
	name := segments.IndexName(seg.FirstOffset)
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	idx, err := segments.ParseIndex(name, b)
	if err != nil {
		return nil, err
	}
	return idx.Records, nil
}

// boundaries lists the chunk ids of the log in [lo, hi).
func (s *streamLog) boundaries(lo, hi uint64) ([]uint64, error) {
	_, _, segs, err := s.bounds()
	if err != nil {
		return nil, err
	}
	var out []uint64
	for _, seg := range segs {
		if seg.Chunks == 0 || seg.NextOffset <= lo || seg.FirstOffset >= hi {
			continue
		}
		recs, err := chunkStarts(s.dir, seg)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			if r.ChunkID >= lo && r.ChunkID < hi {
				out = append(out, r.ChunkID)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// truncateTail cuts the log so that it ends at cut, a chunk boundary inside it (above its
// first chunk): the segment holding cut is truncated at that chunk (file and index), later
// segments are deleted, as a crash that lost an unsynced tail leaves it.
func (s *streamLog) truncateTail(cut uint64) error {
	first, next, segs, err := s.bounds()
	if err != nil {
		return err
	}
	if cut <= first || cut >= next {
		return fmt.Errorf("stream %s: cut %d outside the log (%d,%d)", s.id, cut, first, next)
	}
	for i := len(segs) - 1; i >= 0; i-- {
		seg := segs[i]
		segPath := filepath.Join(s.dir, seg.Name)
		idxPath := filepath.Join(s.dir, segments.IndexName(seg.FirstOffset))
		if seg.FirstOffset >= cut {
			if err := os.Remove(segPath); err != nil {
				return err
			}
			if err := os.Remove(idxPath); err != nil {
				return err
			}
			continue
		}
		recs, err := chunkStarts(s.dir, seg)
		if err != nil {
			return err
		}
		k := sort.Search(len(recs), func(j int) bool { return recs[j].ChunkID >= cut })
		if k == len(recs) {
			break // the cut is at this segment's end: nothing more to remove
		}
		if recs[k].ChunkID != cut {
			return fmt.Errorf("stream %s: %d is not a chunk boundary of %s", s.id, cut, seg.Name)
		}
		if err := os.Truncate(segPath, int64(recs[k].Position)); err != nil {
			return err
		}
		if err := os.Truncate(idxPath, int64(segments.FileHeaderSize+k*segments.IndexRecordSize)); err != nil {
			return err
		}
		break
	}
	_, got, _, err := s.bounds()
	if err != nil {
		return err
	}
	if got != cut {
		return fmt.Errorf("stream %s: after cutting at %d the log ends at %d", s.id, cut, got)
	}
	s.end = cut
	return nil
}

// dropHead deletes the log's oldest segments, never the last one, until its first offset
// is above offset; it returns the old and new first offsets (equal when it could not).
func (s *streamLog) dropHead(offset uint64) (from, to uint64, err error) {
	first, _, segs, err := s.bounds()
	if err != nil {
		return 0, 0, err
	}
	// Only worth it when some segment other than the last starts above offset.
	stop := -1
	for i := 1; i < len(segs); i++ {
		if segs[i].FirstOffset > offset {
			stop = i
			break
		}
	}
	if stop < 0 {
		return first, first, nil
	}
	for _, seg := range segs[:stop] {
		if err := os.Remove(filepath.Join(s.dir, segments.IndexName(seg.FirstOffset))); err != nil {
			return 0, 0, err
		}
		if err := os.Remove(filepath.Join(s.dir, seg.Name)); err != nil {
			return 0, 0, err
		}
	}
	newFirst, _, _, err := s.bounds()
	return first, newFirst, err
}
