package actors

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/segments"
)

// Messages the node sends to a stream's reader.
type (
	forceCutMsg     struct{}
	evaluateRetMsg  struct{}
	setRetentionMsg struct{ Policy manifest.Policy }
	replicaMsg      struct {
		Replica string
		Resync  bool
	}
	statusRequestMsg struct{}
	// truncateRequestMsg is an operator's truncate of a remote tier sharing no chunk with
	// the local log; the reader answers with an error (nil when done).
	truncateRequestMsg struct{}
	truncateResult     struct{ Err error }
	resolveRetryMsg    struct{}
	retentionTickMsg   struct{}
)

// resolvedMsg is the outcome of one resolution attempt: the manifest, compared with the
// local log as it was (Log) when the comparison ran. Deleted, when set, says the stream was
// deleted (and why): the reader stops for good.
type resolvedMsg struct {
	Resolved readercore.Resolved
	Log      readercore.LogOpened
	Deleted  string
	// Stall, when set, says the stream stalls on lost or stale metadata (or a changed
	// claim): nothing is written; the resolution is retried every Config.StallRetry.
	Stall *metadataStall
	Err   error
}

// errReinitialize is the panic value with which a reader asks its supervisor for a fresh
// incarnation after another writer persisted.
type errReinitialize struct{ reason string }

func (e errReinitialize) Error() string { return "reinitialize: " + e.reason }

// reader is the replica reader of one stream: the thin shell around readercore. It receives
// messages, turns them into core events, and executes the core's effects. Every incarnation
// (after a supervisor restart) starts from scratch: resolve, open the log, drain.
type reader struct {
	n   *Node
	h   *streamHandle
	log zerolog.Logger

	ctx    context.Context // this incarnation's: cancelled on stop and restart
	cancel context.CancelFunc
	core   *readercore.Core
	timers shell.Timers
	// persistTimers maps an armed persist timer's ref to its timer, for CancelPersistTimer.
	persistTimers map[readercore.Ref]uint64

	// waiters are the await_offset callers this incarnation's core knows: a request that
	// arrives after the core learned of it from the handle is not fed twice.
	waiters map[readercore.WaiterID]bool

	// drain is the drain child, nil while the reader is passive (reader_flow.go); drainGen
	// tags what it reads since its last (re)start.
	drain    *actor.PID
	drainGen uint64
	// drainListenAt is the offset of the last listener registration the core asked for,
	// drainListening that nothing was sent to the drain since: an idle drain may then be
	// stopped. wakeLive is this incarnation's: the reader's own commit listener posts a
	// wake only while it is set.
	drainListenAt  uint64
	drainListening bool
	wakeLive       *atomic.Bool
	persistDeps    persistDeps
	// persistLogger is set once persistDeps.log is made (at the first persist).
	persistLogger bool
	broadcaster   *actor.PID  // nil without Config.Replicas
	shell         readerShell // owner id, tasks, held deadlines, drain restarts
	resolveTries  int
	resolveErr    string
	running       bool // the core has Resolved and LogOpened
	counted       bool // counted in StreamsRunning (start got that far)
	retLog        retentionLog
	pauseLog      pauseLog
	// localErr is the drain's failure to read the local log, nil when it reads: while set,
	// the stream is "stalled" (counted in StreamsStalled, not StreamsRunning).
	localErr error
	// oldest caches the timestamp of the oldest committed chunk not yet persisted, for
	// status's lag: the disk is read only when the offset it starts at moves.
	oldest oldestUnpersisted
	// received counts the messages Node.readerFor counted for this reader; dormant is set
	// once it left the stream dormant (stream_dormant.go): it ignores everything after.
	received uint64
	dormant  bool
}

