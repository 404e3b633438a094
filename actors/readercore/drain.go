package readercore

import (
	"cmp"
	"fmt"
	"math"
	"time"

	"github.com/streamtier/streamtier/manifest"
)

// onChunk feeds one drained chunk to the assembly and cuts when it says so. At the bound on
// bytes not yet durable the core pauses: it takes no chunk until bytes become durable, and
// the chunks the drain still delivers are read again at the resume.
func (c *Core) onChunk(e ChunkDrained) error {
	if c.phase != phaseRunning {
		return fmt.Errorf("stream %s: chunk %d drained before the reader started", c.cfg.StreamID, e.Header.ChunkID)
	}
	if !c.paused && c.held() >= c.cfg.MaxUnpersistedBytes {
		c.pause()
	}
	if c.paused {
		c.stats.DeferredChunks++
		return nil
	}
	if e.Header.ChunkID != c.drainNext {
		return fmt.Errorf("stream %s: chunk %d drained, expected chunk %d", c.cfg.StreamID, e.Header.ChunkID, c.drainNext)
	}
	cut, err := c.asm.Add(e.Header, e.Location)
	if err != nil {
		return fmt.Errorf("stream %s: %w", c.cfg.StreamID, err)
	}
	c.drainNext = e.Header.NextID()
	if c.drainMiss != nil || c.drainRetry != 0 {
		c.drainMoved()
	}
	if cut {
		c.cut()
	} else {
		c.armCutTimer() // the first chunk of a new assembly: its arrival starts the idle cut
		c.flushCut()
	}
	if c.held() >= c.cfg.MaxUnpersistedBytes {
		c.pause()
	}
	return nil
}

// onDrainSegmentGone answers the stream's retention outrunning the drain: the range up to the
// local first offset is gone locally and can never be uploaded, so it becomes a gap.
func (c *Core) onDrainSegmentGone(e DrainSegmentGone) error {
	if c.phase != phaseRunning {
		return nil
	}
	if e.LocalFirst <= c.drainNext {
		return fmt.Errorf("stream %s: drain reported its segment gone, but the local log starts at %d, not above the drain position %d", c.cfg.StreamID, e.LocalFirst, c.drainNext)
	}
	c.declareGap(GapSegmentGone, e.LocalFirst)
	c.afterChange()
	return nil
}

// cut seals the assembled fragment (if any) and submits it to the governor, with a deadline;
// the idle cut armed for it is cancelled.
func (c *Core) cut() {
	c.cancelCutTimer()
	d, ok := c.asm.Cut()
	if !ok {
		return
	}
	t := &transfer{ref: c.newRef(), desc: d, attempt: 1}
	c.transfers = append(c.transfers, t)
	c.cutBytes += d.Size
	c.stats.Cuts++
	c.emit(SubmitTransfer{Ref: t.ref, Attempt: 1, Fragment: &t.desc, Size: d.ObjectSize()})
	c.emit(ArmTransferDeadline{Ref: t.ref, Attempt: 1, After: c.cfg.TransferDeadline})
}

// findTransfer returns the transfer with ref, or nil when it is unknown (applied, discarded
// by a gap, a truncation or a reinitialize, or never handed out).
func (c *Core) findTransfer(ref Ref) *transfer {
	for _, t := range c.transfers {
		if t.ref == ref {
			return t
		}
	}
	return nil
}

func (c *Core) ignored() { c.stats.IgnoredResults++ }

// onTransferResult applies one attempt's outcome. The first success wins; a failure counts
// only for the attempt in flight; anything else is stale and ignored.
func (c *Core) onTransferResult(e TransferResult) error {
	if e.Outcome > SegmentGone {
		return fmt.Errorf("stream %s: transfer result ref %d: unknown outcome %d", c.cfg.StreamID, e.Ref, e.Outcome)
	}
	c.observe(e.At)
	if c.phase != phaseRunning {
		c.ignored()
		return nil
	}
	t := c.findTransfer(e.Ref)
	if t == nil || e.Attempt < 1 || e.Attempt > t.attempt || t.state == transferDone {
		c.ignored()
		return nil
	}
	switch e.Outcome {
	case OK:
		waited := t.state == transferWaiting
		t.state = transferDone
		t.uid = e.UID
		c.lastUploadErr = ""
		if t.stalled {
			t.stalled = false
			c.emit(Unstalled{Offset: t.desc.FirstOffset, Ref: t.ref})
		}
		if waited {
			c.armRetry() // an older attempt succeeded: its retry is no longer due
		}
		c.applyCompletions()
	case Retriable:
		if t.state != transferInFlight || e.Attempt != t.attempt {
			c.ignored()
			return nil
		}
		t.transient++
		c.stats.TransientRetries++
		c.lastUploadErr = cmp.Or(e.Reason, "retriable upload failure")
		if t.transient == 1 {
			c.resubmit(t)
			return nil
		}
		c.waitRetry(t, c.transientDelay(t.transient, e.Jitter))
	case NonTransient:
		if t.state != transferInFlight || e.Attempt != t.attempt {
			c.ignored()
			return nil
		}
		c.nonTransientFailure(t, e.Reason)
	case SegmentGone:
		if e.LocalFirst <= t.desc.FirstOffset {
			// The local log still holds the fragment's first offset, so its range is not
			// gone: never give it up on a contradictory report, retry it like a 4xx.
			if t.state != transferInFlight || e.Attempt != t.attempt {
				c.ignored()
				return nil
			}
			reason := fmt.Sprintf("segment reported gone but the local log starts at %d, not above the fragment's first offset %d", e.LocalFirst, t.desc.FirstOffset)
			if e.Reason != "" {
				reason += ": " + e.Reason
			}
			c.nonTransientFailure(t, reason)
			return nil
		}
		c.declareGap(GapSegmentGone, e.LocalFirst)
		c.afterChange()
	}
	return nil
}

