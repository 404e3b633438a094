package readercore

import (
	"fmt"

	"github.com/streamtier/streamtier/manifest"
)

// uncaptured counts the pending edits the in-flight persist (if any) does not carry.
func (c *Core) uncaptured() int {
	if c.inflight != nil {
		return len(c.pending) - len(c.inflight.edits)
	}
	return len(c.pending)
}

// maybePersist starts a persist when one is due and nothing holds it back: one persist at a
// time, and none while a rebalance or a remote retention changes the head.
func (c *Core) maybePersist() {
	if c.phase != phaseRunning || c.inflight != nil || c.rebalance != nil || c.retention != nil {
		return
	}
	if len(c.pending) == 0 && c.reset == nil {
		c.persistDue = false
		return
	}
	// Paused at the bound on bytes not yet durable, only a persist frees the budget: the
	// uploaded appends are persisted now rather than at the threshold or the timer. With no
	// upload outstanding, no edit will join these before the next fragment is filled and
	// uploaded: waiting for the threshold or the timer would only delay them (the settled
	// persist; a steady writer then persists about once per fragment, a busy one whose
	// uploads overlap still at the threshold or the timer).
	// A flush whose uploads are applied is persisted now too, also while a steady write
	// keeps the assembly busy.
	due := c.persistDue || (!c.persistBackoff && (c.reset != nil || len(c.pending) >= c.cfg.PersistThreshold || c.paused || c.uploadsSettled() || c.flushPersistDue()))
	if due {
		c.startPersist()
	}
}

// uploadsSettled says no cut fragment is outstanding: every upload is applied. Unpersisted
// edits are then persisted at once (the settled persist), whatever is being assembled,
// rather than at the threshold or the persist interval, which still bound a stream whose
// uploads overlap. The commit-to-persisted latency of a steadily written stream is then
// one fragment's fill time, one upload and one persist.
func (c *Core) uploadsSettled() bool { return len(c.transfers) == 0 }

// startPersist captures the in-memory manifest and the edits since the last persist.
func (c *Core) startPersist() {
	if c.timer != 0 {
		c.emit(CancelPersistTimer{Ref: c.timer})
		c.timer = 0
	}
	c.persistDue = false
	c.persistBackoff = false
	op := &persistOp{
		ref:      c.newRef(),
		root:     c.mem,
		edits:    append([]pendingEdit(nil), c.pending...),
		reset:    c.reset,
		expected: c.revision,
		seq:      max(c.nextSeq, c.root.Seq+1),
		parent:   c.root,
	}
	c.inflight = op
	edits := make([]manifest.Edit, len(op.edits))
	for i, p := range op.edits {
		edits[i] = p.edit
	}
	c.emit(StartPersist{Ref: op.ref, Root: op.root, ExpectedRevision: op.expected, Epoch: c.epoch, Edits: edits, Reset: op.reset != nil,
		Seq: op.seq, Parent: op.parent})
}

// maybeArmTimer arms the persist timer when the first edit not carried by a persist appears,
// so that no edit waits longer than the persist interval.
func (c *Core) maybeArmTimer() {
	if c.phase != phaseRunning || c.timer != 0 || c.persistDue || c.uncaptured() == 0 {
		return
	}
	c.timer = c.newRef()
	c.emit(ArmPersistTimer{Ref: c.timer, After: c.cfg.PersistInterval})
}

func (c *Core) onPersistTimer(e PersistTimer) {
	if c.phase != phaseRunning || e.Ref == 0 || e.Ref != c.timer {
		return
	}
	c.timer = 0
	c.persistDue = true
	c.afterChange()
}

func (c *Core) onPersistResult(e PersistResult) error {
	if e.Outcome > PersistFenced {
		return fmt.Errorf("stream %s: persist result ref %d: unknown outcome %d", c.cfg.StreamID, e.Ref, e.Outcome)
	}
	if c.phase != phaseRunning || c.inflight == nil || e.Ref != c.inflight.ref {
		c.ignored()
		return nil
	}
	op := c.inflight
	if e.Outcome == PersistOK && e.Revision <= op.expected {
		return fmt.Errorf("stream %s: persist ref %d succeeded at revision %d, not above the expected %d", c.cfg.StreamID, e.Ref, e.Revision, op.expected)
	}
	if e.Outcome == PersistFenced && e.StoredEpoch <= c.epoch {
		return fmt.Errorf("stream %s: persist ref %d fenced by epoch %d, not above the writer's %d", c.cfg.StreamID, e.Ref, e.StoredEpoch, c.epoch)
	}
	c.now = e.Now
	switch e.Outcome {
	case PersistOK:
		c.inflight = nil
		c.persistSucceeded(op, e)
	case PersistConflict:
		c.inflight = nil
		c.stats.PersistFailures++
		c.reinitialize(Reinitialize{Reason: fmt.Sprintf("persist conflict at revision %d: another writer persisted", op.expected)})
	case PersistNotFound:
		c.inflight = nil
		c.stats.PersistFailures++
		if op.expected > 0 {
			c.stop(fmt.Sprintf("manifest record not found after revision %d: the stream was deleted", op.expected), 0)
			return nil
		}
		c.notFoundAtZero(e.Reason)
	case PersistFailed:
		c.inflight = nil
		c.stats.PersistFailures++
		c.persistFailed(e.Reason)
	case PersistFenced:
		// A higher epoch persisted: a newer writer owns the stream. Reinitializing would
		// only meet the fence again; this writer is deposed and stops for good.
		c.inflight = nil
		c.stats.PersistFailures++
		c.stop(fmt.Sprintf("deposed by epoch %d (this writer is at epoch %d)", e.StoredEpoch, c.epoch), e.StoredEpoch)
	}
	return nil
}

