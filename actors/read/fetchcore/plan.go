package fetchcore

// plan issues range GETs (retries first, then new ranges in object order) while the
// concurrency and the budget allow, and the index fetch of every fragment it reaches (its
// chunks are delivered once checked against it; a read that starts inside a fragment
// plans nothing of it before the index says where its chunk begins).
func (c *Core) plan() {
	for _, r := range c.ranges {
		if c.inflight >= c.srch.c {
			return
		}
		if r.req == 0 && r.timer == 0 && r.next < r.end {
			c.issue(r)
		}
	}
	for i, lf := range c.leaves {
		if lf.Gap {
			continue
		}
		if i < indexesHeld && lf.index == nil && lf.indexReq == 0 && !c.indexTimerArmed(lf) {
			switch {
			case lf.Key != "":
				lf.indexReq = c.newIndexID()
				c.byIndex[lf.indexReq] = lf
				c.emit(FetchIndex{ID: lf.indexReq, Key: lf.Key, Size: lf.Size})
			case lf.needIndex:
				c.onNotFound(lf)
				return
			}
		}
		if lf.needIndex {
			return // nothing after it before it is positioned
		}
		for lf.planPos < lf.regionEnd {
			if c.inflight >= c.srch.c {
				return
			}
			if lf.Key == "" { // no listing found it: a 404, once it is the head
				if lf == c.leaves[0] {
					c.onNotFound(lf)
				}
				return
			}
			n := min(c.cfg.RangeSize, lf.regionEnd-lf.planPos)
			if c.gets == 0 {
				n = min(n, c.cfg.FirstRange) // the first chunk sooner
			}
			held := c.Held()
			if held+n > c.budget {
				// Nothing requested or waiting for the consumer: what is buffered is part of
				// a chunk, unless the head's chunks wait for its index.
				alone := c.reserved == 0 && c.unconsumed == 0 && (c.leaves[0].Gap || c.leaves[0].index != nil)
				switch {
				case alone:
				case c.budget-held >= MinRange:
					n = c.budget - held
				default:
					return
				}
			}
			r := &rng{lf: lf, start: lf.planPos, end: lf.planPos + n, next: lf.planPos, reserved: n}
			lf.planPos += n
			c.reserved += n
			c.ranges = append(c.ranges, r)
			c.issue(r)
		}
	}
}

// indexesHeld is how many leaves from the head may have their index fetched: every leaf
// the planner reaches, up to this many. The index of a leaf must be here before its first
// chunk goes out, and against a store 40 ms away a fragment is delivered faster than its
// index can be asked for once it is next (two leaves ahead cost a third of the realistic
// read's throughput). Indexes are not counted in the budget: 20 bytes a chunk, about 2 %
// of a fragment of 1 KiB chunks, so 16 of 64 MiB fragments hold about 20 MiB.
const indexesHeld = 16

func (c *Core) indexTimerArmed(lf *leaf) bool {
	for _, t := range c.timers {
		if t.index == lf {
			return true
		}
	}
	return false
}

func (c *Core) issue(r *rng) {
	r.req = c.newID()
	c.byReq[r.req] = r
	c.inflight++
	c.gets++
	c.emit(Get{ID: r.req, Key: r.lf.Key, Off: r.next, Len: r.end - r.next})
}
