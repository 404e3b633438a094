//go:build modelpending

package readercore

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"pgregory.net/rapid"

	"streamtier/fragment"
	"streamtier/manifest"
	"streamtier/segments"
)

// The model test drives a core with random event sequences and executes its effects the way
// the shell would, against a simple world: a local log of committed chunks in segments, an
// "S3" map of objects by uid, an "etcd" record (revision, stored manifest, root, epoch),
// replicas, waiters and the shell's timers. Tasks (transfers, persists, group uploads,
// fetches) finish in random order, fail at random, lose their results or answer twice.
// After every step it checks the invariants of spec/invariants.md that the core answers
// for; at the end, with faults off, it runs the world to quiescence and checks that
// everything committed is persisted.

type mChunk struct {
	id      uint64
	records uint32
	size    int64
	ts      int64
	seg     string
	pos     int64
}

type mSeg struct {
	name    string
	first   uint64
	chunks  int
	size    int64
	deleted bool
}

type mObject struct {
	kind     manifest.Kind
	first    uint64
	next     uint64 // fragments
	size     uint64
	children []manifest.Entry // groups
	deleted  bool
}

type taskKind int

const (
	taskTransfer taskKind = iota
	taskPersist
	taskGroup
	taskFetch
	taskResolve // the shell re-resolves after Reinitialize
	taskResync  // a replica asks for a sync
)

type mTask struct {
	kind    taskKind
	ref     Ref
	attempt int
	desc    *fragment.Description
	persist StartPersist
	group   UploadGroup
	fetch   manifest.Entry
	replica string
	core    *Core // the core that started it (a restart makes the old one's results stale)
}

type mTimer struct {
	ev   Event
	core *Core
}

type mReplica struct {
	has   bool
	epoch uint64
	seq   int64
	m     manifest.Manifest
}

type world struct {
	t   *rapid.T
	c   *Core
	cfg Config

	// local log
	chunks    map[uint64]mChunk
	segs      []*mSeg
	logFirst  uint64
	logNext   uint64
	clock     int64
	segLimit  int
	drainPos  uint64
	draining  bool
	refBase   uint64
	restarts  int
	resets    int
	stopped   bool
	faults    bool
	resetAt   uint64 // the last reset's offset: the base of a reset persist
	lastEvent Event

	// S3
	objs  map[uint64]*mObject
	roots map[RootRef]bool // true while live
	uid   uint64

	// etcd
	rev        int64
	stored     manifest.Manifest
	storedRoot RootRef
	epoch      uint64
	deleted    bool
	history    map[int64]manifest.Manifest

	tasks    []*mTask
	timers   []mTimer
	waiters  map[WaiterID]uint64
	waiterID WaiterID
	replicas map[string]*mReplica

	persistsInFlight int // persist tasks of the current core
	coreCfg          Config
	fed              []Event  // every event fed to the current core, for the replay check
	outs             []string // and the effects it answered with
	prevStoredNext   uint64
	prevResets       int
}

// modelStats counts what the runs exercised, so that a run that never reaches the
// interesting interleavings is visible (go test -v prints it).
var modelStats = map[string]int{}

