package readercore

import (
	"fmt"
	"strings"

	"github.com/streamtier/streamtier/actors/divergence"
	"github.com/streamtier/streamtier/manifest"
)

// step feeds one event the core must take and executes its effects as the shell would,
// checking each on the way.
func (w *world) step(ev Event) {
	if err := w.feed(ev); err != nil {
		w.t.Fatalf("step %T%+v: %v", ev, ev, err)
	}
}

// feed feeds one event and executes its effects; an event the core refuses changes nothing
// and is returned to the caller (a misread chunk).
func (w *world) feed(ev Event) error {
	if w.stopped {
		if _, ok := ev.(AwaitOffset); !ok {
			return nil
		}
	}
	memNext := w.c.mem.NextOffset
	ignored := w.c.stats.IgnoredResults
	w.beforeFeed(ev)
	effs, err := w.c.Step(ev)
	if err != nil {
		w.fed = append(w.fed, fedEvent{ev: ev, refused: true})
		w.t.Logf("> %T%+v refused: %v", ev, ev, err)
		return err
	}
	effs = append([]Effect(nil), effs...)
	w.fed = append(w.fed, fedEvent{ev: ev})
	for _, e := range effs {
		w.outs = append(w.outs, e.String())
	}
	w.t.Logf("> %T%+v", ev, ev)
	for _, e := range effs {
		w.t.Logf("    %s", e)
	}
	truncated := false
	for _, e := range effs {
		switch e.(type) {
		case TruncateRemote, Reinitialize:
			truncated = true
		}
	}
	counted := w.c.stats.IgnoredResults == ignored
	if r, ok := ev.(TransferResult); ok {
		w.noteResult(r, counted)
	}
	if r, ok := ev.(PersistResult); ok {
		w.notePersistResult(r, counted)
	}
	w.resubmitted = w.resubmitted[:0]
	for _, e := range effs {
		if !w.executeFlow(ev, e) && !w.executeIdleCut(ev, e) {
			w.execute(ev, e)
		}
	}
	w.afterFlowStep(ev, counted)
	if w.c.drainNext != w.lastDrainNext || w.c.phase != phaseRunning {
		w.drainMoved()
		w.lastDrainNext = w.c.drainNext
	}
	// invariant 3: the in-memory next offset never goes down, but by a truncation (or at a
	// start, which takes the persisted manifest again)
	if w.c.phase == phaseRunning && !truncated && w.c.mem.NextOffset < memNext {
		switch ev.(type) {
		case Resolved, LogOpened:
		default:
			w.t.Fatalf("in-memory next offset went down from %d to %d on %T without a truncation", memNext, w.c.mem.NextOffset, ev)
		}
	}
	return nil
}

// gated says whether ev is an event after which the persisted manifest may be published:
// a successful persist, or the start (the resolved manifest is persisted).
func gated(ev Event) bool {
	switch e := ev.(type) {
	case PersistResult:
		return e.Outcome == PersistOK
	case Resolved, LogOpened:
		return true
	}
	return false
}

