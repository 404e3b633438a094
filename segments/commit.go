package segments

import (
	"container/heap"
	"fmt"

	"github.com/streamtier/streamtier/chunk"
)

// commitState is the committed offset the embedding broker supplies, and the listeners
// waiting for it. It lives in memory only and is guarded by Log.mu.
type commitState struct {
	has  bool
	id   uint64 // chunk id of the last committed chunk
	next uint64 // one past the last offset of that chunk (before capping at what is written)
	// recent are the chunks written above the committed chunk, oldest first from head, so
	// that a commit naming one of them resolves its next offset without I/O.
	recent    []span
	head      int
	listeners listenerHeap
	lastID    ListenerID // the last OnCommittedPast registration's
}

// written accounts for a chunk just written; nextID is the log's new next offset.
func (c *commitState) written(h chunk.Header, nextID uint64) {
	if c.has && h.ChunkID <= c.id {
		// The commit ran ahead of this replica's writes: the chunk is committed already.
		c.next = max(c.next, h.NextID())
		return
	}
	if len(c.recent)-c.head >= maxRecent {
		c.head++
	}
	if c.head > maxRecent {
		c.recent = append(c.recent[:0], c.recent[c.head:]...)
		c.head = 0
	}
	c.recent = append(c.recent, span{h.ChunkID, nextID})
}

// fire notifies the listeners whose offset is below v, the committed next offset.
func (c *commitState) fire(v uint64) {
	for len(c.listeners) > 0 && c.listeners[0].offset < v {
		heap.Pop(&c.listeners).(listener).notify()
	}
}

// fireAll notifies every listener (the log is closing).
func (c *commitState) fireAll() {
	for _, ln := range c.listeners {
		ln.notify()
	}
	c.listeners = nil
}

// listener is one registration: a channel to close or a function to call.
type listener struct {
	offset uint64
	ch     chan struct{}
	fn     func()
	id     ListenerID // 0 for a channel
}

// ListenerID names one OnCommittedPast registration, for Forget; 0 names none.
type ListenerID uint64

func (ln listener) notify() {
	if ln.fn != nil {
		ln.fn()
		return
	}
	close(ln.ch)
}

// listenerHeap orders listeners by offset, lowest first (container/heap's interface).
type listenerHeap []listener

func (h listenerHeap) Len() int           { return len(h) }
func (h listenerHeap) Less(i, j int) bool { return h[i].offset < h[j].offset }
func (h listenerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *listenerHeap) Push(x any)        { *h = append(*h, x.(listener)) }
func (h *listenerHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// SetCommitted records that the chunk with id offset, and everything before it, is
// committed (replicated to a majority): osiris semantics, the committed offset is the chunk
// id of the last committed chunk. An offset inside a chunk commits that whole chunk; an
// offset beyond what is written commits each chunk up to it as it is written (a replica
// may learn of a commit before it writes the chunk). The committed offset never goes back:
// a lower offset is ignored. The error reports an index read that failed while resolving
// the chunk's end; CommittedNext then stays conservative (offset+1).
func (l *Log) SetCommitted(offset uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	c := &l.commit
	if c.has && offset <= c.id {
		return nil
	}
	c.has, c.id = true, offset
	next, err := l.resolveCommitted(offset)
	c.next = max(c.next, next)
	l.publish()
	if err != nil {
		return fmt.Errorf("set committed %d in %s: %w", offset, l.dir, err)
	}
	return nil
}

// resolveCommitted is one past the last offset of the chunk holding off, capped at the
// next offset; called with mu held.
func (l *Log) resolveCommitted(off uint64) (uint64, error) {
	c := &l.commit
	var found span
	ok := false
	for c.head < len(c.recent) && c.recent[c.head].id <= off {
		found, ok = c.recent[c.head], true
		c.head++
	}
	if c.head == len(c.recent) {
		c.recent, c.head = c.recent[:0], 0
	}
	switch {
	case ok && off < found.next:
		return found.next, nil
	case off >= l.nextID || (l.hasLast && off >= l.last.ChunkID):
		return l.nextID, nil
	case off < l.segs[0].first:
		return off + 1, nil // the committed chunk was deleted: only what precedes off+1 is known committed
	}
	seg := l.segs[l.segmentAt(off)]
	if seg.chunks > 0 && off >= seg.lastID {
		return seg.next, nil
	}
	_, next, err := searchIndex(l.dir, seg, off)
	if err != nil {
		return off + 1, err
	}
	return next, nil
}

// Committed is the chunk id of the last committed chunk, false before the first SetCommitted.
func (l *Log) Committed() (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.commit.id, l.commit.has
}

// CommittedNext is one past the last offset of the last committed chunk, capped at
// NextOffset (a commit ahead of this replica's writes counts only what is written); 0
// before the first commit. Chunks whose id is below it may be read and uploaded.
func (l *Log) CommittedNext() uint64 { return l.visible.Load() }

// NotifyWhenCommittedPast returns a channel that is closed once, when CommittedNext()
// exceeds offset (so a drain waiting for chunk id offset registers offset). It is closed
// at once if that already holds, and when the log closes. Registration and commits take
// the same lock, so a commit racing with registration is never lost. An unfired listener
// costs a few bytes until it fires or the log closes.
func (l *Log) NotifyWhenCommittedPast(offset uint64) <-chan struct{} {
	ch := make(chan struct{})
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.visible.Load() > offset {
		close(ch)
		return ch
	}
	heap.Push(&l.commit.listeners, listener{offset: offset, ch: ch})
	return ch
}

// OnCommittedPast calls fn once, when CommittedNext() exceeds offset or the log closes: at
// once (before it returns) if that already holds. It is the goroutine-free form of
// NotifyWhenCommittedPast: an actor registers a function that posts a message to its own
// mailbox, so that ten thousand idle streams wait without ten thousand goroutines. fn runs
// with the log's lock held, from whichever goroutine commits or closes: it must return at
// once (a non-blocking send) and must not call the Log.
// It returns the registration's id for Forget (0 when fn ran at once).
func (l *Log) OnCommittedPast(offset uint64, fn func()) ListenerID {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.visible.Load() > offset {
		fn()
		return 0
	}
	l.commit.lastID++
	heap.Push(&l.commit.listeners, listener{offset: offset, fn: fn, id: l.commit.lastID})
	return l.commit.lastID
}

// Forget removes the OnCommittedPast registration id if it has not fired yet; for 0, or
// one that fired, it does nothing. An actor that stops, or registers again, forgets what
// it registered: a log that nobody commits to would otherwise keep every listener of
// every actor that ever waited on it.
func (l *Log) Forget(id ListenerID) {
	if id == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.commit.listeners {
		if l.commit.listeners[i].id == id {
			heap.Remove(&l.commit.listeners, i)
			return
		}
	}
}

// Listeners is how many commit listeners wait on the log (registered, not fired).
func (l *Log) Listeners() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.commit.listeners)
}
