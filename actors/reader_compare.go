package actors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"

	"github.com/streamtier/streamtier/actors/divergence"
	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/segments"
)

// errLocalMoved says the local log lost a chunk while it was being compared with the remote
// tier (its own retention ran): the comparison is void and the resolution is retried, so a
// chunk that is merely gone is never taken for one that differs.
var errLocalMoved = errors.New("the local log moved while it was compared with the remote tier")

// remoteChunks reads the remote tier for a comparison: group objects, fragment indexes and
// single chunk headers, each by a GET of just the bytes needed. Entries carry no epoch, so
// an object's key is found by a listing, once per object (keys).
type remoteChunks struct {
	ctx  context.Context
	tier s3io.Tier
	keys map[manifest.Entry]string
}

// locate finds the key of the object e names, listing only the first time.
func (r remoteChunks) locate(e manifest.Entry) (string, error) {
	if k, ok := r.keys[e]; ok {
		return k, nil
	}
	k, err := r.tier.Locate(r.ctx, e)
	if err != nil {
		return "", err
	}
	r.keys[e] = k
	return k, nil
}

func (r remoteChunks) Children(g manifest.Entry) ([]manifest.Entry, error) {
	key, err := r.locate(g)
	if err != nil {
		return nil, err
	}
	return r.tier.ChildrenAt(r.ctx, key, g)
}

func (r remoteChunks) Index(f manifest.Entry) ([]divergence.IndexEntry, error) {
	key, err := r.locate(f)
	if err != nil {
		return nil, err
	}
	recs, err := r.tier.Store.ReadFragmentIndex(r.ctx, key, 0, f.Size)
	if err != nil {
		return nil, err
	}
	out := make([]divergence.IndexEntry, len(recs))
	for i, rec := range recs {
		out[i] = divergence.IndexEntry{ID: rec.ChunkID, Timestamp: rec.Timestamp, Position: rec.Position}
	}
	return out, nil
}

func (r remoteChunks) Chunk(f manifest.Entry, pos uint32) (divergence.Chunk, error) {
	key, err := r.locate(f)
	if err != nil {
		return divergence.Chunk{}, err
	}
	b, err := r.tier.Store.GetRange(r.ctx, key, int64(pos), chunk.HeaderSize)
	if err != nil {
		return divergence.Chunk{}, fmt.Errorf("get chunk header at %d of %s: %w", pos, key, err)
	}
	h, err := chunk.ParseHeader(b)
	if err != nil {
		return divergence.Chunk{}, fmt.Errorf("chunk header at %d of %s: %w", pos, key, err)
	}
	return chunkOf(h), nil
}

func chunkOf(h chunk.Header) divergence.Chunk {
	return divergence.Chunk{ID: h.ChunkID, Next: h.NextID(), Epoch: h.Epoch, CRC: h.DataCRC, Size: h.Size()}
}

// localChunks reads chunk headers from the local log for a comparison.
type localChunks struct{ log *segments.Log }

func (l localChunks) Chunk(id uint64) (divergence.Chunk, bool, error) {
	h, found, err := l.log.ChunkHeader(id)
	switch {
	case errors.Is(err, segments.ErrBelowFirst), errors.Is(err, segments.ErrSegmentGone):
		return divergence.Chunk{}, false, fmt.Errorf("chunk %d: %w: %v", id, errLocalMoved, err)
	case err != nil:
		return divergence.Chunk{}, false, err
	}
	return chunkOf(h), found, nil
}

// compareWithLocal compares a resolved manifest with the local log chunk by chunk and, when
// the divergence point falls inside a fragment, puts that fragment's prefix back as a new
// object (a ranged GET of the old one, a PUT under a fresh uid) before the core sees the
// answer: the replacement exists before any persist can depend on it, and nothing is
// deleted until the truncation is persisted. The prefix is copied even when the local log
// still holds it: draining it again from the log would leave a window, after the old object
// is deleted, in which the log's own retention could take those chunks before they were
// uploaded again, and they would become a gap below the divergence point.
func compareWithLocal(ctx context.Context, n *Node, stream string, epoch uint64, lg *segments.Log, m manifest.Manifest, first, next uint64) (divergence.Result, error) {
	remote := remoteChunks{ctx: ctx, tier: n.store.Tier(n.cfg.KeyPrefix, stream), keys: map[manifest.Entry]string{}}
	res, err := divergence.Find(m, first, next, remote, localChunks{lg})
	if err != nil {
		return res, fmt.Errorf("compare the remote tier [%d,%d) with the local log [%d,%d): %w", m.FirstOffset, m.NextOffset, first, next, err)
	}
	if t := res.Truncation; res.Kind == divergence.Diverged && t.Straddle != nil {
		repl, err := copyPrefix(ctx, n, remote, stream, epoch, t)
		if err != nil {
			return res, fmt.Errorf("copy the prefix [%d,%d) of the fragment at %d: %w", t.Straddle.FirstOffset, t.At, t.Straddle.FirstOffset, err)
		}
		t.Replacement = &repl
	}
	return res, nil
}

