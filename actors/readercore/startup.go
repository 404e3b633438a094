package readercore

import (
	"fmt"

	"streamtier/manifest"
)

func (c *Core) onResolved(e Resolved) error {
	if c.phase != phaseStarting {
		return fmt.Errorf("stream %s: resolved manifest delivered while %s", c.cfg.StreamID, c.phase)
	}
	if e.Revision < 0 {
		return fmt.Errorf("stream %s: resolved manifest at negative revision %d", c.cfg.StreamID, e.Revision)
	}
	if err := e.Manifest.Check(); err != nil {
		return fmt.Errorf("stream %s: resolved manifest at revision %d: %w", c.cfg.StreamID, e.Revision, err)
	}
	if e.Revision == 0 && !e.Manifest.NeverUploaded() {
		return fmt.Errorf("stream %s: resolved manifest without a record (revision 0) is not empty: %s", c.cfg.StreamID, FormatManifest(e.Manifest))
	}
	r := e
	r.Manifest = e.Manifest.Clone()
	c.resolved = &r
	if c.logInfo != nil {
		c.start()
	}
	return nil
}

func (c *Core) onLogOpened(e LogOpened) error {
	if c.phase != phaseStarting {
		return fmt.Errorf("stream %s: local log opened while %s", c.cfg.StreamID, c.phase)
	}
	if e.First > e.Next {
		return fmt.Errorf("stream %s: local log first offset %d above its next offset %d", c.cfg.StreamID, e.First, e.Next)
	}
	if e.Epoch != 0 && e.Epoch < c.epoch {
		return fmt.Errorf("stream %s: local log epoch %d below the writer's epoch %d", c.cfg.StreamID, e.Epoch, c.epoch)
	}
	if e.Epoch > c.epoch {
		c.epoch = e.Epoch
	}
	l := e
	c.logInfo = &l
	if c.resolved != nil {
		c.start()
	}
	return nil
}

// start compares the resolved manifest with the local log and either resumes draining at the
// manifest's next offset or resets to the local first offset:
//   - S3 ahead: the manifest's next offset is above the local log's end, so the remote tier
//     holds a previous timeline; it is discarded and its objects collected.
//   - local ahead: the local log starts above the manifest's next offset, so local retention
//     dropped data the remote tier never got; the gap is accepted and counted.
//
// An empty local log is never a reason to reset.
func (c *Core) start() {
	r, l := c.resolved, c.logInfo
	c.phase = phaseRunning
	c.persisted = r.Manifest
	c.revision = r.Revision
	c.root = r.Root
	c.hasRoot = r.Revision > 0
	c.mem = c.persisted
	p := c.persisted
	empty := l.First == l.Next
	switch {
	case !empty && p.NextOffset > l.Next:
		c.startupReset(ResetS3Ahead, l.First, l.First)
	case !empty && l.First > p.NextOffset:
		c.startupReset(ResetLocalAhead, l.First, p.NextOffset)
	default:
		c.drainNext = p.NextOffset
		c.emit(UpdateRange{Manifest: p, Revision: c.revision})
		c.syncAll()
		c.emit(EvaluateLocalRetention{PersistedNext: p.NextOffset})
		c.releaseWaiters()
		c.emit(StartDrain{From: c.drainNext})
	}
	c.afterChange()
}

// startupReset discards the resolved manifest: the in-memory manifest becomes empty at the
// local first offset and the reset is persisted at once. Until then nothing is published:
// the manifest being discarded must not feed the range table, replicas or local retention.
func (c *Core) startupReset(reason ResetReason, at, gapFrom uint64) {
	stale := append([]manifest.Entry(nil), c.persisted.Entries...)
	c.mem = manifest.EmptyAt(at)
	c.reset = &pendingReset{reason: reason, at: at, stale: stale}
	c.drainNext = at
	c.stats.Resets++
	c.stats.GapOffsets += at - gapFrom
	c.emit(Reset{Reason: reason, DrainFrom: at, GapFrom: gapFrom, Stale: stale})
}

// resetTo answers a segment deleted under an upload: the local log now starts at at, above
// the fragment's first offset, so that range is gone locally and can never be uploaded.
// Everything in progress is discarded (results still to come become stale), the in-memory
// manifest becomes empty at the local first offset, and the reset is persisted at once.
func (c *Core) resetTo(reason ResetReason, at uint64) {
	var stale []manifest.Entry
	if c.reset != nil {
		stale = append(stale, c.reset.stale...)
	}
	stale = append(stale, c.persisted.Entries...)
	stale = append(stale, c.mem.Entries...)
	for _, p := range c.pending {
		stale = append(stale, p.deletes...)
	}
	if c.inflight != nil {
		for _, p := range c.inflight.edits {
			stale = append(stale, p.deletes...)
		}
		c.inflight.superseded = true
	}
	for _, t := range c.transfers {
		if t.state == transferDone {
			stale = append(stale, manifest.Entry{FirstOffset: t.desc.FirstOffset, FirstTimestamp: t.desc.FirstTimestamp,
				LastTimestamp: t.desc.LastTimestamp, Size: t.desc.Size, UID: t.uid, Kind: manifest.KindFragment})
		}
	}
	stale = dedupeEntries(stale)
	gapFrom := c.mem.NextOffset
	dropped := len(c.transfers)
	chunks := c.asm.Discard()
	c.transfers = nil
	c.rebalance = nil
	c.retention = nil
	c.retentionWant = false
	c.pending = nil
	c.nonAppend = 0
	if c.timer != 0 && !c.persistBackoff {
		c.emit(CancelPersistTimer{Ref: c.timer})
		c.timer = 0
	}
	c.persistDue = false
	c.mem = manifest.EmptyAt(at)
	c.reset = &pendingReset{reason: reason, at: at, stale: stale}
	c.drainNext = at
	c.stats.Resets++
	if at > gapFrom {
		c.stats.GapOffsets += at - gapFrom
	}
	c.emit(Reset{Reason: reason, DrainFrom: at, GapFrom: gapFrom, DroppedTransfers: dropped, DroppedChunks: chunks, Stale: stale})
	c.afterChange()
}
