package readercore

import (
	"fmt"
	"sort"
	"time"

	"pgregory.net/rapid"

	"github.com/streamtier/streamtier/actors/divergence"
	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/manifest"
)

// The model world: what the shell around a core sees and does, kept small. A local log of
// committed chunks in segments (each chunk with the epoch it was written in and a CRC that
// differs whenever the content does), an "S3" map of objects by uid (fragments keep the
// chunks they hold, groups their entries), an "etcd" record (revision, stored manifest,
// root, epoch, history by revision), replicas, waiters and the shell's timers. The objects
// and the shell's comparison live in model_remote_test.go, the actions in
// model_actions_test.go, the effects' execution in model_effects_test.go and the invariant
// checks in model_checks_test.go.

// mChunk is one committed chunk of the local log.
type mChunk struct {
	id      uint64
	records uint32
	size    int64
	ts      int64
	epoch   uint64
	crc     uint32
	seg     string
	pos     int64
}

func (c mChunk) next() uint64 { return c.id + uint64(c.records) }

// ident is what the comparison looks at: the same chunk in both tiers has the same ident.
func (c mChunk) ident() divergence.Chunk {
	return divergence.Chunk{ID: c.id, Next: c.next(), Epoch: c.epoch, CRC: c.crc, Size: c.size}
}

type mSeg struct {
	name    string
	first   uint64
	chunks  int
	size    int64
	deleted bool
}

// mObject is an object in S3. A fragment keeps its chunks (identity and place in the
// object), a group its entries.
type mObject struct {
	kind     manifest.Kind
	first    uint64
	next     uint64 // where its range ends (a group: where the run it folded ended)
	size     uint64
	chunks   []mObjChunk      // fragments
	children []manifest.Entry // groups
	deleted  bool
}

type mObjChunk struct {
	c   divergence.Chunk
	ts  int64
	pos uint32 // of its header in the object
}

type taskKind int

const (
	taskTransfer taskKind = iota
	taskPersist
	taskGroup
	taskFetch
	taskLookup
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
	lookup  LookUpLeaves
	replica string
	core    *Core // the core that started it (a restart makes the old one's results stale)
}

// mTimer is a timer the shell armed. A timed one (a retry timer) fires at due on the shell's
// monotonic clock, which then moves there, and carries that time (RetryTimer.At); the others
// (persist timer, transfer deadline) fire at any time. retry marks the stream's transfer
// retry timer; stale, one cancelled after it had already fired (delivered anyway).
type mTimer struct {
	ev    Event
	core  *Core
	timed bool
	due   time.Duration
	retry bool
	stale bool
}

type mReplica struct {
	has   bool
	epoch uint64
	root  rootKey
	m     manifest.Manifest
}

// rootKey names a persisted manifest as replica messages do: its root's seq and uid.
type rootKey struct{ seq, uid uint64 }

// mAck is an offset await_offset answered ok, and the chunk that held it then.
type mAck struct {
	chunk divergence.Chunk
}

// mTruncation is what the model knows of a truncation the core announced: where it cut,
// the base the captured edits fold over, and whether the cut was proven (a divergence the
// model verified against its own log) or an operator's choice.
type mTruncation struct {
	at       uint64
	base     manifest.Manifest
	operator bool
}

