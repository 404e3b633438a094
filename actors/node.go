package actors

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/claim"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/segments"
)

// Node is one streamtier node: the actor system, the governor, the reaper and a supervised
// replica reader per stream whose writer is local. A Go broker embeds it through this API.
type Node struct {
	cfg    Config
	store  *s3io.Store
	meta   *metadata.Store
	log    zerolog.Logger
	system *actor.ActorSystem
	root   *actor.RootContext

	ctx    context.Context // cancelled by Stop: aborts every upload, persist and fetch
	cancel context.CancelFunc

	guardian *guardian // supervises the governor, the reaper and the stream supervisors
	governor *actor.PID
	reaper   *actor.PID
	waker    *actor.PID // wakes dormant streams for their commit listeners
	metrics  *Metrics
	// uploads counts the transfer tasks' upload goroutines: they run apart from the actors
	// (a hung one must not block the governor's restart), so Stop waits for them itself.
	uploads sync.WaitGroup
	// readBudget is the node's read budget (read_budget_bytes), divided among the open
	// remote readers (readbudget.go).
	readBudget *read.Budget
	// keys are the object keys (fragments, groups) the node uploaded or its readers
	// located: a read finds them there instead of listing the stream's directories.
	keys   *read.Keys
	owners atomic.Uint64 // numbers reader incarnations node-wide, for the governor

	claim claimState // the cluster record the node opened with, and whether it changed

	mu      sync.Mutex
	streams map[string]*streamHandle
	logDirs map[string]string // the directory of each stream's log -> the stream: one log, one stream
	stopped bool
}

// Start starts a node on an object store and an etcd metadata store, first opening the key
// prefix's claim (a busy store is tried again up to Config.ResolveTimeout; a refusal wraps
// claim.ErrRefused). The node owns neither store: the caller closes them after Stop.
func Start(ctx context.Context, cfg Config, store *s3io.Store, meta *metadata.Store) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil || meta == nil {
		return nil, errors.New("start node: an object store and a metadata store are required")
	}
	cfg = cfg.withDefaults()
	opened, err := openClaim(ctx, cfg, store, meta)
	if err != nil {
		return nil, fmt.Errorf("start node: %w", err)
	}
	if cfg.Stream.TransferDeadline == 0 {
		// Four times the longest a fragment PUT may take: a deadline that fires while the
		// upload may still succeed only duplicates it.
		cfg.Stream.TransferDeadline = 4 * store.TransferTimeout()
	}
	n := &Node{
		cfg: cfg, store: store, meta: meta, log: cfg.Logger.With().Str("node", cfg.NodeID).Logger(),
		metrics: &Metrics{}, streams: make(map[string]*streamHandle), logDirs: make(map[string]string), readBudget: read.NewBudget(cfg.ReadBudgetBytes),
		keys:  read.NewKeys(read.DefaultKeysKept),
		claim: claimState{opened: opened},
	}
	n.readBudget.KeepWarm(cfg.clock, read.WarmFor)
	n.ctx, n.cancel = context.WithCancel(context.WithoutCancel(ctx))
	n.system = cfg.System
	if n.system == nil {
		n.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			return slog.New(shell.ZerologHandler{Log: n.log.With().Str("component", "protoactor").Logger()})
		}))
	}
	n.root = n.system.Root
	n.guardian = newGuardian(n.log.With().Str("actor", "guardian").Logger(), cfg.clock, n.metrics)
	if cfg.Stream.TransferDeadline < store.TransferTimeout() {
		n.log.Warn().Dur("transfer_deadline", cfg.Stream.TransferDeadline).Dur("s3_transfer_timeout", store.TransferTimeout()).
			Msg("the transfer deadline is below the S3 transfer timeout: slow uploads will be duplicated")
	}
	gd := governorDeps{
		cfg: cfg.Governor, store: store, keyPrefix: cfg.KeyPrefix, log: n.log.With().Str("actor", "governor").Logger(),
		metrics: n.metrics, clock: cfg.clock, memo: &governorMemo{}, readers: n.readerPIDs, faults: cfg.faults,
		uploads: &n.uploads, nodeCtx: n.ctx, keys: n.keys,
	}
	var govInc, reaperInc incarnations
	if n.governor, err = n.root.SpawnNamed(govInc.props(n.guardian, func(inc uint64) actor.Actor { return newGovernor(gd, inc) }), "governor"); err != nil {
		return nil, fmt.Errorf("start node: spawn governor: %w", err)
	}
	rd := reaperDeps{
		ctx: n.ctx, store: store, keyPrefix: cfg.KeyPrefix, log: n.log.With().Str("actor", "reaper").Logger(),
		stats: &n.metrics.Reaper, clock: cfg.clock, ledger: &reaperLedger{attempts: make(map[string]int)}, faults: cfg.faults,
		check: n.checkClaim,
	}
	if n.reaper, err = n.root.SpawnNamed(reaperInc.props(n.guardian, func(inc uint64) actor.Actor { return newReaper(rd, inc) }), "reaper"); err != nil {
		return nil, fmt.Errorf("start node: spawn reaper: %w", err)
	}
	if n.waker, err = n.root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &waker{n: n, timers: shell.Timers{Clock: cfg.clock}} }), "waker"); err != nil {
		return nil, fmt.Errorf("start node: spawn waker: %w", err)
	}
	go n.watchClaim(cfg.ClaimRecheck)
	n.log.Info().Str("governor_rate", rateString(cfg.Governor.RateBytesPerSec)).Dur("transfer_deadline", cfg.Stream.TransferDeadline).Msg("node started")
	return n, nil
}

