package readercore

import (
	"fmt"

	"github.com/streamtier/streamtier/manifest"
)

// maybeRebalance starts a group upload when the head of the in-memory manifest has a run of
// M entries of one kind, unless a persist or a retention is in flight (one head change at a
// time), a truncation is pending or a rebalance was given up since the last persist. A fold
// never takes the root's trailing gap (FindRebalance).
func (c *Core) maybeRebalance() {
	if c.phase != phaseRunning || c.reset != nil || c.inflight != nil || c.retention != nil || c.rebalance != nil || c.rebalanceHeld {
		return
	}
	r, ok := manifest.FindRebalance(c.mem, c.cfg.RebalanceThreshold)
	if !ok {
		return
	}
	c.rebalance = &rebalanceOp{ref: c.newRef(), attempt: 1, r: r}
	c.emit(UploadGroup{Ref: c.rebalance.ref, Attempt: 1, Kind: r.Kind, Children: r.Children, Epoch: c.epoch})
}

// onGroupResult applies a group upload's outcome: success replaces the run with the group
// entry (and the check runs again: rebalancing cascades), a retriable failure uploads again
// (at once, then with backoff), any other failure gives the rebalance up until the next
// persist (the larger root is still a valid manifest).
func (c *Core) onGroupResult(e GroupUploadResult) error {
	if e.Outcome > NonTransient {
		return fmt.Errorf("stream %s: group upload result ref %d: outcome %s is not one a group upload has", c.cfg.StreamID, e.Ref, e.Outcome)
	}
	op := c.rebalance
	if c.phase != phaseRunning || op == nil || op.ref != e.Ref || e.Attempt < 1 || e.Attempt > op.attempt {
		c.ignored()
		return nil
	}
	switch e.Outcome {
	case OK:
		c.rebalance = nil
		ed := op.r.Edit(c.mem, e.UID)
		err := op.r.Matches(c.mem)
		var m manifest.Manifest
		if err == nil {
			m, err = c.mem.Apply(ed)
		}
		if err != nil {
			c.rebalanceHeld = true
			c.emit(Problem{Op: "rebalance", Err: fmt.Errorf("stream %s: group of %d entries at %d: %w", c.cfg.StreamID, len(op.r.Children), op.r.At, err)})
			break
		}
		c.mem = m
		c.pending = append(c.pending, pendingEdit{edit: ed})
		c.nonAppend++
		c.stats.Rebalances++
	case Retriable:
		if op.waiting || e.Attempt != op.attempt {
			c.ignored()
			return nil
		}
		op.failures++
		if op.failures == 1 {
			op.attempt++
			c.emit(UploadGroup{Ref: op.ref, Attempt: op.attempt, Kind: op.r.Kind, Children: op.r.Children, Epoch: c.epoch})
			return nil
		}
		op.waiting = true
		c.emit(RetryGroupUploadAfter{Ref: op.ref, Attempt: op.attempt, Delay: c.transientDelay(op.failures, e.Jitter)})
		return nil
	case NonTransient:
		if op.waiting || e.Attempt != op.attempt {
			c.ignored()
			return nil
		}
		c.rebalance = nil
		c.rebalanceHeld = true
		c.stats.RebalancesGivenUp++
	}
	c.afterChange()
	return nil
}

// wantRetention asks for remote retention now (policy change, on demand); it runs as soon as
// nothing else changes the head, at the earliest when the core is running.
func (c *Core) wantRetention() {
	c.retentionWant = true
	c.afterChange()
}

// onPolicy sets the new policy and asks for its evaluation. A change that arrives while the
// core is starting (at start, after a reinitialize) is evaluated once the start decision is
// made, not dropped.
func (c *Core) onPolicy(e RetentionPolicyChanged) error {
	c.policy = e.Policy
	c.now = e.Now
	c.wantRetention()
	return nil
}