func (r *reader) Receive(c actor.Context) {
	r.n.cfg.faults.atReader(c.Message())
	switch c.Message().(type) {
	case readercore.AwaitOffset, readercore.CancelAwait, forceCutMsg, evaluateRetMsg, setRetentionMsg,
		replicaMsg, statusRequestMsg, truncateRequestMsg: // what Node.readerFor counts
		r.received++
		if r.dormant { // sent before the stream went dormant cannot be (readerFor counts)
			r.stray(c.Message())
			return
		}
	case *actor.Started, *actor.Stopping, *actor.Restarting, *actor.Stopped, *actor.Terminated:
	default:
		if r.dormant {
			return // its supervisor stops it: the stream is dormant
		}
	}
	switch m := c.Message().(type) {
	case *actor.Started:
		r.start(c)
	case *actor.Stopping, *actor.Restarting:
		r.retLog.flush(r.log, r.n.cfg.clock.Now())
		r.pauseLog.flush(r.log, r.n.cfg.clock.Now())
		r.timers.StopAll()
		if r.wakeLive != nil {
			r.wakeLive.Store(false)
		}
		if r.cancel == nil { // it failed before it started: nothing to cancel
			return
		}
		r.cancel()
		c.Send(r.n.governor, cancelOwner{Owner: r.shell.owner})
	case *actor.Stopped:
		if r.counted {
			r.setLocalErr(nil) // a stalled stream leaves StreamsStalled, not StreamsRunning
			r.n.metrics.StreamsRunning.Add(-1)
		}
	case drainTrouble:
		r.setLocalErr(m.Err)
	case drainIdle:
		r.passivate(c, m)
	case drainWake:
		r.activate(c, m)
	case dormantCheck:
		r.maybeDormant(c, m)
	case resolveRetryMsg:
		r.resolve(c)
	case *resolvedMsg:
		r.onResolved(c, m)
	case *chunksDrained:
		r.onChunks(c, m)
	case shell.TaskDone, shell.TaskOverdue, transferAdmitted, governorRestarted, restartDrain:
		r.onShellMsg(c, m)
	case persistDone:
		if r.shell.tasks.Settle(&r.timers, m.ID) {
			r.deliver(c, m)
		}
	case readercore.TransferResult:
		r.shell.settled(&r.timers, m.Ref, m.Attempt)
		if m.Outcome == readercore.SegmentGone {
			m.LocalFirst = r.h.spec.Log.FirstOffset()
		}
		m.At = r.since()
		r.step(c, m)
	case readercore.RetryTimer:
		m.At = r.since()
		r.step(c, m)
	case readercore.PersistTimer:
		delete(r.persistTimers, m.Ref)
		r.step(c, m)
	case readercore.CutTimer:
		if r.shell.cutTimer.ref == m.Ref {
			r.shell.cutTimer.ref, r.shell.cutTimer.id = 0, 0
		}
		r.step(c, m)
	case readercore.TransferDeadline:
		r.step(c, m)
	case readercore.AwaitOffset:
		if r.running && !r.waiters[m.Waiter] { // before resolution the handle has it
			r.waiters[m.Waiter] = true
			r.step(c, m)
		}
	case readercore.CancelAwait:
		if r.waiters[m.Waiter] {
			delete(r.waiters, m.Waiter)
			r.step(c, m)
		}
	case forceCutMsg:
		r.step(c, readercore.ForceCut{})
	case evaluateRetMsg:
		r.step(c, readercore.EvaluateRetention{Now: r.n.cfg.clock.Now().UnixMilli()})
	case retentionTickMsg:
		r.step(c, readercore.EvaluateRetention{Now: r.n.cfg.clock.Now().UnixMilli()})
		r.timers.After(c.ActorSystem().Root, c.Self(), r.n.cfg.RetentionInterval, retentionTickMsg{})
	case setRetentionMsg:
		r.h.policy.Store(&m.Policy) // later incarnations start with it
		r.step(c, readercore.RetentionPolicyChanged{Policy: m.Policy, Now: r.n.cfg.clock.Now().UnixMilli()})
	case replicaMsg:
		r.onReplica(c, m)
	case logGrowthCheckMsg:
		r.checkLogGrowth(c, m)
	case statusRequestMsg:
		c.Respond(r.status())
	case truncateRequestMsg:
		if !r.running {
			c.Respond(truncateResult{fmt.Errorf("stream %s: %w", r.h.spec.ID, ErrStreamStarting)})
			return
		}
		c.Respond(truncateResult{r.step(c, readercore.OperatorTruncate{})})
	case *actor.Terminated: // a task, persist actor, drain or broadcaster stopped
		shell.Release(c, m.Who)
	case actor.SystemMessage, actor.AutoReceiveMessage:
	default:
		r.stray(m)
	}
}

