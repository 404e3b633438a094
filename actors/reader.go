package actors

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"

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
	selfListen     segments.ListenerID // its own commit listener (listenSelf), forgotten when it registers again or stops
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
		r.h.spec.Log.Forget(r.selfListen)
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
			n.keys.Put(stream, manifest.Entry{Kind: e.Kind, FirstOffset: e.Children[0].FirstOffset, UID: uid}, key)
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
