package check

// await_offset answers as acknowledgements. The harness asks the node's admin endpoint
// (POST /streams/{id}/await) during its runs and hands the checker every answer that says
// something about durability: "persisted" (an acknowledgement, like a manifest record) and
// "in a declared gap" (a loss the node admits to).

// AwaitPersisted notes that the node answered an await for offset of stream "persisted".
// It is an acknowledgement exactly like a manifest record: offset must be in S3 from now
// on, byte for byte, unless retention, a declared gap or a truncation rule explains it. And
// the node answers only once a manifest record covering offset is in etcd, so a record
// must show it: observed says the harness read stream's record from etcd (linearizably,
// handing it to Observe) after the answer came, and the checker judges at once; else it
// judges at the next Check, against every record seen by then (a weaker test: a record
// written after the answer may cover it).
func (c *Checker) AwaitPersisted(stream string, offset uint64, observed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.streams[stream]
	if !ok {
		return
	}
	c.stats.AwaitPersisted++
	st.awaitAcked = append(st.awaitAcked, offset)
	if !observed {
		st.awaitDeferred = append(st.awaitDeferred, offset)
		return
	}
	c.judgeAwait(st, offset, "the record read right after the answer")
}

// AwaitInGap notes that the node answered an await for offset of stream "in a declared
// gap": lost for good. Only offsets the harness deleted from the local log before they
// were persisted may be (the same rule as a gap entry in a snapshot).
func (c *Checker) AwaitInGap(stream string, offset uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.streams[stream]
	if !ok {
		return
	}
	c.stats.AwaitInGap++
	if !st.gapAllowed(offset, offset+1) {
		c.violate(stream, "await-gap-over-data", "await_offset answered that offset %d lies in a declared gap, but the local log never lost it before it was persisted (losses %v, acknowledged next %d)",
			offset, st.losses, st.ackedNext)
	}
}

// judgeAwait checks a persisted answer for offset against the records seen (c.mu held): the
// acknowledged next offset must be above it. When it is not, the answer still counts as an
// acknowledgement from now on.
func (c *Checker) judgeAwait(st *streamState, offset uint64, against string) {
	if offset < st.ackedNext {
		return
	}
	c.violate(st.cfg.ID, "await-unrecorded", "await_offset answered that offset %d is persisted, but no manifest record in etcd covers it (%s: acknowledged next %d)",
		offset, against, st.ackedNext)
	st.ackedNext = offset + 1
	st.maxNext = max(st.maxNext, st.ackedNext)
	if st.ackedNext > st.keepNext && !st.inLoss(st.keepNext, st.ackedNext) {
		st.keepNext = st.ackedNext
	}
}

// judgeDeferredAwaits judges the persisted answers the harness could not read etcd after
// (c.mu held), once the check has observed the stream's record.
func (c *Checker) judgeDeferredAwaits(st *streamState) {
	for _, o := range st.awaitDeferred {
		c.judgeAwait(st, o, "the records seen by the check after the answer")
	}
	st.awaitDeferred = nil
}

// awaitInGap reports a persisted answer for an offset that the snapshot shows inside a
// live gap entry [from, to) (c.mu held): the node said persisted where it holds no data.
func (c *Checker) awaitInGap(st *streamState, from, to uint64) {
	for _, o := range st.awaitAcked {
		if o >= from && o < to {
			c.violate(st.cfg.ID, "await-persisted-in-gap", "await_offset answered that offset %d is persisted, but the persisted manifest has it in the gap [%d,%d)", o, from, to)
		}
	}
}
