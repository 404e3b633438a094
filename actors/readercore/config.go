package readercore

import (
	"fmt"
	"time"

	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/manifest"
)

// Defaults from the operations spec; a zero Config field takes the default.
const (
	DefaultFragmentTargetSize   = 64 << 20
	DefaultPersistThreshold     = 5
	DefaultPersistInterval      = 2 * time.Second
	DefaultRebalanceThreshold   = 1024
	DefaultUploadRetryDelay     = time.Second
	DefaultUploadRetryMaxDelay  = 30 * time.Second
	DefaultTransientBackoffBase = 10 * time.Millisecond
	DefaultTransientBackoffMax  = 5 * time.Second
	DefaultTransferDeadline     = 20 * time.Minute // four times s3io's default transfer timeout (5 min)
	DefaultRetentionTimeout     = 60 * time.Second
	// DefaultFragmentMaxAge is how long the oldest chunk of a fragment being assembled may
	// wait (from its arrival at the core) before the fragment is cut below its target size.
	DefaultFragmentMaxAge = 60 * time.Second
	// DefaultUploadsInFlight is how many uploads of one stream may run at once when
	// Config.UploadsInFlight is zero (a core outside a node); the node passes its own.
	DefaultUploadsInFlight = 2
)

// Config is what a core needs to decide: the stream, the writer's epoch, the cut and
// persist triggers, the retry schedules and the remote retention policy. Durations are
// handed to the shell in effects; the core itself never reads a clock.
type Config struct {
	StreamID string // validated like an S3 key component
	Epoch    uint64 // the writer's epoch; LogOpened may raise it, never lower it

	FragmentTargetSize uint64 // cut when a fragment's chunk bytes reach this (crossing chunk included)
	// FragmentMaxAge cuts the fragment being assembled, whatever its size, once its oldest
	// chunk arrived this long ago (the idle cut: the tail of a stream that went quiet is
	// uploaded). Zero takes the default (60 s); a negative value disables the idle cut.
	FragmentMaxAge     time.Duration
	PersistThreshold   int           // unpersisted edits that trigger a persist
	PersistInterval    time.Duration // longest an edit waits for a persist
	RebalanceThreshold int           // M: entries per group object

	UploadRetryDelay     time.Duration // first delay after a non-transient transfer failure
	UploadRetryMaxDelay  time.Duration // the delay doubles up to this
	TransientBackoffBase time.Duration // second retriable failure waits this; the first retries at once
	TransientBackoffMax  time.Duration // the transient delay doubles up to this
	TransferDeadline     time.Duration // resubmit a transfer whose result never came (the shell arms it at admission)
	RetentionTimeout     time.Duration // bound on a group download for remote retention

	// MaxUnpersistedBytes bounds the chunk bytes a stream holds drained and not yet durable:
	// the fragment being assembled, every cut fragment not yet applied (in flight, waiting
	// for a retry, uploaded out of order) and the uploaded fragments not yet persisted. At
	// the bound the core takes no more chunks (the drain pauses; the local log grows on) and
	// resumes by itself once a persist makes bytes durable. Zero means 2 x UploadsInFlight + 2
	// fragment target sizes (UnpersistedBound); it may not be below the fragment target size
	// (a fragment could never be cut).
	MaxUnpersistedBytes uint64
	// UploadsInFlight is how many of this stream's uploads may run at once (the governor's
	// allowance for one stream: max_concurrent_uploads, or the per-stream cap when one is
	// set). It only sizes the default MaxUnpersistedBytes; zero means
	// DefaultUploadsInFlight.
	UploadsInFlight int

	Retention manifest.Policy // remote retention; zero means keep everything

	// RefBase is where this core's references start. A shell that replaces its core (after
	// a supervisor restart) passes a base above every reference the previous core handed
	// out, so that results addressed to the old core can never match the new one.
	RefBase uint64

	// AnchorReinitialized says an earlier core of this stream already reinitialized because
	// its first persist found no anchor (Reinitialize.AnchorMissing): when that recurs, the
	// persist is retried each PersistInterval and reported in status instead. A core that
	// reinitializes itself for it sets it in its own copy.
	AnchorReinitialized bool

	// Counters are where this core's counts start: a shell that wakes a dormant stream
	// passes the counts its previous core had, so that they stay monotonic for the stream.
	Counters Counters
}

