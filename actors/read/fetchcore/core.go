package fetchcore

import (
	"fmt"
	"sort"
	"time"

	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/fragment"
)

// phase is where the read as a whole stands.
type phase uint8

const (
	running    phase = iota // reading known leaves, or asking for more
	endRefresh              // everything known is delivered; a fresh manifest was asked for
	ended                   // End reported; waiting for Resume
	failed                  // Fail reported; nothing more
)

// leaf is a known leaf not yet wholly delivered.
type leaf struct {
	Leaf
	regionEnd int64  // 8 + Size
	planPos   int64  // next object position to plan a range at
	nextID    uint64 // chunk id the next chunk must carry
	needIndex bool   // the read starts inside it: plan nothing before the index is here
	indexReq  uint64 // FetchIndex in flight (0: none)
	indexFail int
	// index is the object's index once fetched: every chunk is checked against its record
	// (id, timestamp, position) before it is delivered, for the header bytes the data CRC
	// does not cover. idx is the record of the next chunk.
	index []fragment.IndexRecord
	idx   int
	asm   assembler
}

// rng is a range of one object planned and not yet wholly handed to its assembler.
type rng struct {
	lf         *leaf
	start, end int64 // object positions [start, end)
	next       int64 // first position not received yet
	pieces     []piece
	reserved   int64  // budget bytes held for it: end minus what moved to the assembler
	req        uint64 // Get in flight (0: none)
	timer      uint64 // retry timer armed (0: none)
	fails      int    // failures without progress in a row
}

// timerFor says what a timer retries.
type timerFor struct {
	r     *rng
	index *leaf
	fresh bool // a leaves retry: fresh or not
	leafs bool
}

// Core is one remote read's decisions. Make one with New, call Start once, then Step for
// every event; each returns the effects to execute, in order.
type Core struct {
	cfg    Config
	budget int64
	srch   search

	pos     uint64 // the next offset to deliver
	leaves  []*leaf
	ranges  []*rng // in object order across leaves
	byReq   map[uint64]*rng
	byIndex map[uint64]*leaf
	timers  map[uint64]timerFor

	leavesReq   uint64 // NeedLeaves in flight (0: none)
	leavesFresh bool
	leavesFails int
	leavesDone  bool   // the manifest walked holds nothing after the known leaves
	knownEnd    uint64 // where the last known leaf ends
	mNext       uint64 // next offset of the manifest the leaves came from

	notFound    int // 404s in a row without the manifest moving past them
	notFoundKey string

	inflight   int
	reserved   int64
	buffered   int64
	unconsumed int64
	delivered  int64   // chunk bytes delivered, cumulative
	consumed   int64   // chunk bytes the consumer is done with, cumulative
	pending    []piece // pieces no longer held, waiting for the consumer to pass their mark
	ph         phase
	err        error
	lastID     uint64
	lastIndex  uint64 // FetchIndex ids are numbered on their own: answered apart from ranges and timers
	lastCopy   uint64 // Item.Copy of the last chunk across responses
	out        []Effect

	// counters for status
	gets, retries, shortReads, skips int
}

// New makes a core that reads from offset from.
func New(cfg Config, from uint64) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Core{
		cfg: cfg, budget: cfg.Budget, srch: searchFor(cfg), pos: from,
		byReq: map[uint64]*rng{}, byIndex: map[uint64]*leaf{}, timers: map[uint64]timerFor{},
	}
	return c, nil
}

// Start returns the first effects: the leaves at the read's offset, from a fresh manifest.
func (c *Core) Start() []Effect {
	c.out = c.out[:0]
	c.askLeaves(c.pos, true)
	return c.out
}

// Step applies one event and returns the effects to execute. The slice is valid until the
// next Step.
func (c *Core) Step(ev Event) []Effect {
	c.out = c.out[:0]
	if c.ph == failed {
		return c.out
	}
	switch e := ev.(type) {
	case LeavesFetched:
		c.onLeaves(e)
	case RangeDone:
		c.onRange(e)
	case IndexFetched:
		c.onIndex(e)
	case TimerFired:
		c.onTimer(e)
	case Consumed:
		c.unconsumed = max(c.unconsumed-e.Bytes, 0)
		c.consumed += e.Bytes
		c.releasePending()
	case SetBudget:
		c.budget = max(e.Bytes, 1)
	case Resume:
		if c.ph == ended {
			c.ph = endRefresh
			c.askLeaves(c.pos, true)
		}
	}
	if c.ph != failed {
		c.pump()
	}
	return c.out
}

func (c *Core) emit(e Effect) { c.out = append(c.out, e) }

func (c *Core) newID() uint64 {
	c.lastID++
	return c.lastID
}

