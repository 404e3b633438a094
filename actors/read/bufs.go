package read

import (
	"os"
	"sync"
	"sync/atomic"
)

// readBufs recycles the range buffers of the node's remote readers. A range GET reads
// into a buffer from it; the chunks delivered from that range are sub-slices of the
// buffer, so it comes back (put) only when the reader's core says nothing refers to it any
// more: the consumer called Next past every chunk cut from it (a Item's Chunk is valid
// until the next Next or Close). Without it every 4 MiB range was a fresh allocation, and
// the garbage collector's share cost about a third of the throughput.
//
// It holds buffers in size classes: the node's range size, its half, its quarter and so
// on down to 64 KiB; a range takes the smallest class that holds it (a stream of small
// fragments has small ranges: a 128 KiB range in a 4 MiB buffer wasted 32 times its size
// and the time to clear it), a range larger than the range size is allocated and dropped.
// The free lists together never hold more than the read budget's worth (in use plus free
// stays within what the budget lets the readers hold), and they are emptied when the last
// reader closes (a node's budget: WarmFor later, if no reader opened meanwhile), so an idle
// node keeps nothing.
type readBufs struct {
	limit  int64 // bytes the free lists may hold: the node's read budget
	poison bool  // debug: fill a buffer that comes back, so a consumer that kept a chunk sees it

	mu        sync.Mutex
	size      int64              // the range size the classes derive from
	free      map[int64][][]byte // by capacity (a class)
	freeBytes int64

	allocs atomic.Int64 // buffers allocated (for tests and the benchmark)
	reuses atomic.Int64 // buffers taken from a free list
}

// minBufClass is the smallest class.
const minBufClass = 64 << 10

// readPoisonEnv turns on readBufs.poison: STREAMTIER_DEBUG_READ_POISON=1 makes every
// recycled range buffer 0xA5 bytes at once, so a consumer that keeps a chunk past the next
// Next reads garbage (and fails its checks) instead of silently racing a later range.
const readPoisonEnv = "STREAMTIER_DEBUG_READ_POISON"

func newReadBufs(limit int64) *readBufs {
	return &readBufs{limit: limit, poison: os.Getenv(readPoisonEnv) == "1"}
}

// class is the capacity of the buffer a range of n bytes takes when ranges are size bytes
// long, or 0: not pooled.
func class(size, n int64) int64 {
	if n > size {
		return 0
	}
	c := size
	for c/2 >= n && c/2 >= minBufClass {
		c /= 2
	}
	return c
}

// get returns a buffer of n bytes (capacity its class) for a range of a reader whose
// ranges are size bytes long.
func (p *readBufs) get(size, n int64) []byte {
	c := class(size, n)
	if c == 0 {
		p.allocs.Add(1)
		return make([]byte, n)
	}
	p.mu.Lock()
	if size != p.size { // another range size (a node's readers share one): start over
		p.size, p.free, p.freeBytes = size, nil, 0
	}
	if l := p.free[c]; len(l) > 0 {
		b := l[len(l)-1]
		l[len(l)-1] = nil
		p.free[c] = l[:len(l)-1]
		p.freeBytes -= c
		p.mu.Unlock()
		p.reuses.Add(1)
		return b[:n]
	}
	p.mu.Unlock()
	p.allocs.Add(1)
	return make([]byte, n, c)
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
	c := int64(cap(b))
	p.mu.Lock()
	defer p.mu.Unlock()
	if class(p.size, c) != c || p.freeBytes+c > p.limit {
		return
	}
	if p.free == nil {
		p.free = map[int64][][]byte{}
	}
	p.free[c] = append(p.free[c], b)
	p.freeBytes += c
}

// drop empties the free lists (the last reader closed).
func (p *readBufs) drop() {
	p.mu.Lock()
	p.free, p.freeBytes = nil, 0
	p.mu.Unlock()
}
