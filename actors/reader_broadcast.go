package actors

import (
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors/readercore"
)

// broadcastQueue bounds the requests a broadcast actor holds for its sink; past it the
// oldest is dropped.
const broadcastQueue = 256

// broadcastEdits asks the broadcast actor to send a persisted batch of edits to replicas.
type broadcastEdits struct {
	Stream string
	Edits  readercore.Broadcast
}

// syncReplica asks the broadcast actor to send one replica the persisted manifest.
type syncReplica struct {
	Stream string
	Sync   readercore.SyncReplica
}

// broadcaster is the broadcast actor of one reader incarnation, its child: it carries the
// core's Broadcast and SyncReplica effects, in order, to Config.Replicas (the cluster
// layer). It answers nothing: a replica that misses edits sees that the next broadcast is not
// built on the root it holds and asks for a resync (ResyncRequested).
//
// A sink that blocks holds only the broadcaster's sender goroutine, never the reader: the
// actor queues each request and returns at once, and the sender (started with the actor,
// told to stop when it stops) makes the calls one at a time. So the actor stops promptly
// too, and the reader's restart and stop, which wait for their children, are never held
// by a replica. The queue is bounded: behind a sink that does not keep up, the oldest
// requests are dropped and counted (BroadcastsDropped), so a slow replica costs neither
// memory nor the writer's progress. A panicking sink loses that one request.
type broadcaster struct {
	sink    ReplicaSender
	log     zerolog.Logger
	metrics *Metrics

	mu          sync.Mutex
	queue       []func()
	overflowing bool          // dropping since the queue was last below half full
	wake        chan struct{} // one pending wake-up for the sender
	stop        chan struct{} // closed when the actor stops
}

func newBroadcaster(sink ReplicaSender, log zerolog.Logger, metrics *Metrics) *broadcaster {
	return &broadcaster{sink: sink, log: log, metrics: metrics}
}

// Receive queues each request for the sender goroutine.
func (b *broadcaster) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		b.wake, b.stop = make(chan struct{}, 1), make(chan struct{})
		go b.sender(b.wake, b.stop)
	case *actor.Stopping, *actor.Restarting:
		if b.stop != nil {
			close(b.stop) // a call in progress is not waited for
			b.stop = nil
		}
	case *broadcastEdits:
		e := m.Edits
		b.enqueue(func() { b.sink.Broadcast(m.Stream, e.To, e.Edits, e.Root, e.Parent, e.Epoch) })
	case *syncReplica:
		e := m.Sync
		b.enqueue(func() { b.sink.Sync(m.Stream, e.Replica, e.Manifest, e.Root, e.Epoch) })
	}
}

// enqueue adds a call for the sender, dropping the oldest when the queue is full.
func (b *broadcaster) enqueue(call func()) {
	b.mu.Lock()
	if len(b.queue) >= broadcastQueue {
		b.queue[0] = nil
		b.queue = b.queue[1:]
		b.metrics.BroadcastsDropped.Add(1)
		if !b.overflowing {
			b.overflowing = true
			b.log.Warn().Int("queue", broadcastQueue).Msg("the replica sink does not keep up: dropping the oldest broadcasts (replicas resync on the gap)")
		}
	}
	b.queue = append(b.queue, call)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// next takes the oldest queued call.
func (b *broadcaster) next() (func(), bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.queue = nil
		return nil, false
	}
	call := b.queue[0]
	b.queue[0] = nil
	b.queue = b.queue[1:]
	if len(b.queue) < broadcastQueue/2 {
		b.overflowing = false
	}
	return call, true
}

// sender makes the queued calls in order until stop is closed.
func (b *broadcaster) sender(wake, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-wake:
		}
		for call, ok := b.next(); ok; call, ok = b.next() {
			select {
			case <-stop:
				return
			default:
			}
			b.call(call)
		}
	}
}

func (b *broadcaster) call(f func()) {
	defer func() {
		if v := recover(); v != nil {
			b.metrics.BroadcastsDropped.Add(1)
			b.log.Error().Str("panic", fmt.Sprint(v)).Str("stack", string(debug.Stack())).Msg("replica sink panicked; broadcast dropped")
		}
	}()
	f()
}
