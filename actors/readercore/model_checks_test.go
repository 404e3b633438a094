package readercore

import (
	"slices"

	"github.com/streamtier/streamtier/actors/divergence"
	"pgregory.net/rapid"

	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/manifest"
)

// The model's invariant checks (spec/invariants.md, where they concern the core): some on
// each effect, the rest after every step (checkInvariants), and liveness and determinism at
// the end of a run.

// checkFragment: every effect well-formed, and only drained, committed chunks are uploaded
// (invariant 4), byte for byte where the log holds them.
func (w *world) checkFragment(d *fragment.Description, size int64) {
	if err := fragment.CheckDescription(*d); err != nil {
		w.t.Fatalf("submitted fragment: %v", err)
	}
	if size != d.ObjectSize() {
		w.t.Fatalf("transfer size %d, object size %d", size, d.ObjectSize())
	}
	if d.NextOffset > w.logNext {
		w.t.Fatalf("fragment [%d,%d) beyond the committed log end %d", d.FirstOffset, d.NextOffset, w.logNext)
	}
	for _, c := range d.Chunks {
		m, ok := w.chunks[c.Header.ChunkID]
		if ok && (m.size != c.Location.Size || m.seg != c.Location.Segment || m.pos != c.Location.Position || w.header(m) != c.Header) {
			w.t.Fatalf("chunk %d in the fragment is not the log's", c.Header.ChunkID)
		}
	}
}

// checkStartPersist: one persist at a time and never during a head change (invariant 12),
// the root is the fold of the captured edits over the last persisted manifest (or, for a
// truncation, over the truncated base the model computed itself), retention only truncates
// the head (invariant 8), and the epoch is the writer's.
func (w *world) checkStartPersist(e StartPersist) {
	t := w.t
	if w.persistsInFlight != 0 {
		t.Fatalf("a second persist started while one is in flight")
	}
	if w.c.rebalance != nil || w.c.retention != nil {
		t.Fatalf("persist started during a rebalance or retention")
	}
	if w.c.diverged != nil {
		t.Fatalf("persist started while stalled for an operator")
	}
	if e.Epoch != w.logEpoch {
		t.Fatalf("persist at epoch %d, the writer's is %d", e.Epoch, w.logEpoch)
	}
	base, ok := w.history[e.ExpectedRevision]
	if e.Reset {
		if w.truncation == nil {
			t.Fatalf("a truncation persisted that the core never announced")
		}
		base, ok = w.truncation.base, true
	} else if w.truncation != nil {
		t.Fatalf("a persist that does not carry the pending truncation")
	}
	if !ok {
		t.Fatalf("persist expects revision %d, never persisted", e.ExpectedRevision)
	}
	folded, err := base.ApplyAll(e.Edits)
	if err != nil {
		t.Fatalf("captured edits do not fold over %s: %v", FormatManifest(base), err)
	}
	if !folded.Equal(e.Root) {
		t.Fatalf("persisted root %s is not the fold %s", FormatManifest(e.Root), FormatManifest(folded))
	}
	for _, ed := range e.Edits {
		if !ed.SetNextOffset && len(ed.Insert) == 0 && ed.At != 0 {
			t.Fatalf("retention edit not at the head: %s", FormatEdit(ed))
		}
		if ed.SetNextOffset && ed.Remove > 1 {
			t.Fatalf("an edit moving next offset removes %d entries: %s", ed.Remove, FormatEdit(ed))
		}
	}
	if err := e.Root.Check(); err != nil {
		t.Fatalf("persist of an invalid root: %v", err)
	}
	w.checkDurable(e.Root, "root to persist")
}