func (w *world) execute(ev Event, e Effect) {
	t := w.t
	switch e := e.(type) {
	case DeclareGap:
		w.checkGap(e)
		w.xfers = map[Ref]*mXfer{} // every transfer not applied is dropped
	case TruncateRemote:
		w.checkTruncate(ev, e)
	case StalledBehind:
		modelStats["stalled-behind"]++
		if w.cmp.Kind != divergence.Behind || e.LocalFirst != w.logFirst || e.LocalNext != w.logNext {
			t.Fatalf("%s: the comparison said %s, local [%d,%d)", e, w.cmp.Kind, w.logFirst, w.logNext)
		}
		w.closeDrain()
		w.behindAt = [2]uint64{e.LocalFirst, e.LocalNext}
	case StalledDiverged:
		modelStats["stalled-diverged"]++
		if w.cmp.Kind != divergence.NoCommon || e.RemoteFirst != w.stored.FirstOffset || e.RemoteNext != w.stored.NextOffset || e.LocalFirst != w.logFirst || e.LocalNext != w.logNext {
			t.Fatalf("%s: the comparison said %s, remote [%d,%d), local [%d,%d)", e, w.cmp.Kind, w.stored.FirstOffset, w.stored.NextOffset, w.logFirst, w.logNext)
		}
		w.closeDrain()
	case SubmitTransfer:
		w.checkFragment(e.Fragment, e.Size)
		w.checkCut(ev, e)
		if e.Attempt != 1 {
			t.Fatalf("first submission with attempt %d", e.Attempt)
		}
		w.tasks = append(w.tasks, &mTask{kind: taskTransfer, ref: e.Ref, attempt: e.Attempt, desc: e.Fragment, core: w.c})
	case ResubmitTransfer:
		w.checkFragment(e.Fragment, e.Size)
		w.tasks = append(w.tasks, &mTask{kind: taskTransfer, ref: e.Ref, attempt: e.Attempt, desc: e.Fragment, core: w.c})
	case ArmTransferDeadline:
		if e.After != DefaultTransferDeadline {
			t.Fatalf("deadline %s", e.After)
		}
		w.timers = append(w.timers, mTimer{ev: TransferDeadline{Ref: e.Ref, Attempt: e.Attempt}, core: w.c})
	case RetryGroupUploadAfter:
		if e.Delay < DefaultTransientBackoffBase/2 || e.Delay > DefaultTransientBackoffMax {
			t.Fatalf("%s: delay out of range", e)
		}
		w.timers = append(w.timers, mTimer{ev: RetryTimer{Ref: e.Ref, Attempt: e.Attempt}, core: w.c, timed: true, due: w.mono + e.Delay})
	case Stalled, Unstalled:
	case RemoteRetention:
		modelStats["retention-edits"]++
		if e.Edit.SetNextOffset || e.Edit.At != 0 || len(e.Edit.Insert) != 0 {
			t.Fatalf("retention edit that is not a head truncation: %s", FormatEdit(e.Edit))
		}
	case StartPersist:
		w.checkStartPersist(e)
		w.checkPersistStart(ev)
		w.persistsInFlight++
		w.tasks = append(w.tasks, &mTask{kind: taskPersist, ref: e.Ref, persist: e, core: w.c})
	case ArmPersistTimer:
		if e.After != DefaultPersistInterval {
			t.Fatalf("persist timer %s", e.After)
		}
		w.timers = append(w.timers, mTimer{ev: PersistTimer{Ref: e.Ref}, core: w.c})
	case CancelPersistTimer:
		for i, tm := range w.timers {
			if pt, ok := tm.ev.(PersistTimer); ok && pt.Ref == e.Ref && tm.core == w.c {
				w.timers = append(w.timers[:i], w.timers[i+1:]...)
				break
			}
		}
	case UploadGroup:
		// invariant 12: one head change at a time
		if w.c.inflight != nil || w.c.retention != nil || w.c.reset != nil {
			t.Fatalf("group upload while a persist, a retention or a truncation is pending")
		}
		if len(e.Children) != w.cfg.RebalanceThreshold || e.Kind == manifest.KindFragment {
			t.Fatalf("group of %d %s entries", len(e.Children), e.Kind)
		}
		w.tasks = append(w.tasks, &mTask{kind: taskGroup, ref: e.Ref, attempt: e.Attempt, group: e, core: w.c})
	case FetchGroupForRetention:
		modelStats["retention-fetches"]++
		if w.c.inflight != nil || w.c.rebalance != nil {
			t.Fatalf("retention fetch while a persist or rebalance is in flight")
		}
		if e.Timeout != DefaultRetentionTimeout {
			t.Fatalf("retention timeout %s", e.Timeout)
		}
		w.tasks = append(w.tasks, &mTask{kind: taskFetch, ref: e.Ref, fetch: e.Group, core: w.c})
	case LookUpLeaves:
		modelStats["leaf-lookups"]++
		if !e.Manifest.Equal(w.stored) {
			t.Fatalf("leaf lookup in a manifest that is not the persisted one")
		}
		for _, o := range e.Offsets {
			if o < e.Manifest.FirstOffset || o >= e.Manifest.NextOffset {
				t.Fatalf("leaf lookup of %d outside [%d,%d)", o, e.Manifest.FirstOffset, e.Manifest.NextOffset)
			}
		}
		w.tasks = append(w.tasks, &mTask{kind: taskLookup, ref: e.Ref, lookup: e, core: w.c})
	case UpdateRange:
		if !gated(ev) {
			t.Fatalf("update-range on %T: not after a persist", ev)
		}
		if e.Revision != w.rev || !e.Manifest.Equal(w.stored) {
			t.Fatalf("update-range rev %d %s, etcd holds rev %d %s", e.Revision, FormatManifest(e.Manifest), w.rev, FormatManifest(w.stored))
		}
	case Broadcast:
		w.broadcast(ev, e)
	case SyncReplica:
		k := rootKey{e.Root.Seq, e.Root.UID}
		want, ok := w.byRoot[k]
		if !ok || !e.Manifest.Equal(want) {
			t.Fatalf("sync of %s as root %+v with %s: not that persisted root's manifest", e.Replica, e.Root, FormatManifest(e.Manifest))
		}
		if w.c.reset != nil || w.c.diverged != nil {
			t.Fatalf("sync of %s while the persisted manifest is the other timeline's", e.Replica)
		}
		if r := w.replicas[e.Replica]; r != nil && (!r.has || e.Epoch > r.epoch || e.Epoch == r.epoch && k.seq >= r.root.seq) {
			r.has, r.epoch, r.root, r.m = true, e.Epoch, k, e.Manifest
		}
	case EvaluateLocalRetention:
		if !gated(ev) {
			t.Fatalf("local retention on %T", ev)
		}
		// invariant 7: local retention uses the persisted next offset
		if e.PersistedNext != w.stored.NextOffset {
			t.Fatalf("local retention at %d, persisted next is %d", e.PersistedNext, w.stored.NextOffset)
		}
		w.tieringRetention(e.PersistedNext)
	case DeleteObjects:
		modelStats["delete-effects"]++
		if pr, ok := ev.(PersistResult); !ok || pr.Outcome != PersistOK {
			t.Fatalf("deletion on %T: not after a successful persist", ev)
		}
		w.deleteObjects(e)
	case ReplyWaiters:
		w.replyWaiters(ev, e)
	case Reinitialize:
		if pr, ok := ev.(PersistResult); !ok || pr.Outcome != PersistConflict {
			t.Fatalf("reinitialize on %T", ev)
		}
		w.closeDrain()
		w.paused = false // everything in flight is dropped, the pause with it
		w.idle.persistFails = 0
		w.xfers = map[Ref]*mXfer{}
		w.truncation = nil
		w.tasks = append(w.tasks, &mTask{kind: taskResolve, core: w.c})
	case Stop:
		if !w.deleted {
			t.Fatalf("stop while the stream exists: %s", e.Reason)
		}
		w.stopped = true
		w.closeDrain()
		w.xfers = map[Ref]*mXfer{}
		if len(w.waiters) > 0 {
			t.Fatalf("stopped with %d waiters unanswered", len(w.waiters))
		}
	case Problem:
		t.Fatalf("core problem: %s", e)
	default:
		t.Fatalf("unknown effect %T", e)
	}
}