type world struct {
	behindAt [2]uint64 // the local log bounds when the core stalled behind
	t        *rapid.T
	c        *Core
	cfg      Config

	// local log
	chunks   map[uint64]mChunk
	timeline map[uint64]mChunk // every chunk of the current timeline, also those retention deleted (a replica may still hold them)
	segs     []*mSeg
	logFirst uint64
	logNext  uint64
	logEpoch uint64 // the writer's epoch: new chunks are written in it
	gen      uint32 // bumps whenever the log's tail is rewritten, so new content gets new CRCs
	clock    int64
	segLimit int

	// the drain and the flow (model_flow_test.go)
	drain    drainState
	drainPos uint64 // where the drain's data reader stands
	drainGen uint64
	budget   uint64 // the core's DrainRoom at its last word to the drain
	listenAt uint64
	batch    *mBatch
	misread  map[uint64]int // chunk ids the data reader misreads, and how many more times
	paused   bool           // the core said PauseDrain, and nothing has ended the pause since
	maxChunk uint64         // the largest chunk fed
	// the drain's disagreement with the core at repositionAt: repositioned once, then
	// drainStalls stalls, until the core's position moves (lastDrainNext)
	repositioned  bool
	repositionAt  uint64
	drainStalls   int
	lastDrainNext uint64

	// the shell's monotonic clock (TransferResult.At, RetryTimer.At), the stream's retry
	// timer and what the model knows of the transfers' backoff
	mono        time.Duration
	xfers       map[Ref]*mXfer
	armedRetry  Ref
	retryDue    time.Duration
	firing      Ref      // the stream's armed retry timer, while its firing is fed
	resubmitted []uint64 // first offsets of the fragments resubmitted in this step

	refBase  uint64
	restarts int
	stopped  bool
	faults   bool
	flakyS3  bool // in some runs uploads fail half the time

	// S3
	objs  map[uint64]*mObject
	roots map[RootRef]bool // true while live
	uid   uint64

	// etcd
	rev        int64
	stored     manifest.Manifest
	storedRoot RootRef
	epoch      uint64 // the stored epoch: persists at a lower one are fenced
	deleted    bool
	history    map[int64]manifest.Manifest
	byRoot     map[rootKey]manifest.Manifest // the persisted manifests by root, for replicas
	maxSeq     uint64                        // the highest seq a root took (a listing's)
	everRef    map[uint64]bool               // every object some persisted manifest referenced

	tasks    []*mTask
	timers   []mTimer
	waiters  map[WaiterID]uint64
	waiterID WaiterID
	flushes  []uint64 // every offset a flush awaited (a core never forgets one but by a restart)
	replicas map[string]*mReplica

	// what the checks remember
	declared   []gapSpan                 // every gap any core declared
	declaredIn []gapSpan                 // the gaps the current core knows: the resolved root's, and those declared since
	acked      map[uint64]mAck           // offsets answered ok, and what held them
	cmp        divergence.Result         // the comparison handed with the last resolution
	truncation *mTruncation              // the current core's truncation, until persisted
	persisting *mTruncation              // the truncation whose persist etcd is accepting now
	copies     map[uint64]manifest.Entry // replacements the shell made, by uid

	idle idleCutState // the idle cut and the persist failures (model_idlecut_test.go)

	persistsInFlight int // persist tasks of the current core
	coreCfg          Config
	fed              []fedEvent // every event fed to the current core, for the replay check
	outs             []string   // and the effects it answered with
}

// fedEvent is an event fed to the core, and whether it refused it.
type fedEvent struct {
	ev      Event
	refused bool
}

// modelStats counts what the runs exercised, so that a run that never reaches the
// interesting interleavings is visible (go test -v prints it).
var modelStats = map[string]int{}

func newWorld(t *rapid.T) *world {
	w := &world{
		t:        t,
		chunks:   map[uint64]mChunk{},
		timeline: map[uint64]mChunk{},
		objs:     map[uint64]*mObject{},
		roots:    map[RootRef]bool{},
		history:  map[int64]manifest.Manifest{0: manifest.Empty()},
		byRoot:   map[rootKey]manifest.Manifest{{}: manifest.Empty()},
		everRef:  map[uint64]bool{},
		stored:   manifest.Empty(),
		waiters:  map[WaiterID]uint64{},
		replicas: map[string]*mReplica{},
		acked:    map[uint64]mAck{},
		copies:   map[uint64]manifest.Entry{},
		misread:  map[uint64]int{},
		faults:   true,
		clock:    1000,
		epoch:    1,
		logEpoch: 1,
		segLimit: rapid.IntRange(2, 8).Draw(t, "seg-chunks"),
		flakyS3:  rapid.IntRange(0, 2).Draw(t, "flaky-s3") == 0,
	}
	w.cfg = Config{
		StreamID:           "model",
		Epoch:              1,
		FragmentTargetSize: uint64(rapid.IntRange(100, 1500).Draw(t, "target")),
		PersistThreshold:   rapid.IntRange(1, 5).Draw(t, "threshold"),
		RebalanceThreshold: rapid.IntRange(2, 4).Draw(t, "rebalance"),
		FragmentMaxAge:     drawFragmentMaxAge(t),
	}
	// the bound on bytes not yet durable: mostly tight, so that the drain pauses
	switch rapid.IntRange(0, 3).Draw(t, "bound") {
	case 0: // the default, four targets
	case 3:
		w.cfg.MaxUnpersistedBytes = 1 << 30 // never reached
	default:
		w.cfg.MaxUnpersistedBytes = w.cfg.FragmentTargetSize + uint64(rapid.IntRange(0, int(w.cfg.FragmentTargetSize)).Draw(t, "bound-slack"))
	}
	if rapid.Bool().Draw(t, "initial-policy") {
		w.cfg.Retention = w.drawPolicy()
	}
	// a local log that may already hold data, starting anywhere on the chunk grid: chunk
	// sizes in records depend on the offset (see commit), so that every timeline, even one
	// written again from 0, has its chunk boundaries at offsets that are not 2 mod 3. A
	// manifest's next offset is then a chunk boundary of any log the model writes (a remote
	// tier emptied by retention cannot be compared, and the core resumes at its next offset
	// whatever the log holds there).
	w.logFirst = uint64(rapid.IntRange(0, 50).Draw(t, "log-first"))
	if w.logFirst%3 == 2 {
		w.logFirst++
	}
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
		p.MaxBytes = uint64(rapid.IntRange(200, 20000).Draw(w.t, "max-bytes"))
	}
	if rapid.Bool().Draw(w.t, "max-age?") {
		p.MaxAgeMillis = int64(rapid.IntRange(20, 4000).Draw(w.t, "max-age"))
	}
	return p
}

