package actors

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// timers owns the timers of one actor incarnation: each fires by sending a message to the
// actor, and all are cancelled together when the incarnation stops or restarts, so no timer
// of an old incarnation ever reaches a new one. Every incarnation is a fresh actor value
// with fresh timers (the producers never hand out an instance twice): stopAll is final for
// the incarnation only. (ReceiveTimeout is not used: it races in this protoactor version.)
type timers struct {
	clock clock // nil: the wall clock

	mu      sync.Mutex
	stopped bool
	next    uint64
	live    map[uint64]func() bool
}

// after sends msg to pid once d has passed, unless cancelled first. It returns a handle for cancel.
func (t *timers) after(root *actor.RootContext, pid *actor.PID, d time.Duration, msg any) uint64 {
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
	t.live[id] = orWall(t.clock).AfterFunc(d, func() {
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

// cancel stops one timer; cancelling a fired or unknown timer does nothing.
func (t *timers) cancel(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if stop, ok := t.live[id]; ok {
		stop()
		delete(t.live, id)
	}
}

// stopAll cancels every timer and refuses new ones: called on Stopping and Restarting.
func (t *timers) stopAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	for id, stop := range t.live {
		stop()
		delete(t.live, id)
	}
}

// count is the number of timers armed and not yet fired or cancelled.
func (t *timers) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.live)
}