// checkDurable: invariants 1, 2 and 10 on a manifest: the tree is consistent (CheckTree:
// the live leaves tile [first, next) with no hole, sizes and header agree), every live
// fragment is an object in S3, not deleted, covering exactly its range, and every gap is
// one a core declared, never next to another gap (not even across a group boundary).
func (w *world) checkDurable(m manifest.Manifest, what string) {
	if err := manifest.CheckTree(m, w.fetcher()); err != nil {
		w.t.Fatalf("%s %s: %v", what, FormatManifest(m), err)
	}
	prevGap := false
	for _, f := range w.leaves(m, what) {
		if f.Gap {
			if prevGap {
				// not even across a group boundary: a truncation ending at a group whose
				// last leaf is a gap opens it (TruncateTail), so a gap declared from there
				// extends that gap
				w.t.Fatalf("%s %s: two adjacent gaps, the second at %d", what, FormatManifest(m), f.Entry.FirstOffset)
			}
			if !w.wasDeclared(max(f.Entry.FirstOffset, m.FirstOffset), f.End) {
				w.t.Fatalf("%s %s: the gap [%d,%d) was never declared", what, FormatManifest(m), f.Entry.FirstOffset, f.End)
			}
			prevGap = true
			continue
		}
		prevGap = false
		o := w.objs[f.Entry.UID]
		if o == nil || o.deleted || o.kind != manifest.KindFragment || o.first != f.Entry.FirstOffset || o.next != f.End || o.size != f.Entry.Size {
			w.t.Fatalf("%s: live fragment %s [%d,%d) is not durable in S3 (%+v)", what, FormatEntry(f.Entry), f.Entry.FirstOffset, f.End, o)
		}
	}
}

// liveUIDs lists every object m still needs.
func (w *world) liveUIDs(m manifest.Manifest) map[uint64]bool {
	live := map[uint64]bool{}
	var walk func(es []manifest.Entry, end uint64)
	walk = func(es []manifest.Entry, end uint64) {
		for i, e := range es {
			eEnd := end
			if i+1 < len(es) {
				eEnd = es[i+1].FirstOffset
			}
			if eEnd <= m.FirstOffset || e.IsGap() {
				continue
			}
			live[e.UID] = true
			if e.Kind != manifest.KindFragment {
				if o := w.objs[e.UID]; o != nil {
					walk(o.children, eEnd)
				}
			}
		}
	}
	walk(m.Entries, m.NextOffset)
	return live
}

// deleteObjects: invariants 2 and 9. Nothing the persisted manifest needs goes; nothing a
// persisted manifest ever referenced goes unless remote retention removed it (it lies
// wholly below the persisted first offset) or a truncation just persisted removed it (it
// holds chunks at or above the cut, which the model proved the local log does not hold, or
// an operator chose to cut there). The core never deletes an object no persisted manifest
// referenced (orphans are garbage collection's).
func (w *world) deleteObjects(e DeleteObjects) {
	t := w.t
	live := w.liveUIDs(w.stored)
	tr := w.persisting
	var objs []manifest.Entry
	for _, en := range e.Entries {
		list, err := manifest.CollectForDelete(en, e.From, w.anyFetcher())
		if err != nil {
			t.Fatalf("delete %s: %v", FormatEntry(en), err)
		}
		objs = append(objs, list...)
	}
	objs = append(objs, e.Alone...)
	alone := map[uint64]bool{}
	for _, x := range e.Alone {
		alone[x.UID] = true
	}
	for _, x := range objs {
		o := w.objs[x.UID]
		if o == nil {
			t.Fatalf("delete of %s, which was never written", FormatEntry(x))
		}
		end := o.next
		if o.kind != manifest.KindFragment {
			end = w.groupEnd(o)
		}
		switch {
		case o.deleted:
			// gone already (a group deleted whole lists what retention took before it):
			// deleting a key that is gone is harmless
			modelStats["deleted-again"]++
		case live[x.UID]:
			t.Fatalf("delete of %s, which the persisted manifest %s still needs", FormatEntry(x), FormatManifest(w.stored))
		case !w.everRef[x.UID]:
			t.Fatalf("delete of %s, which no persisted manifest ever referenced", FormatEntry(x))
		case tr != nil && alone[x.UID] && end <= tr.at:
			// a group the truncation opened at its tail (its last leaf a gap): its own
			// object only, its children stay referenced (checked durable above)
			modelStats["deleted-opened-at-a-cut"]++
		case tr != nil && end > tr.at && tr.operator:
			modelStats["deleted-above-an-operator-cut"]++
		case tr != nil && end > tr.at:
			modelStats["deleted-above-a-divergence"]++
		case tr == nil && end <= w.stored.FirstOffset:
			modelStats["deleted-by-retention"]++
		default:
			t.Fatalf("delete of %s [%d,%d): neither retained away (persisted first %d) nor above a truncation (%+v)", FormatEntry(x), o.first, end, w.stored.FirstOffset, tr)
		}
		o.deleted = true
	}
	for _, r := range e.Roots {
		if r == w.storedRoot {
			t.Fatalf("delete of the current root %v", r)
		}
		delete(w.roots, r)
	}
}