func TestModel(t *testing.T) {
	steps := 300
	if testing.Short() {
		steps = 100
	}
	rapid.Check(t, func(rt *rapid.T) {
		w := newWorld(rt)
		type action struct {
			name   string
			weight int
			do     func(*rapid.T)
		}
		actions := []action{
			{"commit", 6, w.actCommit},
			{"drain", 8, w.actDrain},
			{"eos", 1, func(*rapid.T) { w.step(EndOfStream{}) }},
			{"force-cut", 2, func(*rapid.T) { w.step(ForceCut{}) }},
			{"deliver", 16, w.actDeliver},
			{"fire-timer", 5, w.actFireTimer},
			{"tick", 3, w.actTick},
			{"await", 3, w.actAwait},
			{"cancel-await", 1, w.actCancelAwait},
			{"policy", 1, w.actPolicy},
			{"evaluate", 1, func(*rapid.T) { w.step(EvaluateRetention{Now: w.clock}) }},
			{"replica", 1, w.actReplica},
			{"stream-retains", 1, w.actStreamRetention},
			{"foreign-persist", 1, w.actForeignPersist},
			{"delete-stream", 1, w.actDeleteStream},
			{"restart", 1, w.actRestart},
		}
		total := 0
		for _, a := range actions {
			total += a.weight
		}
		n := rapid.IntRange(steps/4, steps).Draw(rt, "steps")
		for i := 0; i < n && !w.stopped; i++ {
			pick := rapid.IntRange(0, total-1).Draw(rt, "action")
			for _, a := range actions {
				if pick < a.weight {
					a.do(rt)
					break
				}
				pick -= a.weight
			}
			w.checkInvariants()
		}
		w.quiesce()
		w.checkDeterministic()
		k := w.c.stats
		modelStats["runs"]++
		modelStats["persists"] += int(k.Persists)
		modelStats["gaps"] += int(k.Gaps)
		modelStats["reinits"] += int(k.Reinitializations)
		modelStats["rebalances"] += int(k.Rebalances)
		modelStats["retention-runs"] += int(k.RetentionRuns)
		modelStats["ignored"] += int(k.IgnoredResults)
		modelStats["deadlines"] += int(k.DeadlineResubmits)
		modelStats["non-transient"] += int(k.NonTransientRetries)
		modelStats["restarts"] += w.restarts
		if w.stopped {
			modelStats["stopped"]++
		}
		for _, o := range w.objs {
			if o.deleted {
				modelStats["objects-deleted"]++
			}
			if o.kind > manifest.KindGroup {
				modelStats["kgroups"]++
			}
		}
	})
	t.Logf("model coverage: %v", modelStats)
}

func newWorld(t *rapid.T) *world {
	w := &world{
		t:        t,
		chunks:   map[uint64]mChunk{},
		objs:     map[uint64]*mObject{},
		roots:    map[RootRef]bool{},
		history:  map[int64]manifest.Manifest{0: manifest.Empty()},
		stored:   manifest.Empty(),
		waiters:  map[WaiterID]uint64{},
		replicas: map[string]*mReplica{},
		faults:   true,
		clock:    1000,
		epoch:    1,
		segLimit: rapid.IntRange(2, 8).Draw(t, "seg-chunks"),
	}
	w.cfg = Config{
		StreamID:           "model",
		Epoch:              1,
		FragmentTargetSize: uint64(rapid.IntRange(100, 1500).Draw(t, "target")),
		PersistThreshold:   rapid.IntRange(1, 5).Draw(t, "threshold"),
		RebalanceThreshold: rapid.IntRange(2, 4).Draw(t, "rebalance"),
	}
	if rapid.Bool().Draw(t, "initial-policy") {
		w.cfg.Retention = w.drawPolicy()
	}
	// a local log that may already hold data, starting anywhere
	w.logFirst = uint64(rapid.IntRange(0, 50).Draw(t, "log-first"))
	w.logNext = w.logFirst
	for i, n := 0, rapid.IntRange(0, 6).Draw(t, "initial-chunks"); i < n; i++ {
		w.commit()
	}
	w.startCore()
	return w
}

func (w *world) drawPolicy() manifest.Policy {
	var p manifest.Policy
	if rapid.Bool().Draw(w.t, "max-bytes?") {
		p.MaxBytes = uint64(rapid.IntRange(200, 6000).Draw(w.t, "max-bytes"))
	}
	if rapid.Bool().Draw(w.t, "max-age?") {
		p.MaxAgeMillis = int64(rapid.IntRange(20, 400).Draw(w.t, "max-age"))
	}
	return p
}

// startCore creates a core (at start and after a crash) and feeds it the resolved manifest
// and the local log's bounds.
func (w *world) startCore() {
	cfg := w.cfg
	cfg.RefBase = w.refBase
	c, err := New(cfg)
	if err != nil {
		w.t.Fatalf("new core: %v", err)
	}
	w.c = c
	w.coreCfg = cfg
	w.fed, w.outs = nil, nil
	w.persistsInFlight = 0
	w.draining = false
	w.resolve()
}

func (w *world) resolve() {
	w.step(Resolved{Manifest: w.stored.Clone(), Revision: w.rev, Root: w.storedRoot})
	w.step(LogOpened{First: w.logFirst, Next: w.logNext, Epoch: w.epoch})
}

