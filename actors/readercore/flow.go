package readercore

import (
	"fmt"
	"time"
)

// Flow control between the drain and the upload pipeline: the drain's position checked
// against the core's at every batch, the bound on bytes drained and not yet durable, and the
// stream's one transfer retry timer. The rules are in docs/replica-reader-core.md.

// ContinueDrain lets the drain read its next batch: the core took the last one and agrees
// with the drain's position.
type ContinueDrain struct{}

// DrainStalled reports that the drain cannot get past Offset: the drain's position
// (DrainAt) disagreed with the core's again right after a reposition (a chunk the core keeps
// refusing: a bad header, an id out of sequence). Nothing is read until the retry
// (RetryDrainAfter); Failures counts the disagreements in a row.
type DrainStalled struct {
	Offset   uint64
	DrainAt  uint64
	Failures int
	Reason   string
}

// DrainUnstalled reports that the core took a chunk at Offset, where the drain had stalled.
type DrainUnstalled struct{ Offset uint64 }

// RetryDrainAfter asks for RetryTimer{Ref} after Delay: the drain is then reopened at the
// core's position.
type RetryDrainAfter struct {
	Ref   Ref
	Delay time.Duration
}

// PauseDrain reports that the stream holds Held chunk bytes drained and not yet durable, at
// or above its bound (Config.MaxUnpersistedBytes): the core takes no more chunks (chunks of
// the batch in flight are ignored and read again later) until a persist frees the budget.
// The shell only logs it: the drain waits, as it gets no ContinueDrain.
type PauseDrain struct {
	Held  uint64
	Bound uint64
}

// ResumeDrain says bytes became durable and Held is below the bound again: reopen the data
// reader at From (where the core stopped taking chunks) and drain.
type ResumeDrain struct {
	From  uint64
	Held  uint64
	Bound uint64
}

// ArmRetryTimer arms the stream's one transfer retry timer: after After the shell delivers
// RetryTimer{Ref} and the core resubmits every waiting transfer whose retry is due (each
// keeps its own backoff; the timer is armed for the earliest). It replaces the retry timer
// armed before, which a CancelRetryTimer has named.
type ArmRetryTimer struct {
	Ref   Ref
	After time.Duration
}

// CancelRetryTimer says the retry timer Ref is no longer wanted (firing it anyway is harmless).
type CancelRetryTimer struct{ Ref Ref }

func (ContinueDrain) isEffect()    {}
func (DrainStalled) isEffect()     {}
func (DrainUnstalled) isEffect()   {}
func (RetryDrainAfter) isEffect()  {}
func (PauseDrain) isEffect()       {}
func (ResumeDrain) isEffect()      {}
func (ArmRetryTimer) isEffect()    {}
func (CancelRetryTimer) isEffect() {}

func (ContinueDrain) String() string { return "continue-drain" }

func (e DrainStalled) String() string {
	return fmt.Sprintf("drain-stalled offset=%d drain-at=%d failures=%d reason=%q", e.Offset, e.DrainAt, e.Failures, e.Reason)
}

func (e DrainUnstalled) String() string { return fmt.Sprintf("drain-unstalled offset=%d", e.Offset) }

func (e RetryDrainAfter) String() string {
	return fmt.Sprintf("retry-drain-after ref=%d delay=%s", e.Ref, e.Delay)
}

func (e PauseDrain) String() string {
	return fmt.Sprintf("pause-drain held=%d bound=%d", e.Held, e.Bound)
}

func (e ResumeDrain) String() string {
	return fmt.Sprintf("resume-drain from=%d held=%d bound=%d", e.From, e.Held, e.Bound)
}

func (e ArmRetryTimer) String() string {
	return fmt.Sprintf("arm-retry-timer ref=%d after=%s", e.Ref, e.After)
}

func (e CancelRetryTimer) String() string { return fmt.Sprintf("cancel-retry-timer ref=%d", e.Ref) }

// drainMismatch is a disagreement between the drain's position and the core's at `at`
// (the core's drain position then): the first one repositions the drain, the next ones at
// the same position stall it with a growing retry delay.
type drainMismatch struct {
	at       uint64
	failures int // stalls since the reposition
	reason   string
}

// onDrainReport checks the drain's position at the end of a batch (or of the committed
// data) against the core's. In agreement the drain goes on: ContinueDrain, or at the end a
// listener at the position. A disagreement never loops: the first repositions the drain at
// the core's position; when it disagrees again there (a chunk the core keeps refusing), the
// drain stalls with the reason and is reopened after a delay (1 s doubling to 30 s by
// default, the non-transient upload schedule). Paused or waiting for that retry, the core
// ignores the report: the resume or the retry reopens the drain.
func (c *Core) onDrainReport(next uint64, end bool, refused string) {
	if c.phase != phaseRunning || c.diverged != nil || c.paused || c.drainRetry != 0 {
		return
	}
	if next == c.drainNext {
		if end {
			c.emit(RegisterOffsetListener{Offset: c.drainNext})
		} else {
			c.emit(ContinueDrain{})
		}
		return
	}
	reason := fmt.Sprintf("the drain is at %d, the core expects chunk %d", next, c.drainNext)
	if refused != "" {
		reason += ": " + refused
	}
	m := c.drainMiss
	if m == nil {
		c.drainMiss = &drainMismatch{at: c.drainNext, reason: reason}
		c.stats.DrainRepositions++
		c.emit(StartDrain{From: c.drainNext, Reason: reason})
		return
	}
	m.failures++
	m.reason = reason
	c.stats.DrainStalls++
	c.drainRetry = c.newRef()
	c.emit(DrainStalled{Offset: c.drainNext, DrainAt: next, Failures: m.failures, Reason: reason})
	c.emit(RetryDrainAfter{Ref: c.drainRetry, Delay: c.uploadRetryDelay(m.failures)})
}

