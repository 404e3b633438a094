package readercore

import (
	"fmt"
	"sort"
	"time"

	"pgregory.net/rapid"

	"github.com/streamtier/streamtier/actors/divergence"
	"github.com/streamtier/streamtier/manifest"
)

// The model's actions: what can happen next in the world, drawn at random by TestModel.

func (w *world) actCommit(t *rapid.T) {
	for i, n := 0, rapid.IntRange(1, 4).Draw(t, "n"); i < n; i++ {
		w.commit()
	}
}

func (w *world) actTick(t *rapid.T) {
	ms := rapid.IntRange(1, 200).Draw(t, "ms")
	w.clock += int64(ms)
	w.mono += time.Duration(ms) * time.Millisecond
}

func (w *world) actAwait(t *rapid.T) {
	w.waiterID++
	o := uint64(rapid.IntRange(0, int(w.logNext)+20).Draw(t, "offset"))
	if len(w.declared) > 0 && rapid.IntRange(0, 2).Draw(t, "await-in-gap") == 0 {
		g := w.declared[rapid.IntRange(0, len(w.declared)-1).Draw(t, "gap")]
		o = uint64(rapid.IntRange(int(g.from), int(g.to)-1).Draw(t, "gap-offset"))
	}
	w.waiters[w.waiterID] = o
	// A flush changes only when cuts and persists happen: every invariant still holds.
	flush := rapid.Bool().Draw(t, "flush")
	if flush {
		w.flushes = append(w.flushes, o)
	}
	w.step(AwaitOffset{Offset: o, Waiter: w.waiterID, Flush: flush})
}

func (w *world) actCancelAwait(t *rapid.T) {
	if len(w.waiters) == 0 {
		return
	}
	ids := w.waiterIDs()
	id := ids[rapid.IntRange(0, len(ids)-1).Draw(t, "waiter")]
	delete(w.waiters, id)
	w.step(CancelAwait{Waiter: id})
}