// commit appends one committed chunk to the local log, rolling segments.
func (w *world) commit() {
	var s *mSeg
	if len(w.segs) > 0 {
		s = w.segs[len(w.segs)-1]
	}
	if s == nil || s.chunks >= w.segLimit {
		s = &mSeg{name: fmt.Sprintf("%020d.segment", w.logNext), first: w.logNext, size: 8}
		w.segs = append(w.segs, s)
	}
	records := uint32(1 + w.logNext%3)
	size := int64(48 + (w.logNext*37)%350)
	c := mChunk{id: w.logNext, records: records, size: size, ts: w.clock, seg: s.name, pos: s.size}
	w.chunks[c.id] = c
	s.chunks++
	s.size += size
	w.logNext += uint64(records)
}

func (w *world) actCommit(t *rapid.T) {
	for i, n := 0, rapid.IntRange(1, 4).Draw(t, "n"); i < n; i++ {
		w.commit()
	}
}

func (w *world) actTick(t *rapid.T) {
	w.clock += int64(rapid.IntRange(1, 200).Draw(t, "ms"))
}

// actDrain delivers the next committed chunk at the drain position, or reports its segment
// gone when the stream's retention deleted it.
func (w *world) actDrain(t *rapid.T) {
	if !w.draining || w.stopped {
		return
	}
	for i, n := 0, rapid.IntRange(1, 6).Draw(t, "n"); i < n && w.draining; i++ {
		if w.drainPos < w.logFirst {
			w.step(DrainSegmentGone{LocalFirst: w.logFirst})
			continue
		}
		c, ok := w.chunks[w.drainPos]
		if !ok {
			if w.drainPos == w.logNext {
				w.step(EndOfStream{})
				return
			}
			t.Fatalf("drain position %d is not a chunk of the log [%d,%d)", w.drainPos, w.logFirst, w.logNext)
		}
		h := segments.Header{Records: c.records, Timestamp: c.ts, Epoch: w.epoch, ChunkID: c.id, DataLen: uint32(c.size - segments.HeaderSize)}
		w.drainPos = h.NextID()
		w.step(ChunkDrained{Header: h, Location: segments.Location{Segment: c.seg, Position: c.pos, Size: c.size}})
	}
}

