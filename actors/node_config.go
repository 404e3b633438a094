package actors

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors/divergence"
	"github.com/streamtier/streamtier/actors/governorcore"
	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/claim"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/segments"
)

// Config is a node's configuration. Zero values take the defaults of the operations spec.
type Config struct {
	// NodeID names this node in logs, membership and replica messages.
	NodeID string
	// KeyPrefix is the S3 key prefix of every stream (default "streams").
	KeyPrefix string
	// Governor paces and bounds uploads node-wide; a zero rate is unlimited, a zero
	// MaxConcurrent takes DefaultMaxConcurrentUploads, a zero PerStream sets no cap (the
	// governor's share is work-conserving: a lone stream may take every slot).
	Governor governorcore.Config
	// Stream holds the per-stream settings of every stream (fragment size, idle cut, persist
	// triggers, retries, the bound on bytes not yet durable); a spec's Options override them.
	Stream StreamOptions
	// LocalHotWindowBytes keeps up to this many bytes of already-uploaded segments locally
	// as a cache; 0 deletes them right after the persist that made them durable.
	LocalHotWindowBytes int64
	// ReadBudgetBytes bounds what the node's remote readers hold together (in flight,
	// buffered, delivered and not consumed), divided evenly among the open readers
	// (default 256 MiB).
	ReadBudgetBytes int64
	// Read holds the remote readers' range size and concurrency ceiling (zero: the
	// defaults, 4 MiB and 32).
	Read ReadOptions
	// LocalHotWindowAge keeps uploaded segments younger than this; 0 means no age window.
	LocalHotWindowAge time.Duration
	// RetentionInterval is how often remote retention is evaluated besides after each
	// persist, so that max-age trims an idle stream too (default 1 min).
	RetentionInterval time.Duration
	// ResolveBackoffMax bounds the wait between attempts to resolve a manifest at start.
	ResolveBackoffMax time.Duration
	// ClaimRecheck is how often the node re-reads the cluster record (default
	// claim.RecheckInterval, 30 s).
	ClaimRecheck time.Duration
	// StaleAfter: a writer whose last successful persist or resolution is older than this
	// resolves again (with the listing) before its next persist (manifest.md, "Persist";
	// default gc.MinDeleteGrace, 5 min, the shortest grace garbage collection deletes with).
	StaleAfter time.Duration
	// StallRetry is how often a stream stalled on lost or stale metadata (metadata_missing,
	// metadata_behind) resolves again (default 10 s).
	StallRetry time.Duration
	// ResolveTimeout bounds one resolution (anchor, etcd record, root object) (default 30 s).
	ResolveTimeout time.Duration
	// PersistTimeout bounds one persist, the root PUT and the etcd transaction together
	// (default 30 s); a persist past it fails and is retried by the core.
	PersistTimeout time.Duration
	// GroupUploadTimeout bounds one group object PUT of a rebalance (default 60 s).
	GroupUploadTimeout time.Duration
	// DrainIdleClose is how long a stream's drain waits at the end of its local log before
	// it closes its reader's segment file (default 5 s); the next commit reopens it. With the
	// log's own idle close (segments.Options.IdleClose) an idle stream holds no descriptor.
	DrainIdleClose time.Duration
	// DormantAfter is how long a stream's drain stays passive, with everything it drained
	// persisted and nothing in flight, before the stream goes dormant: its actors stop until
	// data, an await or a command wakes it (default 30 s; negative: never).
	DormantAfter time.Duration
	// ParkRetryInterval is how often the reader of a parked stream (one whose reader kept
	// failing until its restart delay reached the ceiling) is retried (default 1 min).
	ParkRetryInterval time.Duration
	// Logger receives the node's structured logs (zerolog is the default).
	Logger zerolog.Logger
	// Slog, when set, receives the node's logs instead of Logger: an embedder that logs
	// with log/slog passes its logger here. Messages, levels and fields carry over; the
	// node logs at the lowest level the logger's handler takes when the node starts.
	Slog *slog.Logger
	// Events receives what happens to the streams as it happens (stalls, pauses, gaps,
	// persisted offsets, ...) and the node's fatal errors; see EventListener.
	Events EventListener
	// Replicas, when set, carries broadcasts and syncs to replica nodes; nil drops them
	// (a single node has no replicas).
	Replicas ReplicaSender
	// System, when set, is the actor system the node runs on (one with protoactor remote
	// already listening: see Listen); nil creates a private one. Stop shuts it down.
	System *actor.ActorSystem

	clock  shell.Clock // nil: the wall clock (tests drive a manual one)
	faults *faultHooks // nil: none (tests inject panics)
}

