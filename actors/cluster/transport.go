package cluster

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/messages"
)

// EndpointName is the name of the actor every node's cluster messages are addressed to.
const EndpointName = "streamtier-cluster"

// TransportFaults are the faults a node's transport injects, for tests of the replica
// protocol: a share of broadcasts dropped or held back behind the next message, and a pause
// that drops every cluster message in and out (a partition without killing the process).
type TransportFaults struct {
	DropPercent    int  // broadcasts dropped, 0 to 100
	ReorderPercent int  // broadcasts held back and sent after the next message to the same node
	Paused         bool // every cluster message to and from this node is dropped
}

// TransportStats counts what the transport did; all counters only rise.
type TransportStats struct {
	Sent           atomic.Int64 // messages handed to protoactor remote
	QueueFull      atomic.Int64 // dropped: the peer's outbound queue was full (dead or slow peer)
	NoRoute        atomic.Int64 // dropped: the peer is not a member (down, or never joined)
	FaultDropped   atomic.Int64 // dropped by TransportFaults.DropPercent
	Reordered      atomic.Int64 // held back by TransportFaults.ReorderPercent
	PausedDropped  atomic.Int64 // dropped in or out while paused
	Received       atomic.Int64 // cluster messages received
	Rejected       atomic.Int64 // envelopes refused before decoding: unknown type, bad index, other serializer
	Recovered      atomic.Int64 // panics in the remote server recovered (the stream closes)
	BadMessages    atomic.Int64 // messages whose content could not be converted
	Unroutable     atomic.Int64 // broadcasts or syncs for a stream this node does not replicate
	Registrations  atomic.Int64 // registrations and resync requests handed to a local writer
	NotWriter      atomic.Int64 // registrations for a stream whose writer is not (yet) running here
	UnknownMessage atomic.Int64 // messages of a type the endpoint has no use for
}

// transport carries cluster messages between nodes over protoactor-go remote. Sending never
// blocks the caller: each peer has an outbound actor with a bounded count of queued
// messages (beyond it messages are dropped and counted), so a dead peer, whose sends take
// protoactor about 10 s to dead-letter, only ever stalls its own outbound actor.
type transport struct {
	cl       *Cluster
	root     *actor.RootContext
	log      zerolog.Logger
	queueMax int64
	hold     time.Duration
	faults   atomic.Pointer[TransportFaults]
	stats    *TransportStats

	mu     sync.Mutex
	out    map[string]*outbound
	closed bool
}

type outbound struct {
	pid     *actor.PID
	pending atomic.Int64
}

// outMsg is one message for an outbound actor to send.
type outMsg struct{ msg proto.Message }

// flushHeld releases a message held back for reordering when nothing followed it.
type flushHeld struct{}

func (t *transport) currentFaults() TransportFaults {
	if f := t.faults.Load(); f != nil {
		return *f
	}
	return TransportFaults{}
}

// send queues msg for node without blocking; it drops (and counts) when the node's queue is full.
func (t *transport) send(node string, msg proto.Message) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	o, ok := t.out[node]
	if !ok {
		o = &outbound{}
		a := &outboundActor{t: t, node: node, q: o}
		pid, err := t.root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return a }), "outbound/"+node)
		if err != nil {
			t.mu.Unlock()
			t.log.Error().Err(err).Str("peer", node).Msg("cannot start an outbound actor; message dropped")
			t.stats.QueueFull.Add(1)
			return
		}
		o.pid = pid
		t.out[node] = o
	}
	t.mu.Unlock()
	if o.pending.Add(1) > t.queueMax {
		o.pending.Add(-1)
		t.stats.QueueFull.Add(1)
		return
	}
	t.root.Send(o.pid, outMsg{msg: msg})
}

// close stops every outbound actor; later sends are dropped.
func (t *transport) close() {
	t.mu.Lock()
	t.closed = true
	out := t.out
	t.out = map[string]*outbound{}
	t.mu.Unlock()
	for _, o := range out {
		_ = t.root.StopFuture(o.pid).Wait()
	}
}

// outboundActor sends one peer's messages in order, applying the injected faults.
type outboundActor struct {
	t      *transport
	node   string
	q      *outbound
	held   proto.Message
	timers shell.Timers
}

func (a *outboundActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Stopping:
		a.timers.StopAll()
	case outMsg:
		a.q.pending.Add(-1)
		a.outgoing(c, m.msg)
	case flushHeld:
		if a.held != nil {
			held := a.held
			a.held = nil
			a.deliver(c, held)
		}
	}
}

func (a *outboundActor) outgoing(c actor.Context, msg proto.Message) {
	f := a.t.currentFaults()
	if f.Paused {
		a.t.stats.PausedDropped.Add(1)
		return
	}
	if _, ok := msg.(*messages.ManifestEdits); ok {
		if f.DropPercent > 0 && rand.IntN(100) < f.DropPercent {
			a.t.stats.FaultDropped.Add(1)
			return
		}
		if a.held == nil && f.ReorderPercent > 0 && rand.IntN(100) < f.ReorderPercent {
			a.held = msg
			a.t.stats.Reordered.Add(1)
			a.timers.After(c.ActorSystem().Root, c.Self(), a.t.hold, flushHeld{})
			return
		}
	}
	a.deliver(c, msg)
	if a.held != nil {
		held := a.held
		a.held = nil
		a.deliver(c, held)
	}
}

func (a *outboundActor) deliver(c actor.Context, msg proto.Message) {
	addr := a.t.cl.memberAddress(a.node)
	if addr == "" {
		a.t.stats.NoRoute.Add(1)
		return
	}
	c.Send(actor.NewPID(addr, EndpointName), msg)
	a.t.stats.Sent.Add(1)
}