// stray logs and counts a message the reader has no case for, a core event among them (the
// core is fed only the results and timers above): it is dropped.
func (r *reader) stray(msg any) {
	r.n.metrics.StrayMessages.Add(1)
	r.log.Error().Str("message", fmt.Sprintf("%T", msg)).Msg("reader got a message it does not handle: dropped")
}

// onReplica registers a replica (or its resync request) with the core and remembers it in
// the handle, so that every later incarnation syncs it too. Before the resolution only the
// handle keeps it: onResolved replays every replica once the core runs.
func (r *reader) onReplica(c actor.Context, m replicaMsg) {
	if !r.running {
		r.h.addReplica(m.Replica)
		return
	}
	var ev readercore.Event = readercore.ReplicaRegistered{Replica: m.Replica}
	if m.Resync {
		ev = readercore.ResyncRequested{Replica: m.Replica}
	}
	if r.step(c, ev) == nil {
		r.h.addReplica(m.Replica)
	}
}

func (r *reader) start(c actor.Context) {
	r.ctx, r.cancel = context.WithCancel(r.n.ctx)
	r.initShell(c)
	r.persistTimers = make(map[readercore.Ref]uint64)
	r.waiters = make(map[readercore.WaiterID]bool)
	inc := r.h.incarnations.Add(1)
	cfg := r.n.cfg.coreConfig(r.h.spec)
	cfg.RefBase = inc << 40
	cfg.AnchorReinitialized = r.h.anchorReinit.Load()
	if p := r.h.policy.Load(); p != nil {
		cfg.Retention = *p
	}
	carried := r.h.takeCarry() // set when the stream woke from dormancy
	if carried != nil {
		cfg.Counters = *carried
	}
	core, err := readercore.New(cfg)
	if err != nil { // validated in AddStream; a failure here is a bug
		panic(fmt.Errorf("stream %s: %w", r.h.spec.ID, err))
	}
	r.core = core
	r.h.setReader(c.Self())
	r.n.metrics.StreamsRunning.Add(1)
	r.counted = true
	r.wakeLive = new(atomic.Bool)
	r.wakeLive.Store(true)
	r.spawnDrain(c)
	r.persistDeps = persistDeps{
		store: r.n.store, meta: r.n.meta, keyPrefix: r.n.cfg.KeyPrefix, timeout: r.n.cfg.PersistTimeout,
		metrics: r.n.metrics, faults: r.n.cfg.faults, clock: r.n.cfg.clock,
		claim: &r.n.claim, stream: r.h.spec.ID, doubt: &r.h.doubt, lose: r.n.loseClaim,
		fresh: &r.h.fresh, staleAfter: r.n.cfg.StaleAfter,
	}
	if sink := r.n.cfg.Replicas; sink != nil {
		blog, metrics := r.log.With().Str("actor", "broadcast").Logger(), r.n.metrics
		r.broadcaster = c.Spawn(actor.PropsFromProducer(func() actor.Actor { return newBroadcaster(sink, blog, metrics) }))
	}
	if inc > 1 && carried == nil {
		r.log.Info().Uint64("incarnation", inc).Msg("reader restarted: resolving the manifest again")
	}
	r.resolve(c)
}