// runRetention evaluates the policy against the persisted manifest when nothing else
// changes the head: no persist, rebalance or retention in flight, no truncation pending and no
// unpersisted head change (so the head of the in-memory manifest is the persisted head and
// the edit applies to both). Otherwise it stays wanted and runs later.
func (c *Core) runRetention() {
	if c.policy.IsZero() {
		c.retentionWant = false
		return
	}
	if c.phase != phaseRunning || c.inflight != nil || c.rebalance != nil || c.retention != nil || c.reset != nil || c.nonAppend > 0 {
		c.retentionWant = true
		return
	}
	c.retentionWant = false
	c.stats.RetentionRuns++
	c.applyRetention(manifest.EvaluateRetention(c.persisted, c.policy, c.now))
}

// applyRetention applies what an evaluation decided: fetch the head group, or apply the
// truncation to the in-memory manifest, keeping its deletions until a persist records it.
func (c *Core) applyRetention(r manifest.Retention) {
	if r.Err != nil {
		c.stats.RetentionFailures++
		c.emit(Problem{Op: "retention", Err: fmt.Errorf("stream %s: %w", c.cfg.StreamID, r.Err)})
		return
	}
	if r.Fetch != nil {
		c.retention = &retentionOp{ref: c.newRef(), group: *r.Fetch, walk: r}
		c.emit(FetchGroupForRetention{Ref: c.retention.ref, Group: *r.Fetch, Timeout: c.cfg.RetentionTimeout})
		return
	}
	if !r.Changed {
		return
	}
	ed := rebaseRetention(r.Edit, c.persisted, c.mem)
	m, err := c.mem.Apply(ed)
	if err != nil {
		c.stats.RetentionFailures++
		c.emit(Problem{Op: "retention", Err: fmt.Errorf("stream %s: %w", c.cfg.StreamID, err)})
		return
	}
	c.mem = m
	c.pending = append(c.pending, pendingEdit{edit: ed, deletes: r.Delete, deleteFrom: r.DeleteFrom})
	c.nonAppend++
	c.emit(RemoteRetention{Edit: ed, Deferred: r.Delete})
}

// rebaseRetention carries an edit computed on the persisted manifest p over to the in-memory
// manifest m, which is p with fragments and gaps appended at the tail (its trailing gap
// possibly extended). Only one thing differs: when the edit empties p while m holds newer
// entries, the header moves to the first of them, and a gap that would then lead goes with
// the prefix (a root never starts with a gap); with nothing after it, m is left empty at
// its own next offset (above p's when p's trailing gap grew in memory).
func rebaseRetention(ed manifest.Edit, p, m manifest.Manifest) manifest.Edit {
	left := len(p.Entries) - ed.Remove + len(ed.Insert)
	if left > 0 {
		return ed
	}
	i := len(p.Entries)
	if i < len(m.Entries) && m.Entries[i].IsGap() {
		ed.Remove++
		i++
	}
	if i == len(m.Entries) {
		ed.FirstOffset = m.NextOffset
		ed.FirstTimestamp, ed.FirstLastTimestamp = -1, -1
		return ed
	}
	h := m.Entries[i]
	ed.FirstOffset = h.FirstOffset
	ed.FirstTimestamp = h.FirstTimestamp
	ed.FirstLastTimestamp = h.LastTimestamp
	return ed
}

func (c *Core) onRetentionFetched(e RetentionGroupFetched) {
	c.now = e.Now
	op := c.retention
	if c.phase != phaseRunning || op == nil || op.ref != e.Ref {
		c.ignored()
		return
	}
	c.retention = nil
	// The walk resumes on the manifest, policy and time it started with: nothing changed the
	// persisted manifest meanwhile (no persist runs while a retention is in flight).
	r, err := op.walk.Resume(e.Children)
	if err != nil {
		c.stats.RetentionFailures++
		c.emit(Problem{Op: "retention", Err: fmt.Errorf("stream %s: group %s: %w", c.cfg.StreamID, FormatEntry(op.group), err)})
	} else {
		c.applyRetention(r)
	}
	c.afterChange()
}

// onRetentionFailed gives this retention round up (fetch failed or timed out); it runs again
// at the next trigger. Persist and rebalance, held back meanwhile, go on.
func (c *Core) onRetentionFailed(ref Ref) {
	op := c.retention
	if c.phase != phaseRunning || op == nil || op.ref != ref {
		c.ignored()
		return
	}
	c.retention = nil
	c.stats.RetentionFailures++
	c.afterChange()
}
