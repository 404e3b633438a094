package actors

import (
	"fmt"
	"time"

	"github.com/streamtier/streamtier/actors/readercore"
)

// EventListener tells the embedder what happens to the node's streams as it happens, so that
// a broker need not poll Status (docs/events.md). Every field is optional. The functions are
// called from the node's goroutines (a stream's reader, its supervisor, the claim check):
// they must not block (hand the event to a channel or a goroutine of your own), and they may
// be called concurrently for different streams. One stream's events from its reader
// (persisted, stall, pause, resume, gap, diverged, deposed) come one at a time in the order
// the stream decided them; OnStopped is the last event of a stream. A listener that panics
// is logged and the event dropped; the node carries on.
type EventListener struct {
	// OnPersisted: a manifest is persisted (in S3 and anchored in etcd) up to NextOffset;
	// also called with the resolved manifest when a stream's reader (re)starts.
	OnPersisted func(PersistedInfo)
	// OnStall: the stream cannot advance (an upload failing non-transiently, a drain whose
	// position disagrees with the core, a local log it cannot read, lost etcd metadata);
	// OnStallCleared when that cause is over.
	OnStall        func(StallInfo)
	OnStallCleared func(StallInfo)
	// OnPause: the bytes drained and not yet durable reached the bound
	// (StreamOptions.MaxUnpersistedBytes): draining stops and the local log grows until
	// uploads and a persist make room (S3 slow or away); OnResume when draining goes on.
	OnPause  func(PauseInfo)
	OnResume func(ResumeInfo)
	// OnGap: the local log no longer holds a range that was never uploaded (it starts
	// above the remote tier, or its retention outran the upload): declared as a gap.
	OnGap func(GapInfo)
	// OnDiverged: the local log and the remote tier disagree: the remote tier was cut
	// back, or the stream waits (for the local log to catch up, or for an operator).
	OnDiverged func(DivergedInfo)
	// OnDeposed: a higher epoch persisted: this node's writer stops for good (OnStopped
	// follows).
	OnDeposed func(DeposedInfo)
	// OnParked: the stream's reader kept failing and is now retried periodically.
	OnParked func(ParkedInfo)
	// OnStopped: the stream's actors stopped for good: deleted, deposed, removed, or the
	// node stopped.
	OnStopped func(StoppedInfo)
	// OnFatal: the node can no longer do its work until it is restarted (today: its cluster
	// claim changed, ErrClaimChanged: nothing persists or deletes any more).
	OnFatal func(error)
}

// PersistedInfo says a stream's remote tier is persisted over [FirstOffset, NextOffset).
// NextOffset never falls but by a truncation (OnDiverged, DivergenceTruncated); Revision
// is the etcd revision of the record (a reader restart repeats the last one).
type PersistedInfo struct {
	Stream                  string
	FirstOffset, NextOffset uint64
	Revision                int64
}

// StallCause says what stalled.
type StallCause uint8

// Stall causes: an upload failing non-transiently (retried with a growing delay), the drain
// disagreeing with the core's position, the local log unreadable, the stream's etcd
// metadata missing or behind the bucket (`node recover` repairs it).
const (
	StallUpload StallCause = iota + 1
	StallDrain
	StallLocalRead
	StallMetadata
)

// String names the cause as docs and logs do.
func (c StallCause) String() string {
	switch c {
	case StallUpload:
		return "upload"
	case StallDrain:
		return "drain"
	case StallLocalRead:
		return "local_read"
	case StallMetadata:
		return "metadata"
	}
	return fmt.Sprintf("stall(%d)", uint8(c))
}

// StallInfo is one stall (or its end): at Offset (0 where the cause has none), after
// Failures failed attempts, for Reason ("" when cleared).
type StallInfo struct {
	Stream   string
	Cause    StallCause
	Offset   uint64
	Failures int
	Reason   string
}

// PauseInfo is a pause at the bound: HeldBytes drained and not yet durable, BoundBytes the
// bound.
type PauseInfo struct {
	Stream                string
	HeldBytes, BoundBytes uint64
}

// ResumeInfo is the end of a pause: draining goes on at From.
type ResumeInfo struct {
	Stream                string
	From                  uint64
	HeldBytes, BoundBytes uint64
}

