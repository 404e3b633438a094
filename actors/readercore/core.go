// Package readercore is the replica reader's decision logic as a pure state machine: the
// upload path's core. The shell (an actor) feeds it events (a drained chunk header, a
// transfer result, a timer, a persist result, a request) through Step and executes the
// effects it returns (submit a transfer, persist, publish, delete, reply). The core does no
// I/O, reads no clock and draws no random numbers: time, uids and jitter come in with the
// events, so the same events always give the same effects.
//
// The design, the rules and how the scenario files read are in docs/replica-reader-core.md.
package readercore

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/streamtier/streamtier/actors/divergence"
	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/manifest"
)

// phase is where the core is in its life.
type phase uint8

const (
	phaseStarting phase = iota // waiting for Resolved and LogOpened (at start, after Reinitialize)
	phaseRunning
	phaseStopped // the stream is gone; every event is ignored
)

func (p phase) String() string {
	switch p {
	case phaseStarting:
		return "starting"
	case phaseRunning:
		return "running"
	case phaseStopped:
		return "stopped"
	}
	return "phase(?)"
}

// transferState is where one cut fragment is in its upload.
type transferState uint8

const (
	transferInFlight transferState = iota // an attempt is with the governor
	transferWaiting                       // a failed attempt waits for its retry timer
	transferDone                          // uploaded; waits for the fragments cut before it
)

// transfer is one cut fragment from its cut until its completion is applied in cut order.
type transfer struct {
	ref          Ref
	desc         fragment.Description
	attempt      int
	state        transferState
	due          time.Duration // transferWaiting: when its retry is due (the clock of TransferResult.At)
	uid          uint64
	transient    int // retriable failures so far
	nonTransient int // non-transient failures so far
	stalled      bool
}

// pendingEdit is an edit applied to the in-memory manifest and not yet persisted, with the
// objects it stops referencing: they may be deleted once a persist has recorded it.
type pendingEdit struct {
	edit       manifest.Edit
	deletes    []manifest.Entry
	deleteFrom uint64 // groups in deletes go with everything under them from this offset
	append     bool   // a fragment or gap append (does not touch the head)
	gap        bool   // declares a gap: no bytes, no timestamps
}

// pendingReset is a truncation of the remote tier that has not been persisted yet: until
// it is, nothing is published (the persisted manifest holds the discarded timeline).
type pendingReset struct {
	reason TruncateReason
	base   manifest.Manifest // the truncated manifest the pending edits apply to
	stale  []manifest.Entry  // objects wholly above the cut, deleted (with all below them) once persisted
	alone  []manifest.Entry  // groups the cut expanded: their object alone goes
}

// persistOp is the one persist in flight.
type persistOp struct {
	ref      Ref
	root     manifest.Manifest
	edits    []pendingEdit
	reset    *pendingReset
	expected int64
	seq      uint64  // the version 3 root's seq
	parent   RootRef // the root it is built on (the one the record names when it starts)
}

// rebalanceOp is the one group upload in flight.
type rebalanceOp struct {
	ref      Ref
	attempt  int
	r        manifest.Rebalance
	failures int
	waiting  bool // a retry timer is armed
}

// retentionOp is the one group fetch for remote retention in flight.
type retentionOp struct {
	ref   Ref
	group manifest.Entry
	walk  manifest.Retention // the evaluation that asked for the group; Resume continues it
}

type waiter struct {
	id     WaiterID
	offset uint64
}

