package fetchcore

// plan issues range GETs (retries first, then new ranges in object order) while the
// concurrency and the budget allow, and index fetches for leaves that need one.
func (c *Core) plan() {
	for _, r := range c.ranges {
		if c.inflight >= c.srch.c {
			return
		}
		if r.req == 0 && r.timer == 0 && r.next < r.end {
			c.issue(r)
		}
	}
	for _, lf := range c.leaves {
		if lf.Gap {
			continue
		}
		if lf.needIndex {
			if lf.indexReq == 0 && !c.indexTimerArmed(lf) {
				if lf.Key == "" {
					c.onNotFound(lf)
					return
				}
				lf.indexReq = c.newID()
				c.byIndex[lf.indexReq] = lf
				c.emit(FetchIndex{ID: lf.indexReq, Key: lf.Key, Size: lf.Size})
			}
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
				alone := c.reserved == 0 && c.unconsumed == 0
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
