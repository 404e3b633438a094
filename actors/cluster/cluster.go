package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/actors/cluster/replicacore"
	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/messages"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/segments"
)

// Config is what a node needs to take part in a cluster: how long its membership
// lease lasts, how to open the local log of a stream the placement gives it, and the
// replica caches' and transport's timings.
type Config struct {
	// MemberTTL is the membership lease (default 3 s): a node that dies leaves the members
	// after about this long, and messages to it are dropped from then on.
	MemberTTL time.Duration
	// OpenStream returns the spec of a stream this node hosts (its local log and per-stream
	// settings). ID, Epoch and Replicas are filled from the placement. A replica uses the
	// log for its own local retention.
	OpenStream func(stream string) (actors.StreamSpec, error)
	// ResyncRetry is how long a replica waits for a sync before asking again (default 1 s).
	ResyncRetry time.Duration
	// TickInterval is how often replica caches check for unanswered requests (default 200 ms).
	TickInterval time.Duration
	// OutboundQueue bounds the messages queued for one peer (default 1024); beyond it,
	// messages are dropped, which the next persist's gap check repairs.
	OutboundQueue int
	// ReorderHold is how long a broadcast held back by TransportFaults waits for a message to
	// overtake it before it goes anyway (default 100 ms).
	ReorderHold time.Duration

	clock shell.Clock // nil: the wall clock (tests drive a manual one)
}

func (c Config) withDefaults() Config {
	c.clock = shell.OrWall(c.clock)
	if c.MemberTTL == 0 {
		c.MemberTTL = 3 * time.Second
	}
	if c.ResyncRetry == 0 {
		c.ResyncRetry = time.Second
	}
	if c.TickInterval == 0 {
		c.TickInterval = 200 * time.Millisecond
	}
	if c.OutboundQueue == 0 {
		c.OutboundQueue = 1024
	}
	if c.ReorderHold == 0 {
		c.ReorderHold = 100 * time.Millisecond
	}
	return c
}

// Validate refuses a configuration the cluster cannot run with, naming the setting.
func (c Config) Validate() error {
	switch {
	case c.OpenStream == nil:
		return errors.New("cluster config: open_stream: not set")
	case c.MemberTTL < 0, c.ResyncRetry < 0, c.TickInterval < 0, c.ReorderHold < 0:
		return errors.New("cluster config: member_ttl, resync_retry, tick_interval and reorder_hold must not be negative")
	case c.OutboundQueue < 0:
		return fmt.Errorf("cluster config: outbound_queue = %d: negative", c.OutboundQueue)
	}
	return nil
}

// Cluster is a actors.Node taking part in a cluster: it registers the node in etcd, follows the
// members and the placements, runs the writer of every stream the placement gives it (at
// the placement's epoch) and a replica manifest cache for every stream it replicates, and
// carries broadcasts, syncs and registrations between nodes over protoactor-go remote.
type Cluster struct {
	node   *actors.Node
	root   *actor.RootContext // the node's actor system, where the cluster's actors run
	cfg    Config
	self   string
	addr   string
	meta   *metadata.Store
	log    zerolog.Logger
	lis    *Listener
	tr     *transport
	stats  *TransportStats
	cstats Stats

	ctx    context.Context // cancelled by Stop: ends the watches and the role loop
	cancel context.CancelFunc
	wg     sync.WaitGroup
	reg    *metadata.Registration
	fences chan fenceEvent

	mu         sync.Mutex
	members    map[string]string // node -> address
	writers    map[string]*writerRole
	replicas   map[string]*replicaRole
	fenced     map[string]uint64 // stream -> the epoch that fenced this node's writer
	placements map[string]metadata.Placement
	stopped    bool
}

// Stats counts role changes; all counters only rise.
type Stats struct {
	WritersStarted  int64
	WritersStopped  int64
	WritersFenced   int64
	ReplicasStarted int64
	ReplicasStopped int64
	RoleErrors      int64
}

