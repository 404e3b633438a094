package read

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/recovery"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/segments"
)

// This file is the cross-tier reader: Node.OpenReader (and Cluster.OpenReader on replica
// nodes, OpenOffline without a node) route a start between the tiers with routeRead,
// read the remote tier through a remoteSource and the local log through a segments.Reader,
// and hand off between them. A Reader runs in its caller's goroutine (plus whatever its
// remote source starts): it never sends to or waits for an actor, so a slow reader slows
// nobody else.

// Attached says that the offset a reader was asked to start at is held by no tier (below
// both, or lost locally before it was uploaded): the reader started at At instead.
type Attached struct {
	Requested uint64
	At        uint64
}

// Reader delivers a stream's chunks from a start offset across the tiers, in order: each
// item starts where the previous one ended. Next, Position and Close are for one goroutine.
type Reader struct {
	// Stream is the stream read; From the start asked for; Start the offset the first item
	// starts at or holds; Attached is set when Start is not what was asked.
	Stream   string
	From     From
	Start    uint64
	Attached *Attached
	// NextAtOpen is the committed next offset when the reader opened (the remote tier's
	// next offset offline): a reader that should not wait for new data stops there.
	NextAtOpen uint64

	side   Side
	pos    uint64
	tier   Tier
	local  *segments.Reader
	remote remoteSource
	ended  bool  // offline: no more items
	queued *Item // an item to deliver before reading on (a range skipped at a switch)

	lastEnd  uint64        // the At of the last remote end seen with the local log short of it
	bo       shell.Backoff // the wait for the remote tier to grow past a hand-off point the local log no longer holds
	opened   time.Time
	gotFirst bool
	// gotItem is set once an item was delivered: pos is then the exact start of the next one.
	gotItem bool
	// earlyRefused is set once a hand-off before the remote end found the local log short.
	earlyRefused bool
	// awaiting: the local segment holding awaitAt went before it was uploaded and the remote
	// tier ends at or below it; no tier is open until the remote tier reaches it.
	awaiting bool
	awaitAt  uint64
	closed   bool
}

// Side is what a reader reads: the stream's local log (nil offline), the remote tier,
// and the persisted manifest at hand.
// A node builds it (Node.OpenReader, the cluster's OpenReader), OpenOffline builds one
// with no local log; a reader needs nothing else of them.
type Side struct {
	Stream string
	Log    *segments.Log // nil: offline, the remote tier alone
	Env    Env
	// Known is the persisted manifest at hand; false: not resolved yet.
	Known   func() (manifest.Manifest, bool)
	Metrics *Metrics
}

// OfflineSource is what an offline reader reads: a stream's remote tier straight from etcd
// and the bucket, with no node running.
type OfflineSource struct {
	Store     *s3io.Store
	Meta      *metadata.Store
	KeyPrefix string // default manifest.DefaultKeyPrefix
	Stream    string
	Log       zerolog.Logger
	Metrics   *Metrics // may be nil
	// FromBucket reads the newest persisted manifest from the bucket alone, with the root
	// choice of `node recover` (recovery.Latest), and never asks etcd: Meta may be nil. It
	// is the read-only mount of an auditor, or of a cluster whose etcd was lost.
	FromBucket bool
}

// OpenOffline opens a reader of the remote tier alone; its Next returns io.EOF at the
// end of what the freshest persisted manifest holds.
func OpenOffline(ctx context.Context, o OfflineSource, from From) (*Reader, error) {
	if o.Store == nil || o.Meta == nil && !o.FromBucket {
		return nil, errors.New("open offline reader: an object store and a metadata store (or FromBucket) are required")
	}
	if err := manifest.ValidateStreamID(o.Stream); err != nil {
		return nil, fmt.Errorf("open offline reader: %w", err)
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = manifest.DefaultKeyPrefix
	}
	if o.Metrics == nil {
		o.Metrics = &Metrics{}
	}
	latest := o.latest()
	m, _, err := latest(ctx)
	if err != nil {
		return nil, err
	}
	cur := m
	side := Side{
		Stream: o.Stream, Metrics: o.Metrics,
		Known: func() (manifest.Manifest, bool) { return cur, true },
		Env: Env{Tier: s3io.Tier{Store: o.Store, KeyPrefix: o.KeyPrefix, Stream: o.Stream}, Log: o.Log,
			Latest: func(ctx context.Context) (manifest.Manifest, int64, error) {
				m, rev, err := latest(ctx)
				if err == nil {
					cur = m
				}
				return m, rev, err
			}},
	}
	return Open(ctx, side, from)
}

