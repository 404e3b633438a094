package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/streamtier/streamtier/actors/readercore"
)

// The reader's side of the flow between its drain and its core: batches in, the drain's
// position checked by the core, the drain started, acknowledged, paused or stalled as the
// core says, and the stream's retry timers.

// onChunks feeds a batch to the core up to the first chunk it refuses (those after it cannot
// follow it), then the drain's position: the core decides whether the drain reads on
// (ContinueDrain, or a listener at the end), is repositioned, or stalls.
func (r *reader) onChunks(c actor.Context, m *chunksDrained) {
	if m.Gen != r.drainGen {
		return // from a reader opened before the last reset
	}
	refused := ""
	for i, ch := range m.Chunks {
		if err := r.step(c, ch); err != nil {
			refused = err.Error()
			if rest := len(m.Chunks) - i - 1; rest > 0 {
				r.log.Warn().Int("chunks", rest).Uint64("refused_chunk", ch.Header.ChunkID).Msg("the rest of the drained batch follows a refused chunk: not fed to the core")
			}
			break
		}
	}
	switch {
	case m.Gone:
		if err := r.step(c, readercore.DrainSegmentGone{LocalFirst: m.LocalFirst}); err != nil {
			// The chunk the core expects is still held locally: read on from there rather
			// than leave the drain waiting for a restart that will not come.
			r.startDrain(c, r.core.Status().DrainNext)
		}
	case m.End:
		r.step(c, readercore.EndOfStream{Next: m.Next, Refused: refused})
	default:
		r.step(c, readercore.BatchDrained{Next: m.Next, Refused: refused})
	}
}

// executeFlow carries out the core's flow-control effects: (re)starting and acknowledging the
// drain, its stalls and pauses (logged, pauses rate-limited by pauseLog; counted, shown in status), the resume, and the
// stream's retry and idle cut timers.
func (r *reader) executeFlow(c actor.Context, e readercore.Effect) {
	root := c.ActorSystem().Root
	switch e := e.(type) {
	case readercore.StartDrain:
		if e.Reason != "" {
			r.n.metrics.DrainRepositions.Add(1)
			r.log.Warn().Uint64("from", e.From).Str("reason", e.Reason).Msg("drain repositioned at the core's position")
		}
		r.startDrain(c, e.From)
	case readercore.ContinueDrain:
		r.toDrain(c, drainAck{Gen: r.drainGen, Budget: r.core.DrainRoom()})
	case readercore.DrainStalled:
		r.n.metrics.DrainStalls.Add(1)
		r.log.Error().Uint64("offset", e.Offset).Uint64("drain_at", e.DrainAt).Int("failures", e.Failures).Str("reason", e.Reason).
			Msg("drain stalled: its position disagrees with the core's again; retrying after a delay")
	case readercore.DrainUnstalled:
		r.log.Info().Uint64("offset", e.Offset).Msg("drain unstalled: the core took the chunk where it had stalled")
	case readercore.RetryDrainAfter:
		r.timers.After(root, c.Self(), e.Delay, readercore.RetryTimer{Ref: e.Ref})
	case readercore.PauseDrain:
		r.n.metrics.DrainPauses.Add(1)
		r.pauseLog.pause(r.log, r.n.cfg.clock.Now(), e.Held, e.Bound)
	case readercore.ResumeDrain:
		r.pauseLog.resume(r.log, r.n.cfg.clock.Now(), e.From, e.Held, e.Bound)
		r.startDrain(c, e.From)
	case readercore.ArmRetryTimer:
		r.timers.Cancel(r.shell.retryTimer.id) // replaced (the core cancels it too)
		r.shell.retryTimer.ref = e.Ref
		r.shell.retryTimer.id = r.timers.After(root, c.Self(), e.After, readercore.RetryTimer{Ref: e.Ref})
	case readercore.CancelRetryTimer:
		if r.shell.retryTimer.ref == e.Ref {
			r.timers.Cancel(r.shell.retryTimer.id)
			r.shell.retryTimer.ref, r.shell.retryTimer.id = 0, 0
		}
	case readercore.ArmCutTimer:
		// armed while the effects of the chunk's own Step are executed: the fragment max age
		// counts from the oldest chunk's arrival at the core
		r.timers.Cancel(r.shell.cutTimer.id) // the core cancels before it arms; kept for safety
		r.shell.cutTimer.ref = e.Ref
		r.shell.cutTimer.id = r.timers.After(root, c.Self(), e.After, readercore.CutTimer{Ref: e.Ref})
	case readercore.CancelCutTimer:
		if r.shell.cutTimer.ref == e.Ref {
			r.timers.Cancel(r.shell.cutTimer.id)
			r.shell.cutTimer.ref, r.shell.cutTimer.id = 0, 0
		}
	}
}

func (r *reader) startDrain(c actor.Context, from uint64) {
	r.drainGen++
	r.toDrain(c, drainStart{From: from, Gen: r.drainGen, Budget: r.core.DrainRoom()})
}

// An idle stream keeps no drain actor. A drain that has waited at the end of the log for
// Config.DrainIdleClose says so (drainIdle); if the reader sent it nothing since the
// listener registration the core asked for, the reader stops it and registers a commit
// listener of its own at that offset: the reader is passive. The first commit past it, or
// any command the core gives the drain meanwhile, starts a fresh drain at the core's drain
// position, which reads on as the stopped one would have. A command in the stopped drain's
// mailbox is lost with it only if it was that registration again, which the reader's own
// listener stands for.

