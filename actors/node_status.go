package actors

import (
	"cmp"
	"fmt"
	"time"

	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/segments"
)

// StreamStatus is what an operator sees of one stream: the local log, the remote tier and the
// upload pipeline between them.
type StreamStatus struct {
	Stream string
	Phase  string
	Epoch  uint64

	LocalFirst     uint64 // oldest offset held locally
	LocalCommitted uint64 // one past the last committed offset
	LocalNext      uint64 // one past the last written offset
	LocalSegments  int
	LocalBytes     int64

	Core     readercore.Status // remote tier (persisted and in memory) and pipeline
	Restarts uint64
	// Timers is how many timers the reader has armed: at most one retry timer, one persist
	// timer, one deadline per transfer in flight and a few housekeeping ones, however long
	// an outage lasts.
	Timers int
	// ResolveError is the last failure to resolve the manifest while the phase is
	// "resolving" (etcd or S3 unreachable, a missing or corrupt root): retried with backoff.
	ResolveError string
	// StopReason says why the reader stopped for good, with phase "stopped": the stream was
	// deleted (then the reason names the stream and when), or its writer was deposed by a
	// higher epoch ("deposed by epoch N ...").
	StopReason string
	// MetadataReason, with phase "metadata_missing", "metadata_behind" or "claim_changed",
	// says what the resolution found and names the command that repairs it (`node recover`).
	MetadataReason string
	// LocalError is why the drain cannot read the local log now (phase "stalled"; it retries
	// on its timer and the stream recovers by itself once the cause clears). Exhausted names
	// the resource that ran out (EMFILE, ENFILE, ENOSPC, EDQUOT, ENOMEM), here or in
	// LogWriteError; "" for other failures.
	LocalError string
	Exhausted  string
	// LogWriteError is the write failure that made the local log refuse appends (the broker
	// must reopen it); "" when it takes them.
	LogWriteError string
	// Parked is set, with phase "parked", while the stream's reader kept failing and the
	// supervisor retries it periodically instead of restarting it at once.
	Parked *ParkedStatus

	// LagBytes estimates the committed bytes not yet persisted remotely (from segment
	// summaries, exact at segment boundaries); LagSeconds is the age of the oldest of them:
	// now minus the timestamp of the committed chunk at the persisted next offset (or the
	// local first offset above it), 0 when everything committed is persisted.
	LagBytes   int64
	LagSeconds float64

	// Waiting says in a sentence why the stream does not move now, whatever the phase: an
	// upload or persist failing with its error, the pause at the memory bound, the
	// resolution failing, or a local log with nothing committed ("" when nothing holds it
	// back). The fields above hold the details; this is the one line to show a person.
	Waiting string

	// Dormant says the stream holds no actor now: everything it drained was persisted and it
	// waits for data, an await or a command to wake it. Core is as it was when it went
	// dormant (the local fields are read now).
	Dormant bool

	// Follow is set when the local log is followed read-only (another process writes it):
	// what its last look at the directory found.
	Follow *FollowStatus
}

// FollowStatus is the state of a followed local log (segments.Options.ReadOnly).
type FollowStatus struct {
	// PendingBytes are the bytes of the last segment past its last complete chunk: a chunk
	// the writer is writing, or a torn tail it left, not tiered until it is complete.
	PendingBytes int64
	// Error is the last look's failure ("" when it succeeded).
	Error string
	// Restarting, with phase "restarting", says why a followed stream that a restart took
	// out of the node (its log was rewritten) is not back in it yet; "" otherwise.
	Restarting string
}

// ParkedStatus says why and since when a stream is parked, and when it is retried next.
type ParkedStatus struct {
	Since    time.Time
	Reason   string // the reader's last failure
	Failures int    // reader failures within the last minute when it was parked
	RetryAt  time.Time
}

// parkedStatus is the status of a parked stream (ok false if it is not): its reader is
// down, the handle says why.
func (h *streamHandle) parkedStatus() (StreamStatus, bool) {
	p, ok := h.parkedState()
	if !ok {
		return StreamStatus{}, false
	}
	st, _ := h.localStatus()
	st.Phase = "parked"
	st.Parked = &ParkedStatus{Since: p.since, Reason: p.reason, Failures: p.failures, RetryAt: p.retryAt}
	return st, true
}