func (w *world) actAwait(t *rapid.T) {
	w.waiterID++
	o := uint64(rapid.IntRange(0, int(w.logNext)+20).Draw(t, "offset"))
	w.waiters[w.waiterID] = o
	w.step(AwaitOffset{Offset: o, Waiter: w.waiterID})
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
// active one): it may delete data the remote tier never got.
func (w *world) actStreamRetention(t *rapid.T) {
	if rapid.IntRange(0, 3).Draw(t, "retains") != 0 {
		return
	}
	w.deleteOldestSegment()
}

func (w *world) deleteOldestSegment() bool {
	live := w.liveSegments()
	if len(live) < 2 {
		return false
	}
	s := live[0]
	s.deleted = true
	w.logFirst = live[1].first
	for id := range w.chunks {
		if id < w.logFirst {
			delete(w.chunks, id)
		}
	}
	return true
}

func (w *world) liveSegments() []*mSeg {
	var live []*mSeg
	for _, s := range w.segs {
		if !s.deleted {
			live = append(live, s)
		}
	}
	return live
}

// actForeignPersist is another writer (at the same epoch, after an election) persisting the
// same content: our next persist conflicts and the core must reinitialize.
func (w *world) actForeignPersist(t *rapid.T) {
	if w.deleted || rapid.IntRange(0, 6).Draw(t, "foreign") != 0 {
		return
	}
	w.uid++
	root := RootRef{Epoch: w.epoch, UID: w.uid}
	w.roots[root] = true
	w.rev++
	w.history[w.rev] = w.stored.Clone()
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
// Sometimes the local log comes back on a new timeline, shorter than the remote tier.
func (w *world) actRestart(t *rapid.T) {
	if w.stopped || rapid.IntRange(0, 4).Draw(t, "restart") != 0 {
		return
	}
	if w.stored.NextOffset > w.logFirst && rapid.IntRange(0, 2).Draw(t, "new-timeline") == 0 {
		// truncate the log to a point below the remote next offset (a previous timeline
		// uploaded more than this log holds), then write new chunks there
		live := w.liveSegments()
		s := live[rapid.IntRange(0, len(live)-1).Draw(t, "timeline-seg")]
		for id := range w.chunks {
			if id >= s.first {
				delete(w.chunks, id)
			}
		}
		w.segs = append(w.segs[:0:0], w.segs...)
		for i, x := range w.segs {
			if x == s {
				w.segs = w.segs[:i]
				break
			}
		}
		w.logNext = s.first
		if w.logFirst > w.logNext {
			w.logFirst = w.logNext
		}
		w.clock += 10000
		w.commit()
		if len(w.liveSegments()) == 1 {
			w.logFirst = w.liveSegments()[0].first
		}
	}
	w.refBase = uint64(w.c.ref) + 1000
	w.restarts++
	w.waiters = map[WaiterID]uint64{} // their callers died with the old reader
	w.startCore()
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
		w.step(TransferResult{Ref: k.ref, Attempt: k.attempt, Outcome: OK, UID: w.newUID()})
	case taskPersist:
		w.step(PersistResult{Ref: k.ref, Outcome: PersistFailed, Now: w.clock})
	case taskGroup:
		w.step(GroupUploadResult{Ref: k.ref, Attempt: k.attempt, Outcome: OK, UID: w.newUID()})
	case taskFetch:
		w.step(RetentionGroupFailed{Ref: k.ref})
	default:
		return
	}
	if !w.stopped && w.c.stats.IgnoredResults != before+1 {
		w.t.Fatalf("a result addressed to a crashed reader was not ignored")
	}
}

func (w *world) newUID() uint64 {
	w.uid++
	return w.uid
}

func (w *world) runTransfer(k *mTask, t *rapid.T) {
	d := k.desc
	for _, s := range d.Spans {
		if w.segDeleted(s.Segment) {
			w.step(TransferResult{Ref: k.ref, Attempt: k.attempt, Outcome: SegmentGone, LocalFirst: w.logFirst, Reason: "enoent"})
			return
		}
	}
	roll := 0
	if w.faults {
		roll = rapid.IntRange(0, 19).Draw(t, "transfer-fault")
	}
	switch {
	case roll >= 15 && roll < 17:
		w.step(TransferResult{Ref: k.ref, Attempt: k.attempt, Outcome: Retriable, Reason: "503", Jitter: rapid.Float64Range(0, 0.99).Draw(t, "jitter")})
	case roll == 17:
		w.step(TransferResult{Ref: k.ref, Attempt: k.attempt, Outcome: NonTransient, Reason: "403"})
	case roll == 18:
		// the result is lost (task killed): the object may even exist; the deadline resubmits
		if rapid.Bool().Draw(t, "put-anyway") {
			w.putFragment(d)
		}
	case roll == 19:
		// the first result wins; a duplicate of it arrives later
		uid := w.putFragment(d)
		ev := TransferResult{Ref: k.ref, Attempt: k.attempt, Outcome: OK, UID: uid}
		w.step(ev)
		before := w.c.stats.IgnoredResults
		w.step(ev)
		if w.c.phase == phaseRunning && w.c.stats.IgnoredResults != before+1 {
			t.Fatalf("duplicate transfer result was not ignored")
		}
	default:
		w.step(TransferResult{Ref: k.ref, Attempt: k.attempt, Outcome: OK, UID: w.putFragment(d)})
	}
}

func (w *world) segDeleted(name string) bool {
	for _, s := range w.segs {
		if s.name == name {
			return s.deleted
		}
	}
	return true // truncated away by a new timeline
}

func (w *world) putFragment(d *fragment.Description) uint64 {
	uid := w.newUID()
	w.objs[uid] = &mObject{kind: manifest.KindFragment, first: d.FirstOffset, next: d.NextOffset, size: d.Size}
	return uid
}

func (w *world) runPersist(k *mTask, t *rapid.T) {
	p := k.persist
	if w.faults && rapid.IntRange(0, 6).Draw(t, "persist-fault") == 0 {
		if rapid.Bool().Draw(t, "root-put") {
			w.roots[RootRef{Epoch: p.Epoch, UID: w.newUID()}] = true // orphan root
		}
		w.step(PersistResult{Ref: k.ref, Outcome: PersistFailed, Reason: "etcd unavailable", Now: w.clock})
		return
	}
	root := RootRef{Epoch: p.Epoch, UID: w.newUID()}
	w.roots[root] = true
	switch {
	case w.deleted && p.ExpectedRevision > 0:
		w.step(PersistResult{Ref: k.ref, Outcome: PersistNotFound, Now: w.clock})
		return
	case w.deleted || p.ExpectedRevision != w.rev || p.Epoch < w.epoch:
		w.step(PersistResult{Ref: k.ref, Outcome: PersistConflict, Now: w.clock})
		return
	}
	w.rev++
	w.stored = p.Root
	w.storedRoot = root
	w.epoch = p.Epoch
	w.history[w.rev] = p.Root
	w.checkDurable(w.stored, "persisted manifest")
	w.step(PersistResult{Ref: k.ref, Outcome: PersistOK, Revision: w.rev, RootUID: root.UID, Now: w.clock})
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
			if o := w.objs[c.UID]; live && (o == nil || o.deleted) {
				t.Fatalf("group child %s is not in S3", FormatEntry(c))
			}
		}
		w.objs[uid] = &mObject{kind: g.Kind, first: g.Children[0].FirstOffset, size: size, children: g.Children}
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

func (w *world) actFireTimer(t *rapid.T) {
	if len(w.timers) == 0 {
		return
	}
	i := rapid.IntRange(0, len(w.timers)-1).Draw(t, "timer")
	tm := w.timers[i]
	w.timers = append(w.timers[:i], w.timers[i+1:]...)
	if tm.core != w.c {
		return // the timer died with its reader
	}
	w.step(tm.ev)
}

// step feeds one event and executes its effects, checking each on the way.
func (w *world) step(ev Event) {
	if w.stopped {
		if _, ok := ev.(AwaitOffset); !ok {
			return
		}
	}
	memNext := w.c.mem.NextOffset
	w.lastEvent = ev
	effs, err := w.c.Step(ev)
	if err != nil {
		w.t.Fatalf("step %T%+v: %v", ev, ev, err)
	}
	effs = append([]Effect(nil), effs...)
	w.fed = append(w.fed, ev)
	for _, e := range effs {
		w.outs = append(w.outs, e.String())
	}
	w.t.Logf("> %T%+v", ev, ev)
	for _, e := range effs {
		w.t.Logf("    %s", e)
	}
	reset := false
	for _, e := range effs {
		if _, ok := e.(Reset); ok {
			reset = true
		}
		if _, ok := e.(Reinitialize); ok {
			reset = true
		}
	}
	for _, e := range effs {
		w.execute(ev, e)
	}
	// invariant 3: the in-memory next offset never goes down except by a reset
	if w.c.phase == phaseRunning && !reset && w.c.mem.NextOffset < memNext {
		if _, ok := ev.(Resolved); !ok {
			if _, ok := ev.(LogOpened); !ok {
				w.t.Fatalf("in-memory next offset went down from %d to %d on %T without a reset", memNext, w.c.mem.NextOffset, ev)
			}
		}
	}
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
	case StartDrain:
		w.draining, w.drainPos = true, e.From
	case Reset:
		w.resets++
		w.resetAt = e.DrainFrom
		if e.DrainFrom != w.logFirst {
			t.Fatalf("reset to %d, the local log starts at %d", e.DrainFrom, w.logFirst)
		}
		w.draining, w.drainPos = true, e.DrainFrom
	case RegisterOffsetListener:
		if e.Offset != w.drainPos {
			t.Fatalf("listener at %d, drain position %d", e.Offset, w.drainPos)
		}
	case SubmitTransfer:
		w.checkFragment(e.Fragment, e.Size)
		if e.Fragment.Size < w.cfg.FragmentTargetSize {
			if _, forced := ev.(ForceCut); !forced {
				t.Fatalf("fragment of %d bytes cut below the target %d without a forced cut", e.Fragment.Size, w.cfg.FragmentTargetSize)
			}
		}
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
	case ResubmitTransferAfter:
		if e.Delay < DefaultTransientBackoffBase/2 || e.Delay > DefaultUploadRetryMaxDelay {
			t.Fatalf("retry delay %s out of range", e.Delay)
		}
		w.timers = append(w.timers, mTimer{ev: RetryTimer{Ref: e.Ref, Attempt: e.Attempt}, core: w.c})
	case RetryGroupUploadAfter:
		w.timers = append(w.timers, mTimer{ev: RetryTimer{Ref: e.Ref, Attempt: e.Attempt}, core: w.c})
	case Stalled, Unstalled:
	case RemoteRetention:
		modelStats["retention-edits"]++
		if e.Edit.SetNextOffset || e.Edit.At != 0 || len(e.Edit.Insert) != 0 {
			t.Fatalf("retention edit that is not a head truncation: %s", FormatEdit(e.Edit))
		}
	case StartPersist:
		w.checkStartPersist(e)
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
		if w.c.inflight != nil || w.c.retention != nil {
			t.Fatalf("group upload while a persist or retention is in flight")
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
	case UpdateRange:
		if !gated(ev) {
			t.Fatalf("update-range on %T: not after a persist", ev)
		}
		if e.Revision != w.rev || !e.Manifest.Equal(w.stored) {
			t.Fatalf("update-range rev %d %s, etcd holds rev %d %s", e.Revision, FormatManifest(e.Manifest), w.rev, FormatManifest(w.stored))
		}
	case Broadcast:
		if !gated(ev) {
			t.Fatalf("broadcast on %T", ev)
		}
		if e.Seq != w.rev {
			t.Fatalf("broadcast seq %d, etcd revision %d", e.Seq, w.rev)
		}
		for _, name := range e.To {
			r := w.replicas[name]
			if r == nil {
				t.Fatalf("broadcast to unknown replica %s", name)
			}
			if !r.has || r.epoch != e.Epoch || e.Seq != r.seq+1 {
				w.tasks = append(w.tasks, &mTask{kind: taskResync, replica: name, core: w.c})
				continue
			}
			modelStats["replica-applies"]++
			m, err := r.m.ApplyAll(e.Edits)
			if err != nil {
				t.Fatalf("replica %s: broadcast seq %d does not apply: %v", name, e.Seq, err)
			}
			// invariant 14: a replica's manifest is always a persisted manifest
			if !m.Equal(w.history[e.Seq]) {
				t.Fatalf("replica %s at seq %d holds %s, persisted was %s", name, e.Seq, FormatManifest(m), FormatManifest(w.history[e.Seq]))
			}
			r.m, r.seq = m, e.Seq
		}
	case SyncReplica:
		want, ok := w.history[e.Revision]
		if !ok || !e.Manifest.Equal(want) {
			t.Fatalf("sync of %s at rev %d with %s: not the persisted manifest", e.Replica, e.Revision, FormatManifest(e.Manifest))
		}
		if r := w.replicas[e.Replica]; r != nil && (!r.has || e.Epoch > r.epoch || e.Epoch == r.epoch && e.Revision >= r.seq) {
			r.has, r.epoch, r.seq, r.m = true, e.Epoch, e.Revision, e.Manifest
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
		modelStats["waiter-replies-ok="+fmt.Sprint(e.OK)] += len(e.Waiters)
		for _, id := range e.Waiters {
			o, ok := w.waiters[id]
			if !ok {
				t.Fatalf("reply to unknown waiter %d", id)
			}
			delete(w.waiters, id)
			if e.OK {
				// invariant 15: only offsets below the persisted next offset
				if o >= w.stored.NextOffset {
					t.Fatalf("waiter %d for offset %d answered, persisted next is %d", id, o, w.stored.NextOffset)
				}
				if o >= w.stored.FirstOffset {
					if _, err := manifest.LookupOffset(w.stored, o, w.fetcher()); err != nil {
						t.Fatalf("waiter %d for offset %d answered, but: %v", id, o, err)
					}
				}
			} else if w.resets == 0 && !w.stopped {
				if _, ok := w.lastEvent.(PersistResult); !ok {
					t.Fatalf("waiter %d failed (%s) with no reset and no stop", id, e.Reason)
				}
			}
		}
	case Reinitialize:
		if pr, ok := ev.(PersistResult); !ok || pr.Outcome != PersistConflict {
			t.Fatalf("reinitialize on %T", ev)
		}
		w.draining = false
		w.tasks = append(w.tasks, &mTask{kind: taskResolve, core: w.c})
	case Stop:
		if !w.deleted {
			t.Fatalf("stop while the stream exists: %s", e.Reason)
		}
		w.stopped = true
		w.draining = false
		if len(w.waiters) > 0 {
			t.Fatalf("stopped with %d waiters unanswered", len(w.waiters))
		}
	case Problem:
		t.Fatalf("core problem: %s", e)
	default:
		t.Fatalf("unknown effect %T", e)
	}
}

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
		if m, ok := w.chunks[c.Header.ChunkID]; ok && (m.size != c.Location.Size || m.seg != c.Location.Segment || m.pos != c.Location.Position) {
			w.t.Fatalf("chunk %d in the fragment is not the log's", c.Header.ChunkID)
		}
	}
}