// groupEnd is the end of a group object's range, as the model recorded it at upload.
func (w *world) groupEnd(o *mObject) uint64 { return o.next }

// truncationPersisted is called when etcd accepted a truncation, before the core hears of
// it: offsets at or above the truncated base's next offset are no longer promised (nothing
// is above next), until acknowledged again.
func (w *world) truncationPersisted() {
	tr := w.truncation
	for o := range w.acked {
		if o >= tr.base.NextOffset {
			delete(w.acked, o)
		}
	}
	w.truncation = nil
	modelStats["truncations-persisted"]++
}

// tieringRetention deletes local segments wholly below the persisted next offset, never
// the active one: what the tiering's local retention rule allows after every persist. It
// does not always use all of it (the stream's own policy decides when), so that the local
// log often still overlaps the remote tier at a restart and the comparison has work.
func (w *world) tieringRetention(next uint64) {
	if w.faults && rapid.IntRange(0, 2).Draw(w.t, "tiering-retention") != 0 {
		return
	}
	for {
		live := w.liveSegments()
		if len(live) < 2 || live[1].first > next {
			return
		}
		w.deleteOldestSegment()
	}
}

// checkInvariants runs after every step.
func (w *world) checkInvariants() {
	t := w.t
	c := w.c
	if w.stopped {
		return
	}
	// the etcd side: durable, tiled (invariants 1, 2)
	w.checkDurable(w.stored, "etcd manifest")
	// every offset acknowledged is still readable, the same chunk, unless retention
	// removed it or a truncation took it back above the persisted next offset
	for o, a := range w.acked {
		if o < w.stored.FirstOffset {
			delete(w.acked, o)
			continue
		}
		got, ok := w.remoteChunk(w.stored, o)
		if !ok || got != a.chunk {
			t.Fatalf("offset %d was acknowledged in chunk %+v; the persisted manifest %s now gives %+v (%t)", o, a.chunk, FormatManifest(w.stored), got, ok)
		}
	}
	w.checkFlow()
	w.checkIdleCut()
	w.checkDormant()
	if c.phase != phaseRunning {
		return
	}
	// the core's manifests are valid and their objects durable (nothing deleted early)
	if err := c.mem.Check(); err != nil {
		t.Fatalf("in-memory manifest: %v", err)
	}
	w.checkDurable(c.mem, "in-memory manifest")
	if !c.persisted.Equal(w.history[c.revision]) {
		t.Fatalf("core's persisted manifest at rev %d is not what etcd accepted", c.revision)
	}
	if c.diverged != nil {
		if c.reset != nil || c.inflight != nil || len(c.transfers) != 0 || !c.mem.Equal(c.persisted) {
			t.Fatalf("stalled for an operator with work in progress: %s", c.Status())
		}
		return
	}
	// no fragment ever dropped (invariant 6): the pipeline is contiguous from the in-memory
	// next offset through the transfers and the assembly to the drain position
	at := c.mem.NextOffset
	for _, tr := range c.transfers {
		if tr.desc.FirstOffset != at {
			t.Fatalf("transfer [%d,%d) does not follow %d: a fragment was dropped", tr.desc.FirstOffset, tr.desc.NextOffset, at)
		}
		at = tr.desc.NextOffset
	}
	if !c.asm.Empty() {
		if c.asm.FirstOffset() != at {
			t.Fatalf("assembly starts at %d, expected %d", c.asm.FirstOffset(), at)
		}
		at = c.asm.NextOffset()
	}
	if at != c.drainNext {
		t.Fatalf("pipeline ends at %d, drain position %d", at, c.drainNext)
	}
	// invariant 15 the other way round: nobody waits for an offset already persisted
	if c.reset == nil {
		for _, wt := range c.waiters {
			// (but one whose leaf is being looked up: a gap may be sealed in a group)
			_, asked := slices.BinarySearch(c.lookupOffs, wt.offset)
			if wt.offset < c.persisted.NextOffset && (c.lookup == 0 || !c.lookupNeeded(wt.offset) && !asked) {
				t.Fatalf("waiter %d for %d still waits, persisted next is %d", wt.id, wt.offset, c.persisted.NextOffset)
			}
		}
	}
	// invariant 12
	if btoi(c.inflight != nil)+btoi(c.rebalance != nil)+btoi(c.retention != nil) > 1 {
		t.Fatalf("more than one of persist, rebalance and retention in flight")
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// quiesce stops the faults and runs the world until nothing is left to do: liveness. An
// operator answers a stall for lack of a common chunk. Then everything committed must be
// persisted, and every waiter below the end answered.
func (w *world) quiesce() {
	t := w.t
	w.faults = false
	clear(w.misread)
	for i := 0; i < 20000; i++ {
		if w.stopped {
			return
		}
		switch {
		case len(w.tasks) > 0:
			w.runTask(0, t)
		case w.c.phase == phaseRunning && w.c.diverged != nil && w.c.diverged.Kind == divergence.Behind:
			// a log that is a prefix of the remote tier waits; the broker writes on in a new
			// epoch (a fork), and the shell compares again
			w.logEpoch++
			w.commit()
			w.recheckBehind()
		case w.c.phase == phaseRunning && w.c.diverged != nil:
			w.step(OperatorTruncate{})
		case w.batch != nil:
			w.deliverBatch()
		case w.canRead():
			w.readBatch(t)
			w.deliverBatch()
		case w.c.phase == phaseRunning && !w.c.asm.Empty() && w.cfg.FragmentMaxAge > 0:
			// the stream stopped writing: its tail is cut by the idle cut, no force needed
			w.fireCutTimer()
		case w.c.phase == phaseRunning && !w.c.asm.Empty():
			w.step(ForceCut{})
		case w.firePersistOrRetryTimer():
		case len(w.timers) > 0:
			w.fireTimer(0)
		default:
			w.checkInvariants()
			w.checkDone()
			return
		}
		w.checkInvariants()
	}
	t.Fatalf("no quiescence: tasks=%d timers=%d drain=%d status:\n%s", len(w.tasks), len(w.timers), w.drain, w.c.Status())
}

// firePersistOrRetryTimer fires a persist or retry timer first: deadlines only matter for
// lost results, and none are lost now.
func (w *world) firePersistOrRetryTimer() bool {
	for i, tm := range w.timers {
		switch tm.ev.(type) {
		case PersistTimer, RetryTimer:
			w.fireTimer(i)
			return true
		}
	}
	return false
}

// checkDeterministic replays every event the current core saw into a fresh core: the core
// is a pure function of its events, so the effects must be the same, one for one.
func (w *world) checkDeterministic() {
	c, err := New(w.coreCfg)
	if err != nil {
		w.t.Fatal(err)
	}
	var outs []string
	for _, f := range w.fed {
		effs, err := c.Step(f.ev)
		if (err != nil) != f.refused {
			w.t.Fatalf("replay of %T%+v: %v (refused in the run: %t)", f.ev, f.ev, err, f.refused)
		}
		for _, e := range effs {
			outs = append(outs, e.String())
		}
	}
	if len(outs) != len(w.outs) {
		w.t.Fatalf("replay gave %d effects, the run %d", len(outs), len(w.outs))
	}
	for i := range outs {
		if outs[i] != w.outs[i] {
			w.t.Fatalf("replay effect %d: %s, the run had %s", i, outs[i], w.outs[i])
		}
	}
}

func (w *world) checkDone() {
	t := w.t
	c := w.c
	if c.phase != phaseRunning || c.diverged != nil {
		t.Fatalf("quiescent but %s (diverged: %t)", c.phase, c.diverged != nil)
	}
	if w.stored.NextOffset != w.logNext {
		t.Fatalf("liveness: persisted next %d, committed end %d\nstatus:\n%s", w.stored.NextOffset, w.logNext, c.Status())
	}
	if len(c.transfers) != 0 || len(c.pending) != 0 || c.reset != nil || c.inflight != nil {
		t.Fatalf("liveness: work left: %s", c.Status())
	}
	// the drain waits at the end for the log to grow: not paused, not stalled, nothing held
	if st := c.Status(); st.Paused || st.DrainStalled || st.HeldBytes != 0 || w.armedRetry != 0 || w.drain != drainListening || w.listenAt != w.logNext {
		t.Fatalf("liveness: the drain is not listening at the end %d (state %d at %d), retry timer %d:\n%s", w.logNext, w.drain, w.listenAt, w.armedRetry, st)
	}
	for id, o := range w.waiters {
		if o < w.logNext {
			t.Fatalf("liveness: waiter %d for %d never answered", id, o)
		}
	}
	// nothing fails through: replicas that asked got a sync and agree with etcd
	for name, r := range w.replicas {
		if r.has && r.root == (rootKey{w.storedRoot.Seq, w.storedRoot.UID}) && !r.m.Equal(w.stored) {
			t.Fatalf("replica %s at root %+v disagrees with etcd", name, r.root)
		}
	}
}

// recheckBehind is the shell's answer to a log that was a prefix of the remote tier: once
// the log's bounds changed, the stream is resolved and compared again (a new core).
func (w *world) recheckBehind() {
	if w.stopped || w.c.phase != phaseRunning || w.c.diverged == nil || w.c.diverged.Kind != divergence.Behind {
		return
	}
	if w.behindAt == [2]uint64{w.logFirst, w.logNext} {
		return
	}
	modelStats["behind-recompared"]++
	w.refBase = uint64(w.c.ref) + 1000
	w.restarts++
	w.waiters = map[WaiterID]uint64{}
	w.startCore()
}

// checkDormant: a core that says its stream may go dormant holds nothing but its persisted
// state. Its in-memory manifest is the persisted one, and nothing is assembled, in flight,
// unpersisted or waited for: stopping its actors then loses nothing. Its status fits the
// compact snapshot a dormant stream keeps.
func (w *world) checkDormant() {
	c := w.c
	if c.Dormant() != "" {
		return
	}
	st := c.Status()
	if st.AssemblyChunks != 0 || st.InFlight != 0 || st.WaitingRetry != 0 || st.Buffered != 0 || st.UnpersistedEdits != 0 ||
		st.UnpersistedBytes != 0 || st.PersistState != "idle" || st.Waiters != 0 || st.ResetPending || st.Paused ||
		!c.mem.Equal(c.persisted) {
		w.t.Fatalf("the core may go dormant with work held: %s", st.String())
	}
	if sn := Snap(st); sn.whole != nil || sn.Status() != st {
		w.t.Fatalf("a dormant core's status does not fit a compact snapshot (whole %t): %s", sn.whole != nil, st.String())
	}
}