// startCore creates a core (at start and after a crash) and resolves it.
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
	w.closeDrain()
	w.paused = false
	w.xfers = map[Ref]*mXfer{}
	w.armedRetry = 0
	w.idle = idleCutState{}
	w.truncation = nil
	w.resolve()
}

// commit appends one committed chunk to the local log in the writer's epoch, rolling
// segments. Segment names are unique, so a transfer of a rewritten segment finds it gone.
func (w *world) commit() {
	var s *mSeg
	if len(w.segs) > 0 {
		s = w.segs[len(w.segs)-1]
	}
	if s == nil || s.deleted || s.chunks >= w.segLimit {
		w.roll()
		s = w.segs[len(w.segs)-1]
	}
	records := uint32(1 + w.logNext%3) // 0 mod 3: 1 record, 1 mod 3: 2 (see newWorld)
	size := int64(48 + (w.logNext*37)%350)
	crc := uint32(w.logNext*2654435761) ^ uint32(w.logEpoch)<<20 ^ w.gen*40503
	c := mChunk{id: w.logNext, records: records, size: size, ts: w.clock, epoch: w.logEpoch, crc: crc, seg: s.name, pos: s.size}
	w.chunks[c.id] = c
	w.timeline[c.id] = c
	s.chunks++
	s.size += size
	w.logNext += uint64(records)
}

func (w *world) roll() {
	w.segs = append(w.segs, &mSeg{name: fmt.Sprintf("%020d.%d.segment", w.logNext, len(w.segs)), first: w.logNext, size: 8})
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

// deleteOldestSegment is the stream's own retention: the oldest segment goes (never the
// last one), whatever the remote tier holds.
func (w *world) deleteOldestSegment() bool {
	live := w.liveSegments()
	if len(live) < 2 {
		return false
	}
	live[0].deleted = true
	w.logFirst = live[1].first
	for id := range w.chunks {
		if id < w.logFirst {
			delete(w.chunks, id)
		}
	}
	return true
}

// truncateLog drops the log's chunks from `at` (a chunk boundary) on: a tail that never
// reached disk, or one a new leader overwrites. New chunks follow in the segment that held
// the cut (segments starting above it are gone).
func (w *world) truncateLog(at uint64) {
	for id := range w.chunks {
		if id >= at {
			delete(w.chunks, id)
		}
	}
	for id := range w.timeline {
		if id >= at {
			delete(w.timeline, id)
		}
	}
	for _, s := range w.segs {
		if s.deleted {
			continue
		}
		if s.first >= at {
			s.deleted = true // rewritten: a transfer of it finds it gone
			continue
		}
		s.chunks, s.size = 0, 8
		for _, c := range w.chunks {
			if c.seg == s.name {
				s.chunks++
				s.size += c.size
			}
		}
	}
	w.logNext = at
	if w.logFirst > at {
		w.logFirst = at
	}
	w.gen++
}

// replicaLog replaces the local log by a replica's copy of the timeline's chunks in
// [from, to): the same chunks (ids, epochs, CRCs) in segments of its own. A replica may
// hold what the old leader's retention already deleted, and lag behind its end.
func (w *world) replicaLog(from, to uint64) {
	w.chunks = map[uint64]mChunk{}
	for _, s := range w.segs {
		s.deleted = true
	}
	w.logFirst, w.logNext = from, from
	w.gen++
	var ids []uint64
	for id := range w.timeline {
		if id >= from && id < to {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	w.roll()
	for _, id := range ids {
		s := w.segs[len(w.segs)-1]
		if s.chunks >= w.segLimit {
			w.roll()
			s = w.segs[len(w.segs)-1]
		}
		c := w.timeline[id]
		c.seg, c.pos = s.name, s.size
		s.chunks++
		s.size += c.size
		w.chunks[id] = c
		w.timeline[id] = c
		w.logNext = c.next()
	}
	for id := range w.timeline {
		if id >= w.logNext {
			delete(w.timeline, id) // the new leader's timeline goes on from its own end
		}
	}
}

// chunkIDs lists the log's chunk ids in order.
func (w *world) chunkIDs() []uint64 {
	ids := make([]uint64, 0, len(w.chunks))
	for id := range w.chunks {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

func (w *world) header(c mChunk) chunk.Header {
	return chunk.Header{Records: c.records, Timestamp: c.ts, Epoch: c.epoch, ChunkID: c.id, DataCRC: c.crc, DataLen: uint32(c.size - chunk.HeaderSize)}
}

func (w *world) location(c mChunk) chunk.Location {
	return chunk.Location{Segment: c.seg, Position: c.pos, Size: c.size}
}