type writerRole struct {
	epoch  uint64
	cancel context.CancelFunc // stops the fence watch
}

type replicaRole struct {
	pid  *actor.PID
	snap *replicaSnapshot
	log  *segments.Log // the replica's local log, nil when the node has none; for readers
}

// fenceEvent says the stored epoch of stream rose above the epoch its local writer runs at.
type fenceEvent struct {
	stream string
	epoch  uint64 // the local writer's
	stored uint64
}

// Start starts a node (see Start) on the listener's actor system and its cluster
// side: the membership registration, and the watches of members and placements, which start
// and stop writers and replica caches. cfg.Replicas and cfg.System are set by the cluster.
// The cluster owns lis from now on (it is closed on failure and by Stop); the caller owns
// store and meta and closes them after Stop.
func Start(ctx context.Context, lis *Listener, cfg actors.Config, cc Config, store *s3io.Store, meta *metadata.Store) (*Cluster, error) {
	if lis == nil {
		return nil, errors.New("start cluster: no listener (call Listen first)")
	}
	refuse := func(err error) (*Cluster, error) {
		lis.Close()
		return nil, err
	}
	if err := cc.Validate(); err != nil {
		return refuse(err)
	}
	if err := metadata.ValidateNodeName(cfg.NodeID); err != nil {
		return refuse(fmt.Errorf("cluster config: node id: %w", err))
	}
	if meta == nil {
		return refuse(errors.New("start cluster: a metadata store is required"))
	}
	cc = cc.withDefaults()
	c := &Cluster{
		cfg: cc, self: cfg.NodeID, meta: meta, lis: lis, addr: lis.addr, stats: lis.stats,
		log:     cfg.Logger.With().Str("node", cfg.NodeID).Str("component", "cluster").Logger(),
		fences:  make(chan fenceEvent),
		members: map[string]string{}, writers: map[string]*writerRole{}, replicas: map[string]*replicaRole{},
		fenced: map[string]uint64{}, placements: map[string]metadata.Placement{},
	}
	cfg.Replicas, cfg.System = c, lis.system
	node, err := actors.Start(ctx, cfg, store, meta)
	if err != nil {
		return refuse(err)
	}
	c.node, c.root = node, lis.system.Root
	c.ctx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	c.tr = &transport{cl: c, root: c.root, log: c.log, queueMax: int64(cc.OutboundQueue), hold: cc.ReorderHold,
		stats: c.stats, out: map[string]*outbound{}}
	fail := func(err error) (*Cluster, error) {
		c.cancel()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return nil, errors.Join(err, c.shutdown(sctx))
	}
	ep := &endpointActor{cl: c}
	if _, err := c.root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return ep }), EndpointName); err != nil {
		return fail(fmt.Errorf("start cluster: spawn endpoint: %w", err))
	}
	initial, memberEvents, err := meta.WatchMembers(c.ctx)
	if err != nil {
		return fail(fmt.Errorf("start cluster: %w", err))
	}
	for _, m := range initial {
		c.members[m.Node] = m.Address
	}
	if c.reg, err = meta.Register(ctx, metadata.Member{Node: c.self, Address: c.addr}, cc.MemberTTL); err != nil {
		return fail(fmt.Errorf("start cluster: %w", err))
	}
	placementEvents, err := meta.WatchPlacements(c.ctx)
	if err != nil {
		return fail(fmt.Errorf("start cluster: %w", err))
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.runRoles(placementEvents, memberEvents)
	}()
	c.log.Info().Str("address", c.addr).Msg("cluster node started")
	return c, nil
}

// actors.Node is the node the cluster runs.
func (c *Cluster) Node() *actors.Node { return c.node }

// Address is where this node's actor system listens (registered in etcd).
func (c *Cluster) Address() string { return c.addr }

// Stats are the transport's counters.
func (c *Cluster) Stats() *TransportStats { return c.stats }