func (r *reader) onResolved(c actor.Context, m *resolvedMsg) {
	if r.running {
		return
	}
	if m.Deleted != "" {
		r.resolveErr = ""
		r.log.Error().Str("reason", m.Deleted).Msg("the stream was deleted: refusing to tier it")
		r.step(c, readercore.StreamDeleted{Reason: m.Deleted})
		return
	}
	if m.Stall != nil {
		r.stalledOnMetadata(c, m.Stall)
		return
	}
	if r.h.setStall(r.n.metrics, nil) {
		r.log.Info().Msg("the stream's metadata is repaired: resolution goes on")
		r.notifyMetadata(nil)
	}
	if m.Err != nil {
		r.retryResolve(c, m.Err)
		return
	}
	if err := r.step(c, m.Resolved); err != nil {
		r.retryResolve(c, err)
		return
	}
	if err := r.step(c, m.Log); err != nil {
		// The core refused the start (a comparison that does not fit the log): it is
		// still starting and waits for a new resolution.
		r.retryResolve(c, err)
		return
	}
	r.running, r.resolveErr = true, ""
	r.h.markReady()
	r.h.fresh.sureAt(r.n.cfg.clock.Now())
	r.n.metrics.Resolutions.Add(1)
	r.h.recovered()
	for _, w := range r.h.outstanding() {
		r.waiters[w.Waiter] = true
		r.step(c, w)
	}
	for _, rep := range r.h.replicas() { // the spec's and those registered at run time
		r.step(c, readercore.ReplicaRegistered{Replica: rep})
	}
	// Remote retention also runs now (max-age of an idle stream) and then periodically.
	r.step(c, readercore.EvaluateRetention{Now: r.n.cfg.clock.Now().UnixMilli()})
	r.timers.After(c.ActorSystem().Root, c.Self(), r.n.cfg.RetentionInterval, retentionTickMsg{})
	r.log.Info().Int64("revision", m.Resolved.Revision).Uint64("next_offset", m.Resolved.Manifest.NextOffset).Msg("manifest resolved")
	if l := m.Log; l.First == l.Next && l.Next < m.Resolved.Manifest.NextOffset {
		// Nothing to compare yet. Data the broker writes below the remote next offset would
		// never be drained (and local retention would take it): compare again once it comes.
		r.log.Warn().Uint64("local_next", l.Next).Uint64("remote_next", m.Resolved.Manifest.NextOffset).
			Msg("the local log is empty and ends below the remote tier: it is compared again when data arrives")
		r.timers.After(c.ActorSystem().Root, c.Self(), logRecheck, logGrowthCheckMsg{first: l.First, next: l.Next})
	}
}

// logRecheck is how often a local log that could not yet be compared with the remote tier
// (empty and behind it at resolution, or a prefix of it) is looked at for growth.
const logRecheck = time.Second

// logGrowthCheckMsg asks the reader to look at a local log that held [first, next) when
// the core could not yet decide how it relates to the remote tier.
type logGrowthCheckMsg struct{ first, next uint64 }

// checkLogGrowth reinitializes once the log changed, so that a new resolution compares it
// with the remote tier chunk by chunk: a wiped log started again below the remote next
// offset then stalls as diverged (instead of having its first offsets never drained), and
// a log that was a prefix of the remote tier either matches it (caught up) or forks (and
// the remote tier is truncated at the divergence point).
func (r *reader) checkLogGrowth(c actor.Context, m logGrowthCheckMsg) {
	lg := r.h.spec.Log
	if lg.FirstOffset() == m.first && lg.NextOffset() == m.next {
		r.timers.After(c.ActorSystem().Root, c.Self(), logRecheck, m)
		return
	}
	reason := fmt.Sprintf("the local log, [%d,%d) when compared, now holds [%d,%d): comparing it with the remote tier again", m.first, m.next, lg.FirstOffset(), lg.NextOffset())
	r.log.Info().Msg(reason)
	panic(errReinitialize{reason: reason})
}