// Core is the replica reader's state for one stream. Create it with New, feed it events with
// Step, execute the returned effects. It is owned by one goroutine (the actor).
type Core struct {
	cfg   Config
	epoch uint64
	phase phase
	ref   Ref // last reference handed out
	out   []Effect
	now   int64 // latest time an event brought (ms); only remote retention reads it
	// rewriteJudged: a start ran with the log's follower's word on a rewrite
	// (LogOpened.Rewritten) and did not hold for it; later starts ignore it.
	rewriteJudged bool

	resolved *Resolved
	logInfo  *LogOpened
	diverged *divergence.Result // the local log shares no chunk with the remote tier: stalled for an operator

	// The persisted truth: the last manifest etcd accepted, its revision and root object.
	persisted manifest.Manifest
	revision  int64
	root      RootRef
	hasRoot   bool
	nextSeq   uint64 // the seq of the next root persisted (format version 3)

	// The speculative state: in-memory manifest = persisted (or the truncated base) with pending folded.
	mem       manifest.Manifest
	pending   []pendingEdit
	nonAppend int // pending edits that changed the head (rebalance, retention)
	reset     *pendingReset
	gaps      []gapSpan // every gap of the in-memory manifest the core knows of, sorted (see persistedGap)
	// sealed are the ranges of the resolved root's group entries, less what lookups showed
	// to be fragments: gaps inside them are known only once looked up (lookupNeeded).
	sealed     []gapSpan
	lookup     Ref      // the LookUpLeaves in flight, 0 when none
	lookupOffs []uint64 // the offsets it asked for, sorted

	drainNext uint64
	asm       *fragment.Assembly
	cutTimer  Ref         // the armed idle cut timer (idlecut.go), 0 when none
	flushTo   uint64      // one past the highest offset a flush waits for (waiters.go); 0: none
	transfers []*transfer // cut order

	// Flow control (flow.go): the drain's disagreement with drainNext, its retry timer, the
	// pause at the bound on bytes not yet durable, and the stream's one retry timer.
	drainMiss  *drainMismatch
	drainRetry Ref           // the armed drain retry timer, 0 when none
	paused     bool          // at the bound: no chunk is taken until bytes become durable
	cutBytes   uint64        // chunk bytes of the transfers and of the unpersisted appends
	clock      time.Duration // the latest At a result or timer brought
	retryTimer Ref           // the armed transfer retry timer, 0 when none
	retryAt    time.Duration // when it fires

	inflight        *persistOp
	timer           Ref // the armed persist timer, 0 when none
	persistDue      bool
	persistBackoff  bool
	persistFailures int
	lastPersistErr  string
	lastUploadErr   string // the last failed upload attempt's reason, "" once one succeeds
	lastPersistAt   int64

	rebalance     *rebalanceOp
	rebalanceHeld bool // a rebalance was given up: wait for the next persist before trying again
	retention     *retentionOp
	retentionWant bool
	policy        manifest.Policy

	waiters  []waiter
	replicas []string // sorted

	stopReason string // why the core stopped (phaseStopped)

	stats Counters
}

// Counters are the core's monotonic counts, for status and metrics.
type Counters struct {
	Cuts                uint64
	IdleCuts            uint64 // cuts made by the fragment max age (included in Cuts)
	FlushCuts           uint64 // cuts made for a flush (AwaitOffset.Flush; included in Cuts)
	Completions         uint64
	TransientRetries    uint64
	NonTransientRetries uint64
	DeadlineResubmits   uint64
	IgnoredResults      uint64 // late, duplicate or previous-generation results
	RetryTimers         uint64 // times the stream's one transfer retry timer was armed
	Persists            uint64
	PersistFailures     uint64
	Gaps                uint64 // gaps declared (local ahead at resolution, segment gone mid-stream)
	GapOffsets          uint64 // offsets those gaps gave up
	Truncations         uint64 // divergence truncations of the remote tier (and operator truncates)
	TruncatedOffsets    uint64 // offsets of the other timeline the truncations removed
	Reinitializations   uint64
	Rebalances          uint64
	RebalancesGivenUp   uint64
	RetentionRuns       uint64
	RetentionFailures   uint64
	DrainRepositions    uint64 // the drain's position disagreed with the core's: reopened there
	DrainStalls         uint64 // ... and again right after: stalled, retried after a delay
	DrainPauses         uint64 // the bound on bytes not yet durable was reached
	DeferredChunks      uint64 // chunks drained while paused: not taken, read again at the resume
}