// SetFaults changes the faults the transport injects (tests only; the zero value is none).
func (c *Cluster) SetFaults(f TransportFaults) { c.tr.faults.Store(&f) }

// Stop leaves the cluster (the member key is revoked at once), stops the replica caches,
// the writers and the node, then protoactor remote.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	c.mu.Unlock()
	c.cancel()
	return c.shutdown(ctx)
}

func (c *Cluster) shutdown(ctx context.Context) error {
	c.wg.Wait() // the role loop and the fence watches end with c.ctx
	var errs []error
	if c.reg != nil {
		if err := c.reg.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	c.tr.close() // from now on broadcasts, syncs and registrations are dropped
	c.mu.Lock()
	replicas := c.replicas
	c.replicas = map[string]*replicaRole{}
	c.writers = map[string]*writerRole{}
	c.mu.Unlock()
	for _, r := range replicas {
		if err := c.root.StopFuture(r.pid).Wait(); err != nil {
			errs = append(errs, fmt.Errorf("stop replica cache: %w", err))
		}
	}
	if err := c.node.Stop(ctx); err != nil {
		errs = append(errs, err)
	}
	c.lis.Close()
	c.log.Info().Msg("cluster node stopped")
	return errors.Join(errs...)
}

func (c *Cluster) memberAddress(node string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[node]
}

// Broadcast implements ReplicaSender: one ManifestEdits per replica, queued without blocking.
// The message names the new root and its parent by seq and uid.
func (c *Cluster) Broadcast(stream string, to []string, edits []manifest.Edit, root, parent readercore.RootRef, epoch uint64) {
	if c.tr == nil || len(to) == 0 {
		return
	}
	msg := &messages.ManifestEdits{Stream: stream, Writer: c.self, RootSeq: root.Seq, RootUid: root.UID,
		ParentSeq: parent.Seq, ParentUid: parent.UID, Epoch: epoch, Edits: messages.FromEdits(edits)}
	for i, node := range to {
		m := proto.Message(msg)
		if i > 0 {
			m = proto.Clone(msg) // each peer's actor marshals its own copy
		}
		c.tr.send(node, m)
	}
}

// Sync implements ReplicaSender: the persisted manifest to one replica, queued without blocking.
func (c *Cluster) Sync(stream, replica string, m manifest.Manifest, root readercore.RootRef, epoch uint64) {
	if c.tr == nil {
		return
	}
	c.tr.send(replica, &messages.ManifestSync{Stream: stream, Writer: c.self, RootSeq: root.Seq, RootUid: root.UID, Epoch: epoch, Manifest: messages.FromManifest(m)})
}

// runRoles is the one goroutine that changes roles: it applies placements, membership
// changes and fences in the order they come, so that starting and stopping writers and
// replica caches never race.
func (c *Cluster) runRoles(placements <-chan metadata.PlacementEvent, members <-chan metadata.MemberEvent) {
	for placements != nil || members != nil {
		select {
		case <-c.ctx.Done():
			return
		case ev, ok := <-placements:
			if !ok {
				placements = nil
				continue
			}
			if ev.Err != nil {
				c.log.Error().Err(ev.Err).Str("stream", ev.Placement.Stream).Msg("placement watch")
				continue
			}
			c.applyPlacement(ev)
		case ev, ok := <-members:
			if !ok {
				members = nil
				continue
			}
			if ev.Err != nil {
				c.log.Error().Err(ev.Err).Str("member", ev.Member.Node).Msg("member watch")
				continue
			}
			c.applyMember(ev)
		case f := <-c.fences:
			c.applyFence(f)
		}
	}
	<-c.ctx.Done()
}

func (c *Cluster) applyMember(ev metadata.MemberEvent) {
	c.mu.Lock()
	if ev.Kind == metadata.MemberLeft {
		delete(c.members, ev.Member.Node)
		c.mu.Unlock()
		c.log.Info().Str("member", ev.Member.Node).Msg("member left")
		return
	}
	c.members[ev.Member.Node] = ev.Member.Address
	var notify []*actor.PID
	for _, r := range c.replicas {
		notify = append(notify, r.pid)
	}
	c.mu.Unlock()
	c.log.Info().Str("member", ev.Member.Node).Str("address", ev.Member.Address).Msg("member joined")
	for _, pid := range notify {
		c.root.Send(pid, writerRejoinedMsg{node: ev.Member.Node})
	}
}

func (c *Cluster) applyPlacement(ev metadata.PlacementEvent) {
	p := ev.Placement
	c.mu.Lock()
	if ev.Kind == metadata.PlacementDeleted {
		delete(c.placements, p.Stream)
	} else {
		c.placements[p.Stream] = p
	}
	c.mu.Unlock()
	switch {
	case ev.Kind == metadata.PlacementDeleted:
		c.stopWriter(p.Stream, "placement deleted")
		c.stopReplica(p.Stream)
	case p.Writer == c.self:
		c.stopReplica(p.Stream)
		c.ensureWriter(p)
	case slices.Contains(p.Replicas, c.self):
		c.stopWriter(p.Stream, fmt.Sprintf("deposed: %s writes at epoch %d", p.Writer, p.Epoch))
		c.ensureReplica(p)
	default:
		c.stopWriter(p.Stream, "no longer placed here")
		c.stopReplica(p.Stream)
	}
}

func (c *Cluster) roleError(stream string, err error) {
	c.mu.Lock()
	c.cstats.RoleErrors++
	c.mu.Unlock()
	c.log.Error().Err(err).Str("stream", stream).Msg("role change failed")
}

// ensureWriter runs the stream's writer at the placement's epoch: started if absent,
// restarted if it runs at a lower epoch.
func (c *Cluster) ensureWriter(p metadata.Placement) {
	c.mu.Lock()
	w, running := c.writers[p.Stream]
	fencedAt := c.fenced[p.Stream]
	c.mu.Unlock()
	if running {
		if w.epoch >= p.Epoch {
			return
		}
		c.stopWriter(p.Stream, fmt.Sprintf("epoch raised from %d to %d", w.epoch, p.Epoch))
	}
	if fencedAt > p.Epoch {
		c.log.Warn().Str("stream", p.Stream).Uint64("epoch", p.Epoch).Uint64("stored_epoch", fencedAt).Msg("placement names this node at an epoch already fenced; not starting the writer")
		return
	}
	spec, err := c.cfg.OpenStream(p.Stream)
	if err != nil {
		c.roleError(p.Stream, fmt.Errorf("open stream %s for writing: %w", p.Stream, err))
		return
	}
	spec.ID, spec.Epoch, spec.Replicas = p.Stream, p.Epoch, append([]string(nil), p.Replicas...)
	if err := c.node.AddStream(spec); err != nil {
		c.roleError(p.Stream, err)
		return
	}
	fctx, cancel := context.WithCancel(c.ctx)
	c.mu.Lock()
	c.writers[p.Stream] = &writerRole{epoch: p.Epoch, cancel: cancel}
	delete(c.fenced, p.Stream)
	c.cstats.WritersStarted++
	c.mu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.watchFence(fctx, p.Stream, p.Epoch)
	}()
	c.log.Info().Str("stream", p.Stream).Uint64("epoch", p.Epoch).Strs("replicas", p.Replicas).Msg("writer started")
}