// retryResolve counts a failed resolution, says why in status and the log, and tries again
// after a growing delay.
// stalledOnMetadata records a metadata stall (logged once per phase, counted in its
// gauge, shown in status) and resolves again after Config.StallRetry.
func (r *reader) stalledOnMetadata(c actor.Context, st *metadataStall) {
	r.resolveErr = st.Reason
	r.n.metrics.StalledResolutions.Add(1)
	if r.h.setStall(r.n.metrics, st) {
		r.log.Error().Str("phase", st.Phase).Str("reason", st.Reason).
			Msg("the stream stalls: nothing is written, drained, retained or collected for it until its metadata is repaired")
		r.notifyMetadata(st)
	}
	r.timers.After(c.ActorSystem().Root, c.Self(), r.n.cfg.StallRetry, resolveRetryMsg{})
}

func (r *reader) retryResolve(c actor.Context, err error) {
	r.resolveTries++
	r.resolveErr = err.Error()
	delay := min(100*time.Millisecond<<min(r.resolveTries-1, 10), r.n.cfg.ResolveBackoffMax)
	r.n.metrics.ResolveFailures.Add(1)
	r.log.Warn().Err(err).Int("attempt", r.resolveTries).Dur("retry_in", delay).Msg("cannot resolve the manifest; retrying")
	r.timers.After(c.ActorSystem().Root, c.Self(), delay, resolveRetryMsg{})
}

// step feeds one event to the core and executes the effects it returns. An event the core
// refuses (a broken contract: a bug) is logged, counted and returned; nothing changed.
func (r *reader) step(c actor.Context, ev readercore.Event) error {
	effects, err := r.core.Step(ev)
	if err != nil {
		r.n.metrics.CoreErrors.Add(1)
		r.log.Error().Err(err).Msg("core refused an event")
		return err
	}
	for _, e := range effects {
		r.log.Debug().Stringer("effect", e).Msg("effect")
		r.execute(c, e)
		r.notify(e) // the embedder's event, if the effect is one
	}
	return nil
}

