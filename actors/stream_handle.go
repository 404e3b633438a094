package actors

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/manifest"
)

// ReplicaSender carries a writer's persisted edits and syncs to its replica nodes. It must
// not block: a send to a dead node is dropped, and the next persist's gap check repairs it.
// Manifests are named by their root's seq and uid (the RootRef's epoch does not travel):
// Broadcast's edits make root of parent, Sync's manifest is root.
type ReplicaSender interface {
	Broadcast(stream string, to []string, edits []manifest.Edit, root, parent readercore.RootRef, epoch uint64)
	Sync(stream, replica string, m manifest.Manifest, root readercore.RootRef, epoch uint64)
}

// Persisted is a stream's manifest cache entry: the last manifest etcd accepted.
type Persisted struct {
	Manifest manifest.Manifest
	Revision int64
	// Seq and UID name the root object (Seq 0: a version 1 or 2 root); a version 3
	// resolution takes the cache only when they equal the record's.
	Seq, UID uint64
}

// streamHandle is the part of a stream that outlives its reader actor's restarts: the spec,
// the await_offset waiters, the replicas registered at run time, the manifest cache, the
// highest manifest revision seen, the incarnation count (which keeps the references of each
// incarnation's core apart), whether a missing anchor already made a reader reinitialize,
// and why the stream stopped for good.
type streamHandle struct {
	spec       StreamSpec
	supervisor *actor.PID
	done       chan struct{} // closed when the stream's actors have stopped for good
	ready      chan struct{} // closed when a reader first resolved and opened the log
	readyOnce  sync.Once

	incarnations atomic.Uint64
	cache        atomic.Pointer[Persisted]
	restarts     atomic.Uint64
	// seenRevision is the highest manifest revision any incarnation saw in etcd (resolved or
	// persisted): above 0, the stream has persisted, so finding no record later means it was
	// deleted, never that it is new.
	seenRevision atomic.Int64
	// seenSeq is the highest version 3 root seq any incarnation resolved or persisted: the
	// next resolution lists the roots from it on.
	seenSeq atomic.Uint64
	// anchorReinit is set once an incarnation reinitialized because its first persist found
	// no anchor: later cores get readercore.Config.AnchorReinitialized, so that a recurrence
	// is retried and reported instead of reinitializing again and again.
	anchorReinit atomic.Bool
	// doubt is a persist attempt whose outcome is unknown: the next persist or resolution
	// settles it (same root, same expected record) before anything new is built.
	doubt atomic.Pointer[inDoubt]
	// fresh is when a writer of the stream was last sure of its record (stale writers
	// resolve again before they persist).
	fresh freshness
	// stall is the metadata stall the last resolution decided (nil: none), kept across
	// incarnations so that it is logged and counted once, not at every retry.
	stall atomic.Pointer[metadataStall]

	mu sync.Mutex
	// registered are the replicas registered at run time (Node.ReplicaRegistered); every
	// incarnation replays them with the spec's once it resolved.
	registered map[string]bool
	lastPark   time.Time // since when the stream was parked, while a retry is running
	nextID     readercore.WaiterID
	waiters    map[readercore.WaiterID]waiterEntry
	stopped    error     // set once the reader stopped: later waiters fail at once
	reason     string    // why the reader stopped for good (deleted, deposed); "" if it did not
	cause      StopCause // StopDeleted or StopDeposed once the reader stopped for good; 0 if it did not
	reader     *actor.PID
	stopOnce   sync.Once
	// parked is set while the supervisor has parked the stream (its reader keeps failing)
	// and waits to retry it.
	parked *parkState

	// dorm is set while the stream is dormant or going dormant (stream_dormant.go): no
	// actor, a snapshot for status, a commit listener to wake it. sent counts the messages
	// sent to the current reader (Node.readerFor), so that a reader goes dormant only with
	// none of them unread; readerReady, while a woken stream has no reader yet, is closed
	// when its new reader registers. carry are the counts of the core that went dormant,
	// for the next one.
	dorm        *dormancy
	dormGen     uint64
	sent        uint64
	readerReady chan struct{}
	carry       *readercore.Counters
	// policy is the remote retention policy set at run time (Node.SetRetention), which
	// every later reader incarnation starts with instead of the spec's; nil: the spec's.
	policy atomic.Pointer[manifest.Policy]
}

// parkState is why and since when a stream is parked.
type parkState struct {
	since    time.Time // when it was parked (the first park of a run of retries)
	reason   string    // the last failure
	failures int       // reader failures within the last minute when it was parked
	retryAt  time.Time // the next retry
}

// park records the stream as parked; it reports whether it was not already (a retry that
// failed keeps the first park's time).
func (h *streamHandle) park(p parkState) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	first := h.parked == nil && h.lastPark.IsZero()
	if h.parked != nil {
		p.since = h.parked.since
	} else if !h.lastPark.IsZero() {
		p.since = h.lastPark
	}
	h.parked = &p
	return first
}

// unpark clears the parked state while the reader is retried; the park's time is kept
// for a retry that fails again, until the reader runs (running clears it).
func (h *streamHandle) unpark() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.parked != nil {
		h.lastPark = h.parked.since
	}
	h.parked = nil
}

// recovered forgets a past park: the reader resolved and runs.
func (h *streamHandle) recovered() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastPark = time.Time{}
}