// New returns a core waiting for Resolved and LogOpened. Zero Config fields take the spec's
// defaults; an invalid setting is refused with an error naming it.
func New(cfg Config) (*Core, error) {
	cfg = cfg.withDefaults()
	if err := manifest.ValidateStreamID(cfg.StreamID); err != nil {
		return nil, fmt.Errorf("replica reader config: stream id: %w", err)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	asm, err := fragment.NewAssembly(cfg.FragmentTargetSize)
	if err != nil {
		return nil, fmt.Errorf("replica reader config for %s: %w", cfg.StreamID, err)
	}
	return &Core{
		cfg:       cfg,
		epoch:     cfg.Epoch,
		ref:       Ref(cfg.RefBase),
		asm:       asm,
		policy:    cfg.Retention,
		persisted: manifest.Empty(),
		mem:       manifest.Empty(),
		stats:     cfg.Counters,
	}, nil
}

// Step applies one event and returns the effects to execute, in order. The returned slice
// is reused by the next Step. An event that breaks the shell's contract (a chunk out of
// sequence, a result that contradicts itself, a start message at the wrong time) is refused
// with an error and changes nothing. Late, duplicate and stale results are not errors: they
// are ignored and counted.
func (c *Core) Step(ev Event) ([]Effect, error) {
	clear(c.out)
	c.out = c.out[:0]
	if c.phase == phaseStopped {
		if e, ok := ev.(AwaitOffset); ok {
			c.emit(ReplyWaiters{Waiters: []WaiterID{e.Waiter}, OK: false, Reason: "reader stopped: " + c.stopReason})
		}
		return c.out, nil
	}
	var err error
	switch e := ev.(type) {
	case ChunkDrained:
		err = c.onChunk(e)
	case TransferResult:
		err = c.onTransferResult(e)
	case DrainSegmentGone:
		err = c.onDrainSegmentGone(e)
	case EndOfStream:
		c.onDrainReport(e.Next, true, e.Refused)
	case BatchDrained:
		c.onDrainReport(e.Next, false, e.Refused)
	case ForceCut:
		if c.phase == phaseRunning {
			c.cut()
		}
	case TransferDeadline:
		c.onDeadline(e)
	case RetryTimer:
		c.onRetryTimer(e)
	case PersistTimer:
		c.onPersistTimer(e)
	case CutTimer:
		c.onCutTimer(e)
	case PersistResult:
		err = c.onPersistResult(e)
	case GroupUploadResult:
		err = c.onGroupResult(e)
	case LeavesLookedUp:
		c.onLeavesLookedUp(e)
	case RetentionGroupFetched:
		c.onRetentionFetched(e)
	case RetentionGroupFailed:
		c.onRetentionFailed(e.Ref)
	case RetentionTimeout:
		c.onRetentionFailed(e.Ref)
	case AwaitOffset:
		err = c.onAwait(e)
	case CancelAwait:
		c.onCancelAwait(e)
	case RetentionPolicyChanged:
		err = c.onPolicy(e)
	case EvaluateRetention:
		c.now = e.Now
		c.wantRetention() // while starting it is kept and runs once the start decision is made
	case OperatorTruncate:
		err = c.onOperatorTruncate()
	case ReplicaRegistered:
		err = c.onReplica(e.Replica)
	case ResyncRequested:
		err = c.onReplica(e.Replica)
	case Resolved:
		err = c.onResolved(e)
	case LogOpened:
		err = c.onLogOpened(e)
	case StreamDeleted:
		c.stop(cmp.Or(e.Reason, "the stream was deleted"), 0)
	case nil:
		err = fmt.Errorf("stream %s: nil event", c.cfg.StreamID)
	default:
		// Event is sealed (its method is unexported), so only an event type added to this
		// package without a case here gets this far. Not naming the type keeps ev from
		// escaping: boxing a drained chunk then costs no allocation.
		err = fmt.Errorf("stream %s: event not handled by the core", c.cfg.StreamID)
	}
	if err != nil {
		clear(c.out)
		c.out = c.out[:0]
		return nil, err
	}
	return c.out, nil
}

func (c *Core) emit(e Effect) { c.out = append(c.out, e) }

func (c *Core) newRef() Ref {
	c.ref++
	return c.ref
}

// afterChange re-runs the decisions that depend on the pipeline's state, in the order the
// design wants: a due rebalance goes first (so the persist includes it), then a wanted
// retention, then a due persist; finally the persist timer is armed for unpersisted edits.
func (c *Core) afterChange() {
	if c.phase != phaseRunning || c.diverged != nil {
		return // stalled for an operator: nothing may change the remote tier meanwhile
	}
	c.maybeRebalance()
	if c.retentionWant {
		c.runRetention()
	}
	c.maybePersist()
	c.maybeArmTimer()
	c.maybeResume()
}

// dropAll forgets everything in progress: transfers, the assembly, the persist, the
// rebalance, the retention, the pending edits and truncation. Their results become stale.
func (c *Core) dropAll() {
	if c.timer != 0 {
		c.emit(CancelPersistTimer{Ref: c.timer})
	}
	c.timer = 0
	c.transfers = nil
	c.armRetry()
	c.drainMiss = nil
	c.drainRetry = 0
	c.paused = false
	c.asm.Discard()
	c.cancelCutTimer()
	c.inflight = nil
	c.rebalance = nil
	c.rebalanceHeld = false
	c.retention = nil
	c.retentionWant = false
	c.pending = nil
	c.nonAppend = 0
	c.reset = nil
	c.persistDue = false
	c.persistBackoff = false
	c.persistFailures = 0
	c.recountHeld()
}

// reinitialize answers a conflict: another writer persisted, so everything this core holds
// is stale. The shell resolves again and feeds Resolved and LogOpened; waiters and
// registered replicas carry over.
func (c *Core) reinitialize(e Reinitialize) {
	c.emit(e)
	want := c.retentionWant // a requested evaluation is not lost: it runs after resolution
	c.dropAll()
	c.retentionWant = want
	c.mem = c.persisted
	c.phase = phaseStarting
	c.resolved = nil
	c.logInfo = nil
	c.diverged = nil
	c.stats.Reinitializations++
}

// stop answers a not-found after an earlier success or a StreamDeleted (the stream was
// deleted) and a fenced persist (the writer was deposed). Waiters are told, nothing more is
// written, and every later event is ignored. deposedBy is the stored epoch that fenced this
// writer, 0 when the stream was deleted.
func (c *Core) stop(reason string, deposedBy uint64) {
	c.dropAll()
	if len(c.waiters) > 0 {
		ids := make([]WaiterID, len(c.waiters))
		for i, w := range c.waiters {
			ids[i] = w.id
		}
		c.waiters = nil
		c.emit(ReplyWaiters{Waiters: ids, OK: false, Reason: "reader stopped: " + reason})
	}
	c.emit(Stop{Reason: reason, DeposedBy: deposedBy, Epoch: c.epoch})
	c.phase = phaseStopped
	c.stopReason = reason
}

// onReplica registers a replica (registration or resync request) and syncs it with the
// persisted manifest, unless a truncation is pending (the manifest it would get is being
// cut back, and the truncation's persist syncs every replica) or the core is stalled for an
// operator.
func (c *Core) onReplica(name string) error {
	if name == "" {
		return fmt.Errorf("stream %s: replica with an empty name", c.cfg.StreamID)
	}
	if i, found := slices.BinarySearch(c.replicas, name); !found {
		c.replicas = slices.Insert(c.replicas, i, name)
	}
	if c.phase == phaseRunning && c.reset == nil && c.diverged == nil {
		c.emit(SyncReplica{Replica: name, Manifest: c.persisted, Root: c.root, Epoch: c.epoch})
	}
	return nil
}

func (c *Core) syncAll() {
	for _, r := range c.replicas {
		c.emit(SyncReplica{Replica: r, Manifest: c.persisted, Root: c.root, Epoch: c.epoch})
	}
}