// withDefaults fills zero fields with the spec's defaults.
func (c Config) withDefaults() Config {
	if c.FragmentTargetSize == 0 {
		c.FragmentTargetSize = DefaultFragmentTargetSize
	}
	if c.FragmentMaxAge == 0 {
		c.FragmentMaxAge = DefaultFragmentMaxAge
	}
	if c.PersistThreshold == 0 {
		c.PersistThreshold = DefaultPersistThreshold
	}
	if c.PersistInterval == 0 {
		c.PersistInterval = DefaultPersistInterval
	}
	if c.RebalanceThreshold == 0 {
		c.RebalanceThreshold = DefaultRebalanceThreshold
	}
	if c.UploadRetryDelay == 0 {
		c.UploadRetryDelay = DefaultUploadRetryDelay
	}
	if c.UploadRetryMaxDelay == 0 {
		c.UploadRetryMaxDelay = DefaultUploadRetryMaxDelay
	}
	if c.TransientBackoffBase == 0 {
		c.TransientBackoffBase = DefaultTransientBackoffBase
	}
	if c.TransientBackoffMax == 0 {
		c.TransientBackoffMax = DefaultTransientBackoffMax
	}
	if c.TransferDeadline == 0 {
		c.TransferDeadline = DefaultTransferDeadline
	}
	if c.RetentionTimeout == 0 {
		c.RetentionTimeout = DefaultRetentionTimeout
	}
	if c.UploadsInFlight == 0 {
		c.UploadsInFlight = DefaultUploadsInFlight
	}
	if c.MaxUnpersistedBytes == 0 {
		c.MaxUnpersistedBytes = UnpersistedBound(c.FragmentTargetSize, c.UploadsInFlight)
	}
	return c
}

// Validate refuses settings the core cannot run with, naming the setting; zero values
// take their defaults first. The per-stream fields (StreamID, Epoch, Retention) are New's
// to check: a node validates its settings once, before any stream exists.
func (c Config) Validate() error {
	return c.withDefaults().validate()
}

// validate refuses a configuration the core cannot run with, naming the setting; defaults
// are applied already.
func (c Config) validate() error {
	bad := func(setting string, v any, why string) error {
		return fmt.Errorf("replica reader config for %s: %s = %v: %s", c.StreamID, setting, v, why)
	}
	switch {
	case c.FragmentTargetSize > fragment.MaxTargetSize:
		return bad("fragment_target_size", c.FragmentTargetSize, fmt.Sprintf("above %d (index positions are 32-bit)", uint64(fragment.MaxTargetSize)))
	case c.PersistThreshold < 1:
		return bad("persist_threshold", c.PersistThreshold, "must be at least 1")
	case c.PersistInterval < 0:
		return bad("persist_interval", c.PersistInterval, "must be positive")
	case c.RebalanceThreshold < 2:
		return bad("rebalance_threshold", c.RebalanceThreshold, "must be at least 2")
	case c.UploadRetryDelay < 0:
		return bad("upload_retry_delay", c.UploadRetryDelay, "must be positive")
	case c.UploadRetryMaxDelay < c.UploadRetryDelay:
		return bad("upload_retry_max_delay", c.UploadRetryMaxDelay, "below upload_retry_delay")
	case c.TransientBackoffBase < 0:
		return bad("transient_backoff_base", c.TransientBackoffBase, "must be positive")
	case c.TransientBackoffMax < c.TransientBackoffBase:
		return bad("transient_backoff_max", c.TransientBackoffMax, "below transient_backoff_base")
	case c.TransferDeadline < 0:
		return bad("transfer_deadline", c.TransferDeadline, "must be positive")
	case c.RetentionTimeout < 0:
		return bad("retention_task_timeout", c.RetentionTimeout, "must be positive")
	case c.MaxUnpersistedBytes < c.FragmentTargetSize:
		return bad("max_unpersisted_bytes", c.MaxUnpersistedBytes, fmt.Sprintf("below fragment_target_size %d: the drain would pause before a fragment could be cut", c.FragmentTargetSize))
	}
	return nil
}

// UnpersistedBound is the default bound on a stream's bytes not yet durable: room for
// every upload the stream may have in flight, as many uploaded fragments again waiting for
// the persist that batches them (a persist takes a while when uploads load the stores: 0.2
// to 1 s on the benchmark's machine), the fragment being assembled and one more, so that a
// lone stream keeps every upload slot busy and its drain pauses only when uploads or
// persists fall behind. 6 fragments (384 MiB at 64 MiB) with 2 uploads in flight; 50 (3.1
// GiB) with the node's 24. An uploaded fragment waiting for its persist holds one manifest
// entry, not its chunk records, so the memory the bound allows is that of the first half.
func UnpersistedBound(fragmentTarget uint64, uploadsInFlight int) uint64 {
	return uint64(2*max(uploadsInFlight, 1)+2) * fragmentTarget
}