// GapInfo is a declared gap [From, To): Reason is GapLocalAhead (the local log starts above
// the remote tier, also for a new log that starts above 0) or GapSegmentGone (a segment
// went before its upload); work not yet uploaded there was dropped.
type GapInfo struct {
	Stream           string
	Reason           readercore.GapReason
	From, To         uint64
	DroppedTransfers int
	DroppedChunks    int
}

// DivergenceAction says what a divergence made the stream do.
type DivergenceAction uint8

// Divergence actions: the remote tier was truncated at At (automatically after a lost tail
// or an unclean failover, or by an operator's TruncateRemote); the two share no chunk and
// the stream waits for TruncateRemote or a restored local log; the local log is a prefix of
// the remote tier and the stream waits for it to catch up.
const (
	DivergenceTruncated DivergenceAction = iota + 1
	DivergenceStalled
	DivergenceBehind
)

// String names the action as docs and logs do.
func (a DivergenceAction) String() string {
	switch a {
	case DivergenceTruncated:
		return "truncated"
	case DivergenceStalled:
		return "stalled"
	case DivergenceBehind:
		return "behind"
	}
	return fmt.Sprintf("divergence(%d)", uint8(a))
}

// DivergedInfo is one divergence. Truncated sets At (the new remote next offset), OldNext
// and Operator; stalled and behind set the remote and local bounds compared.
type DivergedInfo struct {
	Stream                  string
	Action                  DivergenceAction
	At, OldNext             uint64
	Operator                bool
	RemoteFirst, RemoteNext uint64
	LocalFirst, LocalNext   uint64
}

// DeposedInfo says the writer at Epoch was fenced by a persist at ByEpoch.
type DeposedInfo struct {
	Stream         string
	Epoch, ByEpoch uint64
	Reason         string
}

// ParkedInfo is a parked stream: its reader's last failure, the failures within the last
// minute and when it is retried next.
type ParkedInfo struct {
	Stream   string
	Reason   string
	Failures int
	RetryAt  time.Time
}

// StopCause says why a stream stopped.
type StopCause uint8

// Stop causes: the stream was deleted (elsewhere: a DeleteStream of this node removes it
// first), its writer deposed, it was removed (RemoveStream, DeleteStream), or the node
// stopped.
const (
	StopDeleted StopCause = iota + 1
	StopDeposed
	StopRemoved
	StopNodeStopped
)

// String names the cause as docs and logs do.
func (c StopCause) String() string {
	switch c {
	case StopDeleted:
		return "deleted"
	case StopDeposed:
		return "deposed"
	case StopRemoved:
		return "removed"
	case StopNodeStopped:
		return "node_stopped"
	}
	return fmt.Sprintf("stop(%d)", uint8(c))
}

// StoppedInfo is a stream that stopped for good, and why (Reason: the reader's words for a
// deletion or a deposition, "" otherwise).
type StoppedInfo struct {
	Stream string
	Cause  StopCause
	Reason string
}

// emit calls one listener function (nil: nothing) with info, recovering a panic.
func emit[T any](n *Node, kind, stream string, fn func(T), info T) {
	if fn == nil {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			n.log.Error().Str("event", kind).Str("stream", stream).Str("panic", fmt.Sprint(p)).
				Msg("the event listener panicked: event dropped")
		}
	}()
	fn(info)
}

// fatal reports an error after which the node cannot do its work until restarted.
func (n *Node) fatal(err error) { emit(n, "fatal", "", n.cfg.Events.OnFatal, err) }