// notFoundAtZero answers a not-found on a persist that creates the record (revision 0):
// the stream's anchor is missing (never written, or removed without a tombstone). Nothing
// was ever persisted, so this is no deletion. A resolution writes the anchor, so the first
// time the core reinitializes; when it recurs (Config.AnchorReinitialized: this core, or
// the one before it, already did), an immediate retry would only meet the same missing
// anchor: the persist is retried each persist interval, and status says why.
func (c *Core) notFoundAtZero(reason string) {
	if !c.cfg.AnchorReinitialized {
		c.cfg.AnchorReinitialized = true // kept by a reinitialize of this very core
		c.reinitialize(Reinitialize{Reason: "persist found no anchor at revision 0: resolving again writes it", AnchorMissing: true})
		return
	}
	c.persistFailures = max(c.persistFailures, 1) // straight to the timer
	c.persistFailed(fmt.Sprintf("the manifest record cannot be created: the anchor is still missing after a new resolution (not found at revision 0: %s); retrying every %s",
		reason, c.cfg.PersistInterval))
}

// persistFailed retries the persist: at once after the first failure, then each time the
// persist timer (re-armed for the persist interval) fires. Edits keep gathering meanwhile.
func (c *Core) persistFailed(reason string) {
	if reason == "" {
		reason = "persist failed"
	}
	c.lastPersistErr = reason
	c.persistFailures++
	if c.persistFailures == 1 {
		c.persistDue = true
	} else {
		if c.timer != 0 {
			c.emit(CancelPersistTimer{Ref: c.timer})
		}
		c.persistBackoff = true
		c.persistDue = false
		c.timer = c.newRef()
		c.emit(ArmPersistTimer{Ref: c.timer, After: c.cfg.PersistInterval})
	}
	c.afterChange()
}

// persistSucceeded makes the captured manifest the persisted truth and releases, in order,
// everything the persist gates: cache and range table, replicas, local then remote
// retention, deferred deletions (with the replaced root) and the waiters now below the
// persisted next offset.
func (c *Core) persistSucceeded(op *persistOp, e PersistResult) {
	prevRoot, hadRoot := c.root, c.hasRoot
	c.persisted = op.root
	c.revision = e.Revision
	c.root = RootRef{Seq: op.seq, Epoch: c.epoch, UID: e.RootUID}
	c.nextSeq = op.seq + 1
	c.hasRoot = true
	c.persistFailures = 0
	c.lastPersistErr = ""
	c.lastPersistAt = e.Now
	c.rebalanceHeld = false
	c.stats.Persists++
	if op.reset == c.reset {
		c.pending = append([]pendingEdit(nil), c.pending[len(op.edits):]...)
	} // else a truncation superseded this persist: it dropped the edits this one carried
	c.recountHeld() // what this persist made durable no longer counts against the bound
	c.nonAppend = 0
	for _, p := range c.pending {
		if !p.append {
			c.nonAppend++
		}
	}
	if op.reset != nil && op.reset == c.reset {
		c.reset = nil
	}

	c.emit(UpdateRange{Manifest: c.persisted, Revision: c.revision, Root: c.root})
	if op.reset != nil {
		c.syncAll()
	} else {
		edits := make([]manifest.Edit, len(op.edits))
		for i, p := range op.edits {
			edits[i] = p.edit
		}
		c.emit(Broadcast{To: append([]string(nil), c.replicas...), Edits: edits, Root: c.root, Parent: op.parent, Epoch: c.epoch})
	}
	c.emit(EvaluateLocalRetention{PersistedNext: c.persisted.NextOffset})
	if c.reset == nil {
		c.retentionWant = true // remote retention runs after every successful persist
		c.runRetention()
	}

	var del []manifest.Entry
	from := uint64(0)
	first := true
	for _, p := range op.edits {
		if len(p.deletes) > 0 {
			del = append(del, p.deletes...)
			if first || p.deleteFrom < from {
				from, first = p.deleteFrom, false
			}
		}
	}
	var alone []manifest.Entry
	if op.reset != nil {
		if len(op.reset.stale) > 0 {
			del = append(del, op.reset.stale...)
			from = 0 // what lies above the cut goes whole
		}
		alone = op.reset.alone
	}
	var roots []RootRef
	if hadRoot && prevRoot != c.root {
		roots = append(roots, prevRoot)
	}
	if len(del) > 0 || len(alone) > 0 || len(roots) > 0 {
		c.emit(DeleteObjects{Entries: dedupeEntries(del), From: from, Alone: alone, Roots: roots})
	}
	if c.reset == nil && c.diverged == nil {
		// Never from a manifest a pending truncation cuts back (a superseded persist): its
		// own persist releases them.
		c.releaseWaiters()
	}
	c.afterChange()
}

// dedupeEntries drops repeated objects (same kind and uid), keeping the first.
func dedupeEntries(es []manifest.Entry) []manifest.Entry {
	if len(es) < 2 {
		return es
	}
	type key struct {
		kind manifest.Kind
		uid  uint64
	}
	seen := make(map[key]bool, len(es))
	out := es[:0:0]
	for _, e := range es {
		k := key{e.Kind, e.UID}
		if !seen[k] {
			seen[k] = true
			out = append(out, e)
		}
	}
	return out
}