// ErrNoManifest is returned offline for a stream that has no manifest record (never
// persisted, or unknown).
var ErrNoManifest = errors.New("no persisted manifest")

// latest is the source of the newest persisted manifest: the bucket alone with FromBucket,
// else etcd's record and the root it names.
func (o OfflineSource) latest() latestManifest {
	if o.FromBucket {
		return bucketLatest(o)
	}
	return offlineLatest(o)
}

// offlineLatest reads the manifest record from etcd and the root it names (again only when
// the revision moved).
func offlineLatest(o OfflineSource) latestManifest {
	var (
		have bool
		rev  int64
		m    manifest.Manifest
	)
	return func(ctx context.Context) (manifest.Manifest, int64, error) {
		var bo shell.Backoff
		for attempt := 1; ; attempt++ {
			rec, r, found, err := o.Meta.ReadManifest(ctx, o.Stream)
			if err != nil {
				return manifest.Manifest{}, 0, fmt.Errorf("read manifest record of %s: %w", o.Stream, err)
			}
			if !found {
				return manifest.Manifest{}, 0, fmt.Errorf("stream %s: %w", o.Stream, ErrNoManifest)
			}
			if have && r == rev {
				return m, rev, nil
			}
			key := rec.RootKey(o.KeyPrefix, o.Stream)
			body, err := o.Store.GetObject(ctx, key)
			if err != nil {
				// A persist meanwhile replaced the root and the reaper deleted the old one:
				// read the record again.
				if (s3io.IsNotFound(err) || s3io.IsRetriable(err)) && attempt < 20 {
					if werr := bo.Wait(ctx); werr != nil {
						return manifest.Manifest{}, 0, werr
					}
					continue
				}
				return manifest.Manifest{}, 0, fmt.Errorf("get root %s: %w", key, err)
			}
			dm, err := manifest.DecodeRoot(body)
			if err != nil {
				return manifest.Manifest{}, 0, fmt.Errorf("root %s: %w: %w", key, ErrRemoteCorrupt, err)
			}
			m, rev, have = dm, r, true
			return m, rev, nil
		}
	}
}

// bucketLatest chooses the newest persisted manifest from the bucket alone each time it
// is asked (the listing shows persists since); its revision is the root's seq (version 3)
// or 1 (a single version 1 or 2 root).
func bucketLatest(o OfflineSource) latestManifest {
	return func(ctx context.Context) (manifest.Manifest, int64, error) {
		r, err := recovery.Latest(ctx, o.Store, o.KeyPrefix, o.Stream)
		if err != nil {
			if errors.Is(err, recovery.ErrNoRoot) {
				return manifest.Manifest{}, 0, fmt.Errorf("%w: %w", ErrNoManifest, err)
			}
			return manifest.Manifest{}, 0, err
		}
		rev := int64(1)
		if r.Version >= 3 {
			rev = int64(r.Lineage.Seq)
		}
		return r.Manifest, rev, nil
	}
}

// Open opens a reader of side's stream from from: it resolves the start, routes it between
// the tiers and opens the first one.
func Open(ctx context.Context, side Side, from From) (*Reader, error) {
	r := &Reader{Stream: side.Stream, From: from, side: side, opened: time.Now()}
	for attempt := 0; ; attempt++ {
		err := r.open(ctx)
		if err == nil {
			break
		}
		// Local retention may remove the start between the decision and the open: decide
		// again on fresh inputs.
		if errors.Is(err, segments.ErrBelowFirst) && attempt < 5 {
			continue
		}
		side.Metrics.countError(err)
		return nil, fmt.Errorf("open reader of %s from %s: %w", side.Stream, from, err)
	}
	side.Metrics.ReadersOpen.Add(1)
	side.Metrics.ReadersOpened.Add(1)
	return r, nil
}