// stopWriter stops the stream's writer if this cluster started it.
func (c *Cluster) stopWriter(stream, reason string) {
	c.mu.Lock()
	w, ok := c.writers[stream]
	delete(c.writers, stream)
	if ok {
		c.cstats.WritersStopped++
	}
	c.mu.Unlock()
	if !ok {
		return
	}
	w.cancel()
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	if err := c.node.RemoveStream(ctx, stream); err != nil && !errors.Is(err, actors.ErrUnknownStream) {
		c.roleError(stream, err)
	}
	c.log.Info().Str("stream", stream).Uint64("epoch", w.epoch).Str("reason", reason).Msg("writer stopped")
}

func (c *Cluster) applyFence(f fenceEvent) {
	c.mu.Lock()
	w, ok := c.writers[f.stream]
	current := ok && w.epoch == f.epoch
	if current {
		c.fenced[f.stream] = f.stored
		c.cstats.WritersFenced++
	}
	c.mu.Unlock()
	if current {
		c.stopWriter(f.stream, fmt.Sprintf("fenced: epoch %d persisted, this writer is at %d", f.stored, f.epoch))
	}
}

// watchFence follows the stream's stored epoch in etcd while the local writer runs at
// epoch. When a higher epoch has persisted, the writer is deposed: its next persist would be
// refused anyway, and stopping it now stops its uploads too.
func (c *Cluster) watchFence(ctx context.Context, stream string, epoch uint64) {
	stored, err := c.meta.WatchEpoch(ctx, stream, epoch, func(err error) {
		c.log.Error().Err(err).Str("stream", stream).Msg("stored epoch unreadable")
	})
	if err != nil {
		return // ctx ended: the writer stopped
	}
	select {
	case c.fences <- fenceEvent{stream: stream, epoch: epoch, stored: stored}:
	case <-ctx.Done():
	}
}

