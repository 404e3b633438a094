package actors

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"streamtier/fragment"
	"streamtier/manifest"
	"streamtier/s3io"
)

// This file is a simple sequential remote source: one GET at a time, fragment after
// fragment, in the caller's goroutine. It is the stand-in behind the seam of readsource.go
// until the adaptive reader replaces it; it keeps the whole contract (order, gaps, skips,
// the end at the persisted next offset) so that the reader above it does not change.

// Bounds of the sequential source.
const (
	// seqRangeBytes is the most chunk-region bytes one GET reads (at least one chunk): a
	// reader holds at most one such range in memory.
	seqRangeBytes = 8 << 20
	// seqGroupCache bounds the group objects a source keeps decoded.
	seqGroupCache = 64
	// seqMissingTries is how often a source re-reads the manifest after a 404 on an object
	// that the manifest still names before it gives up: a replica's cache may lag the
	// writer's retention by a broadcast.
	seqMissingTries = 8
)

// ErrRemoteMissing marks an object the freshest manifest still names but S3 does not hold:
// data loss, or a manifest that never settles. The reader stops rather than skip it.
var ErrRemoteMissing = errors.New("remote object missing though the manifest names it")

// ErrRemoteCorrupt marks remote bytes that do not verify (chunk CRC, headers, ids that do
// not match the manifest entry). Never retried: reading it again gives the same bytes.
var ErrRemoteCorrupt = errors.New("remote data corrupt")

func init() {
	if openRemoteSource == nil {
		openRemoteSource = openSeqSource
	}
}

// seqSource walks the manifest's leaves from an offset and reads each fragment's chunks.
type seqSource struct {
	env  remoteEnv
	ctx  context.Context // the context of the Next in progress, for the group fetcher
	next uint64          // where the next item starts

	m  manifest.Manifest
	it *manifest.Iterator // nil: re-read the manifest first

	cur   *fragCursor // the fragment being read, nil between fragments
	items []ReadItem  // chunks read and not delivered yet

	keys   map[manifest.Entry]string
	groups map[manifest.Entry][]manifest.Entry
	closed bool
}

// fragCursor is a fragment being read range by range.
type fragCursor struct {
	ref  manifest.FragmentRef
	key  string
	recs []fragment.IndexRecord // nil when the whole region is read in one GET
	pos  int64                  // object position of the next chunk to read
	end  int64                  // object position one past the chunk region
	id   uint64                 // chunk id expected at pos
}

func openSeqSource(_ context.Context, env remoteEnv, from uint64) (remoteSource, error) {
	if env.Store == nil || env.Latest == nil {
		return nil, errors.New("open remote source: an object store and a manifest source are required")
	}
	return &seqSource{env: env, next: from, keys: map[manifest.Entry]string{}, groups: map[manifest.Entry][]manifest.Entry{}}, nil
}

// Close releases the source; it holds no goroutine or connection of its own.
func (s *seqSource) Close() error {
	s.closed = true
	s.items, s.cur, s.it = nil, nil, nil
	return nil
}

// Next delivers the next item, or *RemoteEndError at the persisted next offset.
func (s *seqSource) Next(ctx context.Context) (ReadItem, error) {
	if s.closed {
		return ReadItem{}, errors.New("remote source closed")
	}
	s.ctx = ctx
	defer func() { s.ctx = nil }()
	var bo backoff
	missing := 0
	for {
		if len(s.items) > 0 {
			it := s.items[0]
			s.items[0] = ReadItem{}
			s.items = s.items[1:]
			s.next = it.End
			return it, nil
		}
		if err := ctx.Err(); err != nil {
			return ReadItem{}, err
		}
		var err error
		switch {
		case s.cur != nil:
			err = s.readRange(ctx)
		case s.it == nil:
			var item ReadItem
			var ok bool
			if item, ok, err = s.refresh(ctx, missing > 0); err == nil {
				if ok {
					s.next = item.End
					return item, nil
				}
				if s.it == nil {
					return ReadItem{}, &RemoteEndError{At: s.next}
				}
			}
		default:
			fr, ok, ierr := s.it.Next()
			switch {
			case ierr != nil:
				s.it, err = nil, ierr
			case !ok: // this manifest ends here; the next refresh says whether it grew
				s.it = nil
				if item, ok, rerr := s.refresh(ctx, false); rerr != nil {
					err = rerr
				} else if ok {
					s.next = item.End
					return item, nil
				} else if s.it == nil {
					return ReadItem{}, &RemoteEndError{At: s.next}
				}
			case fr.End <= s.next:
			case fr.Gap:
				item := ReadItem{Kind: ItemGap, Tier: TierRemote, Offset: s.next, End: fr.End}
				s.next = fr.End
				return item, nil
			default:
				err = s.startFragment(ctx, fr)
			}
		}
		if err == nil {
			continue
		}
		switch {
		case s3io.IsNotFound(err):
			// Remote retention may have removed what the manifest in hand names: read it
			// again from where we are; refresh tells a race from a loss.
			s.cur, s.it, s.items = nil, nil, nil
			missing++
			if missing > seqMissingTries {
				return ReadItem{}, fmt.Errorf("read %s at %d: %w: %v", s.env.Stream, s.next, ErrRemoteMissing, err)
			}
			s.env.Log.Debug().Err(err).Uint64("offset", s.next).Msg("remote object not found; re-reading the manifest")
			if missing > 1 {
				if werr := bo.wait(ctx); werr != nil {
					return ReadItem{}, werr
				}
			}
		case s3io.Classify(err) == s3io.ClassRetriable:
			s.cur, s.it, s.items = nil, nil, nil // the iterator's error is sticky: start again at s.next
			s.env.Log.Debug().Err(err).Uint64("offset", s.next).Msg("remote read failed; retrying")
			if werr := bo.wait(ctx); werr != nil {
				return ReadItem{}, fmt.Errorf("read %s at %d: %w (last error: %v)", s.env.Stream, s.next, werr, err)
			}
		default:
			if ctx.Err() != nil {
				return ReadItem{}, ctx.Err()
			}
			return ReadItem{}, fmt.Errorf("read %s at %d: %w", s.env.Stream, s.next, err)
		}
	}
}