func (w *world) waiterIDs() []WaiterID {
	var ids []WaiterID
	for id := range w.waiters {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

func (w *world) actPolicy(t *rapid.T) {
	w.step(RetentionPolicyChanged{Policy: w.drawPolicy(), Now: w.clock})
}

func (w *world) actReplica(t *rapid.T) {
	name := rapid.SampledFrom([]string{"r1", "r2", "r3"}).Draw(t, "replica")
	if _, ok := w.replicas[name]; !ok {
		w.replicas[name] = &mReplica{}
	}
	w.step(ReplicaRegistered{Replica: name})
}

// actStreamRetention is the stream's own retention deleting the oldest segment (never the
// active one): it may delete data the remote tier never got (a gap).
func (w *world) actStreamRetention(t *rapid.T) {
	if rapid.IntRange(0, 3).Draw(t, "retains") != 0 {
		return
	}
	w.deleteOldestSegment()
}

// actOperatorTruncate is the operator's 'node truncate': accepted only while the core is
// stalled because the local log and the remote tier share no chunk, refused otherwise, and
// refused while the log is behind (a prefix of the remote tier: nothing to cut).
func (w *world) actOperatorTruncate(t *rapid.T) {
	if w.stopped {
		return
	}
	if w.c.diverged == nil || w.c.diverged.Kind == divergence.Behind {
		if _, err := w.c.Step(OperatorTruncate{}); err == nil {
			t.Fatalf("operator truncate accepted while %s and not diverged (%v)", w.c.phase, w.c.diverged)
		}
		return
	}
	if rapid.IntRange(0, 2).Draw(t, "operator") == 0 {
		modelStats["operator-truncates"]++
		w.step(OperatorTruncate{})
	}
}

// actForeignPersist is another writer (at the same epoch, after an election) persisting the
// same content: our next persist conflicts and the core must reinitialize.
func (w *world) actForeignPersist(t *rapid.T) {
	if w.deleted || rapid.IntRange(0, 6).Draw(t, "foreign") != 0 {
		return
	}
	w.uid++
	w.maxSeq++ // it listed the roots: its seq is above every one
	root := RootRef{Seq: w.maxSeq, Epoch: w.epoch, UID: w.uid}
	w.roots[root] = true
	w.rev++
	w.history[w.rev] = w.stored.Clone()
	w.byRoot[rootKey{root.Seq, root.UID}] = w.stored.Clone()
	w.storedRoot = root
}

func (w *world) actDeleteStream(t *rapid.T) {
	if w.deleted || w.rev == 0 || rapid.IntRange(0, 15).Draw(t, "delete") != 0 {
		return
	}
	w.deleted = true
}

// actRestart crashes the reader and starts a new core: everything in memory is lost, the
// persisted manifest is the truth, and the old core's results can never match the new one.
// The local log may come back changed: a tail that never reached disk is gone (and the
// writer goes on in the same epoch), a new leader rewrote the tail in a higher epoch (an
// unclean failover), or the stream's retention deleted segments meanwhile.
func (w *world) actRestart(t *rapid.T) {
	if w.stopped || rapid.IntRange(0, 2).Draw(t, "restart") != 0 {
		return
	}
	switch rapid.IntRange(0, 6).Draw(t, "restart-fault") {
	case 0, 1:
		if w.cutTail(t) {
			// (an empty log is never compared: the core would resume above what the writer
			// appends next, so the writer here always appends after a lost tail that took
			// everything)
			modelStats["fault-lost-tail"]++
			least := 0
			if w.logFirst == w.logNext {
				least = 1
			}
			for i, n := 0, rapid.IntRange(least, 3).Draw(t, "rewritten"); i < n; i++ {
				w.commit()
			}
		}
	case 2:
		if w.cutTail(t) {
			modelStats["fault-unclean-failover"]++
			w.logEpoch++
			for i, n := 0, rapid.IntRange(1, 4).Draw(t, "rewritten"); i < n; i++ {
				w.commit()
			}
		}
	case 3:
		for i, n := 0, rapid.IntRange(1, 3).Draw(t, "retained"); i < n; i++ {
			w.deleteOldestSegment()
		}
	case 4:
		// the directory was wiped and the stream started again from 0 in a new epoch: it
		// shares no chunk with the remote tier (an operator must decide)
		modelStats["fault-wiped-log"]++
		w.chunks = map[uint64]mChunk{}
		w.timeline = map[uint64]mChunk{}
		for _, s := range w.segs {
			s.deleted = true
		}
		w.logFirst, w.logNext = 0, 0
		w.logEpoch++
		w.gen++
		w.roll()
		for i, n := 0, rapid.IntRange(1, 4).Draw(t, "rewritten"); i < n; i++ {
			w.commit()
		}
	case 5:
		// a failover to a replica: its log holds the same timeline from some chunk on
		// (even chunks the old leader's retention deleted, so offsets a gap declared
		// lost), up to where it lagged; the new leader writes on in a higher epoch
		var ids []uint64
		for id := range w.timeline {
			ids = append(ids, id)
		}
		if len(ids) == 0 {
			break
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		a := rapid.IntRange(0, len(ids)-1).Draw(t, "replica-from")
		b := rapid.IntRange(a, len(ids)-1).Draw(t, "replica-to")
		modelStats["fault-replica-failover"]++
		w.replicaLog(ids[a], w.timeline[ids[b]].next())
		w.logEpoch++
		for i, n := 0, rapid.IntRange(0, 3).Draw(t, "written"); i < n; i++ {
			w.commit()
		}
	}
	w.refBase = uint64(w.c.ref) + 1000
	w.restarts++
	w.waiters = map[WaiterID]uint64{} // their callers died with the old reader
	w.startCore()
}

// cutTail drops a random tail of the local log, at a chunk boundary (possibly all of it).
func (w *world) cutTail(t *rapid.T) bool {
	ids := w.chunkIDs()
	if len(ids) == 0 {
		return false
	}
	// mostly inside the remote range and above both first offsets, so that the remote
	// tier holds what is cut and a common prefix stays: a divergence to find; otherwise
	// anywhere (no chunk in common, or a cut above the remote tier)
	lo, hi := 0, len(ids)-1
	if rapid.IntRange(0, 3).Draw(t, "cut-inside-remote") != 0 {
		floor := max(w.stored.FirstOffset, w.logFirst)
		for lo < len(ids) && ids[lo] <= floor {
			lo++
		}
		for hi >= 0 && ids[hi] >= w.stored.NextOffset {
			hi--
		}
		if lo > hi {
			lo, hi = 0, len(ids)-1
		}
	}
	w.truncateLog(ids[rapid.IntRange(lo, hi).Draw(t, "cut-at")])
	return true
}

// actDeliver finishes one random task and delivers its result (or loses it, or repeats it).
func (w *world) actDeliver(t *rapid.T) {
	if len(w.tasks) == 0 {
		return
	}
	i := rapid.IntRange(0, len(w.tasks)-1).Draw(t, "task")
	w.runTask(i, t)
}

func (w *world) runTask(i int, t *rapid.T) {
	k := w.tasks[i]
	w.tasks = append(w.tasks[:i], w.tasks[i+1:]...)
	if k.core != w.c {
		// the reader that started it crashed: the result goes to the new reader, whose
		// refs never collide, so it must be ignored
		w.deliverStale(k)
		return
	}
	switch k.kind {
	case taskTransfer:
		w.runTransfer(k, t)
	case taskPersist:
		w.persistsInFlight--
		w.runPersist(k, t)
	case taskGroup:
		w.runGroup(k, t)
	case taskFetch:
		w.runFetch(k, t)
	case taskLookup:
		w.runLookup(k, t)
	case taskResolve:
		if !w.stopped {
			w.resolve()
		}
	case taskResync:
		w.step(ResyncRequested{Replica: k.replica})
	}
}

func (w *world) deliverStale(k *mTask) {
	before := w.c.stats.IgnoredResults
	switch k.kind {
	case taskTransfer:
		w.step(TransferResult{Ref: k.ref, Attempt: k.attempt, Outcome: OK, UID: w.newUID(), At: w.mono})
	case taskPersist:
		w.step(PersistResult{Ref: k.ref, Outcome: PersistFailed, Now: w.clock})
	case taskGroup:
		w.step(GroupUploadResult{Ref: k.ref, Attempt: k.attempt, Outcome: OK, UID: w.newUID()})
	case taskFetch:
		w.step(RetentionGroupFailed{Ref: k.ref})
	case taskLookup:
		w.step(LeavesLookedUp{Ref: k.ref, Reason: "stale"})
	default:
		return
	}
	if !w.stopped && w.c.stats.IgnoredResults != before+1 {
		w.t.Fatalf("a result addressed to a crashed reader was not ignored")
	}
}

func (w *world) runTransfer(k *mTask, t *rapid.T) {
	modelStats[fmt.Sprint("transfer-results-faults=", w.faults)]++
	d := k.desc
	for _, s := range d.Spans {
		if w.segDeleted(s.Segment) {
			w.step(TransferResult{Ref: k.ref, Attempt: k.attempt, Outcome: SegmentGone, LocalFirst: w.logFirst, Reason: "enoent", At: w.mono})
			return
		}
	}
	roll := 0
	if w.faults {
		roll = rapid.IntRange(0, 19).Draw(t, "transfer-fault")
		if w.flakyS3 && roll < 6 {
			roll = 13 + roll%5 // a flaky S3: many transfers wait for retries at once
		}
	}
	switch {
	case roll >= 13 && roll < 17:
		w.step(TransferResult{Ref: k.ref, Attempt: k.attempt, Outcome: Retriable, Reason: "503", Jitter: rapid.Float64Range(0, 0.99).Draw(t, "jitter"), At: w.mono})
	case roll == 17:
		w.step(TransferResult{Ref: k.ref, Attempt: k.attempt, Outcome: NonTransient, Reason: "403", At: w.mono})
	case roll == 18:
		// the result is lost (task killed): the object may even exist; the deadline resubmits
		if rapid.Bool().Draw(t, "put-anyway") {
			w.putFragment(d)
		}
	case roll == 19:
		// the first result wins; a duplicate of it arrives later
		ev := TransferResult{Ref: k.ref, Attempt: k.attempt, Outcome: OK, UID: w.putFragment(d), At: w.mono}
		w.step(ev)
		before := w.c.stats.IgnoredResults
		w.step(ev)
		if w.c.phase == phaseRunning && w.c.stats.IgnoredResults != before+1 {
			t.Fatalf("duplicate transfer result was not ignored")
		}
	default:
		w.step(TransferResult{Ref: k.ref, Attempt: k.attempt, Outcome: OK, UID: w.putFragment(d), At: w.mono})
	}
}

func (w *world) segDeleted(name string) bool {
	for _, s := range w.segs {
		if s.name == name {
			return s.deleted
		}
	}
	return true
}

func (w *world) runPersist(k *mTask, t *rapid.T) {
	p := k.persist
	if w.faults && rapid.IntRange(0, 6).Draw(t, "persist-fault") == 0 {
		if rapid.Bool().Draw(t, "root-put") {
			w.roots[RootRef{Seq: p.Seq, Epoch: p.Epoch, UID: w.newUID()}] = true // orphan root
			w.maxSeq = max(w.maxSeq, p.Seq)
		}
		w.step(PersistResult{Ref: k.ref, Outcome: PersistFailed, Reason: "etcd unavailable", Now: w.clock})
		return
	}
	if p.Seq <= p.Parent.Seq {
		t.Fatalf("persist of root seq %d on parent seq %d: not above it", p.Seq, p.Parent.Seq)
	}
	root := RootRef{Seq: p.Seq, Epoch: p.Epoch, UID: w.newUID()}
	w.roots[root] = true
	w.maxSeq = max(w.maxSeq, p.Seq)
	switch {
	case w.deleted && p.ExpectedRevision > 0:
		w.step(PersistResult{Ref: k.ref, Outcome: PersistNotFound, Now: w.clock})
		return
	case w.deleted || p.ExpectedRevision != w.rev || p.Epoch < w.epoch:
		w.step(PersistResult{Ref: k.ref, Outcome: PersistConflict, Now: w.clock})
		return
	}
	// invariant 3: the persisted next offset never goes down, but by a truncation
	if p.Root.NextOffset < w.stored.NextOffset && !p.Reset {
		t.Fatalf("persist of %s lowers the persisted next offset from %d without a truncation", FormatManifest(p.Root), w.stored.NextOffset)
	}
	if p.Parent != w.storedRoot {
		t.Fatalf("persist on parent %+v; the record names %+v", p.Parent, w.storedRoot)
	}
	w.rev++
	w.stored = p.Root
	w.storedRoot = root
	w.byRoot[rootKey{root.Seq, root.UID}] = p.Root
	w.epoch = p.Epoch
	w.history[w.rev] = p.Root
	w.checkDurable(w.stored, "persisted manifest")
	w.reference(w.stored)
	if p.Reset {
		w.persisting = w.truncation // what the deletions of this persist may remove
		w.truncationPersisted()
	}
	w.step(PersistResult{Ref: k.ref, Outcome: PersistOK, Revision: w.rev, RootUID: root.UID, Now: w.clock})
	w.persisting = nil
}

func (w *world) runGroup(k *mTask, t *rapid.T) {
	roll := 0
	if w.faults {
		roll = rapid.IntRange(0, 9).Draw(t, "group-fault")
	}
	switch roll {
	case 8:
		w.step(GroupUploadResult{Ref: k.ref, Attempt: k.attempt, Outcome: Retriable, Jitter: 0.3})
	case 9:
		w.step(GroupUploadResult{Ref: k.ref, Attempt: k.attempt, Outcome: NonTransient})
	default:
		uid := w.newUID()
		g := k.group
		var size uint64
		live := w.c.rebalance != nil && w.c.rebalance.ref == k.ref
		for _, c := range g.Children {
			size += c.Size
			if c.IsGap() {
				continue
			}
			if o := w.objs[c.UID]; live && (o == nil || o.deleted) {
				t.Fatalf("group child %s is not in S3", FormatEntry(c))
			}
		}
		o := &mObject{kind: g.Kind, first: g.Children[0].FirstOffset, size: size, children: g.Children}
		if live {
			// the group ends where the run it folds does in the core's manifest
			o.next = w.c.mem.EntryEnd(w.c.rebalance.r.At + len(g.Children) - 1)
		}
		w.objs[uid] = o
		w.step(GroupUploadResult{Ref: k.ref, Attempt: k.attempt, Outcome: OK, UID: uid})
	}
}

func (w *world) runFetch(k *mTask, t *rapid.T) {
	roll := 0
	if w.faults {
		roll = rapid.IntRange(0, 7).Draw(t, "fetch-fault")
	}
	o := w.objs[k.fetch.UID]
	live := w.c.retention != nil && w.c.retention.ref == k.ref
	switch {
	case o == nil || o.deleted:
		if live {
			t.Fatalf("retention fetches %s, which is not in S3", FormatEntry(k.fetch))
		}
		w.step(RetentionGroupFailed{Ref: k.ref, Reason: "404"})
	case roll == 6:
		w.step(RetentionGroupFailed{Ref: k.ref, Reason: "500"})
	case roll == 7:
		w.step(RetentionTimeout{Ref: k.ref})
	default:
		w.step(RetentionGroupFetched{Ref: k.ref, Children: o.children, Now: w.clock})
	}
}

// runLookup is the shell's leaf lookup: each offset looked up in the snapshot the core
// sent, through the model's objects (retention may have deleted a group since: the lookup
// fails); with faults, S3 fails now and then.
func (w *world) runLookup(k *mTask, t *rapid.T) {
	if w.faults && rapid.IntRange(0, 5).Draw(t, "lookup-fault") == 0 {
		w.step(LeavesLookedUp{Ref: k.ref, Reason: "500"})
		return
	}
	e := LeavesLookedUp{Ref: k.ref}
	for _, o := range k.lookup.Offsets {
		ref, err := manifest.LookupOffset(k.lookup.Manifest, o, w.fetcher())
		if err != nil {
			e = LeavesLookedUp{Ref: k.ref, Reason: err.Error()}
			break
		}
		e.Leaves = append(e.Leaves, Leaf{From: ref.Entry.FirstOffset, To: ref.End, Gap: ref.Gap})
	}
	w.step(e)
}

func (w *world) actFireTimer(t *rapid.T) {
	if len(w.timers) == 0 {
		return
	}
	w.fireTimer(rapid.IntRange(0, len(w.timers)-1).Draw(t, "timer"))
}

// actTimePasses lets the shell's clock run to the earliest retry timer (the stream's, the
// drain's or a group upload's), which fires.
func (w *world) actTimePasses(t *rapid.T) {
	first := -1
	for i, tm := range w.timers {
		if tm.timed && tm.core == w.c && (first < 0 || tm.due < w.timers[first].due) {
			first = i
		}
	}
	if first >= 0 {
		w.fireTimer(first)
	}
}

// fireTimer fires the i-th timer: a retry timer when it is due (the clock moves there), the
// others at once. A timer of a crashed reader died with it.
func (w *world) fireTimer(i int) {
	tm := w.timers[i]
	w.timers = append(w.timers[:i], w.timers[i+1:]...)
	if tm.core != w.c {
		return
	}
	ev := tm.ev
	if tm.timed {
		w.mono = max(w.mono, tm.due)
	}
	if ct, ok := ev.(CutTimer); ok {
		cuts := w.c.stats.Cuts
		w.step(ev)
		if !tm.stale && w.idle.armed == ct.Ref {
			w.idle.armed = 0 // fired: the core forgets it
		}
		if tm.stale {
			modelStats["stale-cut-timers-fired"]++
			if w.c.stats.Cuts != cuts {
				w.t.Fatalf("cancelled cut timer %d cut a fragment", ct.Ref)
			}
		}
		return
	}
	if tm.timed {
		r := ev.(RetryTimer)
		r.At = w.mono
		ev = r
		if tm.stale {
			modelStats["stale-retry-timers-fired"]++
		}
		if tm.retry && !tm.stale {
			w.armedRetry, w.firing = 0, r.Ref
		}
	}
	w.step(ev)
	w.firing = 0
}

// reference remembers every object a persisted manifest references.
func (w *world) reference(m manifest.Manifest) {
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
			w.everRef[e.UID] = true
			if e.Kind != manifest.KindFragment {
				if o := w.objs[e.UID]; o != nil {
					walk(o.children, eEnd)
				}
			}
		}
	}
	walk(m.Entries, m.NextOffset)
}