func (r *Reader) open(ctx context.Context) error {
	m, ok := r.side.Known()
	in := routeInput{From: r.From, RemoteKnown: ok, RemoteFirst: m.FirstOffset, RemoteNext: m.NextOffset}
	if ok && len(m.Entries) == 0 {
		in.RemoteFirst = m.NextOffset
	}
	if log := r.side.Log; log != nil {
		in.LocalPresent = true
		in.LocalFirst, in.LocalNext = log.FirstOffset(), log.CommittedNext()
		if in.LocalNext < in.LocalFirst { // nothing committed in what the log still holds
			in.LocalNext = in.LocalFirst
		}
		r.NextAtOpen = in.LocalNext
	} else {
		r.NextAtOpen = m.NextOffset
	}
	if !ok {
		return ErrUnavailable
	}
	switch r.From.Kind {
	case AtLast:
		in.From = FromOffset(lastOffset(in))
	case AtTimestamp:
		off, err := r.timestampOffset(ctx, m, in)
		if err != nil {
			return err
		}
		in.From = FromOffset(off)
	}
	d, err := routeRead(in)
	if err != nil {
		return err
	}
	if d.Attached {
		r.Attached = &Attached{Requested: in.From.Offset, At: d.From}
	}
	r.Start, r.pos = d.From, d.From
	if d.End {
		r.ended = true
		return nil
	}
	if d.Tier == TierLocal {
		return r.openLocal(d.From)
	}
	return r.openRemote(ctx, d.From)
}

// lastOffset is the last committed offset: in the local log when it holds one, else the
// remote tier's last; the next offset when neither holds anything (the reader waits).
func lastOffset(in routeInput) uint64 {
	switch {
	case in.LocalPresent && in.LocalNext > in.LocalFirst:
		return in.LocalNext - 1
	case in.RemoteNext > in.RemoteFirst:
		return in.RemoteNext - 1
	case in.LocalPresent:
		return in.LocalNext
	}
	return in.RemoteNext
}

// timestampOffset finds the first chunk at or after the start's timestamp: in the manifest
// (a descent through the groups, then the fragment's index), else in the local index; past
// every chunk it is the next offset.
func (r *Reader) timestampOffset(ctx context.Context, m manifest.Manifest, in routeInput) (uint64, error) {
	ts := r.From.Timestamp
	if len(m.Entries) > 0 {
		env := r.side.Env
		fetch := func(e manifest.Entry) ([]manifest.Entry, error) { return fetchGroup(ctx, env, e) }
		fr, err := manifest.LookupTimestamp(m, ts, fetch)
		switch {
		case err == nil:
			key, err := env.Store.LocateEntry(ctx, env.KeyPrefix, env.Stream, fr.Entry)
			if err != nil {
				return 0, fmt.Errorf("timestamp %d: %w", ts, err)
			}
			recs, err := env.Store.ReadFragmentIndex(ctx, key, 0, fr.Entry.Size)
			if err != nil {
				return 0, fmt.Errorf("timestamp %d: %w", ts, err)
			}
			i := sort.Search(len(recs), func(i int) bool { return recs[i].Timestamp >= ts })
			if i < len(recs) {
				return max(recs[i].ChunkID, m.FirstOffset), nil
			}
			return fr.End, nil
		case !errors.Is(err, manifest.ErrAboveNext):
			return 0, fmt.Errorf("timestamp %d: %w", ts, err)
		}
	}
	if r.side.Log != nil {
		off, found, err := r.side.Log.OffsetAtTimestamp(ts)
		if err != nil {
			return 0, err
		}
		if found {
			return max(off, in.LocalFirst), nil
		}
		return in.LocalNext, nil
	}
	return in.RemoteNext, nil
}

// fetchGroup reads and decodes the group object e names.
func fetchGroup(ctx context.Context, env Env, e manifest.Entry) ([]manifest.Entry, error) {
	children, err := env.children(ctx, e)
	if errors.Is(err, manifest.ErrCorrupt) {
		return nil, fmt.Errorf("%w: %w", ErrRemoteCorrupt, err)
	}
	return children, err
}

func (r *Reader) openLocal(from uint64) error {
	rd, err := r.side.Log.NewReader(from)
	if err != nil {
		return err
	}
	r.local, r.tier = rd, TierLocal
	return nil
}

