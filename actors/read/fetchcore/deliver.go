package fetchcore

import "fmt"

// This file is the delivery side of the core: items handed to the consumer in offset
// order, and the bytes they hold against the budget until consumed or freed.

// deliver hands it to the consumer; a chunk copied from parts gets its copy's number. Its
// bytes count as unconsumed until the consumer says so.
func (c *Core) deliver(it Item) {
	n := int64(it.Size())
	if it.Parts != nil {
		c.lastCopy++
		it.Copy = c.lastCopy
	}
	c.emit(Deliver{Item: it})
	c.unconsumed += n
	c.delivered += n
	if it.Parts != nil { // the shell's copy: free once the consumer is done with it
		c.pending = append(c.pending, piece{id: it.Copy, mark: c.delivered, copy: true})
	}
}

// free hands back the buffer of a piece the core no longer holds: at once when no chunk the
// consumer may still hold refers to it, else once the consumer passed its mark.
func (c *Core) free(p piece) {
	if p.mark <= c.consumed {
		c.emit(Release{ID: p.id, Copy: p.copy})
		return
	}
	c.pending = append(c.pending, p)
}

// freeFrom frees the pieces an assembler is done with.
func (c *Core) freeFrom(a *assembler) {
	for _, p := range a.freed {
		c.free(p)
	}
	clear(a.freed)
	a.freed = a.freed[:0]
}

// releasePending releases the pending pieces whose chunks the consumer is done with.
func (c *Core) releasePending() {
	kept := c.pending[:0]
	for _, p := range c.pending {
		if p.mark <= c.consumed {
			c.emit(Release{ID: p.id, Copy: p.copy})
		} else {
			kept = append(kept, p)
		}
	}
	clear(c.pending[len(kept):])
	c.pending = kept
}

// deliverReady hands the head ranges' bytes to their assemblers and delivers whole chunks
// and gaps in order.
func (c *Core) deliverReady() {
	for len(c.leaves) > 0 {
		lf := c.leaves[0]
		if lf.Gap {
			c.deliver(Item{Kind: ItemGap, Offset: max(c.pos, lf.First), End: lf.End})
			c.pos = lf.End
			c.leaves = c.leaves[1:]
			continue
		}
		for len(c.ranges) > 0 && c.ranges[0].lf == lf {
			r := c.ranges[0]
			for _, p := range r.pieces {
				lf.asm.push(p)
				n := int64(len(p.b))
				r.reserved -= n
				c.reserved -= n
				c.buffered += n
			}
			r.pieces = r.pieces[:0]
			if r.next < r.end {
				break
			}
			c.reserved -= r.reserved
			c.ranges = c.ranges[1:]
		}
		for lf.index != nil {
			h, b, parts, ok, err := lf.asm.nextChunk(lf.Key, lf.regionEnd, lf.nextID, c.delivered)
			if ok && h.NextID() <= c.pos {
				err = &CorruptError{Key: lf.Key, Position: lf.asm.pos - h.Size(), Reason: fmt.Sprintf("chunk [%d,%d) lies below the read position %d", h.ChunkID, h.NextID(), c.pos)}
			}
			if ok && err == nil {
				err = lf.checkIndexed(h, lf.asm.pos-h.Size())
			}
			if err != nil || !ok {
				c.freeFrom(&lf.asm)
				if err != nil {
					c.fail(err)
					return
				}
				break
			}
			c.buffered -= h.Size()
			lf.nextID = h.NextID()
			c.pos = h.NextID()
			c.deliver(Item{Kind: ItemChunk, Offset: h.ChunkID, End: h.NextID(), Header: h, Chunk: b, Parts: parts})
			c.freeFrom(&lf.asm) // after the Deliver: the shell copied parts out of these pieces
		}
		if lf.index == nil || lf.planPos < lf.regionEnd || (len(c.ranges) > 0 && c.ranges[0].lf == lf) {
			return
		}
		if lf.asm.n > 0 {
			c.fail(&CorruptError{Key: lf.Key, Position: lf.asm.pos, Reason: fmt.Sprintf("the chunk region ends inside a chunk (%d bytes left)", lf.asm.n)})
			return
		}
		if lf.nextID != lf.End {
			c.fail(&CorruptError{Key: lf.Key, Position: lf.regionEnd, Reason: fmt.Sprintf("chunks end at offset %d, the manifest says %d", lf.nextID, lf.End)})
			return
		}
		if lf.idx != len(lf.index) {
			c.fail(&CorruptError{Key: lf.Key, Position: lf.regionEnd, Reason: fmt.Sprintf("the index lists %d chunks, the chunk region holds %d", len(lf.index), lf.idx)})
			return
		}
		c.pos = lf.End
		c.leaves = c.leaves[1:]
	}
}

// Held is the bytes the read holds against its budget: requested and not received,
// received and not delivered, delivered and not consumed. It stays within the budget,
// except that one range may be requested over it when nothing is requested and nothing
// delivered waits for the consumer (only part of a chunk, or nothing, is held): a chunk
// larger than the budget is read alone. So Held never exceeds max(budget, largest chunk
// + range size).
func (c *Core) Held() int64 { return c.reserved + c.buffered + c.unconsumed }
