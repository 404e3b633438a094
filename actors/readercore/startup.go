package readercore

import (
	"fmt"
	"slices"

	"github.com/streamtier/streamtier/actors/divergence"
	"github.com/streamtier/streamtier/manifest"
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
	if err := checkComparison(e.Manifest, e.Comparison); err != nil {
		return fmt.Errorf("stream %s: resolved manifest at revision %d: %w", c.cfg.StreamID, e.Revision, err)
	}
	r := e
	r.Manifest = e.Manifest.Clone()
	c.resolved = &r
	if c.logInfo != nil {
		return c.start()
	}
	return nil
}

// checkComparison refuses a comparison that does not fit the manifest it was made against.
func checkComparison(m manifest.Manifest, cmp divergence.Result) error {
	t := cmp.Truncation
	switch cmp.Kind {
	case divergence.NotCompared, divergence.Match, divergence.Behind:
		return nil
	case divergence.Diverged, divergence.NoCommon:
		if t == nil {
			return fmt.Errorf("%s comparison without a truncation", cmp.Kind)
		}
	default:
		return fmt.Errorf("comparison of unknown kind %d", cmp.Kind)
	}
	if cmp.RemoteFirst != m.FirstOffset || cmp.RemoteNext != m.NextOffset {
		return fmt.Errorf("comparison made against the remote tier [%d,%d), the manifest holds [%d,%d)", cmp.RemoteFirst, cmp.RemoteNext, m.FirstOffset, m.NextOffset)
	}
	if err := t.Manifest.Check(); err != nil {
		return fmt.Errorf("truncated manifest: %w", err)
	}
	if r := t.Replacement; r != nil {
		if t.Straddle == nil || r.FirstOffset != t.Straddle.FirstOffset || r.Kind != manifest.KindFragment || r.FirstOffset != t.Manifest.NextOffset || r.FirstOffset >= t.At {
			return fmt.Errorf("replacement %s does not put back the prefix [%d,%d) of the straddling fragment", FormatEntry(*r), t.Manifest.NextOffset, t.At)
		}
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
		return c.start()
	}
	return nil
}