// copyPrefix writes a fragment object holding the chunks of t.Straddle below t.At: its
// chunk region is the first PrefixBytes of the old object's (positions unchanged), followed
// by the index records of those chunks. It streams, holding a copy buffer, not the
// fragment: a first ranged GET of the prefix's chunk region checks every chunk as it
// passes (header, data CRC, contiguous ids, and the ids, timestamps and positions the
// divergence search read from the old object's index) and computes the new object's
// CRC-32; a second ranged GET streams the same bytes into the PUT. Objects are immutable,
// but the second read is not trusted: PutObjectStream checks the body against that CRC-32
// before its last bytes are sent (and the server verifies it too), so bytes that differ
// from the checked ones fail the copy (s3io.ErrBodyMismatch, retriable) and store nothing.
func copyPrefix(ctx context.Context, n *Node, remote remoteChunks, stream string, epoch uint64, t *divergence.Truncation) (manifest.Entry, error) {
	src, err := remote.locate(*t.Straddle)
	if err != nil {
		return manifest.Entry{}, err
	}
	size := int64(t.PrefixBytes)
	hdr := fragment.AppendObjectHeader(nil)
	index := make([]byte, 0, fragment.IndexRecordSize*len(t.Prefix))
	for _, p := range t.Prefix {
		index = fragment.AppendIndexRecord(index, fragment.IndexRecord{ChunkID: p.ID, Timestamp: p.Timestamp, Position: p.Position})
	}
	crc, err := checkPrefix(ctx, n, src, size, t.Prefix, hdr, index)
	if err != nil {
		return manifest.Entry{}, fmt.Errorf("prefix of %s: %w", src, err)
	}
	e := manifest.Entry{
		FirstOffset: t.Straddle.FirstOffset, FirstTimestamp: t.Prefix[0].Timestamp, LastTimestamp: t.PrefixLastTimestamp,
		Size: t.PrefixBytes, UID: rand.Uint64(), Kind: manifest.KindFragment,
	}
	key := manifest.FragmentKey(n.cfg.KeyPrefix, stream, e.FirstOffset, epoch, e.UID)
	region, err := n.store.GetRangeStream(ctx, src, fragment.ObjectHeaderSize, size)
	if err != nil {
		return manifest.Entry{}, err
	}
	defer region.Close()
	body := io.MultiReader(bytes.NewReader(hdr), region, bytes.NewReader(index))
	if err := n.store.PutObjectStream(ctx, key, body, int64(len(hdr))+size+int64(len(index)), crc); err != nil {
		// The PUT was refused or aborted, but a server may still keep what it received of a
		// broken request (versitygw's posix backend sometimes does). The key is new and no
		// manifest names it: delete it now rather than leave it to garbage collection.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.store.TransferTimeout())
		defer cancel()
		if failed, derr := n.store.DeleteObjects(dctx, []string{key}); derr != nil || len(failed) > 0 {
			n.log.Warn().AnErr("error", errors.Join(derr, failed[key])).Str("key", key).
				Msg("could not delete the object of a failed prefix copy (garbage for node gc)")
		}
		return manifest.Entry{}, fmt.Errorf("copy the prefix of %s: %w", src, err)
	}
	return e, nil
}

// prefixCopyBuffer is the copy buffer of a prefix check.
const prefixCopyBuffer = 64 << 10

// checkPrefix reads the first size bytes of the chunk region of the fragment object src as a
// stream, checks that they hold exactly the chunks prefix names, whole and intact, and
// returns the CRC-32 of the object hdr, that region and index make.
func checkPrefix(ctx context.Context, n *Node, src string, size int64, prefix []divergence.IndexEntry, hdr, index []byte) (uint32, error) {
	region, err := n.store.GetRangeStream(ctx, src, fragment.ObjectHeaderSize, size)
	if err != nil {
		return 0, err
	}
	defer region.Close()
	walk := fragment.NewRegionWalker(fragment.ObjectHeaderSize)
	sum := crc32.NewIEEE()
	sum.Write(hdr)
	if _, err := io.CopyBuffer(io.MultiWriter(walk, sum), region, make([]byte, prefixCopyBuffer)); err != nil {
		return 0, err
	}
	chunks, err := walk.Done()
	if err != nil {
		return 0, err
	}
	if len(chunks) != len(prefix) {
		return 0, fmt.Errorf("%w: %d chunks in the first %d bytes, the index names %d", fragment.ErrCorrupt, len(chunks), size, len(prefix))
	}
	for i, c := range chunks {
		if p := prefix[i]; c.Header.ChunkID != p.ID || c.Header.Timestamp != p.Timestamp || c.Position != int64(p.Position) {
			return 0, fmt.Errorf("%w: chunk %d (id %d, ts %d, pos %d) disagrees with its index record (id %d, ts %d, pos %d)",
				fragment.ErrCorrupt, i, c.Header.ChunkID, c.Header.Timestamp, c.Position, p.ID, p.Timestamp, p.Position)
		}
	}
	sum.Write(index)
	return sum.Sum32(), nil
}
