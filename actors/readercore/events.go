package readercore

import (
	"time"

	"github.com/streamtier/streamtier/actors/divergence"
	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/manifest"
)

// Event is one input to the core: something the shell observed (a drained chunk, a result,
// a timer, a request). Events are plain values; Step never keeps them.
type Event interface{ isEvent() }

// Ref names one asynchronous operation the core started: a transfer, a persist, a group
// upload, a retention fetch or a timer. Results and timers carry it back; a ref never
// repeats within a core, so a result addressed to a discarded operation (a late duplicate,
// or one dropped by a gap, a truncation or a reinitialize) matches nothing and is ignored.
type Ref uint64

// WaiterID is the shell's handle for one await_offset caller.
type WaiterID uint64

// RootRef names a root manifest object: the writer's epoch and the object's uid, and for
// a version 3 root its seq (0 for a root of format version 1 or 2).
type RootRef struct {
	Seq   uint64
	Epoch uint64
	UID   uint64
}

// Resolved hands the core the persisted manifest the shell resolved (etcd record, then the
// root from S3), at start and after a Reinitialize. Revision 0 means no record: the stream
// never persisted, and Manifest must then be empty.
type Resolved struct {
	Manifest manifest.Manifest
	Revision int64   // the manifest record's etcd Version
	Root     RootRef // the root object the record names (zero when Revision is 0)
	// NextSeq is the seq the next persisted root takes (one above every version 3 root the
	// resolution listed; a seq a fenced writer took is skipped). 0 means Root.Seq + 1.
	NextSeq uint64
	// Replaced are the roots the resolution itself superseded with a persist of its own (the
	// record's root before an adoption of its child or an upgrade to version 3): the record
	// names a later root, so the core hands them to the reaper as it starts running, as a
	// persist hands it the root it replaced.
	Replaced []RootRef
	// Comparison is how the manifest compares with the local log chunk by chunk (the shell
	// runs divergence.Find against the log LogOpened reports). Its zero value, NotCompared,
	// lets the core's offset rules decide alone.
	Comparison divergence.Result
}

// LogOpened reports the local log's bounds when the shell opens it, at start and after a
// Reinitialize: First is the oldest offset held, Next one past the last (First == Next is an
// empty log). Epoch, when not zero, is the writer's epoch for this run.
type LogOpened struct {
	First uint64
	Next  uint64
	Epoch uint64
	// Rewritten, when set, says the log's follower saw it rewritten below what it had seen
	// before the stream was opened on it (docs/durability.md): should the log start above
	// the remote next offset at the first start, the stream holds as diverged rather than
	// declaring the gap.
	Rewritten *divergence.Rewritten
}

// ChunkDrained is the next committed chunk's header and its place on disk.
type ChunkDrained struct {
	Header   chunk.Header
	Location chunk.Location
}

// DrainSegmentGone says the data reader cannot give the chunk at the drain position because
// the local log no longer (or never did) hold it: the stream's own retention outran the
// drain, or a log that was empty at start began above the manifest's next offset.
// LocalFirst is the local log's oldest offset now; the core declares the gap up to it and
// drains on from there.
type DrainSegmentGone struct{ LocalFirst uint64 }

// EndOfStream says the data reader has no further committed chunk for now. Next is where
// the drain's reader stands (the chunk id it would read next): the core compares it with
// its own drain position. Refused, when set, is why the core refused a chunk of the batch
// this ends (the shell fed none after it), for the stall's reason.
type EndOfStream struct {
	Next    uint64
	Refused string
}

// BatchDrained closes a batch of drained chunks that did not reach the end of committed
// data: the drain waits for ContinueDrain before reading more. Next and Refused are as in
// EndOfStream.
type BatchDrained struct {
	Next    uint64
	Refused string
}

// ForceCut asks for the fragment being assembled to be cut now (operator command, tests).
type ForceCut struct{}

// Outcome classifies the result of an upload (fragment transfer or group object).
type Outcome uint8

// Upload outcomes: success, a transient failure (5xx, SlowDown, timeout, connection reset), a
// non-transient failure (4xx, checksum rejected, unexpected status, crash, corrupt local
// chunk) and, for fragment transfers only, a segment file deleted under the upload.
const (
	OK Outcome = iota
	Retriable
	NonTransient
	SegmentGone
)

// String names the outcome as scenarios print it.
func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Retriable:
		return "retriable"
	case NonTransient:
		return "non-transient"
	case SegmentGone:
		return "segment-gone"
	}
	return "outcome(?)"
}

// TransferResult is what a transfer task reported for one attempt of a fragment upload.
type TransferResult struct {
	Ref     Ref
	Attempt int // the attempt the result belongs to (1 for the first submission)
	Outcome Outcome
	UID     uint64 // OK: the uid of the uploaded object
	// LocalFirst, for SegmentGone, is the local log's oldest offset now: where draining resumes.
	LocalFirst uint64
	Reason     string  // failures: what went wrong, for logs and the stalled report
	Jitter     float64 // a random draw in [0, 1) for the transient backoff; keeps the core deterministic
	// At is when the shell received the result, on its monotonic clock (any fixed origin:
	// only differences count). A failure's retry is due at At plus its backoff.
	At time.Duration
}

// TransferDeadline fires when an attempt's deadline (ArmTransferDeadline) passed.
type TransferDeadline struct {
	Ref     Ref
	Attempt int
}

// RetryTimer fires when a delayed retry is due: the stream's one transfer retry timer
// (ArmRetryTimer: every waiting transfer due by At is resubmitted), the drain's
// (RetryDrainAfter) or a group upload's (RetryGroupUploadAfter).
type RetryTimer struct {
	Ref     Ref
	Attempt int           // a group upload's: the attempt that failed
	At      time.Duration // when it fired, on the clock of TransferResult.At
}

