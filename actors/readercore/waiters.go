package readercore

import (
	"fmt"
	"sort"
)

// onAwait answers at once when the offset is already persisted, and parks the waiter
// otherwise. Only the persisted next offset counts, never the in-memory one; while a reset is
// pending nothing is answered from the manifest being discarded, nor while the local log and
// the remote tier share no chunk. An offset inside a declared gap is told it is lost.
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
	for _, w := range c.waiters {
		if from, to, gap := c.persistedGap(w.offset); gap && w.offset < next {
			c.replyWaiters(func(o uint64) bool { return o >= from && o < to }, false, gapReason(from, to))
		}
	}
	c.replyWaiters(func(o uint64) bool { return o < next }, true, "")
}

// persistedGap finds the gap entry of the persisted root that holds offset o. Gaps inside
// group objects (old history) are not seen: the root alone decides.
func (c *Core) persistedGap(o uint64) (from, to uint64, ok bool) {
	p := c.persisted
	i := sort.Search(len(p.Entries), func(i int) bool { return p.Entries[i].FirstOffset > o }) - 1
	if i < 0 || !p.Entries[i].IsGap() || o >= p.EntryEnd(i) {
		return 0, 0, false
	}
	return p.Entries[i].FirstOffset, p.EntryEnd(i), true
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
