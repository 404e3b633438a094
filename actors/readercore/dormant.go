package readercore

import "math"

// Dormant says whether the core holds nothing but its persisted state, so that its shell may
// let the stream go dormant (stop its actors, keep a snapshot, and resolve again when data,
// a request or a command comes): "" when it may, else what holds it. Everything the core
// knows of is either persisted or nothing: no chunk assembled, no transfer, no edit waiting
// for a persist, no persist, rebalance, retention run or truncation in flight, no waiter, no
// timer that must fire. Whatever it answers, nothing is lost by asking.
//
// A replica to keep in sync keeps a stream awake although nothing moves (its broadcasts
// come from the core). Remote retention by age does not: RetentionDue says when the shell
// must wake the stream for it.
func (c *Core) Dormant() string {
	switch {
	case c.phase != phaseRunning:
		return "not running (" + c.phase.String() + ")"
	case c.diverged != nil:
		return "held for an operator (diverged)"
	case c.asm.Len() > 0 || c.cutTimer != 0:
		return "a fragment is being assembled"
	case len(c.transfers) > 0 || c.retryTimer != 0:
		return "transfers in flight"
	case len(c.pending) > 0 || c.nonAppend > 0 || c.reset != nil:
		return "edits not yet persisted"
	case c.inflight != nil || c.timer != 0 || c.persistDue || c.persistBackoff:
		return "a persist is due or in flight"
	case c.rebalance != nil || c.retention != nil || c.retentionWant:
		return "a rebalance or retention run is in flight"
	case c.lookup != 0:
		return "a lookup is in flight"
	case len(c.waiters) > 0 || c.flushTo != 0:
		return "awaits are waiting"
	case c.drainMiss != nil || c.drainRetry != 0 || c.paused:
		return "the drain is held"
	case len(c.replicas) > 0:
		return "replicas are kept in sync"
	}
	return ""
}

// RetentionDue is the time (ms, on the clock of EvaluateRetention's Now) from which remote
// retention by age removes the oldest fragment held remotely: a dormant stream must be woken
// then. ok is false when time alone never removes anything (no age limit, nothing held).
func (c *Core) RetentionDue() (at int64, ok bool) {
	m := c.persisted
	if c.policy.MaxAgeMillis <= 0 || m.FirstOffset >= m.NextOffset || m.FirstLastTimestamp < 0 {
		return 0, false
	}
	// A fragment expires once its last timestamp is below now - max age.
	if m.FirstLastTimestamp > math.MaxInt64-c.policy.MaxAgeMillis-1 {
		return 0, false
	}
	return m.FirstLastTimestamp + c.policy.MaxAgeMillis + 1, true
}

// Snapshot is the status of a core that went dormant, kept in the fields such a core can
// have set: its persisted state, its counts and its last errors. A dormant stream keeps one
// for its status, and a node may hold tens of thousands: this is about a third of a
// Status. A status with anything else set is kept whole, so Status always gives back
// exactly the status Snap was given.
type Snapshot struct {
	phase, persistState, lastPersistError, lastUploadError string

	epoch, persistedFirst, persistedNext, first, next, totalSize, drainNext, heldBound uint64
	revision, lastPersistAt, oldestUnpersisted                                         int64
	entries                                                                            int

	counters *Counters // nil: all zero
	whole    *Status   // set when the fields above cannot hold the status
}

// Snap is the snapshot of st.
func Snap(st Status) Snapshot {
	s := Snapshot{
		phase: st.Phase, persistState: st.PersistState, lastPersistError: st.LastPersistError, lastUploadError: st.LastUploadError,
		epoch: st.Epoch, persistedFirst: st.PersistedFirst, persistedNext: st.PersistedNext, first: st.First, next: st.Next,
		totalSize: st.TotalSize, drainNext: st.DrainNext, heldBound: st.HeldBound,
		revision: st.Revision, lastPersistAt: st.LastPersistAt, oldestUnpersisted: st.OldestUnpersistedTimestamp, entries: st.Entries,
	}
	if st.Counters != (Counters{}) {
		c := st.Counters
		s.counters = &c
	}
	if s.Status() != st {
		return Snapshot{whole: &st}
	}
	return s
}

// Status is the status the snapshot was made of.
func (s *Snapshot) Status() Status {
	if s.whole != nil {
		return *s.whole
	}
	st := Status{
		Phase: s.phase, PersistState: s.persistState, LastPersistError: s.lastPersistError, LastUploadError: s.lastUploadError,
		Epoch: s.epoch, PersistedFirst: s.persistedFirst, PersistedNext: s.persistedNext, First: s.first, Next: s.next,
		TotalSize: s.totalSize, DrainNext: s.drainNext, HeldBound: s.heldBound,
		Revision: s.revision, LastPersistAt: s.lastPersistAt, OldestUnpersistedTimestamp: s.oldestUnpersisted, Entries: s.entries,
	}
	if s.counters != nil {
		st.Counters = *s.counters
	}
	return st
}
