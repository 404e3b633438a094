package actors

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/segments"
)

// A dormant stream holds no actor. A reader whose drain is passive (reader_flow.go) and
// whose core holds nothing but its persisted state (readercore.Core.Dormant) for
// Config.DormantAfter lets its stream go dormant: it leaves a snapshot of its core's status
// in the handle, registers a commit listener on the log and has its supervisor stop (the
// reader with it). Data committed past the drain's position, an await, a command or a
// replica registration wakes the stream: a fresh supervisor and reader resolve the manifest
// again (everything was persisted, so the resolution finds where the stream stood) and run
// on from there. Status answers from the snapshot meanwhile, without waking it.
//
// What makes it safe: the reader decides under the handle's lock, and only when it has read
// every message sent to it (Node.readerFor counts them); from then on the handle wakes the
// stream instead of sending. Nothing durable is touched: going dormant persists nothing and
// deletes nothing, and waking is the resolution every restart runs.

// dormancy is a dormant stream's state in its handle.
type dormancy struct {
	core     readercore.Snapshot // the core's status when it went dormant
	due      int64               // when remote retention by age removes something (ms; 0: never): wake it then
	stopping bool                // its supervisor is stopping (the name is not free to spawn again yet)
	wake     bool                // a wake came while it was stopping: spawn again once it stopped
	gen      uint64
	listen   segments.ListenerID // the commit listener that wakes it, forgotten when it wakes otherwise
}

// dormantCheck is the reader's timer: its drain has been passive for Config.DormantAfter.
type dormantCheck struct{ Gen uint64 }

// goDormant tells a stream's supervisor that its reader left the stream dormant: stop.
type goDormant struct{}

// wakeStream asks the node's waker to wake a dormant stream (from a commit listener, which
// runs under the log's lock and may only post).
type wakeStream struct {
	h   *streamHandle
	gen uint64
}

// errDormantWake is wrapped (with ErrStreamStarting) by a command that found its stream
// dormant and whose new reader did not start in time to take it.
var errDormantWake = errors.New("the dormant stream's reader did not start in time")

// wakeWait bounds how long a command waits for a woken stream's new reader to register.
const wakeWait = 5 * time.Second

// beginDormancy makes the stream dormant if the reader that asks has read every message
// sent to it (received), no await waits and nothing stopped or parked it; it registers the
// commit listener at listenAt that wakes it. It reports whether it did.
func (h *streamHandle) beginDormancy(n *Node, received uint64, core readercore.Status, due int64, listenAt uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dorm != nil || h.stopped != nil || h.parked != nil || len(h.waiters) > 0 || h.sent != received {
		return false
	}
	h.dormGen++
	h.dorm = &dormancy{core: readercore.Snap(core), due: due, stopping: true, gen: h.dormGen}
	h.reader, h.supervisor = nil, nil // a PID caches its process: holding one keeps the actor
	n.metrics.StreamsDormant.Add(1)
	n.metrics.Dormancies.Add(1)
	gen, root, waker := h.dormGen, n.root, n.waker
	if due != 0 {
		root.Send(waker, watchRetention{})
	}
	h.dorm.listen = h.spec.Log.OnCommittedPast(listenAt, func() { root.Send(waker, wakeStream{h: h, gen: gen}) })
	return true
}

// dormancyStopped is the supervisor's last word when it stopped: true if the stream stays
// dormant (or was woken meanwhile and spawned again), false if the stop is for good.
func (n *Node) dormancyStopped(h *streamHandle) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := h.dorm
	if d == nil || !d.stopping || h.stopped != nil {
		if d != nil { // stopped for good while going dormant
			n.leaveDormancyLocked(h)
		}
		return false
	}
	d.stopping = false
	if d.wake {
		n.spawnWokenLocked(h, d)
	}
	return true
}