// drainMoved forgets a disagreement once the core's drain position moved past it (a chunk
// taken, a gap, a truncation): a stall there is over.
func (c *Core) drainMoved() {
	if m := c.drainMiss; m != nil && m.failures > 0 {
		c.emit(DrainUnstalled{Offset: m.at})
	}
	c.drainMiss = nil
	c.drainRetry = 0 // a retry still armed finds nothing to do
}

// restartDrain moves the drain position to from (a gap, a truncation) and opens the drain
// there: any disagreement, stall or pause is over (a pause is taken again at the next chunk
// if the bound still holds).
func (c *Core) restartDrain(from uint64) {
	c.drainNext = from
	c.drainMoved()
	c.paused = false
	c.emit(StartDrain{From: from})
}

// DrainRoom is how many chunk bytes the core takes before it pauses: the bound less what it
// holds (0 when paused). The shell lets the drain read about that much ahead (at least one
// chunk), so that few chunks are read only to be read again after a pause.
func (c *Core) DrainRoom() uint64 {
	if c.paused || c.held() >= c.cfg.MaxUnpersistedBytes {
		return 0
	}
	return c.cfg.MaxUnpersistedBytes - c.held()
}

// held is the chunk bytes drained and not yet durable: the assembly, the transfers not yet
// applied and the appends not yet persisted.
func (c *Core) held() uint64 { return c.asm.Size() + c.cutBytes }

// recountHeld recomputes the bytes of the transfers and unpersisted appends after the
// pipeline changed other than by a cut (a persist, a gap, a truncation, a drop).
func (c *Core) recountHeld() {
	var n uint64
	for _, t := range c.transfers {
		n += t.desc.Size
	}
	for _, p := range c.pending {
		if p.append && !p.gap {
			n += p.edit.Insert[0].Size
		}
	}
	c.cutBytes = n
}

// pause stops taking chunks at the bound and makes the uploaded appends due for a persist
// (unless persists are backing off after failures): only a persist frees the budget.
func (c *Core) pause() {
	c.paused = true
	c.stats.DrainPauses++
	c.emit(PauseDrain{Held: c.held(), Bound: c.cfg.MaxUnpersistedBytes})
	c.afterChange()
}

// maybeResume reopens the drain where it paused once the bytes cut and not yet durable
// leave room under the bound for a whole fragment (the assembly's included): resuming for
// less would pause again a chunk later, and the drain would reopen its reader per chunk.
// With the bound at its minimum (the target size) that is when everything cut is persisted.
func (c *Core) maybeResume() {
	if !c.paused || c.cutBytes+c.cfg.FragmentTargetSize > c.cfg.MaxUnpersistedBytes {
		return
	}
	c.paused = false
	c.emit(ResumeDrain{From: c.drainNext, Held: c.held(), Bound: c.cfg.MaxUnpersistedBytes})
}

// observe advances the core's clock to at (results and timers bring it; it never goes back).
func (c *Core) observe(at time.Duration) {
	if at > c.clock {
		c.clock = at
	}
}

// waitRetry makes t wait for a retry due after d, on the stream's one retry timer.
func (c *Core) waitRetry(t *transfer, d time.Duration) {
	t.state = transferWaiting
	t.due = c.clock + d
	c.armRetry()
}

// armRetry keeps the stream's one retry timer armed for the earliest due retry: armed anew
// (the old one cancelled) when a retry is due before it, cancelled when nothing waits. A
// timer that fires before anything is due (its transfer succeeded meanwhile) re-arms.
func (c *Core) armRetry() {
	var first time.Duration
	waiting := false
	for _, t := range c.transfers {
		if t.state == transferWaiting && (!waiting || t.due < first) {
			first, waiting = t.due, true
		}
	}
	switch {
	case !waiting:
		if c.retryTimer != 0 {
			c.emit(CancelRetryTimer{Ref: c.retryTimer})
			c.retryTimer = 0
		}
		return
	case c.retryTimer != 0 && c.retryAt <= first:
		return
	case c.retryTimer != 0:
		c.emit(CancelRetryTimer{Ref: c.retryTimer})
	}
	c.retryTimer, c.retryAt = c.newRef(), first
	c.stats.RetryTimers++
	c.emit(ArmRetryTimer{Ref: c.retryTimer, After: max(first-c.clock, 0)})
}

// resubmitDue resubmits, in cut order, every waiting transfer whose retry is due, and arms
// the timer for the rest.
func (c *Core) resubmitDue() {
	for _, t := range c.transfers {
		if t.state == transferWaiting && t.due <= c.clock {
			c.resubmit(t)
		}
	}
	c.armRetry()
}