// openRemote opens the remote source at from; below the manifest's first offset (remote
// retention removed it meanwhile) it opens at the first offset and queues the skipped range.
func (r *Reader) openRemote(ctx context.Context, from uint64) error {
	if m, ok := r.side.Known(); ok && from < m.FirstOffset {
		r.queued = &Item{Kind: ItemSkipped, Tier: TierRemote, Offset: from, End: m.FirstOffset}
		from = m.FirstOffset
	}
	src, err := openRemoteSource(ctx, r.side.Env, from)
	if err != nil {
		return err
	}
	r.remote, r.tier = src, TierRemote
	return nil
}

// Position is the offset the next item starts at (or holds, for a first item that starts
// inside a chunk).
func (r *Reader) Position() uint64 { return r.pos }

// ErrReaderClosed is returned by Next after Close.
var ErrReaderClosed = errors.New("reader closed")

// Next returns the next item: a chunk (bytes as written, CRC verified), a declared gap or
// a range skipped because remote retention removed it meanwhile. At the local log's tail
// it waits for new committed data until ctx ends; an offline reader returns io.EOF at the
// end of the remote tier. The item's Chunk is valid until the next Next or Close (its
// buffer is reused for a later range): copy what must outlive it.
func (r *Reader) Next(ctx context.Context) (Item, error) {
	if r.closed {
		return Item{}, ErrReaderClosed
	}
	it, err := r.next(ctx)
	if err != nil {
		if !errors.Is(err, io.EOF) {
			r.side.Metrics.countError(err)
		}
		return Item{}, err
	}
	if it.End > r.pos {
		r.pos = it.End
	}
	r.gotItem = true
	r.side.Metrics.observe(it)
	if !r.gotFirst && it.Kind == ItemChunk {
		r.gotFirst = true
		r.side.Metrics.observeFirstChunk(time.Since(r.opened))
	}
	return it, nil
}

func (r *Reader) next(ctx context.Context) (Item, error) {
	for {
		if err := ctx.Err(); err != nil {
			return Item{}, err
		}
		switch {
		case r.queued != nil:
			it := *r.queued
			r.queued = nil
			return it, nil
		case r.ended:
			return Item{}, io.EOF
		case r.awaiting:
			if err := r.awaitRemote(ctx); err != nil {
				return Item{}, err
			}
		case r.tier == TierLocal:
			it, err, again := r.nextLocal(ctx)
			if again {
				continue
			}
			return it, err
		case r.tier == TierRemote:
			if r.gotItem && !r.earlyRefused && r.localHolds(r.pos) {
				// The local log holds the position: read it there (no GETs, no waiting for
				// persists), as a reader opened here would.
				err := r.handOffAt(r.pos)
				if err == nil {
					continue
				}
				if !errors.Is(err, segments.ErrBelowFirst) && !errors.Is(err, segments.ErrSegmentGone) {
					return Item{}, err
				}
				// Retention got there first: read on remotely, and leave the hand-off to the
				// remote end from now on rather than try again at every item.
				r.earlyRefused = true
			}
			it, err := r.remote.Next(ctx)
			var end *RemoteEndError
			if errors.As(err, &end) {
				if err := r.atRemoteEnd(ctx, end.At); err != nil {
					return Item{}, err
				}
				continue
			}
			return it, err
		default:
			return Item{}, errors.New("reader has no tier open")
		}
	}
}