// spawnDrain starts a drain child.
func (r *reader) spawnDrain(c actor.Context) {
	log := r.h.spec.Log
	r.drain = c.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &drain{log: log, logger: r.log, faults: r.n.cfg.faults, metrics: r.n.metrics, idleClose: r.n.cfg.DrainIdleClose}
	}))
}

// toDrain sends the drain a command; a passive reader starts a fresh drain instead, at the
// command's position for a drainStart and at the core's drain position for anything else.
func (r *reader) toDrain(c actor.Context, msg any) {
	r.drainListening = false
	if r.drain == nil {
		if _, ok := msg.(drainStart); !ok {
			r.startDrain(c, r.core.Status().DrainNext) // back here with a drainStart
			return
		}
		r.n.metrics.DrainActivations.Add(1)
		r.spawnDrain(c)
	}
	c.Send(r.drain, msg)
}

// listenAt has the drain (or, while passive, the reader itself) wait for the first commit
// past offset, as the core asked (RegisterOffsetListener).
func (r *reader) listenAt(c actor.Context, offset uint64) {
	r.drainListenAt = offset
	if r.drain == nil {
		r.listenSelf(c, offset)
		return
	}
	c.Send(r.drain, drainListen{Offset: offset, Gen: r.drainGen, Budget: r.core.DrainRoom()})
	r.drainListening = true
}

// listenSelf registers the reader's own commit listener at offset: it posts a drainWake of
// this drain generation to the reader (at once if the offset is already committed).
func (r *reader) listenSelf(c actor.Context, offset uint64) {
	r.h.spec.Log.Forget(r.selfListen)
	r.selfListen = wakeOnCommit(r.h.spec.Log, offset, c.ActorSystem().Root, c.Self(), r.drainGen, r.wakeLive)
}

// passivate stops an idle drain that has been told nothing since its listener registration
// and waits on the log in its place.
func (r *reader) passivate(c actor.Context, m drainIdle) {
	if r.drain == nil || m.Gen != r.drainGen || !r.drainListening {
		return // told something since, or of an earlier generation: it is not idle now
	}
	c.Stop(r.drain)
	r.drain, r.drainListening = nil, false
	r.n.metrics.DrainPassivations.Add(1)
	r.listenSelf(c, r.drainListenAt)
	if d := r.n.cfg.DormantAfter; d > 0 {
		r.timers.After(c.ActorSystem().Root, c.Self(), d, dormantCheck{Gen: r.drainGen})
	}
}

// activate is the reader's own listener's wake: data past the offset it waited for was
// committed (or the log closed); a fresh drain reads it.
func (r *reader) activate(c actor.Context, m drainWake) {
	if r.drain != nil || m.Gen != r.drainGen || !r.running {
		return // a drain runs already (started by a command meanwhile), or a stale wake
	}
	r.startDrain(c, r.core.Status().DrainNext)
}

// since is the core's retry clock: the time since this incarnation started, on the node's
// clock (monotonic with the wall clock).
func (r *reader) since() time.Duration { return r.n.cfg.clock.Now().Sub(r.shell.born) }

// declaredGap counts and logs a gap the core declared: a warning when offsets are missing
// from both tiers, an info line when the log merely starts above 0 on a stream that never
// persisted anything.
func (r *reader) declaredGap(e readercore.DeclareGap) {
	r.n.metrics.Gaps.Add(1)
	r.n.metrics.GapOffsets.Add(int64(e.To - e.From))
	if e.Reason == readercore.GapLocalAhead && e.From == 0 {
		// Nothing was ever persisted and the log begins above 0 (a log created with a first
		// offset, or one whose older segments the broker removed before tiering began): the
		// stream's remote tier starts where the log starts; nothing was lost.
		r.log.Info().Uint64("first_offset", e.To).
			Msgf("the local log starts at offset %d: the remote tier starts there too", e.To)
		return
	}
	r.log.Warn().Str("reason", e.Reason.String()).Uint64("gap_from", e.From).Uint64("gap_to", e.To).
		Int("dropped_transfers", e.DroppedTransfers).Int("dropped_chunks", e.DroppedChunks).
		Msg("the local log lost offsets before they were uploaded: declared a gap, the remote tier keeps everything else")
}

// setLocalErr records the drain's local read failure (nil: it reads again) and moves the
// stream between the running and the stalled gauges.
func (r *reader) setLocalErr(err error) {
	m := r.n.metrics
	was := r.localErr != nil
	if was {
		m.StalledBy[causeIndex(ExhaustedResource(r.localErr))].Add(-1)
	}
	r.localErr = err
	if err != nil {
		m.StalledBy[causeIndex(ExhaustedResource(err))].Add(1)
	}
	switch {
	case err != nil && !was:
		m.StreamsRunning.Add(-1)
		m.StreamsStalled.Add(1)
		r.log.Warn().Err(err).Str("exhausted", ExhaustedResource(err)).Msg("stream stalled: its drain cannot read the local log; retrying")
		r.notifyLocalRead(err)
	case err == nil && was:
		m.StreamsRunning.Add(1)
		m.StreamsStalled.Add(-1)
		r.log.Info().Msg("stream no longer stalled: its drain reads the local log again")
		r.notifyLocalRead(nil)
	}
}
