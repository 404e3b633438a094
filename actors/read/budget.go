package read

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/streamtier/streamtier/actors/internal/shell"
)

// DefaultBudgetBytes is the node-wide read budget when the setting is zero.
const DefaultBudgetBytes = 256 << 20

// WarmFor is how long a node keeps its readers' range buffers after the last reader closed
// (Budget.KeepWarm): a read that follows another within it reuses them instead of
// allocating and clearing up to the budget's worth again (about 190 MB per GiB read
// from a cold pool); an idle node still keeps nothing after it.
const WarmFor = 5 * time.Second

// Budget divides the node's read budget (read_budget_bytes) evenly among the open
// remote readers: each holds at most its share (fetched, buffered, delivered and not yet
// consumed), so many readers stay bounded together, and a slow consumer fills only its own
// share and stops its own fetching without slowing anyone else. A reader that opens or
// closes changes every share: each reader gets its new share as a budgetShare message.
// It also remembers the concurrency the node's reads last settled at, from which the next
// read starts its search (Learned).
type Budget struct {
	total   int64
	bufs    *readBufs    // the readers' range buffers, recycled
	learned atomic.Int64 // the level a reader's search last held and confirmed (0: none)

	mu      sync.Mutex
	readers map[*actor.PID]*actor.RootContext
	// The range buffers outlive the last reader by warm (KeepWarm; 0: dropped at once), so
	// that back-to-back reads do not allocate and clear their buffers again each time.
	clock    shell.Clock
	warm     time.Duration
	stopDrop func() bool // the armed drop, nil: none
	idleGen  uint64      // counts the times the last reader left: a drop is for one of them
	closed   bool
}

// budgetShare tells a remote reader its share of the node's read budget.
type budgetShare struct{ bytes int64 }

func NewBudget(total int64) *Budget {
	if total <= 0 {
		total = DefaultBudgetBytes
	}
	return &Budget{total: total, bufs: newReadBufs(total), readers: make(map[*actor.PID]*actor.RootContext)}
}

// Learned is the number of range GETs in flight the node's reads last settled at (0: no
// read settled yet): a new read's search starts there (fetchcore.Config.Learned) instead of
// at fetchcore.DefaultStartConcurrency, so back-to-back reads against the same S3 do not
// each climb from four again. The search moves on from it by its rules.
func (b *Budget) Learned() int { return int(b.learned.Load()) }

// learn records the level a reader's search settled at.
func (b *Budget) learn(c int) { b.learned.Store(int64(c)) }

// KeepWarm keeps the range buffers for d after the last reader closed (on clock), instead
// of dropping them at once: a node's budget, which the next read will use. A reader's own
// budget (no node) keeps nothing after it closes.
func (b *Budget) KeepWarm(clock shell.Clock, d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.clock, b.warm = shell.OrWall(clock), d
}

// Close drops the buffers and any drop still armed (the node stops).
func (b *Budget) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	b.disarmLocked()
	b.bufs.drop()
}

func (b *Budget) disarmLocked() {
	if b.stopDrop != nil {
		b.stopDrop()
		b.stopDrop = nil
	}
}

// join adds a reader and returns its share (everyone else gets theirs by message).
func (b *Budget) join(root *actor.RootContext, pid *actor.PID) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.disarmLocked()
	b.readers[pid] = root
	return b.spreadLocked(pid)
}

// leave removes a reader; the others get the larger share.
func (b *Budget) leave(pid *actor.PID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.readers[pid]; !ok {
		return
	}
	delete(b.readers, pid)
	if len(b.readers) == 0 {
		b.idleLocked()
	}
	b.spreadLocked(nil)
}

// idleLocked is the last reader's leaving: the buffers go now, or after the warm period
// if no reader joins meanwhile.
func (b *Budget) idleLocked() {
	if b.warm <= 0 || b.closed {
		b.bufs.drop()
		return
	}
	b.disarmLocked()
	b.idleGen++
	gen := b.idleGen
	b.stopDrop = b.clock.AfterFunc(b.warm, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if gen == b.idleGen && len(b.readers) == 0 {
			b.stopDrop = nil
			b.bufs.drop()
		}
	})
}

func (b *Budget) spreadLocked(except *actor.PID) int64 {
	share := b.total / int64(max(len(b.readers), 1))
	share = max(share, 1)
	for pid, root := range b.readers {
		if pid != except {
			root.Send(pid, budgetShare{bytes: share})
		}
	}
	return share
}