// retrying reports a parked stream whose reader is being retried and has not run yet.
func (h *streamHandle) retrying() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.parked == nil && !h.lastPark.IsZero()
}

// parkedState is a copy of the park, ok false when the stream is not parked.
func (h *streamHandle) parkedState() (parkState, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.parked == nil {
		return parkState{}, false
	}
	return *h.parked, true
}

type waiterEntry struct {
	offset uint64
	flush  bool // Node.Flush: the reader hurries the offset
	reply  chan error
}

func newStreamHandle(spec StreamSpec) *streamHandle {
	return &streamHandle{spec: spec, done: make(chan struct{}), ready: make(chan struct{}), waiters: make(map[readercore.WaiterID]waiterEntry)}
}

// markReady records that a reader resolved the stream and opened its log (once per stream:
// later incarnations resolve again, but readers and awaits already work across them).
func (h *streamHandle) markReady() { h.readyOnce.Do(func() { close(h.ready) }) }

// addWaiter registers an await_offset caller; the reader learns of it by message (and every
// new incarnation re-reads them all).
func (h *streamHandle) addWaiter(offset uint64, flush bool) (readercore.WaiterID, chan error, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped != nil {
		return 0, nil, h.stopped
	}
	h.nextID++
	ch := make(chan error, 1)
	h.waiters[h.nextID] = waiterEntry{offset: offset, flush: flush, reply: ch}
	return h.nextID, ch, nil
}

func (h *streamHandle) removeWaiter(id readercore.WaiterID) {
	h.mu.Lock()
	delete(h.waiters, id)
	h.mu.Unlock()
}

// reply answers waiters; err nil means their offset is persisted.
func (h *streamHandle) reply(ids []readercore.WaiterID, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		if w, ok := h.waiters[id]; ok {
			w.reply <- err
			delete(h.waiters, id)
		}
	}
}

// outstanding lists the waiters a new reader incarnation must know about.
func (h *streamHandle) outstanding() []readercore.AwaitOffset {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]readercore.AwaitOffset, 0, len(h.waiters))
	for id, w := range h.waiters {
		out = append(out, readercore.AwaitOffset{Offset: w.offset, Waiter: id, Flush: w.flush})
	}
	return out
}

// stop fails every waiter with err and refuses new ones.
func (h *streamHandle) stop(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped == nil {
		h.stopped = err
	}
	for id, w := range h.waiters {
		w.reply <- err
		delete(h.waiters, id)
	}
}

// gone records that the reader stopped for good and why, and fails every waiter with err.
func (h *streamHandle) gone(reason string, err error) {
	h.mu.Lock()
	if h.reason == "" {
		h.reason = reason
	}
	h.mu.Unlock()
	h.stop(err)
}

// setStopCause records why the reader stopped for good (the OnStopped event's cause).
func (h *streamHandle) setStopCause(c StopCause) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cause = c
}

// stopCause is why the reader stopped for good, 0 while it has not.
func (h *streamHandle) stopCause() StopCause {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cause
}

// stopReason is why the reader stopped for good, "" while it has not.
func (h *streamHandle) stopReason() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reason
}

// noteSeq remembers that the stream's record named the version 3 root of seq.
func (h *streamHandle) noteSeq(seq uint64) {
	for {
		cur := h.seenSeq.Load()
		if seq <= cur || h.seenSeq.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// setStall records the stream's metadata stall (nil: none) and keeps the per-phase gauges;
// it reports whether the phase changed (the caller logs then, not at every retry).
func (h *streamHandle) setStall(m *Metrics, st *metadataStall) bool {
	old := h.stall.Swap(st)
	gauge := func(s *metadataStall, d int64) {
		if s == nil {
			return
		}
		switch s.Phase {
		case "metadata_missing":
			m.StreamsMetadataMissing.Add(d)
		case "metadata_behind":
			m.StreamsMetadataBehind.Add(d)
		}
	}
	gauge(old, -1)
	gauge(st, 1)
	return (old == nil) != (st == nil) || (old != nil && old.Phase != st.Phase)
}

// noteRevision remembers that the stream's manifest record was seen at rev.
func (h *streamHandle) noteRevision(rev int64) {
	for {
		cur := h.seenRevision.Load()
		if rev <= cur || h.seenRevision.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// addReplica remembers a replica registered at run time, for the next incarnations.
func (h *streamHandle) addReplica(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.registered == nil {
		h.registered = make(map[string]bool)
	}
	h.registered[name] = true
}

// replicas lists the stream's replicas, sorted: the spec's and those registered at run time.
func (h *streamHandle) replicas() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := slices.Clone(h.spec.Replicas)
	for name := range h.registered {
		out = append(out, name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (h *streamHandle) setReader(pid *actor.PID) {
	h.mu.Lock()
	h.reader, h.sent = pid, 0
	if h.readerReady != nil {
		close(h.readerReady)
		h.readerReady = nil
	}
	h.mu.Unlock()
}

// takeCarry returns (and forgets) the counts a woken stream's new core starts from.
func (h *streamHandle) takeCarry() *readercore.Counters {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.carry
	h.carry = nil
	return c
}

// supervisorPID is the stream's current supervisor (a woken stream has a new one).
func (h *streamHandle) supervisorPID() *actor.PID {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.supervisor
}

func (h *streamHandle) readerPID() *actor.PID {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reader
}
