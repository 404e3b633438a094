package readercore

import (
	"time"

	"pgregory.net/rapid"
)

// The model's side of the flow between the drain and the core, played the way the shell
// plays it (actors/drain.go, actors/readerflow.go): the drain reads a batch from the local
// log up to the core's room (DrainRoom), the reader feeds it later (other events may come
// first; a batch read before the drain was reopened is dropped, as the shell drops an old
// generation's), up to the first chunk the core refuses, then reports where the drain's
// reader stands; the drain reads on only when the core says so (ContinueDrain, a listener
// that fires once the log grows, StartDrain, ResumeDrain). The data reader sometimes
// misreads a chunk (a corrupt header), so that repositions and stalls happen. Transfer
// retries share the stream's one retry timer; the model reckons each transfer's backoff
// itself from its own failures and checks that none is retried before it.

// drainState is what the model's drain does next.
type drainState uint8

const (
	drainClosed    drainState = iota // no data reader open: before the start, diverged, reinitializing, stopped
	drainReady                       // opened, resumed or acknowledged: it reads its next batch
	drainWaiting                     // a batch went to the reader: it waits for the core's word (none comes while paused or stalled)
	drainListening                   // at the end, the listener registered: it reads again once the log grows past listenAt
)

// mBatch is a batch the drain read that the reader has not fed to the core yet.
type mBatch struct {
	gen        uint64
	chunks     []ChunkDrained
	misread    []bool // the chunk's header was misread: the core must refuse it (or defer it, paused)
	next       uint64 // where the data reader stands after the batch
	end        bool   // it reached the end of committed data
	gone       bool   // the segment at the drain position is gone
	localFirst uint64
}

// mXfer is what the model knows of one transfer of the current core: its latest attempt,
// its failures the core counted, and whether and until when it waits for a retry, by the
// model's own reckoning of the backoff.
type mXfer struct {
	attempt      int
	first        uint64
	transient    int
	nonTransient int
	waiting      bool
	due          time.Duration
}

// openDrain (re)opens the data reader at from: a batch still in flight belongs to the old
// reader and is dropped.
func (w *world) openDrain(from uint64) {
	if w.batch != nil {
		modelStats["stale-batches"]++
		w.batch = nil
	}
	w.drainGen++
	w.drain, w.drainPos, w.budget = drainReady, from, w.c.DrainRoom()
}

func (w *world) closeDrain() {
	w.drain, w.batch = drainClosed, nil
}

// canRead says whether the drain reads now: opened, acknowledged, or its listener fired.
func (w *world) canRead() bool {
	switch w.drain {
	case drainReady:
		return true
	case drainListening:
		return w.logNext > w.listenAt
	}
	return false
}

// actDrain feeds the batch the drain read, or lets the drain read its next one (fed at once
// or left for later).
func (w *world) actDrain(t *rapid.T) {
	if w.stopped {
		return
	}
	if w.batch != nil {
		w.deliverBatch()
		return
	}
	if !w.canRead() {
		return
	}
	w.readBatch(t)
	if rapid.IntRange(0, 2).Draw(t, "fed-at-once") != 0 {
		w.deliverBatch()
	}
}