func (r *reader) execute(c actor.Context, e readercore.Effect) {
	stream := r.h.spec.ID
	root := c.ActorSystem().Root
	switch e := e.(type) {
	case readercore.StartDrain, readercore.ContinueDrain, readercore.DrainStalled, readercore.DrainUnstalled,
		readercore.PauseDrain, readercore.ResumeDrain, readercore.ArmRetryTimer, readercore.CancelRetryTimer, readercore.RetryDrainAfter,
		readercore.ArmCutTimer, readercore.CancelCutTimer:
		r.executeFlow(c, e)
	case readercore.DeclareGap:
		r.declaredGap(e)
	case readercore.TruncateRemote:
		r.n.metrics.Truncations.Add(1)
		if e.OldNext > e.At {
			r.n.metrics.TruncatedOffsets.Add(int64(e.OldNext - e.At))
		}
		r.log.Warn().Str("reason", e.Reason.String()).Uint64("at", e.At).Uint64("old_next", e.OldNext).Uint64("drain_from", e.DrainFrom).
			Int("dropped_objects", len(e.Dropped)).Int("expanded_groups", len(e.Alone)).Bool("prefix_copied", e.Copy).
			Msg("the local log diverged from the remote tier: truncating the remote tier to the last chunk both hold")
	case readercore.StalledBehind:
		r.log.Warn().Uint64("remote_first", e.RemoteFirst).Uint64("remote_next", e.RemoteNext).
			Uint64("local_first", e.LocalFirst).Uint64("local_next", e.LocalNext).
			Msg("the local log is a prefix of the remote tier: nothing is uploaded or deleted until it reaches the remote next offset or writes chunks of its own")
		r.timers.After(c.ActorSystem().Root, c.Self(), logRecheck, logGrowthCheckMsg{first: e.LocalFirst, next: e.LocalNext})
	case readercore.StalledDiverged:
		r.n.metrics.DivergedStalls.Add(1)
		if rw := e.Rewritten; rw != nil {
			withRanges(r.log.Error(), e.RemoteFirst, e.RemoteNext, e.LocalFirst, e.LocalNext).Uint64("rewritten_below", rw.SeenNext).
				Str("rewrite", rw.Detail).
				Msg("the local log starts above the remote tier after its follower saw it rewritten: the rewrite may start below the remote next offset and cannot be compared; nothing is uploaded or deleted until an operator runs 'node truncate' (which keeps the remote tier and declares the gap)")
			return
		}
		if a := e.EpochAhead; a != nil {
			withRanges(r.log.Error(), e.RemoteFirst, e.RemoteNext, e.LocalFirst, e.LocalNext).Uint64("local_first_epoch", a.LocalEpoch).
				Uint64("remote_last_epoch", a.RemoteEpoch).
				Msg("the local log starts above the remote tier at a higher epoch than its last chunk: a rewrite may have been trimmed unseen; nothing is uploaded or deleted until an operator runs 'node truncate' (which keeps the remote tier and declares the gap)")
			return
		}
		if g := e.GapFork; g != nil {
			withRanges(r.log.Error(), e.RemoteFirst, e.RemoteNext, e.LocalFirst, e.LocalNext).Uint64("fork_at", g.At).
				Uint64("gap_from", g.From).Uint64("gap_to", g.To).
				Msg("the local log forks from the remote tier inside a declared gap with durable data above it: nothing is deleted or uploaded until an operator runs 'node truncate' (which deletes that data) or restores the local log from the run after the gap")
			return
		}
		withRanges(r.log.Error(), e.RemoteFirst, e.RemoteNext, e.LocalFirst, e.LocalNext).
			Msg("the local log shares no chunk with the remote tier: nothing is deleted or uploaded until an operator runs 'node truncate' (or restores the local log)")
	case readercore.RegisterOffsetListener:
		r.listenAt(c, e.Offset)
	case readercore.SubmitTransfer:
		r.submit(c, e.Ref, e.Attempt, e.Fragment, e.Size)
	case readercore.ResubmitTransfer:
		r.submit(c, e.Ref, e.Attempt, e.Fragment, e.Size)
	case readercore.ArmTransferDeadline:
		r.armTransferDeadline(c, e) // held until the governor admits the attempt
	case readercore.RetryGroupUploadAfter:
		r.timers.After(root, c.Self(), e.Delay, readercore.RetryTimer{Ref: e.Ref, Attempt: e.Attempt})
	case readercore.Stalled:
		r.n.metrics.Stalls.Add(1)
		r.log.Error().Uint64("offset", e.Offset).Int("failures", e.Failures).Str("reason", e.Reason).Msg("upload pipeline stalled")
	case readercore.Unstalled:
		r.log.Info().Uint64("offset", e.Offset).Msg("upload pipeline resumed")
	case readercore.StartPersist:
		r.persist(c, e)
	case readercore.ArmPersistTimer:
		r.persistTimers[e.Ref] = r.timers.After(root, c.Self(), e.After, readercore.PersistTimer{Ref: e.Ref})
	case readercore.CancelPersistTimer:
		r.timers.Cancel(r.persistTimers[e.Ref])
		delete(r.persistTimers, e.Ref)
	case readercore.UploadGroup:
		r.uploadGroup(c, e)
	case readercore.FetchGroupForRetention:
		r.fetchGroup(c, e)
	case readercore.LookUpLeaves:
		r.lookUpLeaves(c, e)
	case readercore.RemoteRetention:
		r.n.metrics.RemoteRetentionRuns.Add(1)
		r.retLog.note(r.log, r.n.cfg.clock.Now(), e.Edit, len(e.Deferred))
	case readercore.UpdateRange:
		r.h.noteRevision(e.Revision)
		r.h.noteSeq(e.Root.Seq)
		r.h.cache.Store(&Persisted{Manifest: e.Manifest, Revision: e.Revision, Seq: e.Root.Seq, UID: e.Root.UID})
	case readercore.Broadcast:
		if r.broadcaster != nil {
			c.Send(r.broadcaster, &broadcastEdits{Stream: stream, Edits: e})
		}
	case readercore.SyncReplica:
		if r.broadcaster != nil {
			c.Send(r.broadcaster, &syncReplica{Stream: stream, Sync: e})
		}
	case readercore.EvaluateLocalRetention:
		r.localRetention(e.PersistedNext)
	case readercore.DeleteObjects:
		r.reap(c, e)
	case readercore.ReplyWaiters:
		var err error
		switch {
		case e.Retry:
			err = fmt.Errorf("await_offset on %s: %s: %w", stream, e.Reason, ErrAwaitUndecided)
		case e.Gap:
			err = fmt.Errorf("await_offset on %s: %s: %w", stream, e.Reason, ErrOffsetInGap)
		case !e.OK:
			err = fmt.Errorf("await_offset on %s: %s: %w", stream, e.Reason, ErrStreamStopped)
		}
		r.h.reply(e.Waiters, err)
		for _, w := range e.Waiters {
			delete(r.waiters, w)
		}
	case readercore.Reinitialize:
		r.n.metrics.Reinitializations.Add(1)
		if e.AnchorMissing {
			r.h.anchorReinit.Store(true) // a recurrence is retried and reported, not reinitialized
		}
		r.log.Warn().Str("reason", e.Reason).Msg("reinitializing: resolving the manifest again")
		panic(errReinitialize{reason: e.Reason})
	case readercore.Stop:
		r.log.Warn().Str("reason", e.Reason).Msg("reader stops for good: nothing more is written")
		r.h.gone(e.Reason, fmt.Errorf("stream %s: %s: %w", stream, e.Reason, ErrStreamStopped))
		c.Send(c.Parent(), streamGone{})
	case readercore.Problem:
		r.n.metrics.CoreErrors.Add(1)
		r.log.Error().Str("op", e.Op).Err(e.Err).Msg("core gave up an operation")
	default:
		r.n.metrics.StrayMessages.Add(1)
		r.log.Error().Str("effect", fmt.Sprintf("%T", e)).Msg("reader got an effect it does not execute: dropped")
	}
}