func (c *Core) newIndexID() uint64 {
	c.lastIndex++
	return c.lastIndex
}

func (c *Core) fail(err error) {
	if c.ph == failed {
		return
	}
	c.cancelAll()
	c.ph, c.err = failed, err
	c.emit(Fail{Err: err})
}

func (c *Core) askLeaves(from uint64, fresh bool) {
	c.leavesReq, c.leavesFresh = c.newID(), fresh
	c.emit(NeedLeaves{ID: c.leavesReq, From: from, Fresh: fresh})
}

func (c *Core) backoff(fails int) time.Duration {
	d := c.cfg.RetryBase
	for i := 1; i < fails && d < c.cfg.RetryMax; i++ {
		d *= 2
	}
	return min(d, c.cfg.RetryMax)
}

func (c *Core) arm(fails int, t timerFor) uint64 {
	id := c.newID()
	c.timers[id] = t
	c.emit(ArmTimer{ID: id, After: c.backoff(fails)})
	return id
}

func (c *Core) onLeaves(e LeavesFetched) {
	if e.ID == 0 || e.ID != c.leavesReq {
		return
	}
	c.leavesReq = 0
	fresh := c.leavesFresh
	switch e.Outcome {
	case Retriable, NotFound: // a group object retention removed is a stale manifest: refresh
		c.leavesFails++
		c.arm(c.leavesFails, timerFor{leafs: true, fresh: fresh || e.Outcome == NotFound})
		return
	case Fatal:
		c.fail(fmt.Errorf("manifest walk from offset %d: %w", c.knownEnd, e.Err))
		return
	}
	c.leavesFails = 0
	if e.Done && len(e.Leaves) > 0 && e.Leaves[len(e.Leaves)-1].End != e.Next {
		c.fail(fmt.Errorf("manifest walk: the last leaf ends at %d, the manifest's next offset is %d", e.Leaves[len(e.Leaves)-1].End, e.Next))
		return
	}
	if fresh {
		if !c.onFresh(e) {
			return
		}
	} else if len(e.Leaves) > 0 && e.Leaves[0].First != c.knownEnd {
		c.fail(fmt.Errorf("manifest walk: leaf at %d does not follow the known leaves ending at %d", e.Leaves[0].First, c.knownEnd))
		return
	}
	for i, l := range e.Leaves {
		if l.End <= l.First || (i > 0 && l.First != e.Leaves[i-1].End) {
			c.fail(fmt.Errorf("manifest walk: leaf [%d,%d) does not tile the leaves before it", l.First, l.End))
			return
		}
		if !l.Gap && l.Size == 0 {
			c.fail(fmt.Errorf("manifest walk: fragment [%d,%d) with an empty chunk region", l.First, l.End))
			return
		}
		lf := &leaf{Leaf: l, regionEnd: fragment.ObjectHeaderSize + int64(l.Size), planPos: fragment.ObjectHeaderSize, nextID: l.First}
		lf.asm.reset(fragment.ObjectHeaderSize)
		if !l.Gap && l.First < c.pos && len(c.leaves) == 0 {
			lf.needIndex = true // the read starts inside it
		}
		c.leaves = append(c.leaves, lf)
		c.knownEnd = l.End
	}
	c.leavesDone, c.mNext = e.Done, e.Next
	if c.ph == endRefresh && len(e.Leaves) > 0 {
		c.ph = running
	}
}

// onFresh positions the read on a fresh manifest (the known leaves are all gone: at the
// start, at the end, after a 404): a skipped range up to its first offset, the end when it
// holds nothing at the read's offset. It reports whether the leaves are to be taken.
func (c *Core) onFresh(e LeavesFetched) bool {
	if e.First > c.pos {
		c.deliver(Item{Kind: ItemSkipped, Offset: c.pos, End: e.First})
		c.pos = e.First
		c.skips++
		c.notFound = 0
	}
	if e.Next < c.pos {
		c.fail(fmt.Errorf("the remote tier's next offset %d went below the read position %d (the remote tier was truncated)", e.Next, c.pos))
		return false
	}
	if len(e.Leaves) == 0 {
		if c.pos != e.Next || !e.Done {
			c.fail(fmt.Errorf("manifest walk from %d: no leaf, but the manifest's next offset is %d", c.pos, e.Next))
			return false
		}
		// Nothing is known (a fresh walk comes only then) and nothing is left: the end.
		c.knownEnd, c.leavesDone, c.mNext = c.pos, true, e.Next
		c.ph = ended
		c.emit(End{At: e.Next})
		return false
	}
	if l := e.Leaves[0]; l.First > c.pos || l.End <= c.pos {
		c.fail(fmt.Errorf("manifest walk from %d: first leaf [%d,%d) does not hold it", c.pos, l.First, l.End))
		return false
	}
	c.knownEnd = e.Leaves[0].First
	return true
}