// actMisread makes the data reader misread a chunk at or after the drain position for the
// next one to three reads of it.
func (w *world) actMisread(t *rapid.T) {
	var ids []uint64
	for _, id := range w.chunkIDs() {
		if id >= w.drainPos {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 || !w.faults {
		return
	}
	id := ids[rapid.IntRange(0, min(len(ids)-1, 3)).Draw(t, "misread-chunk")]
	w.misread[id] = rapid.IntRange(1, 3).Draw(t, "misreads")
}

// readBatch reads the drain's next batch as actors/drain.go does: at least one chunk, then
// on while the core's room lasts, a handful at most; or up to the end of committed data; or
// the segment at the position is gone.
func (w *world) readBatch(t *rapid.T) {
	if w.c.paused {
		t.Fatalf("the drain reads at %d while the core is paused", w.drainPos)
	}
	if w.c.drainRetry != 0 {
		t.Fatalf("the drain reads at %d while its retry is armed", w.drainPos)
	}
	b := &mBatch{gen: w.drainGen}
	if w.drainPos < w.logFirst {
		b.gone, b.localFirst = true, w.logFirst
	}
	// now and then the drain reads past the room it was given (an older word of the core):
	// what it reads beyond a pause is deferred and read again
	ahead := w.faults && rapid.IntRange(0, 3).Draw(t, "read-ahead") == 0
	for n := rapid.IntRange(1, 6).Draw(t, "batch"); !b.gone && len(b.chunks) < n && (w.budget > 0 || ahead || len(b.chunks) == 0); {
		c, ok := w.chunks[w.drainPos]
		if !ok {
			if w.drainPos >= w.logNext {
				b.end = true
				break
			}
			t.Fatalf("drain position %d is not a chunk of the log [%d,%d)", w.drainPos, w.logFirst, w.logNext)
		}
		h := w.header(c)
		bad := w.misread[c.id] > 0
		if bad {
			w.misread[c.id]--
			switch rapid.IntRange(0, 2).Draw(t, "misread") {
			case 0:
				h.ChunkID += 7 // ids that jump
			case 1:
				h.Records = 0
			default:
				h.DataLen++ // the header's size disagrees with the chunk's place on disk
			}
		}
		b.chunks = append(b.chunks, ChunkDrained{Header: h, Location: w.location(c)})
		b.misread = append(b.misread, bad)
		w.budget -= min(w.budget, uint64(c.size))
		w.drainPos = c.next()
	}
	b.next = w.drainPos
	w.drain, w.batch = drainWaiting, b
}

// deliverBatch is the reader feeding a batch (actors/readerflow.go, onChunks): its chunks
// up to the first refused, then the drain's position, or the segment gone.
func (w *world) deliverBatch() {
	b := w.batch
	w.batch = nil
	if b.gen != w.drainGen || w.stopped {
		modelStats["stale-batches"]++
		return
	}
	refused := ""
	for i, ch := range b.chunks {
		w.maxChunk = max(w.maxChunk, uint64(ch.Location.Size))
		before, held := w.c.drainNext, w.c.held()
		err := w.feed(ch)
		taken := w.c.drainNext != before
		switch {
		case taken && held >= w.c.cfg.MaxUnpersistedBytes:
			w.t.Fatalf("chunk %d taken with %d bytes held, at the bound %d", ch.Header.ChunkID, held, w.c.cfg.MaxUnpersistedBytes)
		case err != nil && !b.misread[i]:
			w.t.Fatalf("chunk %d at the drain position refused: %v", ch.Header.ChunkID, err)
		case taken && b.misread[i]:
			w.t.Fatalf("a misread header of chunk %d was taken", ch.Header.ChunkID)
		case err == nil && !taken && !w.c.paused:
			w.t.Fatalf("chunk %d neither taken, nor refused, nor deferred by a pause", ch.Header.ChunkID)
		case err == nil && !taken:
			modelStats["deferred-chunks"]++
		}
		if err != nil {
			modelStats["chunks-refused"]++
			refused = err.Error()
			break
		}
	}
	switch {
	case b.gone:
		w.step(DrainSegmentGone{LocalFirst: b.localFirst})
	case b.end:
		w.step(EndOfStream{Next: b.next, Refused: refused})
	default:
		w.step(BatchDrained{Next: b.next, Refused: refused})
	}
}

// executeFlow carries out the flow effects as the shell does, checking each; false for an
// effect that is not one of them.
func (w *world) executeFlow(ev Event, e Effect) bool {
	t := w.t
	switch e := e.(type) {
	case StartDrain:
		switch ev.(type) {
		case BatchDrained, EndOfStream:
			// a reposition: once per disagreement at a position, then it stalls (no loop)
			if w.repositioned && w.repositionAt == e.From {
				t.Fatalf("%s: repositioned at %d again, without a stall", e, e.From)
			}
			if e.Reason == "" || e.From != w.c.drainNext {
				t.Fatalf("%s on %T: no reason, or not the core's position %d", e, ev, w.c.drainNext)
			}
			w.repositioned, w.repositionAt = true, e.From
			modelStats["drain-repositioned"]++
		default:
			if e.Reason == "" {
				w.drainMoved() // a start, a gap or a truncation: a disagreement before it is over
			}
		}
		w.paused = false // a gap or a truncation ends a pause (taken again at the bound)
		w.openDrain(e.From)
	case ResumeDrain:
		modelStats["resumes"]++
		if !w.paused || e.From != w.c.drainNext || e.Bound != w.c.cfg.MaxUnpersistedBytes || e.Held >= e.Bound {
			t.Fatalf("%s: paused %t, drain position %d, bound %d", e, w.paused, w.c.drainNext, w.c.cfg.MaxUnpersistedBytes)
		}
		w.paused = false
		w.openDrain(e.From)
	case ContinueDrain:
		if w.drain != drainWaiting {
			t.Fatalf("%s on %T: the drain does not wait for a word (state %d)", e, ev, w.drain)
		}
		w.drain, w.budget = drainReady, w.c.DrainRoom()
	case RegisterOffsetListener:
		if e.Offset != w.drainPos || w.drain != drainWaiting {
			t.Fatalf("listener at %d, drain position %d (state %d)", e.Offset, w.drainPos, w.drain)
		}
		w.drain, w.listenAt, w.budget = drainListening, e.Offset, w.c.DrainRoom()
	case PauseDrain:
		modelStats["pauses"]++
		if w.paused || e.Bound != w.c.cfg.MaxUnpersistedBytes || e.Held < e.Bound {
			t.Fatalf("%s: paused already %t, bound %d", e, w.paused, w.c.cfg.MaxUnpersistedBytes)
		}
		w.paused = true
	case DrainStalled:
		modelStats["drain-stalls"]++
		if !w.repositioned || w.repositionAt != e.Offset || e.Failures != w.drainStalls+1 {
			t.Fatalf("%s: not after a reposition at %d (repositioned %t at %d, %d stalls before)", e, e.Offset, w.repositioned, w.repositionAt, w.drainStalls)
		}
		w.drainStalls = e.Failures
	case DrainUnstalled:
		modelStats["drain-unstalls"]++
	case RetryDrainAfter:
		if e.Delay != modelUploadDelay(w.drainStalls) {
			t.Fatalf("%s after %d stalls: the delay is %s", e, w.drainStalls, modelUploadDelay(w.drainStalls))
		}
		w.timers = append(w.timers, mTimer{ev: RetryTimer{Ref: e.Ref}, core: w.c, timed: true, due: w.mono + e.Delay})
	case ArmRetryTimer:
		modelStats["retry-timers-armed"]++
		if w.armedRetry != 0 {
			t.Fatalf("%s while retry timer %d is armed: two retry timers", e, w.armedRetry)
		}
		if e.After < 0 || e.After > DefaultUploadRetryMaxDelay {
			t.Fatalf("%s: delay out of range", e)
		}
		w.armedRetry, w.retryDue = e.Ref, w.mono+e.After
		w.timers = append(w.timers, mTimer{ev: RetryTimer{Ref: e.Ref}, core: w.c, timed: true, due: w.retryDue, retry: true})
	case CancelRetryTimer:
		if e.Ref != w.armedRetry {
			t.Fatalf("%s: the armed retry timer is %d", e, w.armedRetry)
		}
		w.armedRetry = 0
		for i, tm := range w.timers {
			if tm.retry && !tm.stale && tm.core == w.c && tm.ev.(RetryTimer).Ref == e.Ref {
				if w.faults && rapid.IntRange(0, 3).Draw(t, "cancel-races") == 0 {
					w.timers[i].stale = true // it fired before the cancel took: delivered anyway
				} else {
					w.timers = append(w.timers[:i], w.timers[i+1:]...)
				}
				break
			}
		}
	case SubmitTransfer:
		w.xfers[e.Ref] = &mXfer{attempt: e.Attempt, first: e.Fragment.FirstOffset}
		return false // the transfer itself is executed with the other effects
	case ResubmitTransfer:
		w.checkResubmit(ev, e)
		return false
	default:
		return false
	}
	return true
}

// noteResult counts a transfer result's failure as the core does (only the attempt in
// flight's, which the core does not ignore) and reckons when its retry is due.
func (w *world) noteResult(r TransferResult, counted bool) {
	x := w.xfers[r.Ref]
	if x == nil || !counted {
		return
	}
	switch r.Outcome {
	case OK:
		delete(w.xfers, r.Ref)
	case Retriable:
		x.transient++
		if x.transient > 1 {
			x.waiting, x.due = true, r.At+modelTransientDelay(x.transient, r.Jitter)
		}
	case NonTransient:
		x.nonTransient++
		x.waiting, x.due = true, r.At+modelUploadDelay(x.nonTransient)
	case SegmentGone:
		if r.LocalFirst <= x.first { // a contradictory report: retried like a 4xx
			x.nonTransient++
			x.waiting, x.due = true, r.At+modelUploadDelay(x.nonTransient)
		}
	}
}

// checkResubmit: a transfer is resubmitted at once only after its first retriable failure
// or at its deadline, otherwise only when the stream's armed retry timer fires at or after
// its own due time; in cut order.
func (w *world) checkResubmit(ev Event, e ResubmitTransfer) {
	t := w.t
	x := w.xfers[e.Ref]
	if x == nil || e.Attempt != x.attempt+1 {
		t.Fatalf("%s on %T: the model knows %+v", e, ev, x)
	}
	switch ev := ev.(type) {
	case TransferResult:
		if ev.Ref != e.Ref || ev.Outcome != Retriable || x.transient != 1 || x.waiting {
			t.Fatalf("%s at once on %s: only the first retriable failure retries at once (%+v)", e, ev.Outcome, x)
		}
	case TransferDeadline:
		if ev.Ref != e.Ref || ev.Attempt != x.attempt || x.waiting {
			t.Fatalf("%s on a deadline for attempt %d (%+v)", e, ev.Attempt, x)
		}
	case RetryTimer:
		if w.firing == 0 || ev.Ref != w.firing {
			t.Fatalf("%s on retry timer %d, which is not the stream's armed one", e, ev.Ref)
		}
		if !x.waiting || x.due > ev.At {
			t.Fatalf("%s at %s: its backoff runs until %s (waiting %t)", e, ev.At, x.due, x.waiting)
		}
		modelStats["retried-by-timer"]++
	default:
		t.Fatalf("%s on %T", e, ev)
	}
	if n := len(w.resubmitted); n > 0 && w.resubmitted[n-1] >= x.first {
		t.Fatalf("%s: not in cut order after the fragment at %d", e, w.resubmitted[n-1])
	}
	w.resubmitted = append(w.resubmitted, x.first)
	x.attempt, x.waiting = e.Attempt, false
}

// afterFlowStep checks what a step owed: the first retriable failure resubmitted at once,
// and every transfer due by a firing of the retry timer resubmitted by it.
func (w *world) afterFlowStep(ev Event, counted bool) {
	switch ev := ev.(type) {
	case TransferResult:
		if x := w.xfers[ev.Ref]; x != nil && counted && ev.Outcome == Retriable && x.transient == 1 && x.attempt == ev.Attempt {
			w.t.Fatalf("ref %d not resubmitted at once after its first retriable failure", ev.Ref)
		}
	case RetryTimer:
		if w.firing == 0 || ev.Ref != w.firing {
			return
		}
		for ref, x := range w.xfers {
			if x.waiting && x.due <= ev.At {
				w.t.Fatalf("ref %d due at %s still waits after the retry timer fired at %s", ref, x.due, ev.At)
			}
		}
	}
}

// drainMoved forgets the drain's disagreement once the core's position moved (a chunk
// taken, a gap, a truncation, a new generation).
func (w *world) drainMoved() {
	w.repositioned, w.drainStalls = false, 0
}

// checkFlow runs after every step: the bytes held are what the stages hold and never more
// than the bound plus one chunk, the pause is what the effects said, the drain is never
// asked to read while paused or while its retry waits, at most one retry timer is armed,
// and it is armed, early enough, exactly while a transfer waits.
func (w *world) checkFlow() {
	t := w.t
	c := w.c
	st := c.Status()
	if sum := st.AssemblyBytes + st.InFlightBytes + st.UnpersistedBytes; st.HeldBytes != sum {
		t.Fatalf("held %d bytes, the assembly, transfers and unpersisted appends hold %d", st.HeldBytes, sum)
	}
	if st.HeldBytes > st.HeldBound+w.maxChunk {
		t.Fatalf("held %d bytes, above the bound %d plus one chunk (%d)\n%s", st.HeldBytes, st.HeldBound, w.maxChunk, st)
	}
	if st.HeldBytes > st.HeldBound {
		modelStats["steps-held-above-bound"]++
	}
	if st.Paused != w.paused {
		t.Fatalf("the core is paused: %t; its effects said %t", st.Paused, w.paused)
	}
	if w.drain == drainReady || w.drain == drainListening {
		if st.Paused {
			t.Fatalf("the drain may read (state %d) while the core is paused", w.drain)
		}
		if c.drainRetry != 0 {
			t.Fatalf("the drain may read (state %d) while its retry is armed", w.drain)
		}
	}
	// paused, the uploaded appends are persisted at once, unless persists back off
	if c.paused && len(c.pending) > 0 && c.inflight == nil && c.rebalance == nil && c.retention == nil && !c.persistBackoff {
		t.Fatalf("paused with %d unpersisted edits and no persist:\n%s", len(c.pending), st)
	}
	if st.RetryArmed != (w.armedRetry != 0) {
		t.Fatalf("retry timer armed: core %t, model %d", st.RetryArmed, w.armedRetry)
	}
	live := 0
	for _, tm := range w.timers {
		if tm.retry && !tm.stale && tm.core == c {
			live++
		}
	}
	if live != btoi(w.armedRetry != 0) {
		t.Fatalf("%d retry timers armed", live)
	}
	waiting := 0
	for ref, x := range w.xfers {
		if !x.waiting {
			continue
		}
		waiting++
		if w.armedRetry == 0 || w.retryDue > x.due {
			t.Fatalf("ref %d waits until %s, the retry timer is %d at %s", ref, x.due, w.armedRetry, w.retryDue)
		}
		if tr := c.findTransfer(ref); tr == nil || tr.state != transferWaiting {
			t.Fatalf("ref %d waits for a retry in the model, not in the core", ref)
		}
	}
	if st.WaitingRetry != waiting {
		t.Fatalf("%d transfers wait for a retry, the model counts %d", st.WaitingRetry, waiting)
	}
	if waiting == 0 && w.armedRetry != 0 {
		t.Fatalf("retry timer %d armed while no transfer waits: not cancelled", w.armedRetry)
	}
}

// modelTransientDelay is the wait after the n-th retriable failure (n >= 2): 10 ms doubling
// to 5 s, shortened by up to half by the jitter.
func modelTransientDelay(n int, jitter float64) time.Duration {
	d := DefaultTransientBackoffBase
	for i := 0; i < n-2 && d < DefaultTransientBackoffMax; i++ {
		d *= 2
	}
	d = min(d, DefaultTransientBackoffMax)
	return d - time.Duration(float64(d)*jitter/2)
}

// modelUploadDelay is the wait after the n-th non-transient failure: 1 s doubling to 30 s.
func modelUploadDelay(n int) time.Duration {
	d := DefaultUploadRetryDelay
	for i := 0; i < n-1 && d < DefaultUploadRetryMaxDelay; i++ {
		d *= 2
	}
	return min(d, DefaultUploadRetryMaxDelay)
}