func (r *reader) submit(c actor.Context, ref readercore.Ref, attempt int, f *fragment.Description, size int64) {
	sub := &submitTransfer{
		Ctx: r.ctx, Owner: r.shell.owner, Stream: r.h.spec.ID, Epoch: r.h.spec.Epoch, Dir: r.h.spec.Log.Dir(), Ref: ref, Attempt: attempt,
		Fragment: f, Size: size, ReplyTo: c.Self(),
	}
	r.shell.submitted(sub)
	c.Send(r.n.governor, sub)
}

// persist hands one persist attempt to a persist actor of its own (persist.go), tracked
// like a task: its answer, or the failure its overdue timer gives, comes back once.
func (r *reader) persist(c actor.Context, e readercore.StartPersist) {
	stream, metrics := r.h.spec.ID, r.n.metrics
	id := r.shell.tasks.Track(c, &r.timers, "persist", r.persistDeps.timeout, func(reason string) any {
		metrics.observePersist(readercore.PersistFailed, 0)
		return persistDone{Result: persistFailure(stream, e.Ref, reason, r.n.cfg.clock.Now())}
	})
	if !r.persistLogger {
		// Made at the first persist, not at start: zerolog's With takes 512 bytes, which
		// an idle stream that never persists held for nothing.
		r.persistDeps.log, r.persistLogger = r.log.With().Str("actor", "persist").Logger(), true
	}
	ctx, deps := r.ctx, r.persistDeps
	pid := c.Spawn(actor.PropsFromProducer(func() actor.Actor { return newPersister(ctx, deps) }))
	c.Send(pid, &persistRequest{ID: id, Stream: stream, Persist: e, ReplyTo: c.Self()})
}