// ensureReplica runs the stream's replica cache and tells it who writes the stream.
func (c *Cluster) ensureReplica(p metadata.Placement) {
	c.mu.Lock()
	r, ok := c.replicas[p.Stream]
	c.mu.Unlock()
	if ok {
		c.root.Send(r.pid, writerChangedMsg{writer: p.Writer, epoch: p.Epoch})
		return
	}
	spec, err := c.cfg.OpenStream(p.Stream)
	if err != nil {
		// The cache still serves the manifest; only local retention needs the log.
		c.roleError(p.Stream, fmt.Errorf("open stream %s for its replica cache: %w", p.Stream, err))
	}
	snap := &replicaSnapshot{}
	ra := &replicaActor{cl: c, stream: p.Stream, log: spec.Log, placement: p, snap: snap,
		logger: c.log.With().Str("stream", p.Stream).Str("actor", "replica").Logger()}
	pid, err := c.root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return ra }), "replica/"+p.Stream)
	if err != nil {
		c.roleError(p.Stream, fmt.Errorf("start replica cache of %s: %w", p.Stream, err))
		return
	}
	c.mu.Lock()
	c.replicas[p.Stream] = &replicaRole{pid: pid, snap: snap, log: spec.Log}
	c.cstats.ReplicasStarted++
	c.mu.Unlock()
	c.log.Info().Str("stream", p.Stream).Str("writer", p.Writer).Uint64("epoch", p.Epoch).Msg("replica cache started")
}

func (c *Cluster) stopReplica(stream string) {
	c.mu.Lock()
	r, ok := c.replicas[stream]
	delete(c.replicas, stream)
	if ok {
		c.cstats.ReplicasStopped++
	}
	c.mu.Unlock()
	if !ok {
		return
	}
	if err := c.root.StopFuture(r.pid).Wait(); err != nil {
		c.roleError(stream, fmt.Errorf("stop replica cache: %w", err))
	}
	c.log.Info().Str("stream", stream).Msg("replica cache stopped")
}

func (c *Cluster) replicaPID(stream string) *actor.PID {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.replicas[stream]; ok {
		return r.pid
	}
	return nil
}

// Status is what an operator sees of a cluster node.
type Status struct {
	Node       string
	Address    string
	Members    map[string]string        // node -> address
	Writers    map[string]uint64        // streams this cluster runs the writer of -> epoch
	Fenced     map[string]uint64        // streams whose writer was fenced -> the epoch that did it
	Replicas   map[string]ReplicaStatus // streams this node replicates
	Placements map[string]metadata.Placement
	Roles      Stats
	Faults     TransportFaults
}