// nextLocal reads the next committed chunk of the local log; again says "loop": the reader
// waited for a commit or moved to the remote tier.
func (r *Reader) nextLocal(ctx context.Context) (Item, error, bool) {
	log := r.side.Log
	// The chunk this call delivers: once Next has read its header the segments.Reader has
	// moved past it, yet its body may still be gone (below).
	at := r.local.NextOffset()
	h, loc, err := r.local.Next()
	if err == nil {
		var b []byte
		if b, h, err = log.ReadChunk(loc); err == nil {
			return Item{Kind: ItemChunk, Tier: TierLocal, Offset: h.ChunkID, End: h.NextID(), Header: h, Chunk: b}, nil, false
		}
	}
	switch {
	case errors.Is(err, segments.ErrEndOfStream):
		select {
		case <-log.NotifyWhenCommittedPast(r.local.NextOffset()):
			return Item{}, nil, true
		case <-ctx.Done():
			return Item{}, ctx.Err(), false
		}
	case errors.Is(err, segments.ErrSegmentGone):
		// Local retention removed what the reader needs: it is uploaded (retention only
		// removes persisted data), read it remotely, from the chunk not delivered: the
		// segment may have gone after Next read the chunk's header (through the reader's
		// open file) and before its body was read (by name), and continuing from
		// r.local.NextOffset() would then skip that chunk.
		r.local.Close()
		r.local = nil
		if m, ok := r.side.Known(); ok && at >= m.NextOffset {
			// Not uploaded: the broker's retention took it first. The writer declares the
			// loss as a gap once it finds the segment gone; wait for the remote tier to
			// reach at (awaitRemote) rather than open it above its end, which fails.
			r.side.Env.Log.Debug().Uint64("offset", at).Uint64("remote_next", m.NextOffset).
				Msg("local segment gone under a reader before it was uploaded; waiting for the remote tier to reach it")
			r.awaiting, r.awaitAt, r.bo = true, at, shell.Backoff{}
			return Item{}, nil, true
		}
		r.side.Env.Log.Debug().Uint64("offset", at).Msg("local segment gone under a reader; reading remotely")
		if err := r.openRemote(ctx, at); err != nil {
			return Item{}, err, false
		}
		return Item{}, nil, true
	}
	return Item{}, err, false
}

// awaitRemote waits, backing off as atRemoteEnd's handOffRemote case does, until the
// remote tier the reader knows reaches awaitAt (an upload, or the gap the writer declares
// for a segment lost before its upload), then opens it there.
func (r *Reader) awaitRemote(ctx context.Context) error {
	if m, ok := r.side.Known(); ok && r.awaitAt < m.NextOffset {
		r.awaiting, r.bo = false, shell.Backoff{}
		return r.openRemote(ctx, r.awaitAt)
	}
	return r.bo.Wait(ctx)
}

// atRemoteEnd hands off to the local log at at, or goes on remotely, or waits (handOff).
func (r *Reader) atRemoteEnd(ctx context.Context, at uint64) error {
	var first, next uint64
	if log := r.side.Log; log != nil {
		first, next = log.FirstOffset(), log.CommittedNext()
	}
	switch handOff(at, r.side.Log != nil, first, next) {
	case handOffEnd:
		r.ended = true
		return nil
	case handOffLocal:
		err := r.handOffAt(at)
		if errors.Is(err, segments.ErrBelowFirst) {
			return nil // retention got there first: ask the remote source again
		}
		return err
	case handOffWait:
		select {
		case <-r.side.Log.NotifyWhenCommittedPast(at - 1):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second): // or the remote tier grows
			return nil
		}
	}
	// handOffRemote: the remote tier must grow past at (an upload, or a gap the writer
	// declares for what the local log lost): ask again, backing off while it has not.
	if at == r.lastEnd {
		if err := r.bo.Wait(ctx); err != nil {
			return err
		}
	} else {
		r.bo = shell.Backoff{}
	}
	r.lastEnd = at
	return nil
}

// localHolds reports whether the local log holds committed data at pos.
func (r *Reader) localHolds(pos uint64) bool {
	log := r.side.Log
	return log != nil && log.FirstOffset() <= pos && pos < log.CommittedNext()
}

// handOffAt moves the reader from the remote tier to the local log at pos, the end of the
// last item delivered; segments.ErrBelowFirst says local retention removed pos meanwhile.
func (r *Reader) handOffAt(pos uint64) error {
	if err := r.openLocal(pos); err != nil {
		return err
	}
	r.remote.Close()
	r.remote = nil
	r.side.Metrics.Handoffs.Add(1)
	r.bo = shell.Backoff{}
	return nil
}

// Close releases the reader's files and remote source.
func (r *Reader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	r.side.Metrics.ReadersOpen.Add(-1)
	var errs []error
	if r.local != nil {
		errs = append(errs, r.local.Close())
	}
	if r.remote != nil {
		errs = append(errs, r.remote.Close())
	}
	return errors.Join(errs...)
}