// remoteEnvFor completes env with what a remote reader takes from the node: its actor
// system, its read budget, its metrics, its clock and the read settings. Node.OpenReader
// calls it (through readSide) before openRemoteSource.
func (n *Node) remoteEnvFor(env read.Env) read.Env {
	env.System, env.Budget, env.Keys, env.Clock = n.system, n.readBudget, n.keys, n.cfg.clock
	env.Stats, env.Panics = &n.metrics.RemoteRead, &n.metrics.TaskPanics
	env.Fetch, env.AtTask = n.cfg.Read.fetch(), n.cfg.faults.atTask
	if env.KeyPrefix == "" {
		env.KeyPrefix = n.cfg.KeyPrefix
	}
	if env.Store == nil {
		env.Store = n.store
	}
	return env
}

// readerPIDs lists the current reader of every stream that has one.
func (n *Node) readerPIDs() []*actor.PID {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*actor.PID, 0, len(n.streams))
	for _, h := range n.streams {
		if pid := h.readerPID(); pid != nil {
			out = append(out, pid)
		}
	}
	return out
}

func rateString(r int64) string {
	if r == 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%d B/s", r)
}

// Metrics returns the node's live counters and gauges.
func (n *Node) Metrics() *Metrics { return n.metrics }

// AddStream starts tiering a stream whose writer is local.
func (n *Node) AddStream(spec StreamSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if err := n.cfg.coreConfig(spec).Validate(); err != nil {
		return fmt.Errorf("add stream %s: %w", spec.ID, err)
	}
	if err := n.refuseDeleted(spec.ID); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return ErrNodeStopped
	}
	if _, ok := n.streams[spec.ID]; ok {
		return fmt.Errorf("add stream %s: %w", spec.ID, ErrStreamExists)
	}
	if id, ok := n.logDirs[spec.Log.Dir()]; ok { // the same *Log, or another of its directory
		return fmt.Errorf("add stream %s: its log %s is stream %s's: %w", spec.ID, spec.Log.Dir(), id, ErrLogInUse)
	}
	h := newStreamHandle(spec)
	pid, err := n.spawnStream(h)
	if err != nil {
		return fmt.Errorf("add stream %s: %w", spec.ID, err)
	}
	h.supervisor = pid
	n.streams[spec.ID] = h
	n.logDirs[spec.Log.Dir()] = spec.ID
	n.log.Info().Str("stream", spec.ID).Uint64("epoch", spec.Epoch).Msg("stream added")
	return nil
}

// spawnStream spawns a stream's supervisor (which spawns its reader): at AddStream, and
// when a dormant stream wakes.
func (n *Node) spawnStream(h *streamHandle) (*actor.PID, error) {
	log := n.log.With().Str("stream", h.spec.ID).Logger()
	var inc incarnations
	props := inc.props(n.guardian, func(i uint64) actor.Actor { return newStreamSupervisor(n, h, log, i) }, streamMailbox)
	return n.root.SpawnNamed(props, "stream/"+h.spec.ID)
}

