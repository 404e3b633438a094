package actors

import (
	"fmt"
	"runtime/debug"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"streamtier/actors/readercore"
)

// broadcastQueue bounds a broadcast actor's mailbox: past it the oldest request is dropped.
const broadcastQueue = 256

// broadcastEdits asks the broadcast actor to send a persisted batch of edits to replicas.
// N numbers the reader incarnation's requests to its broadcaster (from 1): a jump says the
// requests in between were dropped.
type broadcastEdits struct {
	N      uint64
	Stream string
	Edits  readercore.Broadcast
}

// syncReplica asks the broadcast actor to send one replica the persisted manifest; N as in
// broadcastEdits.
type syncReplica struct {
	N      uint64
	Stream string
	Sync   readercore.SyncReplica
}

// broadcaster is the broadcast actor of one reader incarnation: it carries the core's
// Broadcast and SyncReplica effects, in order, to Config.Replicas (the cluster layer). It
// answers nothing: a replica that misses edits sees the gap in their sequence and asks for
// a resync (ResyncRequested).
//
// A sink that blocks holds the broadcaster, never the reader: the reader only sends to it,
// and it is not the reader's child (a parent's restart and stop wait for its children).
// The reader stops it when its incarnation ends. Its mailbox is bounded: behind a sink
// that does not keep up the oldest requests are dropped and counted (BroadcastsDropped),
// so a slow replica costs neither memory nor the writer's progress. A panicking sink drops
// that one request.
type broadcaster struct {
	sink    ReplicaSender
	log     zerolog.Logger
	metrics *Metrics
	seen    uint64 // N of the last request handled
}

// spawnBroadcaster starts a broadcast actor on sink at the system's root; its owner stops it.
func spawnBroadcaster(root *actor.RootContext, sink ReplicaSender, log zerolog.Logger, metrics *Metrics) *actor.PID {
	props := actor.PropsFromProducer(func() actor.Actor {
		return &broadcaster{sink: sink, log: log, metrics: metrics}
	}, actor.WithMailbox(actor.BoundedDropping(broadcastQueue)))
	return root.Spawn(props)
}

// Receive sends each request to the sink.
func (b *broadcaster) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *broadcastEdits:
		b.count(m.N)
		e := m.Edits
		b.send(func() { b.sink.Broadcast(m.Stream, e.To, e.Edits, e.Seq, e.Epoch) })
	case *syncReplica:
		b.count(m.N)
		e := m.Sync
		b.send(func() { b.sink.Sync(m.Stream, e.Replica, e.Manifest, e.Revision, e.Epoch) })
	}
}

// count notes the requests dropped before the one numbered n.
func (b *broadcaster) count(n uint64) {
	if n > b.seen+1 {
		dropped := n - b.seen - 1
		b.metrics.BroadcastsDropped.Add(int64(dropped))
		b.log.Warn().Uint64("dropped", dropped).Msg("the replica sink did not keep up: broadcasts dropped (replicas resync on the gap)")
	}
	b.seen = max(b.seen, n)
}

func (b *broadcaster) send(f func()) {
	defer func() {
		if v := recover(); v != nil {
			b.metrics.BroadcastsDropped.Add(1)
			b.log.Error().Str("panic", fmt.Sprint(v)).Str("stack", string(debug.Stack())).Msg("replica sink panicked; broadcast dropped")
		}
	}()
	f()
}