// PersistTimer fires when an ArmPersistTimer's delay passed.
type PersistTimer struct{ Ref Ref }

// CutTimer fires when an ArmCutTimer's delay passed: the fragment being assembled since
// then (if it is still the same one) is cut, whatever its size.
type CutTimer struct{ Ref Ref }

// PersistOutcome classifies a persist attempt's result.
type PersistOutcome uint8

// Persist outcomes: success, an etcd conflict (another writer persisted at this writer's
// epoch or below), not-found (the stream's records are gone), any other failure (root PUT,
// etcd unavailable) and fenced (a higher epoch persisted: this writer is deposed).
const (
	PersistOK PersistOutcome = iota
	PersistConflict
	PersistNotFound
	PersistFailed
	PersistFenced
)

// String names the outcome as scenarios print it.
func (o PersistOutcome) String() string {
	switch o {
	case PersistOK:
		return "ok"
	case PersistConflict:
		return "conflict"
	case PersistNotFound:
		return "not-found"
	case PersistFailed:
		return "error"
	case PersistFenced:
		return "fenced"
	}
	return "persist-outcome(?)"
}

// PersistResult is the outcome of a StartPersist.
type PersistResult struct {
	Ref      Ref
	Outcome  PersistOutcome
	Revision int64  // OK: the manifest record's new Version
	RootUID  uint64 // OK: the uid of the root object written
	// StoredEpoch, for Fenced, is the epoch etcd holds: above the writer's.
	StoredEpoch uint64
	Reason      string
	Now         int64 // ms since the Unix epoch: remote retention runs after a success
}

// GroupUploadResult is the outcome of an UploadGroup attempt (OK, Retriable or NonTransient).
type GroupUploadResult struct {
	Ref     Ref
	Attempt int
	Outcome Outcome
	UID     uint64 // OK: the uid of the group object written
	Reason  string
	Jitter  float64
}

// RetentionGroupFetched delivers the entries of a group fetched for remote retention.
type RetentionGroupFetched struct {
	Ref      Ref
	Children []manifest.Entry
	Now      int64
}

// RetentionGroupFailed says a group fetch for remote retention failed (missing, corrupt, S3 error).
type RetentionGroupFailed struct {
	Ref    Ref
	Reason string
}

// RetentionTimeout says a group fetch for remote retention ran past its timeout.
type RetentionTimeout struct{ Ref Ref }

// LeavesLookedUp answers LookUpLeaves: the leaf holding each offset looked up, a fragment
// or a gap, or Reason when the lookup failed (a group object missing, corrupt, S3 down).
type LeavesLookedUp struct {
	Ref    Ref
	Leaves []Leaf
	Reason string
}

// Leaf is one leaf of the manifest tree: [From, To), a declared gap or a fragment.
type Leaf struct {
	From, To uint64
	Gap      bool
}

// AwaitOffset asks to be told once Offset is persisted (Offset < persisted next offset).
type AwaitOffset struct {
	Offset uint64
	Waiter WaiterID
	// Flush hurries the offset: the fragment holding it is cut as soon as it is drained
	// (not at its target size or idle age), and the manifest is persisted as soon as the
	// uploads up to it are applied (not at the threshold or the interval).
	Flush bool
}

// CancelAwait withdraws a waiter (its caller gave up); it gets no reply.
type CancelAwait struct{ Waiter WaiterID }

// RetentionPolicyChanged sets a new remote retention policy and evaluates it.
type RetentionPolicyChanged struct {
	Policy manifest.Policy
	Now    int64
}

// EvaluateRetention asks for remote retention to be evaluated now (operator command, timer).
type EvaluateRetention struct{ Now int64 }

// OperatorTruncate is an operator's word that a stream whose local log shares no chunk with
// its remote tier may truncate the remote tier (Comparison.Truncation of the resolution)
// and tier the local log from there. Anywhere else it is refused.
type OperatorTruncate struct{}

// ReplicaRegistered says a replica node (re)started and needs a sync.
type ReplicaRegistered struct{ Replica string }

// ResyncRequested says a replica saw a gap or an epoch change and needs a full sync.
type ResyncRequested struct{ Replica string }

// StreamDeleted says the shell found the stream deleted outside a persist result: its
// tombstone at a resolution or a persist, or no record at a resolution though the stream
// had persisted. The core stops for good, in any phase, as on a not-found after a success.
type StreamDeleted struct{ Reason string }

func (Resolved) isEvent()               {}
func (LogOpened) isEvent()              {}
func (ChunkDrained) isEvent()           {}
func (EndOfStream) isEvent()            {}
func (BatchDrained) isEvent()           {}
func (DrainSegmentGone) isEvent()       {}
func (ForceCut) isEvent()               {}
func (TransferResult) isEvent()         {}
func (TransferDeadline) isEvent()       {}
func (RetryTimer) isEvent()             {}
func (PersistTimer) isEvent()           {}
func (CutTimer) isEvent()               {}
func (PersistResult) isEvent()          {}
func (GroupUploadResult) isEvent()      {}
func (RetentionGroupFetched) isEvent()  {}
func (RetentionGroupFailed) isEvent()   {}
func (RetentionTimeout) isEvent()       {}
func (AwaitOffset) isEvent()            {}
func (LeavesLookedUp) isEvent()         {}
func (CancelAwait) isEvent()            {}
func (RetentionPolicyChanged) isEvent() {}
func (EvaluateRetention) isEvent()      {}
func (ReplicaRegistered) isEvent()      {}
func (ResyncRequested) isEvent()        {}
func (OperatorTruncate) isEvent()       {}
func (StreamDeleted) isEvent()          {}