// nonTransientFailure keeps the fragment at its place, stalls the pipeline at its offset and
// schedules a delayed retry: the fragment is never abandoned.
func (c *Core) nonTransientFailure(t *transfer, reason string) {
	if reason == "" {
		reason = "non-transient upload failure"
	}
	t.nonTransient++
	c.stats.NonTransientRetries++
	c.lastUploadErr = reason
	t.stalled = true
	c.emit(Stalled{Offset: t.desc.FirstOffset, Ref: t.ref, Failures: t.nonTransient, Reason: reason})
	c.waitRetry(t, c.uploadRetryDelay(t.nonTransient))
}

// resubmit starts the next attempt of t now, under the same ref, with a fresh deadline.
func (c *Core) resubmit(t *transfer) {
	t.attempt++
	t.state = transferInFlight
	c.emit(ResubmitTransfer{Ref: t.ref, Attempt: t.attempt, Fragment: &t.desc, Size: t.desc.ObjectSize()})
	c.emit(ArmTransferDeadline{Ref: t.ref, Attempt: t.attempt, After: c.cfg.TransferDeadline})
}

// onDeadline resubmits an attempt whose result never came. A deadline for an attempt that
// already answered is stale and ignored (deadlines are never cancelled).
func (c *Core) onDeadline(e TransferDeadline) {
	if c.phase != phaseRunning {
		return
	}
	t := c.findTransfer(e.Ref)
	if t == nil || t.state != transferInFlight || t.attempt != e.Attempt {
		return
	}
	c.stats.DeadlineResubmits++
	c.resubmit(t)
}

// onRetryTimer starts the delayed retries that are due: the waiting transfers (the stream's
// retry timer), the drain (its retry timer) or a group upload.
func (c *Core) onRetryTimer(e RetryTimer) {
	c.observe(e.At)
	if c.phase != phaseRunning || e.Ref == 0 {
		return
	}
	switch e.Ref {
	case c.retryTimer:
		c.retryTimer = 0
		c.resubmitDue()
		return
	case c.drainRetry:
		c.drainRetry = 0
		if c.diverged == nil && !c.paused {
			reason := "retry after the drain stalled"
			if m := c.drainMiss; m != nil {
				reason += ": " + m.reason
			}
			c.emit(StartDrain{From: c.drainNext, Reason: reason})
		}
		return
	}
	if op := c.rebalance; op != nil && op.ref == e.Ref && op.waiting && op.attempt == e.Attempt {
		op.waiting = false
		op.attempt++
		c.emit(UploadGroup{Ref: op.ref, Attempt: op.attempt, Kind: op.r.Kind, Children: op.r.Children, Epoch: c.epoch})
	}
}

// applyCompletions applies finished transfers to the in-memory manifest in cut order; a
// finished transfer behind an unfinished one waits.
func (c *Core) applyCompletions() {
	applied := false
	for len(c.transfers) > 0 && c.transfers[0].state == transferDone {
		t := c.transfers[0]
		entry := manifest.Entry{
			FirstOffset:    t.desc.FirstOffset,
			FirstTimestamp: t.desc.FirstTimestamp,
			LastTimestamp:  t.desc.LastTimestamp,
			Size:           t.desc.Size,
			UID:            t.uid,
			Kind:           manifest.KindFragment,
		}
		ed, err := manifest.AppendEdit(c.mem, entry, t.desc.NextOffset)
		var m manifest.Manifest
		if err == nil {
			m, err = c.mem.Apply(ed)
		}
		if err != nil {
			// Never reached unless the core has a bug: the fragment stays at the head of
			// the queue (nothing is dropped) and the pipeline stalls there.
			c.emit(Problem{Op: "append", Err: fmt.Errorf("stream %s: fragment [%d,%d): %w", c.cfg.StreamID, t.desc.FirstOffset, t.desc.NextOffset, err)})
			break
		}
		c.mem = m
		c.transfers[0] = nil
		c.transfers = c.transfers[1:]
		c.pending = append(c.pending, pendingEdit{edit: ed, append: true})
		c.stats.Completions++
		applied = true
	}
	if applied {
		c.afterChange()
	}
}

// transientDelay is the wait before the n-th retry of a retriable failure (n >= 2; the first
// retries at once): base doubling to max, shortened by up to half by jitter in [0, 1).
func (c *Core) transientDelay(n int, jitter float64) time.Duration {
	d := doubling(c.cfg.TransientBackoffBase, c.cfg.TransientBackoffMax, n-2)
	if !(jitter > 0 && jitter < 1) { // also refuses NaN
		jitter = 0
	}
	return d - time.Duration(float64(d)*jitter/2)
}

// uploadRetryDelay is the wait before retrying after the n-th non-transient failure.
func (c *Core) uploadRetryDelay(n int) time.Duration {
	return doubling(c.cfg.UploadRetryDelay, c.cfg.UploadRetryMaxDelay, n-1)
}

// doubling is base * 2^k, capped at max.
func doubling(base, max time.Duration, k int) time.Duration {
	if k < 0 {
		k = 0
	}
	d := base
	for i := 0; i < k && d < max; i++ {
		if d > math.MaxInt64/2 {
			return max
		}
		d *= 2
	}
	if d > max {
		return max
	}
	return d
}