// checkGap: a gap is declared only for offsets the local log no longer holds, right at
// the in-memory next offset (invariant 6: nothing durable or still local is given up).
func (w *world) checkGap(e DeclareGap) {
	modelStats["gaps-"+e.Reason.String()]++
	if e.From >= e.To || e.To > w.logFirst {
		w.t.Fatalf("%s: the local log holds [%d,%d)", e, w.logFirst, w.logNext)
	}
	if e.To != w.c.mem.NextOffset || e.To != w.c.drainNext {
		w.t.Fatalf("%s: in-memory next offset %d, drain position %d", e, w.c.mem.NextOffset, w.c.drainNext)
	}
	w.declare(e.From, e.To)
}

// checkTruncate: a truncation the core makes by itself cuts exactly where the model's own
// log and objects prove a divergence: the remote chunk that ends at the cut is the same
// locally, the one that starts there is not, and it drops exactly what lies above the cut.
// An operator's truncation takes the cut the comparison prepared, and only while the core
// is stalled for lack of a common chunk. The model keeps the truncated base: the captured
// edits of the truncation's persist must fold over it.
func (w *world) checkTruncate(ev Event, e TruncateRemote) {
	t := w.t
	modelStats["truncations-"+e.Reason.String()]++
	if e.OldNext != w.stored.NextOffset {
		t.Fatalf("%s: the persisted next offset is %d", e, w.stored.NextOffset)
	}
	if _, ok := ev.(OperatorTruncate); ok {
		tr := w.cmp.Truncation
		if e.Reason != TruncateOperator || w.cmp.Kind != divergence.NoCommon || tr == nil || e.At != tr.At {
			t.Fatalf("%s on an operator's truncate, the comparison said %s", e, w.cmp.Kind)
		}
		w.truncation = &mTruncation{at: e.At, base: tr.Manifest, operator: true}
		return
	}
	switch ev.(type) {
	case Resolved, LogOpened:
	default:
		t.Fatalf("%s on %T: a truncation is decided at resolution only", e, ev)
	}
	if e.Reason != TruncateDiverged {
		t.Fatalf("%s at resolution", e)
	}
	if e.At > w.stored.FirstOffset {
		c, ok := w.remoteChunk(w.stored, e.At-1)
		if !ok && w.leafAt(w.stored, e.At-1).Gap {
			t.Fatalf("%s: the cut follows a gap", e)
		}
		if ok && (c.Next != e.At || !w.localSame(c)) {
			t.Fatalf("%s: the remote chunk [%d,%d) before the cut is not the local one: the cut drops common history", e, c.ID, c.Next)
		}
	}
	if c, ok := w.remoteChunk(w.stored, e.At); ok && (c.ID != e.At || w.localSame(c)) {
		t.Fatalf("%s: the remote chunk [%d,%d) at the cut is the same locally: no divergence there", e, c.ID, c.Next)
	}
	r, err := manifest.TruncateTail(w.stored, e.At, w.fetcher())
	if err != nil {
		t.Fatalf("%s: %v", e, err)
	}
	var dropped, alone []manifest.Entry
	for _, d := range r.Dropped {
		if d.Kind != manifest.KindFragment && d.FirstOffset < e.At {
			alone = append(alone, d)
		} else {
			dropped = append(dropped, d)
		}
	}
	if FormatEntries(dropped) != FormatEntries(e.Dropped) || FormatEntries(alone) != FormatEntries(e.Alone) {
		t.Fatalf("%s: the cut drops %s and expands %s", e, FormatEntries(dropped), FormatEntries(alone))
	}
	base := r.Manifest
	if e.Copy {
		repl := w.cmp.Truncation.Replacement
		if repl == nil || w.copies[repl.UID] != *repl || r.Straddle == nil {
			t.Fatalf("%s: no copy of the straddling prefix was made", e)
		}
		ed, err := manifest.AppendEdit(base, *repl, e.At)
		if err == nil {
			base, err = base.Apply(ed)
		}
		if err != nil {
			t.Fatalf("%s: the copied prefix does not append: %v", e, err)
		}
	} else if r.Straddle != nil && w.logFirst > r.Straddle.FirstOffset {
		t.Fatalf("%s: the straddling fragment's prefix is neither copied nor in the local log (from %d)", e, w.logFirst)
	}
	w.truncation = &mTruncation{at: e.At, base: base}
}

