package segments

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/streamtier/streamtier/chunk"
)

// One writer committing as it goes, retention deleting behind it, a draining reader that
// jumps forward when its segment goes (as the upload path does on local ahead), and a
// ranged reader of the drained locations: run under -race. Every header a reader returns
// is the chunk written at that id, every ranged read either returns the exact chunk or
// ErrSegmentGone, never other bytes.
func TestConcurrentWriterReaderRetention(t *testing.T) {
	const chunks = 3000
	l := mustOpen(t, t.TempDir(), Options{MaxSegmentChunks: 25})
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()

	var mu sync.Mutex
	written := map[uint64]chunk.Header{}
	var final uint64
	done := make(chan struct{})
	errs := make(chan error, 4)
	var wg sync.WaitGroup

	wg.Add(1)
	go func() { // writer
		defer wg.Done()
		defer close(done)
		for i := range chunks {
			h, _, err := l.Append(userChunk(1, int64(i), fmt.Sprintf("record %d", i), "and another"))
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			written[h.ChunkID] = h
			final = h.NextID()
			mu.Unlock()
			if i%3 == 2 || i == chunks-1 {
				if err := l.SetCommitted(h.ChunkID); err != nil {
					errs <- err
					return
				}
			}
		}
	}()

	wg.Add(1)
	go func() { // retention keeps about four segments
		defer wg.Done()
		for {
			if _, err := l.ApplyRetention(RetentionPolicy{MaxBytes: 4 * 25 * 90}, time.Now()); err != nil {
				errs <- err
				return
			}
			select {
			case <-done:
				return
			case <-l.NotifyWhenCommittedPast(l.CommittedNext() + 20):
			}
		}
	}()

	locs := make(chan chunk.Location, 64)
	wg.Add(1)
	go func() { // ranged reads of what the drain saw
		defer wg.Done()
		for loc := range locs {
			b, h, err := l.ReadChunk(loc)
			if errors.Is(err, ErrSegmentGone) {
				continue
			}
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			want := written[h.ChunkID]
			mu.Unlock()
			if h != want || int64(len(b)) != loc.Size {
				errs <- fmt.Errorf("ranged read at %+v: %+v, wrote %+v", loc, h, want)
				return
			}
		}
	}()

	wg.Add(1)
	go func() { // drain
		defer wg.Done()
		defer close(locs)
		var r *Reader
		defer func() {
			if r != nil {
				r.Close()
			}
		}()
		jumps := 0
		for {
			if r == nil {
				var err error
				r, err = l.NewReader(l.FirstOffset())
				if errors.Is(err, ErrBelowFirst) || errors.Is(err, ErrSegmentGone) {
					continue // retention moved on meanwhile
				}
				if err != nil {
					errs <- err
					return
				}
			}
			finished := false // the writer was done before this Next: end of stream is the end
			select {
			case <-done:
				finished = true
			default:
			}
			h, loc, err := r.Next()
			switch {
			case errors.Is(err, ErrEndOfStream):
				if finished {
					mu.Lock()
					end := final
					mu.Unlock()
					if r.NextOffset() != end || l.CommittedNext() != end {
						errs <- fmt.Errorf("drain ended at %d, the log at %d", r.NextOffset(), end)
					}
					t.Logf("drain reached %d after %d jumps", end, jumps)
					return
				}
				select {
				case <-l.NotifyWhenCommittedPast(r.NextOffset()):
				case <-done:
				case <-ctx.Done():
					errs <- fmt.Errorf("drain stuck at %d: %w", r.NextOffset(), ctx.Err())
					return
				}
				continue
			case errors.Is(err, ErrSegmentGone):
				r.Close()
				r = nil
				jumps++
				continue
			case err != nil:
				errs <- err
				return
			}
			mu.Lock()
			want, ok := written[h.ChunkID]
			mu.Unlock()
			if !ok || h != want {
				errs <- fmt.Errorf("drained %+v, wrote %+v", h, want)
				return
			}
			if h.ChunkID >= l.CommittedNext() {
				errs <- fmt.Errorf("drained chunk %d above the committed next %d", h.ChunkID, l.CommittedNext())
				return
			}
			locs <- loc
		}
	}()

	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if _, err := l.ApplyRetention(RetentionPolicy{MaxBytes: 4 * 25 * 90}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if segs := l.Segments(); len(segs) > 6 {
		t.Errorf("retention left %d segments", len(segs))
	}
}
