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
		c.Send(r.drain, drainAck{Gen: r.drainGen, Budget: r.core.DrainRoom()})
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
	c.Send(r.drain, drainStart{From: from, Gen: r.drainGen, Budget: r.core.DrainRoom()})
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
