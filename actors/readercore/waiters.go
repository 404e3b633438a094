package readercore

import (
	"fmt"
	"sort"

	"streamtier/manifest"
)

// onAwait answers at once when the offset is already persisted, and parks the waiter
// otherwise. Only the persisted next offset counts, never the in-memory one; while a
// truncation is pending nothing is answered from the manifest it cuts back, nor while the
// local log and the remote tier share no chunk. An offset inside a persisted gap is told it
// is lost.
func (c *Core) onAwait(e AwaitOffset) error {
	for _, w := range c.waiters {
		if w.id == e.Waiter {
			return fmt.Errorf("stream %s: waiter %d is already waiting (for offset %d)", c.cfg.StreamID, e.Waiter, w.offset)
		}
	}
	if c.phase == phaseRunning && c.reset == nil && c.diverged == nil && e.Offset < c.persisted.NextOffset {
		if from, to, gap := c.persistedGap(e.Offset); gap {
			c.emit(ReplyWaiters{Waiters: []WaiterID{e.Waiter}, Reason: gapReason(from, to)})
			return nil
		}
		c.emit(ReplyWaiters{Waiters: []WaiterID{e.Waiter}, OK: true})
		return nil
	}
	c.waiters = append(c.waiters, waiter{id: e.Waiter, offset: e.Offset})
	return nil
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
// when it falls in a declared gap, persisted otherwise.
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
		c.replyWaiters(func(o uint64) bool { return o >= from && o < to }, false, gapReason(from, to))
	}
	c.replyWaiters(func(o uint64) bool { return o < next }, true, "")
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
	if i := sort.Search(len(p.Entries), func(i int) bool { return p.Entries[i].FirstOffset > o }) - 1; i >= 0 && p.Entries[i].IsGap() {
		return p.Entries[i].FirstOffset, p.EntryEnd(i), true
	}
	i := sort.Search(len(c.gaps), func(i int) bool { return c.gaps[i].to > o })
	if i == len(c.gaps) || c.gaps[i].from > o {
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

// replyWaiters answers, in one effect, the waiters whose offset matches.
func (c *Core) replyWaiters(match func(uint64) bool, ok bool, reason string) {
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
		c.emit(ReplyWaiters{Waiters: ids, OK: ok, Reason: reason})
	}
}
