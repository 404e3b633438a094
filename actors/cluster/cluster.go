package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/streamtier/streamtier/actors"
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
	// MemberTTL is the membership lease (default 3 s, at least MinMemberTTL): a node that
	// dies leaves the members after about this long, and messages to it are dropped from
	// then on.
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

// MinMemberTTL is the shortest membership lease a node can keep: etcd's client renews a
// lease a third of the way through it, on a half-second cadence, so a 1 s lease lapses
// whenever the node stalls for half a second (a collector cycle, a loaded host), and the
// node would leave and rejoin the cluster for nothing.
const MinMemberTTL = 2 * time.Second

// Validate refuses a configuration the cluster cannot run with, naming the setting.
func (c Config) Validate() error {
	switch {
	case c.OpenStream == nil:
		return errors.New("cluster config: open_stream: not set")
	case c.MemberTTL < 0, c.ResyncRetry < 0, c.TickInterval < 0, c.ReorderHold < 0:
		return errors.New("cluster config: member_ttl, resync_retry, tick_interval and reorder_hold must not be negative")
	case c.MemberTTL != 0 && c.MemberTTL < MinMemberTTL:
		return fmt.Errorf("cluster config: member_ttl = %v: must be at least %v (etcd's client renews a lease every half second, so a shorter one lapses on any stall)", c.MemberTTL, MinMemberTTL)
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