// localSame says whether the local log holds the remote chunk c, the very same one.
func (w *world) localSame(c divergence.Chunk) bool {
	l, ok := w.chunks[c.ID]
	return ok && l.ident() == c
}

// rootGap says whether a gap entry of m's root holds o.
func (w *world) rootGap(m manifest.Manifest, o uint64) bool {
	for i, e := range m.Entries {
		if e.IsGap() && e.FirstOffset <= o && o < m.EntryEnd(i) {
			return true
		}
	}
	return false
}

func (w *world) leafAt(m manifest.Manifest, o uint64) manifest.FragmentRef {
	f, err := manifest.LookupOffset(m, o, w.fetcher())
	if err != nil {
		w.t.Fatalf("lookup %d in %s: %v", o, FormatManifest(m), err)
	}
	return f
}

func (w *world) broadcast(ev Event, e Broadcast) {
	t := w.t
	if !gated(ev) {
		t.Fatalf("broadcast on %T", ev)
	}
	if e.Root != w.storedRoot || e.Root.Seq <= e.Parent.Seq {
		t.Fatalf("broadcast of root %+v on %+v, etcd names root %+v", e.Root, e.Parent, w.storedRoot)
	}
	root, parent := rootKey{e.Root.Seq, e.Root.UID}, rootKey{e.Parent.Seq, e.Parent.UID}
	if _, ok := w.byRoot[parent]; !ok {
		t.Fatalf("broadcast of root %+v on %+v: no such persisted root", e.Root, e.Parent)
	}
	for _, name := range e.To {
		r := w.replicas[name]
		if r == nil {
			t.Fatalf("broadcast to unknown replica %s", name)
		}
		if !r.has || r.epoch != e.Epoch || r.root != parent {
			w.tasks = append(w.tasks, &mTask{kind: taskResync, replica: name, core: w.c})
			continue
		}
		modelStats["replica-applies"]++
		m, err := r.m.ApplyAll(e.Edits)
		if err != nil {
			t.Fatalf("replica %s: broadcast of root %+v does not apply: %v", name, e.Root, err)
		}
		// invariant 14: a replica's manifest is always a persisted manifest
		if !m.Equal(w.byRoot[root]) {
			t.Fatalf("replica %s at root %+v holds %s, persisted was %s", name, e.Root, FormatManifest(m), FormatManifest(w.byRoot[root]))
		}
		r.m, r.root = m, root
	}
}