func (c *Core) onRange(e RangeDone) {
	r := c.byReq[e.ID]
	if r == nil {
		c.emit(Release{ID: e.ID}) // not asked for (any more): nothing refers to its bytes
		return
	}
	delete(c.byReq, e.ID)
	inflight := c.inflight
	c.inflight--
	r.req = 0
	if int64(len(e.Data)) > r.end-r.next {
		c.fail(&CorruptError{Key: r.lf.Key, Position: r.next, Reason: fmt.Sprintf("range answered with %d bytes, %d asked", len(e.Data), r.end-r.next)})
		return
	}
	c.srch.observe(e.At, int64(len(e.Data)), inflight)
	if len(e.Data) == 0 {
		c.emit(Release{ID: e.ID})
	} else {
		r.pieces = append(r.pieces, piece{b: e.Data, id: e.ID})
		r.next += int64(len(e.Data))
		r.fails = 0
		c.notFound = 0
	}
	if r.next == r.end {
		return
	}
	// short or failed: the rest of the range, alone, from the byte where it stopped
	switch e.Outcome {
	case OK:
		c.shortReads++
		if len(e.Data) > 0 {
			return // re-requested at once by the planner
		}
		r.fails++ // an empty answer without an error would spin: back off
		r.timer = c.arm(r.fails, timerFor{r: r})
	case Retriable:
		c.retries++
		r.fails++
		r.timer = c.arm(r.fails, timerFor{r: r})
	case NotFound:
		if len(c.leaves) > 0 && r.lf != c.leaves[0] {
			// An object after the one being delivered: retention removes a prefix, so the
			// head answers 404 too if that is what happened; if not, this object is lost,
			// and the read must still deliver everything before it. Retry it with backoff
			// until it is the head.
			c.retries++
			r.fails++
			r.timer = c.arm(r.fails, timerFor{r: r})
			return
		}
		c.onNotFound(r.lf)
	default:
		c.fail(fmt.Errorf("fragment object %s at position %d: %w", r.lf.Key, r.next, e.Err))
	}
}

func (c *Core) onIndex(e IndexFetched) {
	lf := c.byIndex[e.ID]
	if lf == nil {
		return
	}
	delete(c.byIndex, e.ID)
	lf.indexReq = 0
	switch {
	case e.Outcome == Retriable, e.Outcome == NotFound && lf != c.leaves[0]:
		// A 404 behind the head is retried until it is the head, as a range's is.
		c.retries++
		lf.indexFail++
		c.arm(lf.indexFail, timerFor{index: lf})
		return
	case e.Outcome == NotFound:
		c.onNotFound(lf)
		return
	case e.Outcome == Fatal:
		c.fail(fmt.Errorf("index of fragment object %s: %w", lf.Key, e.Err))
		return
	}
	recs := e.Records
	if len(recs) == 0 || recs[0].ChunkID != lf.First {
		c.fail(&CorruptError{Key: lf.Key, Position: fragment.ObjectHeaderSize, Reason: fmt.Sprintf("index does not start at the fragment's first offset %d", lf.First)})
		return
	}
	lf.index = recs
	if !lf.needIndex {
		return
	}
	i := sort.Search(len(recs), func(i int) bool { return recs[i].ChunkID > c.pos }) - 1
	r := recs[i]
	if int64(r.Position) < fragment.ObjectHeaderSize || int64(r.Position) >= lf.regionEnd {
		c.fail(&CorruptError{Key: lf.Key, Position: int64(r.Position), Reason: fmt.Sprintf("index record of chunk %d outside the chunk region", r.ChunkID)})
		return
	}
	lf.needIndex, lf.planPos, lf.nextID, lf.idx = false, int64(r.Position), r.ChunkID, i
	lf.asm.reset(int64(r.Position))
}

