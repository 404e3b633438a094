package actors

import (
	"os"
	"sync"
	"sync/atomic"
)

// readBufs recycles the range buffers of the node's remote readers. A range GET reads
// into a buffer from it; the chunks delivered from that range are sub-slices of the
// buffer, so it comes back (put) only when the reader's core says nothing refers to it any
// more: the consumer called Next past every chunk cut from it (a ReadItem's Chunk is valid
// until the next Next or Close). Without it every 4 MiB range was a fresh allocation, and
// the garbage collector's share cost about a third of the throughput.
//
// It holds buffers of one size (the node's range size; a smaller range takes one too, a
// larger one is allocated and dropped). The free list never holds more than the read
// budget's worth (in use plus free stays within what the budget lets the readers hold),
// and it is emptied when the last reader closes, so an idle node keeps nothing.
type readBufs struct {
	limit  int64 // bytes the free list may hold: the node's read budget
	poison bool  // debug: fill a buffer that comes back, so a consumer that kept a chunk sees it

	mu   sync.Mutex
	size int64
	free [][]byte

	allocs atomic.Int64 // buffers allocated (for tests and the benchmark)
	reuses atomic.Int64 // buffers taken from the free list
}

// readPoisonEnv turns on readBufs.poison: STREAMTIER_DEBUG_READ_POISON=1 makes every
// recycled range buffer 0xA5 bytes at once, so a consumer that keeps a chunk past the next
// Next reads garbage (and fails its checks) instead of silently racing a later range.
const readPoisonEnv = "STREAMTIER_DEBUG_READ_POISON"

func newReadBufs(limit int64) *readBufs {
	return &readBufs{limit: limit, poison: os.Getenv(readPoisonEnv) == "1"}
}

// get returns a buffer of at least n bytes for a range of a reader whose ranges are size
// bytes long.
func (p *readBufs) get(size, n int64) []byte {
	if n > size {
		p.allocs.Add(1)
		return make([]byte, n)
	}
	p.mu.Lock()
	if size != p.size { // another range size (a node's readers share one): start over
		p.size, p.free = size, nil
	}
	if k := len(p.free); k > 0 {
		b := p.free[k-1]
		p.free[k-1] = nil
		p.free = p.free[:k-1]
		p.mu.Unlock()
		p.reuses.Add(1)
		return b[:n]
	}
	p.mu.Unlock()
	p.allocs.Add(1)
	return make([]byte, n, size)
}

// put gives back a buffer get returned, once nothing refers to its bytes.
func (p *readBufs) put(b []byte) {
	b = b[:cap(b)]
	if p.poison && len(b) > 0 {
		b[0] = 0xA5
		for i := 1; i < len(b); i *= 2 { // doubling copies: fast, also under the race detector
			copy(b[i:], b[:i])
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if int64(cap(b)) != p.size || int64(len(p.free)+1)*p.size > p.limit {
		return
	}
	p.free = append(p.free, b)
}

// drop empties the free list (the last reader closed).
func (p *readBufs) drop() {
	p.mu.Lock()
	p.free = nil
	p.mu.Unlock()
}