// allowedTypes are the only message types a node accepts from the network.
var allowedTypes = map[protoreflect.FullName]bool{
	proto.MessageName(&messages.ManifestEdits{}):   true,
	proto.MessageName(&messages.ManifestSync{}):    true,
	proto.MessageName(&messages.RegisterReplica{}): true,
}

// guardStream is the remote server's stream interceptor. protoactor's endpoint reader
// panics on an envelope whose type is not registered, whose target or sender index is out
// of range or whose serializer is unknown, and a panic in a gRPC handler kills the process.
// The guard drops such envelopes (and every type but the cluster's own) before the reader
// sees them, and recovers any other panic, which ends only that peer's stream.
func guardStream(stats *TransportStats, log zerolog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				stats.Recovered.Add(1)
				log.Error().Interface("panic", r).Str("method", info.FullMethod).Msg("remote stream handler panicked; stream closed")
				err = fmt.Errorf("remote stream %s: recovered from panic: %v", info.FullMethod, r)
			}
		}()
		return handler(srv, &guardedStream{ServerStream: ss, stats: stats, log: log})
	}
}

type guardedStream struct {
	grpc.ServerStream
	stats *TransportStats
	log   zerolog.Logger
}

func (s *guardedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if rm, ok := m.(*remote.RemoteMessage); ok {
		if b := rm.GetMessageBatch(); b != nil {
			filterBatch(b, s.stats, s.log)
		}
	}
	return nil
}

// filterBatch keeps the envelopes protoactor can deliver without panicking and that carry
// one of the cluster's message types.
func filterBatch(b *remote.MessageBatch, stats *TransportStats, log zerolog.Logger) {
	kept := b.Envelopes[:0]
	for _, e := range b.Envelopes {
		why := ""
		switch {
		case e == nil:
			why = "empty envelope"
		case e.TypeId < 0 || int(e.TypeId) >= len(b.TypeNames):
			why = "type index " + strconv.Itoa(int(e.TypeId)) + " out of range"
		case !allowedTypes[protoreflect.FullName(b.TypeNames[e.TypeId])]:
			why = "message type " + strconv.Quote(b.TypeNames[e.TypeId]) + " not accepted"
		case e.SerializerId != 0:
			why = "serializer " + strconv.Itoa(int(e.SerializerId)) + " not accepted"
		case e.Target < 0 || int(e.Target) >= len(b.Targets) || b.Targets[e.Target] == nil:
			why = "target index " + strconv.Itoa(int(e.Target)) + " out of range"
		case e.Sender < 0 || int(e.Sender) > len(b.Senders) || e.Sender > 0 && b.Senders[e.Sender-1] == nil:
			why = "sender index " + strconv.Itoa(int(e.Sender)) + " out of range"
		}
		if why != "" {
			stats.Rejected.Add(1)
			log.Warn().Str("reason", why).Msg("remote envelope rejected")
			continue
		}
		kept = append(kept, e)
	}
	clear(b.Envelopes[len(kept):])
	b.Envelopes = kept
}

// Listener is this process's actor system with protoactor remote listening: the first
// step of a cluster node, taken before anything else in the process uses gRPC. (remote.Start
// replaces gRPC's global logger, which gRPC does not guard; once an etcd client or server
// runs in the process that write races with its reads. So: one Listener per process, first.)
type Listener struct {
	system *actor.ActorSystem
	remote *remote.Remote
	addr   string
	stats  *TransportStats
	log    zerolog.Logger
	once   sync.Once
}

// Listen starts an actor system with protoactor remote on listen (host:port; port 0 picks a
// free one), with the guard that keeps malformed or foreign messages from crashing the
// process. Hand it to Start, or Close it.
func Listen(listen string, log zerolog.Logger) (*Listener, error) {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("cluster listen address %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("cluster listen address %q: port must be 0 to 65535", listen)
	}
	if host == "" {
		return nil, fmt.Errorf("cluster listen address %q: give a host (peers dial the address bound)", listen)
	}
	l := &Listener{stats: &TransportStats{}, log: log.With().Str("component", "remote").Logger()}
	l.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(shell.ZerologHandler{Log: log.With().Str("component", "protoactor").Logger()})
	}))
	if err := l.start(host, port); err != nil {
		l.system.Shutdown()
		return nil, err
	}
	return l, nil
}

// start starts remote; protoactor panics when it cannot listen, which comes back as an error.
func (l *Listener) start(host string, port int) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("start remote on %s:%d: %v", host, port, p)
		}
	}()
	l.remote = remote.NewRemote(l.system, remote.Configure(host, port,
		remote.WithServerOptions(grpc.StreamInterceptor(guardStream(l.stats, l.log))),
		remote.WithEndpointWriterQueueSize(65536)))
	l.remote.Start()
	l.addr = l.system.Address()
	return nil
}

// Address is where peers reach this node: the address actually bound.
func (l *Listener) Address() string { return l.addr }

// Close stops remote and the actor system. A cluster closes its listener on Stop.
//
// protoactor's own graceful shutdown (Remote.Shutdown(true)) writes the endpoint manager's
// fields while connection goroutines read them (the race detector reports it), and can send
// on a closed channel. Close does what it does without that: it stops the endpoint
// supervisor, whose writers close their outbound connections, then the gRPC server.
func (l *Listener) Close() {
	l.once.Do(func() {
		pid := actor.NewPID(l.addr, "EndpointSupervisor")
		if err := l.system.Root.StopFuture(pid).Wait(); err != nil {
			l.log.Warn().Err(err).Msg("stopping protoactor's endpoint supervisor")
		}
		l.remote.Shutdown(false)
		if !l.system.IsStopped() { // a node on it shut it down already
			l.system.Shutdown()
		}
	})
}