// checkStartPersist: one persist at a time and never during a head change (invariant 12),
// the root is the fold of the captured edits over the last persisted manifest (or over the
// reset base), retention only truncates the head (invariant 8), and the epoch is the writer's.
func (w *world) checkStartPersist(e StartPersist) {
	t := w.t
	if w.persistsInFlight != 0 {
		t.Fatalf("a second persist started while one is in flight")
	}
	if w.c.rebalance != nil || w.c.retention != nil {
		t.Fatalf("persist started during a rebalance or retention")
	}
	if e.Epoch != w.cfg.Epoch {
		t.Fatalf("persist at epoch %d", e.Epoch)
	}
	base, ok := w.history[e.ExpectedRevision]
	if e.Reset {
		base, ok = manifest.EmptyAt(w.resetAt), true
	}
	if !ok {
		t.Fatalf("persist expects revision %d, never persisted", e.ExpectedRevision)
	}
	folded, err := base.ApplyAll(e.Edits)
	if err != nil {
		t.Fatalf("captured edits do not fold over the persisted manifest: %v", err)
	}
	if !folded.Equal(e.Root) {
		t.Fatalf("persisted root %s is not the fold %s", FormatManifest(e.Root), FormatManifest(folded))
	}
	for _, ed := range e.Edits {
		if !ed.SetNextOffset && len(ed.Insert) == 0 && ed.At != 0 {
			t.Fatalf("retention edit not at the head: %s", FormatEdit(ed))
		}
		if ed.SetNextOffset && (ed.Remove != 0 || len(ed.Insert) != 1) {
			t.Fatalf("append edit of odd shape: %s", FormatEdit(ed))
		}
	}
	if err := e.Root.Check(); err != nil {
		t.Fatalf("persist of an invalid root: %v", err)
	}
	w.checkDurable(e.Root, "root to persist")
}