// notify turns an effect the reader just executed into the embedder's event, if it is one.
// Nothing is decided here: each event is an effect of the core, as it came.
func (r *reader) notify(e readercore.Effect) {
	n, id, ev := r.n, r.h.spec.ID, &r.n.cfg.Events
	switch e := e.(type) {
	case readercore.UpdateRange:
		emit(n, "persisted", id, ev.OnPersisted, PersistedInfo{Stream: id, FirstOffset: e.Manifest.FirstOffset, NextOffset: e.Manifest.NextOffset, Revision: e.Revision})
	case readercore.Stalled:
		emit(n, "stall", id, ev.OnStall, StallInfo{Stream: id, Cause: StallUpload, Offset: e.Offset, Failures: e.Failures, Reason: e.Reason})
	case readercore.Unstalled:
		emit(n, "stall_cleared", id, ev.OnStallCleared, StallInfo{Stream: id, Cause: StallUpload, Offset: e.Offset})
	case readercore.DrainStalled:
		emit(n, "stall", id, ev.OnStall, StallInfo{Stream: id, Cause: StallDrain, Offset: e.Offset, Failures: e.Failures, Reason: e.Reason})
	case readercore.DrainUnstalled:
		emit(n, "stall_cleared", id, ev.OnStallCleared, StallInfo{Stream: id, Cause: StallDrain, Offset: e.Offset})
	case readercore.PauseDrain:
		emit(n, "pause", id, ev.OnPause, PauseInfo{Stream: id, HeldBytes: e.Held, BoundBytes: e.Bound})
	case readercore.ResumeDrain:
		emit(n, "resume", id, ev.OnResume, ResumeInfo{Stream: id, From: e.From, HeldBytes: e.Held, BoundBytes: e.Bound})
	case readercore.DeclareGap:
		emit(n, "gap", id, ev.OnGap, GapInfo{Stream: id, Reason: e.Reason, From: e.From, To: e.To, DroppedTransfers: e.DroppedTransfers, DroppedChunks: e.DroppedChunks})
	case readercore.TruncateRemote:
		emit(n, "diverged", id, ev.OnDiverged, DivergedInfo{Stream: id, Action: DivergenceTruncated, At: e.At, OldNext: e.OldNext, Operator: e.Reason == readercore.TruncateOperator})
	case readercore.StalledDiverged:
		emit(n, "diverged", id, ev.OnDiverged, DivergedInfo{Stream: id, Action: DivergenceStalled,
			RemoteFirst: e.RemoteFirst, RemoteNext: e.RemoteNext, LocalFirst: e.LocalFirst, LocalNext: e.LocalNext})
	case readercore.StalledBehind:
		emit(n, "diverged", id, ev.OnDiverged, DivergedInfo{Stream: id, Action: DivergenceBehind,
			RemoteFirst: e.RemoteFirst, RemoteNext: e.RemoteNext, LocalFirst: e.LocalFirst, LocalNext: e.LocalNext})
	case readercore.Stop:
		cause := StopDeleted
		if e.DeposedBy != 0 {
			cause = StopDeposed
			emit(n, "deposed", id, ev.OnDeposed, DeposedInfo{Stream: id, Epoch: e.Epoch, ByEpoch: e.DeposedBy, Reason: e.Reason})
		}
		r.h.setStopCause(cause)
	}
}

// notifyLocalRead reports the drain's local read failure starting (err) or ending (nil).
func (r *reader) notifyLocalRead(err error) {
	n, id := r.n, r.h.spec.ID
	if err != nil {
		emit(n, "stall", id, n.cfg.Events.OnStall, StallInfo{Stream: id, Cause: StallLocalRead, Reason: err.Error()})
		return
	}
	emit(n, "stall_cleared", id, n.cfg.Events.OnStallCleared, StallInfo{Stream: id, Cause: StallLocalRead})
}

// notifyMetadata reports a metadata stall starting or changing phase (st), or ending (nil).
func (r *reader) notifyMetadata(st *metadataStall) {
	n, id := r.n, r.h.spec.ID
	if st != nil {
		emit(n, "stall", id, n.cfg.Events.OnStall, StallInfo{Stream: id, Cause: StallMetadata, Reason: st.Phase + ": " + st.Reason})
		return
	}
	emit(n, "stall_cleared", id, n.cfg.Events.OnStallCleared, StallInfo{Stream: id, Cause: StallMetadata})
}

// streamStopped reports a stream whose actors stopped for good: the cause its reader
// recorded (deleted, deposed), else the node stopping or the stream removed.
func (n *Node) streamStopped(h *streamHandle) {
	cause := h.stopCause()
	if cause == 0 {
		n.mu.Lock()
		cause = StopRemoved
		if n.stopped {
			cause = StopNodeStopped
		}
		n.mu.Unlock()
	}
	emit(n, "stopped", h.spec.ID, n.cfg.Events.OnStopped, StoppedInfo{Stream: h.spec.ID, Cause: cause, Reason: h.stopReason()})
}