// checkIndexed compares the header of the chunk at object position pos with the index
// record it must match (the next one) and with the record after it (or the leaf's end),
// and moves past it. The data CRC covers a chunk's data only; the index says where the
// chunk starts and what id and timestamp it carries, and the next record where it ends and
// the id after it, so a flipped timestamp, record count or trailer length is refused
// before the chunk is delivered, not found at the chunk after it.
func (lf *leaf) checkIndexed(h chunk.Header, pos int64) error {
	bad := func(format string, args ...any) error {
		return &CorruptError{Key: lf.Key, Position: pos, Reason: fmt.Sprintf(format, args...)}
	}
	if lf.idx >= len(lf.index) {
		return bad("chunk %d has no index record (the index lists %d chunks)", h.ChunkID, len(lf.index))
	}
	r := lf.index[lf.idx]
	if r.ChunkID != h.ChunkID || r.Timestamp != h.Timestamp || int64(r.Position) != pos {
		return bad("index record %d (id %d, ts %d, pos %d) disagrees with the chunk (id %d, ts %d, pos %d)",
			lf.idx, r.ChunkID, r.Timestamp, r.Position, h.ChunkID, h.Timestamp, pos)
	}
	nextID, nextPos := lf.End, lf.regionEnd
	if lf.idx+1 < len(lf.index) {
		nextID, nextPos = lf.index[lf.idx+1].ChunkID, int64(lf.index[lf.idx+1].Position)
	}
	if h.NextID() != nextID || pos+h.Size() != nextPos {
		return bad("chunk %d ends at offset %d and position %d; the index puts the next chunk at offset %d and position %d",
			h.ChunkID, h.NextID(), pos+h.Size(), nextID, nextPos)
	}
	lf.idx++
	return nil
}

func (c *Core) onTimer(e TimerFired) {
	t, ok := c.timers[e.ID]
	if !ok {
		return
	}
	delete(c.timers, e.ID)
	switch {
	case t.r != nil:
		if t.r.timer == e.ID {
			t.r.timer = 0 // ready: the planner re-requests it
		}
	case t.index != nil:
		// re-requested by the planner
	case t.leafs:
		if c.leavesReq == 0 {
			if t.fresh {
				c.dropAll()
			}
			c.askLeaves(c.nextLeavesFrom(t.fresh), t.fresh)
		}
	}
}

func (c *Core) nextLeavesFrom(fresh bool) uint64 {
	if fresh {
		return c.pos
	}
	return c.knownEnd
}

// onNotFound handles a 404 on lf's object: retention raced the read (the fresh manifest
// will start above the read, and a skipped range says what went), or the manifest the
// shell sees lags (it still lists the object: retry, a bounded number of times).
func (c *Core) onNotFound(lf *leaf) {
	if lf.Key == c.notFoundKey {
		c.notFound++
	} else {
		c.notFound, c.notFoundKey = 1, lf.Key
	}
	if c.notFound > c.cfg.MaxNotFound {
		c.fail(&MissingObjectError{Key: lf.Key, First: lf.First, Times: c.notFound})
		return
	}
	c.dropAll()
	c.ph = endRefresh // a fresh manifest is asked for; nothing is known
	if c.notFound == 1 {
		c.askLeaves(c.pos, true)
		return
	}
	c.arm(c.notFound-1, timerFor{leafs: true, fresh: true})
}

// dropAll forgets every known leaf and range (their GETs are cancelled), keeping what was
// delivered: the read goes on from pos on a fresh manifest.
func (c *Core) dropAll() {
	c.cancelAll()
	for _, lf := range c.leaves {
		lf.asm.reset(lf.asm.pos)
		c.freeFrom(&lf.asm)
	}
	for _, r := range c.ranges {
		for _, p := range r.pieces {
			c.free(p)
		}
	}
	clear(c.byReq)
	clear(c.byIndex)
	clear(c.timers)
	c.leaves, c.ranges = nil, nil
	c.inflight, c.reserved, c.buffered = 0, 0, 0
	c.leavesReq, c.leavesDone, c.knownEnd = 0, false, c.pos
}

// cancelAll cancels every GET in flight, in request order.
func (c *Core) cancelAll() {
	ids := make([]uint64, 0, len(c.byReq))
	for id := range c.byReq {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		c.emit(Cancel{ID: id})
	}
}

// pump delivers what is whole, plans what the budget and the concurrency allow and asks for
// leaves ahead of need, until nothing more can be done now.
func (c *Core) pump() {
	c.deliverReady()
	if c.ph == failed {
		return
	}
	c.plan()
	if c.ph == failed {
		return
	}
	unplanned := 0
	for _, lf := range c.leaves {
		if lf.Gap || lf.planPos < lf.regionEnd {
			unplanned++
		}
	}
	switch {
	case c.leavesReq != 0 || c.ph != running || len(c.timers) > 0 && c.leavesTimerArmed():
	case !c.leavesDone && unplanned < c.cfg.LeavesAhead:
		c.askLeaves(c.knownEnd, false)
	case c.leavesDone && len(c.leaves) == 0:
		c.ph = endRefresh
		c.askLeaves(c.pos, true)
	}
}

func (c *Core) leavesTimerArmed() bool {
	for _, t := range c.timers {
		if t.leafs {
			return true
		}
	}
	return false
}