// start compares the resolved manifest with the local log (manifest.md, "Resolution", step
// 4) and decides where draining resumes. A comparison that does not fit the log (made
// against other bounds, or missing where the two overlap) is refused: the core forgets both
// and waits for a new resolution. Nothing already remote is ever discarded here except
// above a divergence point the comparison proved:
//   - an empty local log: resume at the manifest's next offset, whatever it holds;
//   - local ahead (the log starts above the next offset): declare the gap, drain on;
//   - diverged: truncate the remote tier to the last chunk both hold, drain from there
//     (also a match whose remote tier ends with a gap the local log holds the start of);
//   - no chunk in common: stall, delete nothing, until an operator decides;
//   - otherwise (the remote tier's last chunk is the same locally): resume.
func (c *Core) start() error {
	r, l := c.resolved, c.logInfo
	p := r.Manifest
	empty := l.First == l.Next
	cmp := r.Comparison
	if !empty && l.First < p.NextOffset && cmp.Kind == divergence.NotCompared && len(p.Entries) > 0 {
		c.resolved, c.logInfo = nil, nil
		return fmt.Errorf("stream %s: the local log [%d,%d) overlaps the remote tier [%d,%d) but the two were not compared", c.cfg.StreamID, l.First, l.Next, p.FirstOffset, p.NextOffset)
	}
	if t := cmp.Truncation; cmp.Kind == divergence.Diverged && t.NeedsCopy(l.First) && t.Replacement == nil {
		c.resolved, c.logInfo = nil, nil
		return fmt.Errorf("stream %s: the divergence point %d falls inside the fragment at %d, which the local log (from %d) no longer holds, and no copy of its prefix was made", c.cfg.StreamID, t.At, t.Straddle.FirstOffset, l.First)
	}
	var gapCut *divergence.Truncation
	if cmp.Kind == divergence.Match && !empty {
		gapCut = trailingGapCut(p, l.First)
	}
	if cmp.Kind == divergence.Match && gapCut == nil && !empty && l.Next < p.NextOffset && l.First <= p.NextOffset {
		c.resolved, c.logInfo = nil, nil
		return fmt.Errorf("stream %s: a match with the remote tier [%d,%d) claimed for a local log [%d,%d) that ends below it", c.cfg.StreamID, p.FirstOffset, p.NextOffset, l.First, l.Next)
	}
	if (cmp.Kind == divergence.Diverged || cmp.Kind == divergence.NoCommon || cmp.Kind == divergence.Behind) && (cmp.LocalFirst != l.First || cmp.LocalNext != l.Next) {
		c.resolved, c.logInfo = nil, nil
		return fmt.Errorf("stream %s: comparison made against the local log [%d,%d), it holds [%d,%d)", c.cfg.StreamID, cmp.LocalFirst, cmp.LocalNext, l.First, l.Next)
	}
	// The follower's word on a rewrite counts until a start did not hold for it: once the
	// stream ran on the log, a later resolution's local-ahead is the broker's retention as
	// usual.
	rewritten := l.Rewritten
	if c.rewriteJudged {
		rewritten = nil
	}
	c.phase = phaseRunning
	c.persisted = p
	c.revision = r.Revision
	c.root = r.Root
	c.hasRoot = r.Revision > 0
	c.nextSeq = max(r.NextSeq, r.Root.Seq+1)
	if replaced := r.Replaced; len(replaced) > 0 {
		c.emit(DeleteObjects{Roots: slices.Clone(replaced)})
	}
	c.mem = c.persisted
	c.knowGaps(p)
	c.sealed, c.lookup, c.lookupOffs = sealedSpans(p), 0, nil
	switch {
	case empty:
		c.resume()
	case cmp.Kind == divergence.NoCommon && cmp.EpochAhead != nil:
		// Local ahead, but at a higher epoch than the remote tier's last chunk: a rewrite
		// below the remote next offset may have been trimmed before anyone looked.
		c.diverged = &cmp
		c.drainNext = p.NextOffset
		c.emit(StalledDiverged{RemoteFirst: p.FirstOffset, RemoteNext: p.NextOffset, LocalFirst: l.First, LocalNext: l.Next, EpochAhead: cmp.EpochAhead})
	case l.First > p.NextOffset && rewritten != nil && len(p.Entries) > 0:
		// Local ahead after the follower saw the log rewritten: the rewrite may start below
		// the remote next offset, where the remote tier holds the old timeline; the chunks
		// that would show it are gone. Declaring the gap would mix the two.
		d := divergence.HoldRewritten(p, l.First, l.Next, rewritten)
		c.diverged = &d
		c.drainNext = p.NextOffset
		c.emit(StalledDiverged{RemoteFirst: p.FirstOffset, RemoteNext: p.NextOffset, LocalFirst: l.First, LocalNext: l.Next, Rewritten: rewritten})
	case l.First > p.NextOffset:
		c.resume()
		c.declareGap(GapLocalAhead, l.First)
	case cmp.Kind == divergence.Diverged:
		c.truncate(TruncateDiverged, cmp.Truncation)
	case gapCut != nil:
		c.truncate(TruncateDiverged, gapCut)
	case cmp.Kind == divergence.NoCommon:
		c.diverged = &cmp
		c.drainNext = p.NextOffset
		c.emit(StalledDiverged{RemoteFirst: p.FirstOffset, RemoteNext: p.NextOffset, LocalFirst: l.First, LocalNext: l.Next, GapFork: cmp.GapFork})
	case cmp.Kind == divergence.Behind:
		c.diverged = &cmp // the same hold as a divergence: nothing changes remotely meanwhile
		c.drainNext = p.NextOffset
		c.emit(StalledBehind{RemoteFirst: p.FirstOffset, RemoteNext: p.NextOffset, LocalFirst: l.First, LocalNext: l.Next})
	default:
		c.resume()
	}
	c.rewriteJudged = c.rewriteJudged || c.diverged == nil || c.diverged.Rewritten == nil
	c.afterChange()
	return nil
}

// trailingGapCut is the truncation a match calls for when the remote tier ends with a gap
// entry whose first offset the local log holds (from localFirst on; a match says it holds
// everything up to there). The gap's writer lost those offsets, this log did not: the last
// chunk both hold ends where the gap starts, which is the divergence point. Keeping the gap
// would hide whatever the log holds or appends in it. The cut removes only the gap entry
// (no object). A trailing gap inside a group object is not seen here: the core never reads
// group objects, the comparison must find it.
func trailingGapCut(p manifest.Manifest, localFirst uint64) *divergence.Truncation {
	n := len(p.Entries)
	if n < 2 || !p.Entries[n-1].IsGap() || p.Entries[n-1].FirstOffset < localFirst {
		return nil
	}
	m := p.Clone()
	m.NextOffset = m.Entries[n-1].FirstOffset
	m.Entries = m.Entries[:n-1]
	return &divergence.Truncation{At: m.NextOffset, Manifest: m}
}

// resume publishes the persisted manifest (it is the truth: cache, range table, replicas,
// local retention, waiters) and drains from its next offset.
func (c *Core) resume() {
	p := c.persisted
	c.drainNext = p.NextOffset
	c.emit(UpdateRange{Manifest: p, Revision: c.revision, Root: c.root})
	c.syncAll()
	c.emit(EvaluateLocalRetention{PersistedNext: p.NextOffset})
	c.releaseWaiters()
	c.emit(StartDrain{From: c.drainNext})
}