// openClaim opens the key prefix's claim (claim.Open), trying again on a transient failure
// (a 500 or 503 SlowDown, a dropped connection, an etcd leader change) until ResolveTimeout:
// the SDK's own retryer is off, and one answer of a busy store must not fail a start.
// Every step of claim.Open is safe to repeat: its creates are conditional, its probe key
// fresh each time. A refusal or any other error is returned at once.
func openClaim(ctx context.Context, cfg Config, store *s3io.Store, meta *metadata.Store) (metadata.ClusterRecord, error) {
	octx, cancel := context.WithTimeout(ctx, cfg.ResolveTimeout)
	defer cancel()
	var wait shell.Backoff
	for attempt := 1; ; attempt++ {
		opened, err := claim.Open(octx, claim.Options{Store: store, Meta: meta, KeyPrefix: cfg.KeyPrefix})
		if err == nil || !(s3io.IsRetriable(err) || metadata.IsRetriable(err)) {
			return opened, err
		}
		cfg.Logger.Warn().Err(err).Str("node", cfg.NodeID).Int("attempt", attempt).Msg("start: opening the key prefix failed transiently, retrying")
		if werr := wait.Wait(octx); werr != nil {
			return opened, fmt.Errorf("%w (%d attempts in %v)", err, attempt, cfg.ResolveTimeout)
		}
	}
}

// refuseDeleted reads the stream's etcd tombstone (one read, bounded by ResolveTimeout):
// a deleted id is refused at once, wrapping metadata.ErrStreamDeleted, rather than by a
// reader that stops later. A failed read refuses nothing: the resolution reads the
// tombstone again (and the bucket's deletion marker) and stops a deleted stream then.
func (n *Node) refuseDeleted(id string) error {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.ResolveTimeout)
	defer cancel()
	t, found, err := n.meta.ReadTombstone(ctx, id)
	if err != nil || !found {
		return nil
	}
	return fmt.Errorf("add stream %s: %w (a stream id is never reused: give the re-created stream a new id)", id, &metadata.DeletedError{Tombstone: t})
}

// AwaitReady waits until the stream has resolved its manifest and opened its local log:
// from then on readers open and awaits are answered (before, OpenReader answers
// read.ErrUnavailable). It returns ErrStreamStopped (with the reason) for a stream that
// stopped for good first, and on ctx's end an error naming the stream's phase and what it
// waits for (etcd or S3 away, lost metadata).
func (n *Node) AwaitReady(ctx context.Context, id string) error {
	h, err := n.handle(id)
	if err != nil {
		return err
	}
	select {
	case <-h.ready:
		return nil
	case <-h.done:
		if reason := h.stopReason(); reason != "" {
			return fmt.Errorf("stream %s: %s: %w", id, reason, ErrStreamStopped)
		}
		return fmt.Errorf("stream %s: %w", id, ErrStreamStopped)
	case <-ctx.Done():
		why := ""
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		if st, err := n.Status(sctx, id); err == nil {
			why = fmt.Sprintf(" (phase %s", st.Phase)
			if w := cmp.Or(st.Waiting, st.MetadataReason, st.ResolveError); w != "" {
				why += ": " + w
			}
			why += ")"
		}
		return fmt.Errorf("stream %s not ready%s: %w", id, why, ctx.Err())
	}
}

func (n *Node) handle(id string) (*streamHandle, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return nil, ErrNodeStopped
	}
	h, ok := n.streams[id]
	if !ok {
		return nil, fmt.Errorf("stream %q: %w", id, ErrUnknownStream)
	}
	return h, nil
}

// RemoveStream stops tiering a stream (its remote data stays). In-flight uploads become
// orphans for garbage collection; waiters get ErrStreamStopped.
func (n *Node) RemoveStream(ctx context.Context, id string) error {
	n.mu.Lock()
	h, ok := n.streams[id]
	delete(n.streams, id)
	if ok {
		delete(n.logDirs, h.spec.Log.Dir())
	}
	n.mu.Unlock()
	if !ok {
		return fmt.Errorf("remove stream %q: %w", id, ErrUnknownStream)
	}
	return n.stopStream(ctx, h)
}

func (n *Node) stopStream(ctx context.Context, h *streamHandle) error {
	h.stop(fmt.Errorf("stream %s removed: %w", h.spec.ID, ErrStreamStopped)) // a dormant stream stays so
	finished, dormant := h.stopDormant(n)
	select {
	case <-h.done: // it stopped for good by itself (deleted, deposed): stopping it again is a dead letter
	default:
		if finished { // dormant: no actor to stop
			n.streamStopped(h)
			close(h.done)
		} else if !dormant { // a supervisor stopping for its dormancy finishes it
			n.root.Stop(h.supervisorPID())
		}
	}
	n.root.Send(n.governor, cancelStream{Stream: h.spec.ID})
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop stream %s: %w", h.spec.ID, ctx.Err())
	}
}