// replyWaiters: invariant 15. Ok only below the persisted next offset, never inside a gap,
// and then the offset is readable from S3 (remembered, to be checked after every step).
// Failed only for a stopped reader, or for an offset in a gap that is persisted.
func (w *world) replyWaiters(ev Event, e ReplyWaiters) {
	t := w.t
	modelStats["waiter-replies-ok="+fmt.Sprint(e.OK)] += len(e.Waiters)
	_, await := ev.(AwaitOffset)
	_, looked := ev.(LeavesLookedUp) // a leaf of the persisted manifest looked up
	if !await && !looked && !gated(ev) && !strings.HasPrefix(e.Reason, "reader stopped") {
		t.Fatalf("waiters answered on %T: not after a persist", ev)
	}
	for _, id := range e.Waiters {
		o, ok := w.waiters[id]
		if !ok {
			t.Fatalf("reply to unknown waiter %d", id)
		}
		delete(w.waiters, id)
		switch {
		case strings.HasPrefix(e.Reason, "reader stopped"):
			if !w.deleted || e.OK {
				t.Fatalf("waiter %d told %q, the stream exists", id, e.Reason)
			}
		case e.Retry:
			// not known yet (a failed leaf lookup): neither persisted nor lost
			if o >= w.stored.NextOffset {
				t.Fatalf("waiter %d for offset %d told %q, above the persisted next %d", id, o, e.Reason, w.stored.NextOffset)
			}
			modelStats["waiters-undecided"]++
		case e.OK:
			if o >= w.stored.NextOffset {
				t.Fatalf("waiter %d for offset %d answered, persisted next is %d", id, o, w.stored.NextOffset)
			}
			if o < w.stored.FirstOffset {
				continue // retained away: it was persisted once
			}
			if f := w.leafAt(w.stored, o); f.Gap {
				// not even one sealed in a group object of the manifest the core resolved:
				// its leaf is looked up first
				t.Fatalf("waiter %d for offset %d answered ok, it lies in the persisted gap [%d,%d)", id, o, f.Entry.FirstOffset, f.End)
			}
			c, held := w.remoteChunk(w.stored, o)
			if !held {
				t.Fatalf("waiter %d for offset %d answered, but no object holds it", id, o)
			}
			w.acked[o] = mAck{chunk: c}
		default:
			if o >= w.stored.NextOffset || !w.wasDeclared(o, o+1) {
				t.Fatalf("waiter %d for offset %d told %q: not a persisted gap (persisted next %d)", id, o, e.Reason, w.stored.NextOffset)
			}
			if o >= w.stored.FirstOffset && !w.leafAt(w.stored, o).Gap {
				t.Fatalf("waiter %d for offset %d told %q, a fragment holds it", id, o, e.Reason)
			}
			modelStats["waiters-in-gaps"]++
		}
	}
}