func (w *world) fetcher() manifest.GroupFetcher {
	return func(e manifest.Entry) ([]manifest.Entry, error) {
		o := w.objs[e.UID]
		if o == nil || o.deleted || o.kind != e.Kind {
			return nil, fmt.Errorf("%s: no such object", FormatEntry(e))
		}
		return o.children, nil
	}
}

// checkDurable: invariants 1, 2 and 10 on a manifest: the tree is consistent, and every live
// fragment is an object in S3, not deleted, covering exactly its range.
func (w *world) checkDurable(m manifest.Manifest, what string) {
	if err := manifest.CheckTree(m, w.fetcher()); err != nil {
		w.t.Fatalf("%s %s: %v", what, FormatManifest(m), err)
	}
	it := manifest.Iterate(m, m.FirstOffset, w.fetcher())
	for {
		f, ok, err := it.Next()
		if err != nil {
			w.t.Fatalf("%s: %v", what, err)
		}
		if !ok {
			break
		}
		o := w.objs[f.Entry.UID]
		if o == nil || o.deleted || o.kind != manifest.KindFragment || o.first != f.Entry.FirstOffset || o.next != f.End || o.size != f.Entry.Size {
			w.t.Fatalf("%s: live fragment %s [%d,%d) is not durable in S3 (%+v)", what, FormatEntry(f.Entry), f.Entry.FirstOffset, f.End, o)
		}
	}
}