// DeleteStream stops a stream and deletes it everywhere: its etcd records in one
// transaction, then every object under its S3 prefix.
func (n *Node) DeleteStream(ctx context.Context, id string) error {
	if err := manifest.ValidateStreamID(id); err != nil {
		return fmt.Errorf("delete stream: %w", err)
	}
	if err := n.claim.err(); err != nil {
		return fmt.Errorf("delete stream %s: %w", id, err)
	}
	if err := n.RemoveStream(ctx, id); err != nil && !errors.Is(err, ErrUnknownStream) {
		return err
	}
	// The tombstone fences the writers, then the bucket's deletion marker, then the records.
	marker := func(ctx context.Context) error {
		m := s3io.Marker{Stream: id, ClusterID: n.claim.opened.ClusterID, Time: n.cfg.clock.Now()}
		if err := n.store.CreateMarker(ctx, n.cfg.KeyPrefix, m); err != nil {
			return fmt.Errorf("write the deletion marker: %w", err)
		}
		return nil
	}
	if err := n.meta.DeleteStreamMarked(ctx, id, marker); err != nil {
		return fmt.Errorf("delete stream %s: etcd: %w", id, err)
	}
	var keys []string
	prefix := manifest.StreamPrefix(n.cfg.KeyPrefix, id)
	if err := n.store.List(ctx, prefix, func(o s3io.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		return fmt.Errorf("delete stream %s: list %s: %w", id, prefix, err)
	}
	keys = slices.DeleteFunc(keys, func(k string) bool { return k == manifest.MarkerKey(n.cfg.KeyPrefix, id) })
	failed, err := n.store.DeleteObjects(ctx, keys)
	if err != nil {
		return fmt.Errorf("delete stream %s: delete objects: %w", id, err)
	}
	if len(failed) > 0 {
		return fmt.Errorf("delete stream %s: %d of %d objects not deleted (garbage collection will retry)", id, len(failed), len(keys))
	}
	n.log.Info().Str("stream", id).Int("objects", len(keys)).Msg("stream deleted")
	return nil
}

// Streams lists the streams the node runs.
func (n *Node) Streams() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.streams))
	for id := range n.streams {
		out = append(out, id)
	}
	return out
}

// Stop cancels every upload, persist and fetch in flight, stops every actor and returns when
// they have all ended. Waiters get ErrStreamStopped. Unpersisted work is lost to orphans,
// which is safe: the persisted manifest is the truth on restart.
func (n *Node) Stop(ctx context.Context) error {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return nil
	}
	n.stopped = true
	streams := n.streams
	n.streams, n.logDirs = map[string]*streamHandle{}, map[string]string{}
	n.mu.Unlock()

	n.guardian.stop()
	n.cancel()
	var errs []error
	for _, h := range streams {
		if err := n.stopStream(ctx, h); err != nil {
			errs = append(errs, err)
		}
	}
	for _, pid := range []*actor.PID{n.waker, n.governor, n.reaper} {
		if err := n.root.StopFuture(pid).Wait(); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", pid.Id, err))
		}
	}
	if err := n.awaitUploads(ctx); err != nil {
		errs = append(errs, err)
	}
	n.readBudget.Close()
	n.system.Shutdown()
	n.log.Info().Msg("node stopped")
	return errors.Join(errs...)
}

// awaitUploads waits until every upload goroutine has ended (cancelled with the node's
// context, they end at once unless hung outside it), or ctx ends: then it says how many
// still run; they end on their own, and nothing waits for their results.
func (n *Node) awaitUploads(ctx context.Context) error {
	done := make(chan struct{})
	go func() { // owned by the uploads it waits for: it ends with the last of them
		n.uploads.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		running := n.metrics.TransfersRunning.Load()
		n.log.Error().Int64("uploads", running).Msg("stopping with uploads still running (hung outside their context)")
		return fmt.Errorf("stop: %d uploads still running: %w", running, ctx.Err())
	}
}

// Config is the node's configuration with its defaults applied: what it runs with.
func (n *Node) Config() Config { return n.cfg }

// Store is the object store the node tiers to; a cluster layer reads replicas' objects
// through it.
func (n *Node) Store() *s3io.Store { return n.store }

// StreamLog is the local log of a stream this node writes (ErrUnknownStream for another):
// what a cluster layer reads a written stream's local tier from.
func (n *Node) StreamLog(id string) (*segments.Log, error) {
	h, err := n.handle(id)
	if err != nil {
		return nil, err
	}
	return h.spec.Log, nil
}