func (r *reader) uploadGroup(c actor.Context, e readercore.UploadGroup) {
	n, stream := r.n, r.h.spec.ID
	r.spawnTask(c, shell.TaskSpec{Name: "group upload", Timeout: n.cfg.GroupUploadTimeout, Run: func(ctx context.Context) any {
		uid := rand.Uint64()
		key := manifest.GroupKey(n.cfg.KeyPrefix, stream, e.Kind, e.Children[0].FirstOffset, e.Epoch, uid)
		err := n.store.PutObject(ctx, key, manifest.EncodeGroup(e.Kind, e.Children))
		res := readercore.GroupUploadResult{Ref: e.Ref, Attempt: e.Attempt, UID: uid, Jitter: rand.Float64()}
		switch s3io.Classify(err) {
		case s3io.ClassNone:
			res.Outcome = readercore.OK
		case s3io.ClassRetriable:
			res.Outcome, res.Reason = readercore.Retriable, err.Error()
		default:
			res.Outcome, res.Reason = readercore.NonTransient, err.Error()
		}
		return res
	}, Failed: func(reason string) any {
		return readercore.GroupUploadResult{Ref: e.Ref, Attempt: e.Attempt, Outcome: readercore.NonTransient, Jitter: rand.Float64(),
			Reason: fmt.Sprintf("upload group of %s: %s", stream, reason)}
	}})
}

// localRetention deletes local segments that are wholly below the persisted next offset,
// keeping the configured hot window; never the active segment, never data not yet durable.
func (r *reader) localRetention(persistedNext uint64) {
	lg := r.h.spec.Log
	if lg.ReadOnly() {
		return // a followed log's files are its writer's: the broker's retention trims them
	}
	deletable := segments.DurableDeletable(lg.Segments(), persistedNext, r.n.cfg.LocalHotWindowBytes, r.n.cfg.LocalHotWindowAge, r.n.cfg.clock.Now())
	if len(deletable) == 0 {
		return
	}
	deleted, err := lg.ApplyRetention(segments.RetentionPolicy{
		MayDelete: func(s segments.SegmentInfo) bool { return deletable[s.Name] },
	}, r.n.cfg.clock.Now())
	r.n.metrics.LocalSegmentsDeleted.Add(int64(len(deleted)))
	if err != nil {
		r.log.Error().Err(err).Msg("local retention failed")
	}
}

func (r *reader) reap(c actor.Context, e readercore.DeleteObjects) {
	stream, prefix := r.h.spec.ID, r.n.cfg.KeyPrefix
	req := &reapRequest{Stream: stream}
	for _, en := range e.Entries {
		switch {
		case en.IsGap(): // names no object
		case en.Kind == manifest.KindFragment:
			req.Objects = append(req.Objects, en)
		default:
			req.Groups = append(req.Groups, reapGroup{Entry: en, From: e.From})
		}
	}
	req.Objects = append(req.Objects, e.Alone...) // groups a truncation expanded: their children stay
	for _, root := range e.Roots {
		if root.Seq > 0 {
			req.Keys = append(req.Keys, manifest.SeqRootKey(prefix, stream, root.Seq))
			continue
		}
		req.Keys = append(req.Keys, manifest.RootKey(prefix, stream, root.Epoch, root.UID))
	}
	c.Send(r.n.reaper, req)
}

// withRanges adds the remote and local ranges a divergence stall names to a log event.
func withRanges(ev *zerolog.Event, remoteFirst, remoteNext, localFirst, localNext uint64) *zerolog.Event {
	return ev.Uint64("remote_first", remoteFirst).Uint64("remote_next", remoteNext).
		Uint64("local_first", localFirst).Uint64("local_next", localNext)
}