func (c Config) withDefaults() Config {
	if c.NodeID == "" {
		c.NodeID = "node-1"
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = manifest.DefaultKeyPrefix
	}
	if c.RetentionInterval == 0 {
		c.RetentionInterval = time.Minute
	}
	if c.ResolveBackoffMax == 0 {
		c.ResolveBackoffMax = 5 * time.Second
	}
	if c.ClaimRecheck == 0 {
		c.ClaimRecheck = claim.RecheckInterval
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = 5 * time.Minute
	}
	if c.StallRetry == 0 {
		c.StallRetry = 10 * time.Second
	}
	if c.ResolveTimeout == 0 {
		c.ResolveTimeout = DefaultResolveTimeout
	}
	if c.PersistTimeout == 0 {
		c.PersistTimeout = DefaultPersistTimeout
	}
	if c.GroupUploadTimeout == 0 {
		c.GroupUploadTimeout = DefaultGroupUploadTimeout
	}
	if c.Governor.MaxConcurrent == 0 {
		c.Governor.MaxConcurrent = DefaultMaxConcurrentUploads
	}
	if c.DrainIdleClose == 0 {
		c.DrainIdleClose = DefaultDrainIdleClose
	}
	if c.ParkRetryInterval == 0 {
		c.ParkRetryInterval = DefaultParkRetryInterval
	}
	if c.DormantAfter == 0 {
		c.DormantAfter = DefaultDormantAfter
	}
	if c.Slog != nil {
		c.Logger = shell.ZerologToSlog(c.Slog)
	}
	c.clock = shell.OrWall(c.clock)
	return c
}

// Task deadlines by default (docs/operations.md).
const (
	DefaultResolveTimeout     = 30 * time.Second
	DefaultPersistTimeout     = 30 * time.Second
	DefaultGroupUploadTimeout = 60 * time.Second
	// DefaultParkRetryInterval is how often a parked stream's reader is retried.
	DefaultParkRetryInterval = time.Minute
	DefaultDrainIdleClose    = 5 * time.Second
	// DefaultDormantAfter is how long an idle stream keeps its actors before it goes dormant.
	DefaultDormantAfter = 30 * time.Second
)

// Upload bounds by default (docs/operations.md): 24 uploads at once node-wide, each one S3
// connection, shared among the streams that want them (a lone stream may take all 24).
const (
	DefaultMaxConcurrentUploads = 24
)

// Validate refuses a configuration the node cannot run with, naming the setting.
func (c Config) Validate() error {
	if err := c.Governor.Validate(); err != nil {
		return fmt.Errorf("node config: %w", err)
	}
	if c.LocalHotWindowBytes < 0 {
		return fmt.Errorf("node config: local_hot_window_bytes = %d: negative", c.LocalHotWindowBytes)
	}
	if c.ReadBudgetBytes < 0 {
		return fmt.Errorf("node config: read_budget_bytes = %d: negative", c.ReadBudgetBytes)
	}
	if err := c.Read.fetch().Validate(); err != nil {
		return fmt.Errorf("node config: read_range_bytes / read_max_concurrency: %w", err)
	}
	if c.RetentionInterval < 0 {
		return fmt.Errorf("node config: retention_interval = %s: negative", c.RetentionInterval)
	}
	if c.LocalHotWindowAge < 0 {
		return fmt.Errorf("node config: local_hot_window_age = %s: negative", c.LocalHotWindowAge)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"resolve_timeout", c.ResolveTimeout}, {"persist_timeout", c.PersistTimeout}, {"group_upload_timeout", c.GroupUploadTimeout}, {"drain_idle_close", c.DrainIdleClose}, {"stream_park_retry_interval", c.ParkRetryInterval}} {
		if d.v < 0 {
			return fmt.Errorf("node config: %s = %s: negative", d.name, d.v)
		}
	}
	if c.KeyPrefix != "" && !validKeyPrefix(c.KeyPrefix) {
		return fmt.Errorf("node config: key_prefix = %q: use [A-Za-z0-9._-/], no leading or trailing '/'", c.KeyPrefix)
	}
	if err := c.Stream.core().Validate(); err != nil {
		return fmt.Errorf("node config: %w", err)
	}
	return nil
}

