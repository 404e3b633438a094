package readercore

import (
	"fmt"
	"slices"
	"sort"

	"github.com/streamtier/streamtier/manifest"
)

// onAwait answers at once when the offset is already persisted, and parks the waiter
// otherwise. Only the persisted next offset counts, never the in-memory one; while a
// truncation is pending nothing is answered from the manifest it cuts back, nor while the
// local log and the remote tier share no chunk. An offset inside a persisted gap is told it
// is lost; one inside a group object of the resolved manifest waits for the lookup of its
// leaf (lookupNeeded): that group may hold a gap the core never saw.
func (c *Core) onAwait(e AwaitOffset) error {
	for _, w := range c.waiters {
		if w.id == e.Waiter {
			return fmt.Errorf("stream %s: waiter %d is already waiting (for offset %d)", c.cfg.StreamID, e.Waiter, w.offset)
		}
	}
	if c.phase == phaseRunning && c.reset == nil && c.diverged == nil && e.Offset < c.persisted.NextOffset {
		if from, to, gap := c.persistedGap(e.Offset); gap {
			c.emit(ReplyWaiters{Waiters: []WaiterID{e.Waiter}, Gap: true, Reason: gapReason(from, to)})
			return nil
		}
		if !c.lookupNeeded(e.Offset) {
			c.emit(ReplyWaiters{Waiters: []WaiterID{e.Waiter}, OK: true})
			return nil
		}
		c.waiters = append(c.waiters, waiter{id: e.Waiter, offset: e.Offset})
		c.startLookup()
		return nil
	}
	c.waiters = append(c.waiters, waiter{id: e.Waiter, offset: e.Offset})
	if e.Flush {
		c.flushTo = max(c.flushTo, e.Offset+1)
		c.flushCut()
		c.afterChange()
	}
	return nil
}

// flushing says a flush waits for offsets below flushTo that are not persisted yet.
func (c *Core) flushing() bool { return c.flushTo > c.persisted.NextOffset }

// flushCut cuts the assembly when it holds an offset a flush waits for and everything up
// to the flush's end is drained: waiting for the target size or the idle cut would only
// delay the flush.
func (c *Core) flushCut() {
	if c.phase == phaseRunning && c.flushing() && !c.asm.Empty() && c.asm.FirstOffset() < c.flushTo && c.asm.NextOffset() >= c.flushTo {
		c.stats.FlushCuts++
		c.cut()
	}
}

// flushPersistDue says a persist now would answer a flush: the uploads up to its end are
// applied to the in-memory manifest, and only the persist is missing.
func (c *Core) flushPersistDue() bool {
	return c.flushing() && c.mem.NextOffset >= c.flushTo && len(c.pending) > 0
}

func (c *Core) onCancelAwait(e CancelAwait) {
	for i, w := range c.waiters {
		if w.id == e.Waiter {
			c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
			return
		}
	}
}

// releaseWaiters answers every waiter whose offset is below the persisted next offset: lost
// when it falls in a declared gap, persisted otherwise, except those whose leaf must be
// looked up first (lookupNeeded), for which a lookup starts.
func (c *Core) releaseWaiters() {
	next := c.persisted.NextOffset
	for {
		// one gap at a time: replyWaiters compacts c.waiters, so find, answer, look again
		var from, to uint64
		found := false
		for _, w := range c.waiters {
			if f, t, gap := c.persistedGap(w.offset); gap {
				from, to, found = f, t, true
				break
			}
		}
		if !found {
			break
		}
		c.replyWaiters(func(o uint64) bool { return o >= from && o < to }, ReplyWaiters{Gap: true, Reason: gapReason(from, to)})
	}
	c.replyWaiters(func(o uint64) bool { return o < next && !c.lookupNeeded(o) }, ReplyWaiters{OK: true})
	c.startLookup()
}

// lookupNeeded tells whether a waiter for o cannot be answered from what the core knows: o
// lies below the persisted next offset, in no gap the core knows of, in a root entry that
// is a group object, inside the range of the resolved manifest's groups (c.sealed), whose
// gaps the core never saw (it reads no group object). Groups the core folded itself hold
// only gaps it knows of.
func (c *Core) lookupNeeded(o uint64) bool {
	p := c.persisted
	if o < p.FirstOffset || o >= p.NextOffset || !inSpans(c.sealed, o) {
		return false
	}
	if _, _, gap := c.persistedGap(o); gap {
		return false
	}
	i := p.EntryAt(o)
	return i >= 0 && !p.Entries[i].IsLeaf()
}