// Status reports the node's membership, roles and replica caches.
func (c *Cluster) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Status{
		Node: c.self, Address: c.addr, Members: map[string]string{}, Writers: map[string]uint64{},
		Fenced: map[string]uint64{}, Replicas: map[string]ReplicaStatus{}, Placements: map[string]metadata.Placement{},
		Roles: c.cstats,
	}
	for k, v := range c.members {
		st.Members[k] = v
	}
	for k, w := range c.writers {
		st.Writers[k] = w.epoch
	}
	for k, v := range c.fenced {
		st.Fenced[k] = v
	}
	for k, p := range c.placements {
		st.Placements[k] = p
	}
	for k, r := range c.replicas {
		if s := r.snap.load(); s != nil {
			st.Replicas[k] = *s
		}
	}
	if c.tr != nil {
		st.Faults = c.tr.currentFaults()
	}
	return st
}

// ReplicaManifest returns the manifest the stream's replica cache holds (the writer's
// persisted manifest of the root Seq and UID; Revision is 0, a replica does not know the
// record's etcd Version) and the epoch of the writer that sent it.
func (c *Cluster) ReplicaManifest(stream string) (actors.Persisted, uint64, bool) {
	c.mu.Lock()
	r, ok := c.replicas[stream]
	c.mu.Unlock()
	if !ok {
		return actors.Persisted{}, 0, false
	}
	s := r.snap.load()
	if s == nil || !s.Synced {
		return actors.Persisted{}, 0, false
	}
	return actors.Persisted{Manifest: s.manifest, Seq: s.Seq, UID: s.UID}, s.Epoch, true
}

// ReplicaLookup finds the fragment holding offset through the replica's cached manifest,
// fetching group objects from S3 as needed: how a replica serves a remote read.
func (c *Cluster) ReplicaLookup(ctx context.Context, stream string, offset uint64) (manifest.FragmentRef, error) {
	p, _, ok := c.ReplicaManifest(stream)
	if !ok {
		return manifest.FragmentRef{}, fmt.Errorf("lookup %s at %d: no synced replica cache on %s", stream, offset, c.self)
	}
	tier := c.node.Store().Tier(c.node.Config().KeyPrefix, stream)
	return manifest.LookupOffset(p.Manifest, offset, func(e manifest.Entry) ([]manifest.Entry, error) {
		return tier.Children(ctx, e)
	})
}

// endpointActor receives every cluster message addressed to this node and routes it:
// broadcasts and syncs to the stream's replica cache, registrations to the local writer.
type endpointActor struct{ cl *Cluster }

func (a *endpointActor) Receive(c actor.Context) {
	cl := a.cl
	msg := c.Message()
	switch msg.(type) {
	case *messages.ManifestEdits, *messages.ManifestSync, *messages.RegisterReplica:
		cl.stats.Received.Add(1)
		if cl.tr.currentFaults().Paused {
			cl.stats.PausedDropped.Add(1)
			return
		}
	}
	switch m := msg.(type) {
	case *messages.ManifestEdits:
		if err := metadata.ValidateNodeName(m.Writer); err != nil {
			cl.badMessage(m.Stream, m.Writer, err)
			return
		}
		edits, err := messages.ToEdits(m.Edits)
		if err != nil {
			cl.badMessage(m.Stream, m.Writer, err)
			return
		}
		cl.toReplica(m.Stream, replicaEditsMsg{from: m.Writer, root: replicacore.Root{Seq: m.RootSeq, UID: m.RootUid},
			parent: replicacore.Root{Seq: m.ParentSeq, UID: m.ParentUid}, epoch: m.Epoch, edits: edits})
	case *messages.ManifestSync:
		if err := metadata.ValidateNodeName(m.Writer); err != nil {
			cl.badMessage(m.Stream, m.Writer, err)
			return
		}
		man, err := messages.ToManifest(m.Manifest)
		if err != nil {
			cl.badMessage(m.Stream, m.Writer, err)
			return
		}
		cl.toReplica(m.Stream, replicaSyncMsg{from: m.Writer, root: replicacore.Root{Seq: m.RootSeq, UID: m.RootUid}, epoch: m.Epoch, manifest: man})
	case *messages.RegisterReplica:
		if err := metadata.ValidateNodeName(m.Replica); err != nil {
			cl.badMessage(m.Stream, m.Replica, err)
			return
		}
		if err := cl.node.ReplicaRegistered(m.Stream, m.Replica, m.Resync); err != nil {
			cl.stats.NotWriter.Add(1)
			cl.log.Debug().Err(err).Str("stream", m.Stream).Str("replica", m.Replica).Msg("registration for a stream not written here")
			return
		}
		cl.stats.Registrations.Add(1)
	case actor.SystemMessage, actor.AutoReceiveMessage:
	default:
		cl.stats.UnknownMessage.Add(1)
		cl.log.Warn().Str("type", fmt.Sprintf("%T", msg)).Msg("unexpected message at the cluster endpoint")
	}
}