// wake turns a dormant stream back into a supervisor and a reader (gen 0: whatever its
// dormancy; otherwise only that one, so that a late listener of an earlier one does
// nothing). A stream still stopping is spawned again once it stopped.
func (n *Node) wake(h *streamHandle, gen uint64) {
	n.mu.Lock()
	gone := n.stopped || n.streams[h.spec.ID] != h
	n.mu.Unlock()
	if gone {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	d := h.dorm
	if d == nil || h.stopped != nil || (gen != 0 && d.gen != gen) {
		return
	}
	if d.stopping {
		d.wake = true
		return
	}
	n.spawnWokenLocked(h, d)
}

// wakeForRetention wakes the dormant streams whose remote retention by age is due: their
// new reader evaluates it as it starts (and the stream goes dormant again afterwards). It
// reports whether a dormant stream still waits for its retention to come due.
func (n *Node) wakeForRetention() (waiting bool) {
	now := n.cfg.clock.Now().UnixMilli()
	n.mu.Lock()
	var due []*streamHandle
	for _, h := range n.streams {
		h.mu.Lock()
		if d := h.dorm; d != nil && d.due != 0 {
			if d.due <= now {
				due = append(due, h)
			} else {
				waiting = true
			}
		}
		h.mu.Unlock()
	}
	n.mu.Unlock()
	for _, h := range due {
		n.wake(h, 0)
	}
	return waiting
}

// spawnWokenLocked spawns a dormant stream's supervisor (h.mu held): the stream leaves
// dormancy, its next core starts from the dormant one's counts.
func (n *Node) spawnWokenLocked(h *streamHandle, d *dormancy) {
	counters := d.core.Status().Counters
	h.carry = &counters
	pid, err := n.spawnStream(h)
	if err != nil {
		// Only a node shutting down refuses a spawn: the stream stays dormant, and says so.
		h.carry = nil
		n.log.Error().Err(err).Str("stream", h.spec.ID).Msg("waking the dormant stream failed; it stays dormant")
		return
	}
	h.supervisor = pid
	n.leaveDormancyLocked(h) // its new reader counts it as running again
	n.metrics.Wakes.Add(1)
}

// leaveDormancyLocked ends the stream's dormancy (h.mu held), woken or stopped for good: it
// leaves StreamsDormant, and StreamsRunning, where the dormant stream was still counted.
func (n *Node) leaveDormancyLocked(h *streamHandle) {
	h.spec.Log.Forget(h.dorm.listen)
	h.dorm = nil
	n.metrics.StreamsDormant.Add(-1)
	n.metrics.StreamsRunning.Add(-1)
}

// readerFor returns the stream's reader to send one message to, and counts it (see
// beginDormancy). A dormant stream is woken: then it returns no reader and a channel closed
// once the new one registered. No reader and no channel: none yet (the stream starts).
func (n *Node) readerFor(h *streamHandle) (*actor.PID, <-chan struct{}) {
	h.mu.Lock()
	pid, dormant := h.countedReaderLocked()
	if !dormant {
		h.mu.Unlock()
		return pid, nil
	}
	if h.readerReady == nil { // closed by the next reader's registration (setReader)
		h.readerReady = make(chan struct{})
	}
	ready := h.readerReady
	h.mu.Unlock()
	n.wake(h, 0)
	return nil, ready
}

// countedReader is readerFor without the wake: the reader, counted, or dormant true.
func (h *streamHandle) countedReader() (*actor.PID, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.countedReaderLocked()
}

func (h *streamHandle) countedReaderLocked() (*actor.PID, bool) {
	if h.dorm != nil {
		return nil, true
	}
	if h.reader != nil {
		h.sent++
	}
	return h.reader, false
}

// readerAwake is readerFor for a command that needs the reader: it waits (at most wakeWait)
// for a woken stream's new reader.
func (n *Node) readerAwake(h *streamHandle) (*actor.PID, error) {
	pid, ready := n.readerFor(h)
	if pid != nil || ready == nil {
		return pid, nil
	}
	t := time.NewTimer(wakeWait)
	defer t.Stop()
	select {
	case <-ready:
	case <-t.C:
		return nil, fmt.Errorf("stream %s: %w (%v): %w", h.spec.ID, errDormantWake, wakeWait, ErrStreamStarting)
	case <-n.ctx.Done():
		return nil, ErrNodeStopped
	}
	pid, _ = n.readerFor(h)
	return pid, nil
}

// dormantStatus is the status of a dormant stream (ok false if it is not): its local log
// read now, its core as it was when it went dormant.
func (h *streamHandle) dormantStatus(now time.Time) (StreamStatus, bool) {
	h.mu.Lock()
	d := h.dorm
	h.mu.Unlock()
	if d == nil { // woken meanwhile: its new reader is starting
		return StreamStatus{Stream: h.spec.ID, Phase: "starting"}, false
	}
	st, segs := h.localStatus()
	st.Core = d.core.Status()
	st.Phase, st.Dormant = st.Core.Phase, true
	st.LagBytes, st.LagSeconds = lag(segs, st.Core.PersistedNext, st.LocalCommitted, now)
	return st, true
}

// stopDormant ends a dormant stream for good (RemoveStream, Stop): true if it was dormant
// and not stopping, so that no actor is left to stop and the caller finishes it; a stream
// whose supervisor is still stopping finishes when it stopped (dormancyStopped).
func (h *streamHandle) stopDormant(n *Node) (finished, dormant bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := h.dorm
	if d == nil {
		return false, false
	}
	if d.stopping {
		return false, true
	}
	n.leaveDormancyLocked(h)
	return true, true
}

// maybeDormant is the reader's dormancy check: with its drain still passive and nothing held
// (its core, its tasks and timers, its waiters, replicas, a followed log), it leaves the
// stream dormant and has its supervisor stop; otherwise it looks again later.
func (r *reader) maybeDormant(c actor.Context, m dormantCheck) {
	if r.drain != nil || m.Gen != r.drainGen || r.dormant {
		return // data came since (a fresh drain runs, or ran): not idle
	}
	if why := r.dormancyBlocker(); why != "" {
		r.log.Debug().Str("held_by", why).Msg("the stream stays awake")
		r.timers.After(c.ActorSystem().Root, c.Self(), r.n.cfg.DormantAfter, m)
		return
	}
	if due, _ := r.core.RetentionDue(); !r.h.beginDormancy(r.n, r.received, r.core.Status(), due, r.drainListenAt) {
		r.timers.After(c.ActorSystem().Root, c.Self(), r.n.cfg.DormantAfter, m) // a message on its way: later
		return
	}
	r.dormant = true
	r.counted = false // a dormant stream stays in StreamsRunning: its handle counts it out
	r.wakeLive.Store(false)
	r.h.spec.Log.Forget(r.selfListen)
	r.log.Debug().Uint64("listen_at", r.drainListenAt).Msg("stream dormant: its actors stop until data, a request or a command wakes it")
	c.Send(c.Parent(), goDormant{})
}

// dormancyBlocker says what keeps the stream awake ("" if nothing does).
func (r *reader) dormancyBlocker() string {
	switch {
	case !r.running:
		return "not running"
	case r.localErr != nil:
		return "the local log cannot be read"
	case r.h.spec.Log.ReadOnly():
		return "a followed log (its refresh polls)"
	case r.broadcaster != nil:
		return "replication"
	case r.n.claim.lostReason() != "":
		return "the claim changed"
	case len(r.waiters) > 0 || len(r.persistTimers) > 0 || r.shell.tasks.Live() > 0:
		return "work in flight"
	case r.timers.Count() > 1: // the retention tick is always armed
		return "timers armed"
	}
	return r.core.Dormant()
}