func validKeyPrefix(p string) bool {
	if p[0] == '/' || p[len(p)-1] == '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == '/') {
			return false
		}
	}
	return true
}

// StreamSpec is one stream the node tiers: its id, the local log the broker writes, the
// writer's epoch, its remote retention policy, its replica nodes and its own settings.
type StreamSpec struct {
	ID  string
	Log *segments.Log
	// Epoch is the writer's epoch (the broker's leader epoch for the stream): at least 1,
	// and not below the epoch of the log's last chunk (docs/events.md, "Epochs").
	Epoch     uint64
	Retention manifest.Policy
	Replicas  []string
	// Options, where non-zero, replace the node's Config.Stream for this stream (a negative
	// FragmentMaxAge turns its idle cut off).
	Options StreamOptions
	// Rewritten, when set, says the log's follower saw it rewritten below what it had seen
	// before this stream was added on it (a followed stream restarted on a rewritten log):
	// should the log start above the remote next offset at the stream's first resolution,
	// the stream holds as diverged, naming it, instead of declaring the gap.
	Rewritten *divergence.Rewritten
}

// ErrBadEpoch is returned by AddStream for a spec whose epoch is 0 or below the epoch of
// its local log's last chunk.
var ErrBadEpoch = errors.New("bad writer epoch")

// Validate refuses a spec with a hostile id, no log, epoch 0 or an epoch below its log's
// last chunk's (a writer older than the data it would upload).
func (s StreamSpec) Validate() error {
	if err := manifest.ValidateStreamID(s.ID); err != nil {
		return fmt.Errorf("add stream: %w", err)
	}
	if s.Log == nil {
		return fmt.Errorf("add stream %s: no local log", s.ID)
	}
	if s.Epoch == 0 {
		return fmt.Errorf("add stream %s: epoch 0: epochs start at 1 (give the broker's leader epoch for the stream): %w", s.ID, ErrBadEpoch)
	}
	if last, ok := s.Log.LastChunk(); ok && last.Epoch > s.Epoch {
		return fmt.Errorf("add stream %s: epoch %d is below epoch %d of the local log's last chunk (offset %d): a writer is never older than what it wrote; give the current epoch: %w",
			s.ID, s.Epoch, last.Epoch, last.ChunkID, ErrBadEpoch)
	}
	return nil
}

// ErrUnknownStream is returned for a stream the node does not run.
var ErrUnknownStream = read.ErrUnknownStream

// ErrStreamExists is returned when adding a stream the node already runs.
var ErrStreamExists = errors.New("stream already running")

// ErrLogInUse is returned by AddStream for a local log (the same *segments.Log, or one of
// the same directory) that another stream of the node already tiers: each stream's local
// retention would delete segments the others have not uploaded.
var ErrLogInUse = errors.New("local log already tiered by another stream of this node")

// ErrStreamStopped is returned to await_offset callers of a stream that stopped (deleted,
// removed or node stopped) before their offset was persisted.
var ErrStreamStopped = errors.New("stream stopped")

// ErrOffsetInGap is returned to an await_offset caller whose offset lies in a declared gap:
// the local log lost it before it was uploaded, so it will never be persisted, while the
// stream itself goes on (unlike ErrStreamStopped).
var ErrOffsetInGap = errors.New("offset in a declared gap")

// ErrAwaitUndecided is returned to an await_offset caller whose offset lies inside a group
// object of the remote tier that could not be read to tell a fragment from a declared gap
// (S3 failing): the offset is neither known persisted nor known lost; asking again may
// succeed.
var ErrAwaitUndecided = errors.New("await_offset undecided")

// ErrStreamStarting is returned by commands sent to a stream whose reader has not started
// yet; retrying shortly succeeds.
var ErrStreamStarting = errors.New("stream reader not started yet")

// ErrNodeStopped is returned by calls made after Stop.
var ErrNodeStopped = errors.New("node stopped")

// coreConfig merges the node's stream options with one stream's spec.
func (c Config) coreConfig(s StreamSpec) readercore.Config {
	cfg := c.Stream.over(s.Options).core()
	// What one stream may have in flight sizes its default bound on bytes not yet durable,
	// so that the bound is not what stops a lone stream first.
	cfg.UploadsInFlight = c.Governor.MaxConcurrent
	if c.Governor.PerStream > 0 {
		cfg.UploadsInFlight = c.Governor.PerStream
	}
	cfg.StreamID = s.ID
	cfg.Epoch = s.Epoch
	cfg.Retention = s.Retention
	return cfg
}