// localStatus is the part of the status the handle knows: the stream, its local log and its
// restarts; the phase is "resolving" until the reader says more.
func (h *streamHandle) localStatus() (StreamStatus, []segments.SegmentInfo) {
	lg := h.spec.Log
	segs := lg.Segments()
	st := StreamStatus{
		Stream:         h.spec.ID,
		Phase:          "resolving",
		Epoch:          h.spec.Epoch,
		LocalFirst:     lg.FirstOffset(),
		LocalCommitted: lg.CommittedNext(),
		LocalNext:      lg.NextOffset(),
		LocalSegments:  len(segs),
		Restarts:       h.restarts.Load(),
	}
	if err := lg.WriteError(); err != nil {
		st.LogWriteError, st.Exhausted = err.Error(), ExhaustedResource(err)
	}
	if _, has := lg.Committed(); !has && !lg.ReadOnly() && st.LocalNext > st.LocalFirst {
		// osiris semantics: the committed offset lives in memory; a broker that reopened
		// the log and did not call SetCommitted gets a stream that never moves.
		st.Waiting = fmt.Sprintf("nothing committed; the local log holds [%d, %d): the broker must call SetCommitted (the committed offset is not kept across a reopen)", st.LocalFirst, st.LocalNext)
	}
	for _, s := range segs {
		st.LocalBytes += s.Size
	}
	if lg.ReadOnly() {
		f, err := lg.LastRefresh()
		st.Follow = &FollowStatus{PendingBytes: f.PendingBytes}
		if err != nil {
			st.Follow.Error = err.Error()
		}
	}
	return st, segs
}

// stoppedStatus is the status of a stream whose reader stopped for good (ok false if it did
// not): the reader is gone, the handle remembers why.
func (h *streamHandle) stoppedStatus() (StreamStatus, bool) {
	reason := h.stopReason()
	if reason == "" {
		return StreamStatus{}, false
	}
	st, _ := h.localStatus()
	st.Phase, st.StopReason = "stopped", reason
	return st, true
}

func (r *reader) status() StreamStatus {
	st, segs := r.h.localStatus()
	st.ResolveError = r.resolveErr
	st.Timers = r.timers.Count()
	if r.running {
		st.Core = r.core.Status()
		st.Phase = st.Core.Phase
		if st.Core.Diverged {
			st.Phase = "diverged"
			if st.Core.Behind {
				st.Phase = "behind"
			}
		}
		now := r.n.cfg.clock.Now()
		st.LagBytes, st.LagSeconds = lag(segs, st.Core.PersistedNext, st.LocalCommitted, now)
		if ts, ok := r.oldest.at(r.h.spec.Log, max(st.Core.PersistedNext, st.LocalFirst), st.LocalCommitted); ok {
			st.LagSeconds = max(float64(now.UnixMilli()-ts)/1000, 0)
		}
	}
	if ms := r.h.stall.Load(); ms != nil && !r.running {
		st.Phase, st.MetadataReason = ms.Phase, ms.Reason
	}
	if reason := r.n.claim.lostReason(); reason != "" {
		// Nothing persists or deletes any more: the stream stalls with the node's claim.
		st.Phase, st.MetadataReason = "claim_changed", reason
	}
	if r.localErr != nil {
		st.LocalError = r.localErr.Error()
		if c := ExhaustedResource(r.localErr); c != "" {
			st.Exhausted = c
		}
		st.Phase = "stalled"
	}
	if reason := r.h.stopReason(); reason != "" {
		st.Phase, st.StopReason = "stopped", reason
	}
	st.Waiting = cmp.Or(st.Waiting, st.Core.Waiting(), st.ResolveError)
	return st
}

// oldestUnpersisted remembers the timestamp of the chunk at one offset (the oldest committed
// chunk not yet persisted), so that a status reads the disk only when that offset moves.
type oldestUnpersisted struct {
	off   uint64
	ts    int64
	known bool
}

// at returns the timestamp of the committed chunk starting at off in lg (cached per off);
// ok is false when off is at or past committed (nothing is waiting) or no chunk starts
// there (a segment just deleted, off inside a chunk): the caller estimates instead.
// Before, the age was interpolated between a segment's first and last timestamps, which
// after a broker outage spanned by one segment reported the outage instead of the lag.
func (o *oldestUnpersisted) at(lg *segments.Log, off, committed uint64) (int64, bool) {
	if off >= committed {
		return 0, false
	}
	if o.known && o.off == off {
		return o.ts, true
	}
	h, found, err := lg.ChunkHeader(off)
	if err != nil || !found {
		o.known = false
		return 0, false
	}
	o.off, o.ts, o.known = off, h.Timestamp, true
	return o.ts, true
}

// lag estimates the bytes and the age of committed data in [persisted, committed), assuming
// bytes and time spread evenly over offsets within a segment (the age is the fallback of
// oldestUnpersisted.at).
func lag(segs []segments.SegmentInfo, persisted, committed uint64, now time.Time) (int64, float64) {
	if committed <= persisted {
		return 0, 0
	}
	var bytes float64
	oldest := int64(-1)
	for _, s := range segs {
		lo, hi := max(s.FirstOffset, persisted), min(s.NextOffset, committed)
		if lo >= hi || s.NextOffset <= s.FirstOffset {
			continue
		}
		span := float64(s.NextOffset - s.FirstOffset)
		bytes += float64(s.Size) * float64(hi-lo) / span
		if oldest < 0 {
			frac := float64(lo-s.FirstOffset) / span
			oldest = s.FirstTimestamp + int64(frac*float64(s.LastTimestamp-s.FirstTimestamp))
		}
	}
	age := 0.0
	if oldest >= 0 {
		age = max(float64(now.UnixMilli()-oldest)/1000, 0)
	}
	return int64(bytes), age
}