func (c *Cluster) badMessage(stream, from string, err error) {
	c.stats.BadMessages.Add(1)
	c.log.Warn().Err(err).Str("stream", stream).Str("from", from).Msg("cluster message refused")
}

func (c *Cluster) toReplica(stream string, msg any) {
	pid := c.replicaPID(stream)
	if pid == nil {
		c.stats.Unroutable.Add(1)
		return
	}
	c.root.Send(pid, msg)
}

// OpenReader opens a reader on a cluster node: of the stream this node writes (the
// writer's manifest cache and local log) or replicates (the replica cache and the replica's
// local log). Before the manifest at hand is resolved (a writer resolving, a replica cache
// not synced) it fails with read.ErrUnavailable.
//
// The reader follows the node's role, not the role it opened under: each time it needs the
// manifest it takes the writer's cache when this node writes the stream now, else the
// replica cache's, else the last one it saw. A writer failover that promotes this node, or
// moves the writer away from it, thus goes unnoticed by the reader, while a reader tied to
// the cache it opened with would follow a manifest that no longer grows and, once local
// retention passed its end, wait for it forever.
func (c *Cluster) OpenReader(ctx context.Context, stream string, from read.From) (*read.Reader, error) {
	log, err := c.readLog(stream)
	if err != nil {
		return nil, err
	}
	var last atomic.Pointer[manifest.Manifest] // known runs in the reader's and its remote source's goroutines
	known := func() (manifest.Manifest, bool) {
		if m, ok := c.readManifest(stream); ok {
			last.Store(&m)
			return m, true
		}
		if m := last.Load(); m != nil {
			return *m, true
		}
		return manifest.Manifest{}, false
	}
	return read.Open(ctx, c.node.ReadSide(stream, log, known), from)
}

// readLog is the local log of a stream this node writes or replicates.
func (c *Cluster) readLog(stream string) (*segments.Log, error) {
	if log, err := c.node.StreamLog(stream); err == nil {
		return log, nil
	}
	c.mu.Lock()
	r, ok := c.replicas[stream]
	c.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("stream %q: %w (neither written nor replicated on %s)", stream, actors.ErrUnknownStream, c.self)
	}
	return r.log, nil
}

// readManifest is the stream's manifest at hand on this node now: the writer's cache when
// this node writes the stream, else its replica cache once synced.
func (c *Cluster) readManifest(stream string) (manifest.Manifest, bool) {
	if _, err := c.node.StreamLog(stream); err == nil {
		p, ok := c.node.Cached(stream)
		return p.Manifest, ok
	}
	c.mu.Lock()
	r, ok := c.replicas[stream]
	c.mu.Unlock()
	if !ok {
		return manifest.Manifest{}, false
	}
	if s := r.snap.load(); s != nil && s.Synced {
		return s.manifest, true
	}
	return manifest.Manifest{}, false
}