// refresh reads the freshest manifest and starts a walk at s.next. Below its first offset it
// returns the skipped range (ok) and walks on from there. At or past its next offset it
// leaves s.it nil: the end. afterMissing says an object was not found: a manifest whose
// first offset did not move past s.next still names it, which is reported as not found
// again (the caller retries a few times, then fails).
func (s *seqSource) refresh(ctx context.Context, afterMissing bool) (ReadItem, bool, error) {
	m, _, err := s.env.Latest(ctx)
	if err != nil {
		return ReadItem{}, false, err
	}
	s.m = m
	if s.next < m.FirstOffset {
		item := ReadItem{Kind: ItemSkipped, Tier: TierRemote, Offset: s.next, End: m.FirstOffset}
		s.it = nil
		if len(m.Entries) > 0 && m.FirstOffset < m.NextOffset {
			s.it = manifest.Iterate(m, m.FirstOffset, s.fetch)
		}
		return item, true, nil
	}
	if s.next >= m.NextOffset || len(m.Entries) == 0 {
		s.it = nil
		return ReadItem{}, false, nil
	}
	if afterMissing {
		// Still named: go on, the caller counts; the next GET either finds it (a stale
		// listing) or fails again.
		s.keys = map[manifest.Entry]string{}
	}
	s.it = manifest.Iterate(m, s.next, s.fetch)
	return ReadItem{}, false, nil
}

