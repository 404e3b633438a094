package read

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/actors/read/fetchcore"

	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io"
)

// This file is the seam between the cross-tier reader (Node.OpenReader, which routes between
// the tiers and hands off from the remote tier to the local log) and a remote source (which
// walks a stream's remote tier and delivers its chunks in order). Either side can change
// without the other as long as this contract holds.

// Tier says which tier a delivered item came from.
type Tier uint8

// The tiers an item comes from.
const (
	TierLocal Tier = iota + 1
	TierRemote
)

func (t Tier) String() string {
	switch t {
	case TierLocal:
		return "local"
	case TierRemote:
		return "remote"
	}
	return fmt.Sprintf("tier(%d)", uint8(t))
}

// ItemKind says what a Item is.
type ItemKind uint8

// The kinds of items a reader delivers, in offset order.
const (
	// ItemChunk is one whole chunk, its bytes exactly as written, CRC verified.
	ItemChunk ItemKind = iota + 1
	// ItemGap is a declared gap (a manifest gap entry): [Offset, End) is held by no tier
	// and never will be.
	ItemGap
	// ItemSkipped is a range the reader could not deliver because remote retention removed
	// it while the reader was on its way (a 404 on an object the reader's manifest named);
	// the reader went on at End, the new first offset.
	ItemSkipped
)

func (k ItemKind) String() string {
	switch k {
	case ItemChunk:
		return "chunk"
	case ItemGap:
		return "gap"
	case ItemSkipped:
		return "skipped"
	}
	return fmt.Sprintf("item(%d)", uint8(k))
}

// Item is one thing a reader delivers. Items come in offset order, each starting where
// the previous one ended: [Offset, End) of consecutive items tile the offsets read.
//
// Chunk is valid until the next call of Next (or Close) on the reader or source that
// returned it, like bufio.Scanner.Bytes: a remote chunk is a sub-slice of a range buffer
// the reader reuses for a later range once the consumer moved on. A consumer that keeps
// the bytes (or Records decoded from them) past the next Next must copy them.
type Item struct {
	Kind   ItemKind
	Tier   Tier
	Offset uint64       // the chunk id, or the first offset of the gap or skipped range
	End    uint64       // one past the last offset covered (a chunk: Header.NextID())
	Header chunk.Header // ItemChunk only
	Chunk  []byte       // ItemChunk only: header, bloom, data and trailer as written
}

// RemoteEndError is what a remote source's Next returns once it has delivered everything
// below the persisted next offset of the freshest manifest it could read: At is that next
// offset, where the local tier takes over. The source stays usable: a later Next re-reads
// the manifest and goes on if the remote tier has grown past At meanwhile (the hand-off
// point was removed from the local log by its retention, which only runs on persisted
// data).
type RemoteEndError struct{ At uint64 }

func (e *RemoteEndError) Error() string {
	return fmt.Sprintf("end of the remote tier at offset %d", e.At)
}

// ErrRemoteEnd matches every RemoteEndError (errors.Is).
var ErrRemoteEnd = errors.New("end of the remote tier")

// Is lets errors.Is(err, ErrRemoteEnd) match.
func (e *RemoteEndError) Is(target error) bool { return target == ErrRemoteEnd }

// ErrRemoteMissing marks an object the freshest manifest still names but S3 does not hold:
// data loss, or a manifest that never settles. The reader stops rather than skip it.
var ErrRemoteMissing = fetchcore.ErrMissing

// ErrRemoteCorrupt marks remote bytes that do not verify (chunk CRC, headers, ids that do
// not match the manifest entry). Never retried: reading it again gives the same bytes.
var ErrRemoteCorrupt = fetchcore.ErrCorrupt

// remoteSource delivers a stream's remote tier from an offset, in order: chunks (Tier
// remote), gaps and skipped ranges, then a *RemoteEndError. It fails with a typed error on
// what it cannot get past without losing data (a corrupt object, a manifest that does not
// decode); a retriable S3 or etcd fault is retried inside, with backoff, until ctx ends.
// Next and Close are called from one goroutine (the reader's owner); Close stops
// everything the source started and waits for it. An item's Chunk is valid until the next
// Next or Close: calling Next tells the source the consumer is done with the previous one.
type remoteSource interface {
	Next(ctx context.Context) (Item, error)
	Close() error
}

// latestManifest returns the freshest persisted manifest of the stream the reader can see
// (the node's manifest cache on a writer or replica node; etcd and the root object offline)
// and its revision.
type latestManifest func(ctx context.Context) (manifest.Manifest, int64, error)

// Env is what a remote source needs from its node (or from an offline command).
type Env struct {
	s3io.Tier // the stream's remote tier: Store, KeyPrefix, Stream
	Latest    latestManifest
	Log       zerolog.Logger

	// What the remote reader (remotereader.go) takes from the node; each may be left zero
	// (an offline command): a private actor system, a private budget of the default size,
	// private metrics, the wall clock, the core's default settings.
	System *actor.ActorSystem // where the reader's actor runs
	Budget *Budget            // the node's read budget, divided among open readers
	Keys   *Keys              // the object keys the node knows (nil: listed, then kept per reader)
	Stats  *RemoteStats       // the node's remote-read statistics
	Panics *atomic.Int64      // the node's count of tasks that panicked
	Clock  shell.Clock
	Fetch  fetchcore.Config // range size and concurrency ceiling; Budget comes from Budget
	// AtTask is the node's fault hook (tests): a panic injected into a GET, index or walk task.
	AtTask func(name string)

	// getRange replaces Store.GetRangePartial (tests: a GET stuck outside its context).
	getRange func(ctx context.Context, key string, off, n int64, buf []byte) ([]byte, error)
}

// openRemoteSource opens the remote source a reader uses; from is at or above the manifest's
// first offset (the caller attaches below-first readers at the first offset and says so).
// It is a variable so that the implementation behind the seam can be swapped in one place.
var openRemoteSource func(ctx context.Context, env Env, from uint64) (remoteSource, error)