// startLookup asks the shell for the leaves of the waiters that need one (one lookup at a
// time), while waiters may be answered at all.
func (c *Core) startLookup() {
	if c.lookup != 0 || c.phase != phaseRunning || c.reset != nil || c.diverged != nil {
		return
	}
	var offs []uint64
	for _, w := range c.waiters {
		if c.lookupNeeded(w.offset) {
			offs = append(offs, w.offset)
		}
	}
	if len(offs) == 0 {
		return
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	offs = slices.Compact(offs)
	c.lookup, c.lookupOffs = c.newRef(), offs
	c.emit(LookUpLeaves{Ref: c.lookup, Manifest: c.persisted, Offsets: offs, Timeout: c.cfg.RetentionTimeout})
}

// onLeavesLookedUp learns from a lookup: a gap is a gap the core now knows of (its waiters
// are told their offsets are lost, and so is anyone asking later), a fragment's range
// needs no lookup any more (its waiters are told persisted). When the lookup failed, or
// left a waiter's offset unanswered, that waiter is told the answer is not known yet: it
// may ask again (a waiter that came after the lookup started waits for the next one).
// Nothing is ever answered "persisted" for an offset not looked up.
func (c *Core) onLeavesLookedUp(e LeavesLookedUp) {
	if c.phase != phaseRunning || e.Ref == 0 || e.Ref != c.lookup {
		c.ignored()
		return
	}
	asked := c.lookupOffs
	c.lookup, c.lookupOffs = 0, nil
	reason := e.Reason
	if reason == "" {
		for _, l := range e.Leaves {
			switch {
			case l.From >= l.To:
			case l.Gap:
				c.learnGap(l.From, l.To)
			default:
				c.sealed = cutSpan(c.sealed, l.From, l.To)
			}
		}
		reason = "the lookup did not return its leaf"
	}
	c.replyWaiters(func(o uint64) bool {
		_, ok := slices.BinarySearch(asked, o)
		return ok && c.lookupNeeded(o)
	}, ReplyWaiters{Retry: true, Reason: "cannot tell yet whether the offset is in S3 or in a declared gap sealed in a group object: " + reason})
	c.releaseWaiters()
}

// sealedSpans are the ranges of m's root entries that are group objects, merged.
func sealedSpans(m manifest.Manifest) []gapSpan {
	var out []gapSpan
	for i, e := range m.Entries {
		if e.IsLeaf() {
			continue
		}
		from, to := max(e.FirstOffset, m.FirstOffset), m.EntryEnd(i)
		if n := len(out); n > 0 && out[n-1].to == from {
			out[n-1].to = to
			continue
		}
		out = append(out, gapSpan{from, to})
	}
	return out
}

// spanAt finds o in the sorted, disjoint spans: the index of the first span ending above
// o (where a span holding o is, or would be inserted), and whether that span holds o.
func spanAt(spans []gapSpan, o uint64) (int, bool) {
	i := sort.Search(len(spans), func(i int) bool { return spans[i].to > o })
	return i, i < len(spans) && spans[i].from <= o
}

// inSpans tells whether o lies in one of the sorted, disjoint spans.
func inSpans(spans []gapSpan, o uint64) bool {
	_, ok := spanAt(spans, o)
	return ok
}

// cutSpan removes [from, to) from the sorted, disjoint spans.
func cutSpan(spans []gapSpan, from, to uint64) []gapSpan {
	var out []gapSpan
	for _, s := range spans {
		if s.to <= from || s.from >= to {
			out = append(out, s)
			continue
		}
		if s.from < from {
			out = append(out, gapSpan{s.from, from})
		}
		if s.to > to {
			out = append(out, gapSpan{to, s.to})
		}
	}
	return out
}

// learnGap records a gap found inside a group object, in order among the known gaps.
func (c *Core) learnGap(from, to uint64) {
	i, known := spanAt(c.gaps, from)
	if known {
		return // known already
	}
	c.gaps = slices.Insert(c.gaps, i, gapSpan{from, to})
}

// gapSpan is a range of offsets declared lost, [from, to).
type gapSpan struct{ from, to uint64 }

// persistedGap finds the persisted gap that holds offset o, cut at the persisted next
// offset (a trailing gap may already be longer in memory): a gap entry of the persisted
// root, or one the core knows of (c.gaps), so that a gap rebalancing folded into a group is
// still seen. Gaps inside group objects of a resolved manifest (older runs) are not: the
// core never reads group objects.
func (c *Core) persistedGap(o uint64) (from, to uint64, ok bool) {
	p := c.persisted
	next := p.NextOffset
	if o >= next {
		return 0, 0, false
	}
	if i := p.EntryAt(o); i >= 0 && p.Entries[i].IsGap() {
		return p.Entries[i].FirstOffset, p.EntryEnd(i), true
	}
	i, ok := spanAt(c.gaps, o)
	if !ok {
		return 0, 0, false
	}
	return c.gaps[i].from, min(c.gaps[i].to, next), true
}

// knowGaps starts the list of known gaps from a resolved manifest's root entries.
func (c *Core) knowGaps(m manifest.Manifest) {
	c.gaps = c.gaps[:0]
	for i, e := range m.Entries {
		if e.IsGap() {
			c.gaps = append(c.gaps, gapSpan{e.FirstOffset, m.EntryEnd(i)})
		}
	}
}

// addGap records a declared gap; one that starts where the last ends extends it (the
// manifest merges them the same way).
func (c *Core) addGap(from, to uint64) {
	if n := len(c.gaps); n > 0 && c.gaps[n-1].to == from {
		c.gaps[n-1].to = to
		return
	}
	c.gaps = append(c.gaps, gapSpan{from, to})
}

// cutGaps forgets what a truncation to next removed: gaps from next on, and the part of a
// gap above it.
func (c *Core) cutGaps(next uint64) {
	for len(c.gaps) > 0 && c.gaps[len(c.gaps)-1].from >= next {
		c.gaps = c.gaps[:len(c.gaps)-1]
	}
	if n := len(c.gaps); n > 0 && c.gaps[n-1].to > next {
		c.gaps[n-1].to = next
	}
}

func gapReason(from, to uint64) string {
	return fmt.Sprintf("offsets [%d,%d) were lost from the local log before they were uploaded: a declared gap", from, to)
}

// replyWaiters answers, in one effect (reply with its waiters filled in), the waiters whose
// offset matches.
func (c *Core) replyWaiters(match func(uint64) bool, reply ReplyWaiters) {
	var ids []WaiterID
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if match(w.offset) {
			ids = append(ids, w.id)
		} else {
			kept = append(kept, w)
		}
	}
	clear(c.waiters[len(kept):])
	c.waiters = kept
	if len(ids) > 0 {
		reply.Waiters = ids
		c.emit(reply)
	}
}
