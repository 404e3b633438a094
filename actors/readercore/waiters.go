package readercore

import "fmt"

// onAwait answers at once when the offset is already persisted, and parks the waiter
// otherwise. Only the persisted next offset counts, never the in-memory one; while a reset is
// pending nothing is answered from the manifest being discarded.
func (c *Core) onAwait(e AwaitOffset) error {
	for _, w := range c.waiters {
		if w.id == e.Waiter {
			return fmt.Errorf("stream %s: waiter %d is already waiting (for offset %d)", c.cfg.StreamID, e.Waiter, w.offset)
		}
	}
	if c.phase == phaseRunning && c.reset == nil && e.Offset < c.persisted.NextOffset {
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

// releaseWaiters answers every waiter whose offset is below the persisted next offset.
func (c *Core) releaseWaiters() {
	next := c.persisted.NextOffset
	c.replyWaiters(func(o uint64) bool { return o < next }, true, "")
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
