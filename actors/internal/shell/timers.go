package shell

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Timers owns the timers of one actor incarnation: each fires by sending a message to the
// actor, and all are cancelled together when the incarnation stops or restarts, so no timer
// of an old incarnation ever reaches a new one. Every incarnation is a fresh actor value
// with fresh timers (the producers never hand out an instance twice): StopAll is final for
// the incarnation only. (ReceiveTimeout is not used: it races in this protoactor version.)
type Timers struct {
	// Clock arms the timers; nil: the wall clock.
	Clock Clock

	mu      sync.Mutex
	stopped bool
	next    uint64
	live    map[uint64]func() bool
}

// After sends msg to pid once d has passed, unless cancelled first. It returns a handle for Cancel.
func (t *Timers) After(root *actor.RootContext, pid *actor.PID, d time.Duration, msg any) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return 0
	}
	if t.live == nil {
		t.live = make(map[uint64]func() bool)
	}
	t.next++
	id := t.next
	t.live[id] = OrWall(t.Clock).AfterFunc(d, func() {
		t.mu.Lock()
		_, ok := t.live[id]
		delete(t.live, id)
		stopped := t.stopped
		t.mu.Unlock()
		if ok && !stopped {
			root.Send(pid, msg)
		}
	})
	return id
}

// Cancel stops one timer; cancelling a fired or unknown timer does nothing.
func (t *Timers) Cancel(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if stop, ok := t.live[id]; ok {
		stop()
		delete(t.live, id)
	}
}

// StopAll cancels every timer and refuses new ones: called on Stopping and Restarting.
func (t *Timers) StopAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	for id, stop := range t.live {
		stop()
		delete(t.live, id)
	}
}

// Count is the number of timers armed and not yet fired or cancelled.
func (t *Timers) Count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.live)
}
