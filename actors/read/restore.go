package read

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/segments"
)

// RestoreOptions say which stream's remote tier to restore and where to.
type RestoreOptions struct {
	Source OfflineSource
	// Dir is the stream directory to write; it must be empty or absent.
	Dir string
	// From is where the restored log starts. The default is the last run: the end of the
	// remote tier's last declared gap (its first offset when it holds none), so the log runs up to the remote next offset and a broker can continue it
	// safely. Give FromFirst (or an offset) for an earlier run: the restore then stops at
	// the first gap after its first chunk (RestoreGapError). A broker must never be
	// started on an earlier run's directory: its next chunk would land in the gap
	// (docs/reading.md, "Restoring across gaps").
	From From
	// To, when above 0, ends the restored log before the first chunk starting at or above
	// offset To.
	To uint64
	// Segments are the options of the log written (segment size limits).
	Segments segments.Options
}

// RestoreReport says what a restore wrote.
type RestoreReport struct {
	Dir         string `json:"dir"`
	FirstOffset uint64 `json:"first_offset"` // the first chunk's id; NextOffset when none
	NextOffset  uint64 `json:"next_offset"`
	Chunks      int    `json:"chunks"`
	Bytes       int64  `json:"bytes"`
	Segments    int    `json:"segments"`
	// Attached is set when the start asked for is no longer held (see Reader.Attached).
	Attached *Attached `json:"attached,omitempty"`
	// AfterGap is the gap the default start followed (nil when the remote tier holds no
	// gap): the offsets below it are earlier runs, restored only on request (From).
	AfterGap *GapRange `json:"after_gap,omitempty"`
}

// GapRange is a range [From, To) of offsets no tier holds.
type GapRange struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

// RestoreGapError says that a restore stopped at a declared gap or a range remote
// retention removed: an osiris log holds consecutive offsets only, so the directory ends
// at Start. Restore [End, ...) into another directory with From set to End.
type RestoreGapError struct {
	Kind       ItemKind
	Start, End uint64
}

func (e *RestoreGapError) Error() string {
	return fmt.Sprintf("restore stopped at offset %d: a %s range [%d, %d) the remote tier does not hold; "+
		"restore from %d into another directory for what follows", e.Start, e.Kind, e.Start, e.End, e.End)
}

// ErrTargetNotEmpty is returned for a restore into a directory that holds files.
var ErrTargetNotEmpty = errors.New("restore target directory is not empty")

// Restore writes an osiris stream directory from a stream's remote tier, chunk bytes
// exactly as they were written (ids, epochs, timestamps, CRCs): how a node that lost its
// disk rebuilds its local log. It reads from etcd and the bucket only, up to the freshest
// persisted manifest's next offset. A gap or skipped range after the first chunk stops it
// with a *RestoreGapError (the report says what was written).
func Restore(ctx context.Context, o RestoreOptions) (RestoreReport, error) {
	rep := RestoreReport{Dir: o.Dir}
	if o.Dir == "" {
		return rep, errors.New("restore: no target directory")
	}
	if ents, err := os.ReadDir(o.Dir); err == nil && len(ents) > 0 {
		return rep, fmt.Errorf("restore into %s: %w (%d entries)", o.Dir, ErrTargetNotEmpty, len(ents))
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return rep, fmt.Errorf("restore into %s: %w", o.Dir, err)
	}
	if o.From.Kind == 0 {
		from, gap, err := lastRun(ctx, o.Source)
		if err != nil {
			return rep, fmt.Errorf("restore: find the last run: %w", err)
		}
		o.From, rep.AfterGap = FromOffset(from), gap
	}
	r, err := OpenOffline(ctx, o.Source, o.From)
	if err != nil {
		return rep, fmt.Errorf("restore: %w", err)
	}
	defer r.Close()
	rep.Attached = r.Attached
	var lg *segments.Log
	closeLog := func() error {
		if lg == nil {
			return nil
		}
		rep.Segments = len(lg.Segments())
		err := errors.Join(lg.Sync(), lg.Close())
		lg = nil
		return err
	}
	defer closeLog()
	for {
		it, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return rep, fmt.Errorf("restore at %d: %w", r.Position(), err)
		}
		if o.To > 0 && it.Offset >= o.To {
			break
		}
		if it.Kind != ItemChunk {
			if lg == nil {
				continue // before the first chunk: the log starts after it
			}
			return rep, errors.Join(&RestoreGapError{Kind: it.Kind, Start: it.Offset, End: it.End}, closeLog())
		}
		if lg == nil {
			opts := o.Segments
			opts.FirstOffset = it.Offset
			if lg, err = segments.Open(o.Dir, opts); err != nil {
				return rep, fmt.Errorf("restore: %w", err)
			}
			rep.FirstOffset = it.Offset
		}
		if _, _, err := lg.AppendRaw(it.Chunk); err != nil {
			return rep, fmt.Errorf("restore: %w", err)
		}
		rep.Chunks++
		rep.Bytes += int64(len(it.Chunk))
		rep.NextOffset = it.End
	}
	if rep.Chunks == 0 { // an empty log, at the offset reached
		rep.FirstOffset, rep.NextOffset = r.Position(), r.Position()
		opts := o.Segments
		opts.FirstOffset = r.Position()
		if lg, err = segments.Open(o.Dir, opts); err != nil {
			return rep, fmt.Errorf("restore: %w", err)
		}
	}
	if err := closeLog(); err != nil {
		return rep, fmt.Errorf("restore: %w", err)
	}
	return rep, nil
}

// lastRun finds where the remote tier's last run of consecutive chunks starts: the end of
// its last declared gap (reading group objects from the newest down, only until a gap is
// found), else its first offset.
func lastRun(ctx context.Context, o OfflineSource) (uint64, *GapRange, error) {
	if o.KeyPrefix == "" {
		o.KeyPrefix = manifest.DefaultKeyPrefix
	}
	m, _, err := o.latest()(ctx)
	if err != nil {
		return 0, nil, err
	}
	tier := s3io.Tier{Store: o.Store, KeyPrefix: o.KeyPrefix, Stream: o.Stream}
	var last func(entries []manifest.Entry, end uint64, depth int) (*GapRange, error)
	last = func(entries []manifest.Entry, end uint64, depth int) (*GapRange, error) {
		for i := len(entries) - 1; i >= 0; i-- {
			e := entries[i]
			eEnd := end
			if i+1 < len(entries) {
				eEnd = entries[i+1].FirstOffset
			}
			if eEnd <= m.FirstOffset {
				return nil, nil // below the first offset: retained away
			}
			switch {
			case e.IsGap():
				return &GapRange{From: max(e.FirstOffset, m.FirstOffset), To: eEnd}, nil
			case e.Kind == manifest.KindFragment:
				continue
			case depth >= 4:
				return nil, fmt.Errorf("%s at %d: tree deeper than four levels", e.Kind, e.FirstOffset)
			}
			children, err := fetchGroup(ctx, Env{Tier: tier}, e)
			if err != nil {
				return nil, fmt.Errorf("%s at %d: %w", e.Kind, e.FirstOffset, err)
			}
			if g, err := last(children, eEnd, depth+1); g != nil || err != nil {
				return g, err
			}
		}
		return nil, nil
	}
	g, err := last(m.Entries, m.NextOffset, 0)
	if err != nil || g == nil {
		return m.FirstOffset, nil, err
	}
	return g.To, g, nil
}