// declareGap answers the local log losing [next, to) before it was uploaded: at resolution
// (local ahead) or mid-stream (a segment gone under the drain or an upload). Everything
// remote stays, and so does every edit already applied in memory and the persist in
// flight; only the work not yet applied in order is dropped (its uploaded objects become
// orphans). A gap entry [next, to) is appended (or the trailing gap extended) and persisted
// promptly, and draining restarts at to. Waiters inside the gap are told their offsets are
// lost once the gap is persisted: until then another writer may still win (a conflict) and
// hold those offsets.
func (c *Core) declareGap(reason GapReason, to uint64) {
	from := c.mem.NextOffset
	dropped := len(c.transfers)
	chunks := c.asm.Discard()
	c.cancelCutTimer()
	c.transfers = nil
	c.drainNext = to
	ed, err := manifest.GapEdit(c.mem, to)
	var m manifest.Manifest
	if err == nil {
		m, err = c.mem.Apply(ed)
	}
	if err != nil {
		// Never reached unless the core has a bug; draining resumes at to regardless and
		// the next append is refused loudly rather than covering the hole.
		c.emit(Problem{Op: "declare gap", Err: fmt.Errorf("stream %s: gap [%d,%d): %w", c.cfg.StreamID, from, to, err)})
	} else {
		c.mem = m
		// On an empty manifest the gap only moves the header: that is a head change.
		head := len(ed.Insert) == 0
		c.pending = append(c.pending, pendingEdit{edit: ed, append: !head, gap: true})
		if head {
			c.nonAppend++
		}
		c.addGap(from, to)
		if !c.persistBackoff {
			c.persistDue = true // promptly, but a failing persist keeps its backoff
		}
	}
	c.stats.Gaps++
	c.stats.GapOffsets += to - from
	c.emit(DeclareGap{Reason: reason, From: from, To: to, DroppedTransfers: dropped, DroppedChunks: chunks})
	c.armRetry() // the waiting transfers were dropped
	c.recountHeld()
	c.restartDrain(to)
}

// truncate cuts the remote tier back to the divergence point (or where an operator's
// truncate cuts it): the in-memory manifest becomes the truncated one, the straddling
// fragment's prefix is put back (its copy already uploaded by the shell, or re-drained from
// the local log), a gap covers what the local log lacks above the cut, and the truncation
// is persisted at once. Until then nothing is published: the persisted manifest holds the
// other timeline. Only what lies above the cut is deleted, after that persist.
func (c *Core) truncate(reason TruncateReason, t *divergence.Truncation) {
	l := c.logInfo
	base := t.Manifest
	drainFrom := base.NextOffset
	if r := t.Replacement; r != nil {
		ed, err := manifest.AppendEdit(base, *r, t.At)
		if err == nil {
			base, err = base.Apply(ed)
		}
		if err != nil {
			c.emit(Problem{Op: "truncate", Err: fmt.Errorf("stream %s: replacement of the prefix [%d,%d): %w", c.cfg.StreamID, r.FirstOffset, t.At, err)})
			c.diverged = &divergence.Result{Kind: divergence.NoCommon, RemoteFirst: c.persisted.FirstOffset, RemoteNext: c.persisted.NextOffset, LocalFirst: l.First, LocalNext: l.Next}
			c.emit(StalledDiverged{RemoteFirst: c.persisted.FirstOffset, RemoteNext: c.persisted.NextOffset, LocalFirst: l.First, LocalNext: l.Next})
			return
		}
		drainFrom = t.At
	}
	oldNext := c.persisted.NextOffset
	c.mem = base
	c.cutGaps(base.NextOffset)
	c.sealed, c.lookup, c.lookupOffs = cutSpan(c.sealed, base.NextOffset, ^uint64(0)), 0, nil // a lookup of the other timeline is void
	c.reset = &pendingReset{reason: reason, base: base, stale: t.Dropped, alone: t.Alone}
	c.pending = nil
	c.nonAppend = 0
	c.stats.Truncations++
	if oldNext > t.At {
		c.stats.TruncatedOffsets += oldNext - t.At
	}
	c.emit(TruncateRemote{Reason: reason, At: t.At, OldNext: oldNext, DrainFrom: max(drainFrom, l.First),
		Dropped: t.Dropped, Alone: t.Alone, Copy: t.Replacement != nil})
	if l.First > drainFrom {
		c.declareGap(GapLocalAhead, l.First)
		return
	}
	c.recountHeld()
	c.restartDrain(drainFrom)
}

// onOperatorTruncate carries out an operator's truncate of a remote tier that shares no
// chunk with the local log: the cut the resolution prepared.
func (c *Core) onOperatorTruncate() error {
	if c.phase != phaseRunning || c.diverged == nil {
		return fmt.Errorf("stream %s: truncate refused: the local log and the remote tier are not known to share no chunk (%s)", c.cfg.StreamID, c.phase)
	}
	t := c.diverged.Truncation
	if c.diverged.Kind == divergence.Behind {
		return fmt.Errorf("stream %s: truncate refused: the local log [%d,%d) is a prefix of the remote tier [%d,%d), not another history; tiering resumes once the log reaches the remote next offset or writes chunks of its own", c.cfg.StreamID, c.diverged.LocalFirst, c.diverged.LocalNext, c.diverged.RemoteFirst, c.diverged.RemoteNext)
	}
	if t == nil {
		return fmt.Errorf("stream %s: truncate refused: the resolution prepared no cut", c.cfg.StreamID)
	}
	c.diverged = nil
	c.truncate(TruncateOperator, t)
	c.afterChange()
	return nil
}