// liveUIDs lists every object the stored manifest still needs.
func (w *world) liveUIDs(m manifest.Manifest) map[uint64]bool {
	live := map[uint64]bool{}
	var walk func(es []manifest.Entry, end uint64)
	walk = func(es []manifest.Entry, end uint64) {
		for i, e := range es {
			eEnd := end
			if i+1 < len(es) {
				eEnd = es[i+1].FirstOffset
			}
			if eEnd <= m.FirstOffset {
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

// deleteObjects: invariant 9, only objects the persisted manifest no longer needs go (and,
// for retention, only those wholly below the new first offset).
func (w *world) deleteObjects(e DeleteObjects) {
	t := w.t
	live := w.liveUIDs(w.stored)
	for _, en := range e.Entries {
		objs, err := manifest.CollectForDelete(en, e.From, func(g manifest.Entry) ([]manifest.Entry, error) {
			o := w.objs[g.UID]
			if o == nil {
				return nil, fmt.Errorf("unknown group")
			}
			return o.children, nil
		})
		if err != nil {
			t.Fatalf("delete %s: %v", FormatEntry(en), err)
		}
		for _, x := range objs {
			if live[x.UID] {
				t.Fatalf("delete of %s, which the persisted manifest %s still needs", FormatEntry(x), FormatManifest(w.stored))
			}
			if o := w.objs[x.UID]; o != nil {
				o.deleted = true
			}
		}
	}
	for _, r := range e.Roots {
		if r == w.storedRoot {
			t.Fatalf("delete of the current root %v", r)
		}
		delete(w.roots, r)
	}
}

// tieringRetention deletes local segments wholly below the persisted next offset, never
// the active one: what the tiering's local retention rule does after every persist.
func (w *world) tieringRetention(next uint64) {
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
	// the etcd side: durable, never behind except by a reset (invariants 2, 3)
	w.checkDurable(w.stored, "etcd manifest")
	if w.stored.NextOffset < w.prevStoredNext && w.resets == w.prevResets && w.restarts == 0 {
		t.Fatalf("persisted next offset went down from %d to %d without a reset", w.prevStoredNext, w.stored.NextOffset)
	}
	w.prevStoredNext, w.prevResets = w.stored.NextOffset, w.resets
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
			if wt.offset < c.persisted.NextOffset {
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

// quiesce stops the faults and runs the world until nothing is left to do: liveness. Then
// everything committed must be persisted, and every waiter below the end answered.
func (w *world) quiesce() {
	t := w.t
	w.faults = false
	for i := 0; i < 20000; i++ {
		if w.stopped {
			return
		}
		switch {
		case len(w.tasks) > 0:
			w.runTask(0, t)
		case w.draining && w.drainPos != w.logNext:
			w.actDrainAll()
		case w.c.phase == phaseRunning && !w.c.asm.Empty():
			w.step(ForceCut{})
		case w.firePersistOrRetryTimer():
		case len(w.timers) > 0:
			tm := w.timers[0]
			w.timers = w.timers[1:]
			if tm.core == w.c {
				w.step(tm.ev)
			}
		default:
			w.checkInvariants()
			w.checkDone()
			return
		}
		w.checkInvariants()
	}
	t.Fatalf("no quiescence: tasks=%d timers=%d status:\n%s", len(w.tasks), len(w.timers), w.c.Status())
}

func (w *world) actDrainAll() {
	for w.draining && w.drainPos != w.logNext {
		if w.drainPos < w.logFirst {
			w.step(DrainSegmentGone{LocalFirst: w.logFirst})
			continue
		}
		c := w.chunks[w.drainPos]
		h := segments.Header{Records: c.records, Timestamp: c.ts, Epoch: w.epoch, ChunkID: c.id, DataLen: uint32(c.size - segments.HeaderSize)}
		w.drainPos = h.NextID()
		w.step(ChunkDrained{Header: h, Location: segments.Location{Segment: c.seg, Position: c.pos, Size: c.size}})
	}
}

// firePersistOrRetryTimer fires a persist or retry timer first: deadlines only matter for
// lost results, and none are lost now.
func (w *world) firePersistOrRetryTimer() bool {
	for i, tm := range w.timers {
		switch tm.ev.(type) {
		case PersistTimer, RetryTimer:
			w.timers = append(w.timers[:i], w.timers[i+1:]...)
			if tm.core == w.c {
				w.step(tm.ev)
			}
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
	for _, ev := range w.fed {
		effs, err := c.Step(ev)
		if err != nil {
			w.t.Fatalf("replay: %v", err)
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
	if c.phase != phaseRunning {
		t.Fatalf("quiescent but %s", c.phase)
	}
	if w.stored.NextOffset != w.logNext {
		t.Fatalf("liveness: persisted next %d, committed end %d\nstatus:\n%s", w.stored.NextOffset, w.logNext, c.Status())
	}
	if len(c.transfers) != 0 || len(c.pending) != 0 || c.reset != nil || c.inflight != nil {
		t.Fatalf("liveness: work left: %s", c.Status())
	}
	for id, o := range w.waiters {
		if o < w.logNext {
			t.Fatalf("liveness: waiter %d for %d never answered", id, o)
		}
	}
	// nothing fails through: replicas that asked got a sync and agree with etcd
	for name, r := range w.replicas {
		if r.has && r.seq == w.rev && !r.m.Equal(w.stored) {
			t.Fatalf("replica %s at seq %d disagrees with etcd", name, r.seq)
		}
	}
	_ = time.Second
}
