package read

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// DefaultBudgetBytes is the node-wide read budget when the setting is zero.
const DefaultBudgetBytes = 256 << 20

// Budget divides the node's read budget (read_budget_bytes) evenly among the open
// remote readers: each holds at most its share (fetched, buffered, delivered and not yet
// consumed), so many readers stay bounded together, and a slow consumer fills only its own
// share and stops its own fetching without slowing anyone else. A reader that opens or
// closes changes every share: each reader gets its new share as a budgetShare message.
type Budget struct {
	total int64
	bufs  *readBufs // the readers' range buffers, recycled

	mu      sync.Mutex
	readers map[*actor.PID]*actor.RootContext
}

// budgetShare tells a remote reader its share of the node's read budget.
type budgetShare struct{ bytes int64 }

func NewBudget(total int64) *Budget {
	if total <= 0 {
		total = DefaultBudgetBytes
	}
	return &Budget{total: total, bufs: newReadBufs(total), readers: make(map[*actor.PID]*actor.RootContext)}
}

// join adds a reader and returns its share (everyone else gets theirs by message).
func (b *Budget) join(root *actor.RootContext, pid *actor.PID) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
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
		b.bufs.drop()
	}
	b.spreadLocked(nil)
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