// fetch is the group fetcher of the walk: it locates the group's key, reads and decodes it,
// and locates the keys of its children with one listing.
func (s *seqSource) fetch(e manifest.Entry) ([]manifest.Entry, error) {
	if c, ok := s.groups[e]; ok {
		return c, nil
	}
	ctx := s.ctx
	key, err := s.locate(ctx, e)
	if err != nil {
		return nil, err
	}
	body, err := s.env.Store.GetObject(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	_, children, err := manifest.DecodeGroup(body)
	if err != nil {
		return nil, fmt.Errorf("group %s: %w: %w", key, ErrRemoteCorrupt, err)
	}
	if len(s.groups) >= seqGroupCache {
		clear(s.groups)
	}
	s.groups[e] = children
	if err := s.locateAll(ctx, children); err != nil {
		return nil, err
	}
	return children, nil
}

// locateAll finds the keys of the entries not located yet with as few listings as
// LocateEntries can.
func (s *seqSource) locateAll(ctx context.Context, es []manifest.Entry) error {
	var want []manifest.Entry
	for _, e := range es {
		if _, ok := s.keys[e]; !ok && !e.IsGap() {
			want = append(want, e)
		}
	}
	if len(want) == 0 {
		return nil
	}
	found, err := s.env.Store.LocateEntries(ctx, s.env.KeyPrefix, s.env.Stream, want)
	if len(s.keys) > 8*manifest.DefaultRebalanceThreshold {
		clear(s.keys)
	}
	for e, k := range found {
		s.keys[e] = k
	}
	return err
}

// locate returns e's key: from what earlier listings found, or by listing e and the
// entries of the root after it (siblings, when e is a root entry) at once.
func (s *seqSource) locate(ctx context.Context, e manifest.Entry) (string, error) {
	if k, ok := s.keys[e]; ok {
		return k, nil
	}
	batch := []manifest.Entry{e}
	i := sort.Search(len(s.m.Entries), func(i int) bool { return s.m.Entries[i].FirstOffset >= e.FirstOffset })
	if i < len(s.m.Entries) && s.m.Entries[i] == e {
		for _, o := range s.m.Entries[i+1:] {
			if o.Kind == e.Kind {
				batch = append(batch, o)
			}
		}
	}
	if err := s.locateAll(ctx, batch); err != nil {
		return "", err
	}
	if k, ok := s.keys[e]; ok {
		return k, nil
	}
	return "", fmt.Errorf("locate %s %s at %d uid %016x: %w", s.env.Stream, e.Kind, e.FirstOffset, e.UID, s3io.ErrNotFound)
}

// startFragment positions a cursor on the chunk of fr holding s.next.
func (s *seqSource) startFragment(ctx context.Context, fr manifest.FragmentRef) error {
	key, err := s.locate(ctx, fr.Entry)
	if err != nil {
		return err
	}
	c := &fragCursor{ref: fr, key: key, pos: fragment.ObjectHeaderSize,
		end: fragment.ObjectHeaderSize + int64(fr.Entry.Size), id: fr.Entry.FirstOffset}
	if s.next > fr.Entry.FirstOffset || fr.Entry.Size > seqRangeBytes {
		recs, err := s.env.Store.ReadFragmentIndex(ctx, key, 0, fr.Entry.Size)
		if err != nil {
			if errors.Is(err, fragment.ErrCorrupt) {
				return fmt.Errorf("%w: %w", ErrRemoteCorrupt, err)
			}
			return err
		}
		if len(recs) == 0 || recs[0].ChunkID != fr.Entry.FirstOffset {
			return fmt.Errorf("%w: fragment %s: its index does not start at the entry's offset %d", ErrRemoteCorrupt, key, fr.Entry.FirstOffset)
		}
		i := sort.Search(len(recs), func(i int) bool { return recs[i].ChunkID > s.next }) - 1
		c.recs, c.pos, c.id = recs[i:], int64(recs[i].Position), recs[i].ChunkID
	}
	s.cur = c
	return nil
}

// readRange reads the cursor's next range (at most seqRangeBytes, at least one chunk, at
// chunk boundaries), verifies it and queues its chunks.
func (s *seqSource) readRange(ctx context.Context) error {
	c := s.cur
	n := c.end - c.pos
	used := 1 // index records consumed by this range
	if c.recs != nil {
		for used < len(c.recs) && int64(c.recs[used].Position)-c.pos <= seqRangeBytes {
			used++
		}
		if used < len(c.recs) {
			n = int64(c.recs[used].Position) - c.pos
		} else {
			used = len(c.recs)
		}
	}
	rng, err := s.env.Store.ReadFragmentRange(ctx, c.key, c.pos, n)
	if err != nil {
		if errors.Is(err, fragment.ErrCorrupt) {
			return fmt.Errorf("%w: %w", ErrRemoteCorrupt, err)
		}
		return err
	}
	if len(rng.Chunks) == 0 || rng.Chunks[0].Header.ChunkID != c.id {
		return fmt.Errorf("%w: fragment %s at %d: first chunk is not %d", ErrRemoteCorrupt, c.key, c.pos, c.id)
	}
	items := make([]ReadItem, 0, len(rng.Chunks))
	for _, ch := range rng.Chunks {
		lo := ch.Position - c.pos
		b := rng.Bytes[lo : lo+ch.Header.Size() : lo+ch.Header.Size()]
		items = append(items, ReadItem{Kind: ItemChunk, Tier: TierRemote, Offset: ch.Header.ChunkID, End: ch.Header.NextID(), Header: ch.Header, Chunk: b})
	}
	last := items[len(items)-1]
	c.pos += n
	c.id = last.End
	if c.recs != nil {
		c.recs = c.recs[used:]
		if len(c.recs) > 0 && c.recs[0].ChunkID != c.id {
			return fmt.Errorf("%w: fragment %s: chunk %d follows chunk %d ending at %d", ErrRemoteCorrupt, c.key, c.recs[0].ChunkID, last.Offset, c.id)
		}
	}
	if c.pos >= c.end {
		if c.id != c.ref.End {
			return fmt.Errorf("%w: fragment %s ends at offset %d, its manifest entry at %d", ErrRemoteCorrupt, c.key, c.id, c.ref.End)
		}
		s.cur = nil
	}
	s.items = items
	return nil
}

// backoff is the retry delay of a source: 50 ms doubling to 2 s.
type backoff struct{ d time.Duration }

func (b *backoff) wait(ctx context.Context) error {
	switch {
	case b.d == 0:
		b.d = 50 * time.Millisecond
	case b.d < 2*time.Second:
		b.d *= 2
	}
	t := time.NewTimer(b.d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
