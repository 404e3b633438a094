package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/actors/cluster"
	"github.com/streamtier/streamtier/actors/divergence"
	"github.com/streamtier/streamtier/admin"
	"github.com/streamtier/streamtier/backends"
	"github.com/streamtier/streamtier/claim"
	"github.com/streamtier/streamtier/gc"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/nodeconfig"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/segments"
)

// startTimeout bounds starting the backends and the node.
const startTimeout = 2 * time.Minute

// openStream is a stream the process runs: its local log and, for the demo, its load.
type openStream struct {
	id   string
	log  *segments.Log
	demo *demoLoad
	// oldRoots are the root objects that were already superseded when the stream was
	// added (left by an earlier crash): a clean stop does not wait for them to go.
	oldRoots map[string]bool
	// follow is set for a stream declared with follow: true: log is read-only and the
	// follower (follow.go) refreshes it; cfg is its declaration, to reopen it.
	follow bool
	cfg    nodeconfig.StreamSettings
	// removed is set (under process.mu) while a followed stream is out of the node between
	// a restart's RemoveStream and its AddStream; logged is the follower's last logged
	// failure of it, so that a failure that lasts is logged once.
	removed bool
	logged  string
	// failure is the follower's last failure with this stream (under process.mu), for the
	// status of a stream out of the node; cleared when it is added back.
	failure string
	// refused is why the node refused the stream for good (a deleted id still declared):
	// the other streams run, status lists this one as stopped with the reason.
	refused string
	// rewritten is the follower's proof of a rewrite (a seen file shrank, a seen chunk
	// changed) to hand to the node when the stream is added back (nil: none); given is the
	// one handed at the last add, kept while the stream has not run on the log since.
	// Follower goroutine only.
	rewritten, given *divergence.Rewritten
}

// serve runs a node until SIGINT or SIGTERM: the demo (ModeDemo) or `node run`.
func serve(mode nodeconfig.Mode, args []string, stdout, stderr io.Writer) int {
	name := "run"
	if mode == nodeconfig.ModeDemo {
		name = demoName
	}
	s, positional, code, ok := parseFlags(name, mode, args, stderr, nil)
	if !ok {
		return code
	}
	if len(positional) > 0 {
		return badUsage(stderr, name, fmt.Sprintf("unexpected argument %q (settings are flags: --name value)", positional[0]))
	}
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()

	display := newDisplay(s, stdout)
	log := newLogger(s, stderr, display)
	started := time.Now()

	if err := os.MkdirAll(s.DataDir, 0o755); err != nil {
		fmt.Fprintf(stderr, "node: data dir: %v\n", err)
		return exitFailed
	}
	lock, err := backends.Lock(s.DataDir)
	if err != nil {
		if info, found, _ := backends.ReadRunInfo(s.DataDir); found && errors.Is(err, backends.ErrLocked) {
			err = fmt.Errorf("%w: node pid %d, admin %s", err, info.PID, info.AdminURL)
		}
		fmt.Fprintf(stderr, "node: %v\n", err)
		return exitFailed
	}
	ev := log.Info()
	if s.Demo {
		p := s.Retention(s.DemoStreamSettings())
		ev = ev.Str("demo_rate", s.Redacted()["demo_rate"]).Str("demo_retention_max_bytes", nodeconfig.FormatSize(float64(p.MaxBytes)))
	}
	ev.Str("data_dir", s.DataDir).Str("config", s.ConfigFile).Bool("embedded_etcd", s.EmbeddedEtcd()).
		Bool("embedded_s3", s.EmbeddedS3()).Str("fragment_target_size", s.Redacted()["fragment_target_size"]).Msg("starting")
	log.Debug().Interface("settings", s.Redacted()).Msg("settings")
	var lis *cluster.Listener
	if s.Cluster {
		// First, before any etcd client or embedded etcd: protoactor remote replaces gRPC's
		// global logger, which gRPC reads without a lock (docs/cluster.md).
		if lis, err = cluster.Listen(s.ClusterListen, log); err != nil {
			lock.Unlock()
			fmt.Fprintf(stderr, "node: setting cluster_listen (from %s): %v\n", s.Origins["cluster_listen"], err)
			return exitFailed
		}
	}
	startCtx, cancelStart := context.WithTimeout(ctx, startTimeout)
	defer cancelStart()
	b, err := backends.Open(startCtx, s, lock)
	if err != nil {
		if lis != nil {
			lis.Close()
		}
		lock.Unlock()
		fmt.Fprintf(stderr, "node: %v%s\n", err, backendsHint(err, s.DataDir))
		return exitFailed
	}
	if err := backends.WriteLocation(s.DataDir, backends.LocationOf(s)); err != nil {
		b.Close()
		if lis != nil {
			lis.Close()
		}
		fmt.Fprintf(stderr, "node: %v\n", err)
		return exitFailed
	}
	p := &process{s: s, b: b, lis: lis, log: log, stdout: stdout, stderr: stderr, display: display, started: started,
		byID: map[string]*openStream{}}
	defer p.close()
	if err := p.start(startCtx); err != nil {
		printStartError(stderr, err)
		return exitFailed
	}
	cancelStart()

	var wg sync.WaitGroup
	loadCtx, stopLoad := context.WithCancel(context.Background())
	for _, st := range p.openStreams() { // under the lock: the cluster's role loop may be adding one
		if st.demo != nil {
			wg.Add(1)
			go func() { // owned by serve: stopLoad and wg end it
				defer wg.Done()
				if err := st.demo.run(loadCtx); err != nil {
					log.Error().Err(err).Str("stream", st.id).Msg("demo load stopped")
				}
			}()
		}
	}
	progressDone := make(chan struct{})
	go func() { // owned by serve: ctx ends it
		defer close(progressDone)
		p.progress(ctx)
	}()
	stopFollow := p.startFollower()

	<-ctx.Done()
	stopSignals() // a second Ctrl-C now ends the process at once
	display.stop()
	<-progressDone
	fmt.Fprintln(stderr, "stopping: waiting for committed data to be persisted (Ctrl-C again to force)")
	stopFollow() // what the writer completes from now on is tiered by the next run
	stopLoad()
	wg.Wait()
	return p.shutdown()
}

// process is a running node with its backends, streams and admin server.
type process struct {
	s       nodeconfig.Settings
	b       *backends.Backends
	log     zerolog.Logger
	stdout  io.Writer
	stderr  io.Writer
	display *display
	started time.Time

	etcdMetrics *admin.EtcdMetrics
	probe       *s3io.BucketProbe // nil when s3_probe_interval is 0
	sweeper     *gc.Sweeper       // nil when gc_interval is 0
	node        *actors.Node
	admin       *admin.Server
	// lis is the cluster listener until StartCluster takes it; cluster is set in cluster mode.
	lis     *cluster.Listener
	cluster *cluster.Cluster

	mu      sync.Mutex // guards streams, byID and faults: the cluster's role loop opens streams
	streams []*openStream
	byID    map[string]*openStream
	closed  bool
	faults  []admin.Fault // embedded servers that stopped on their own
	// unopened are the declared streams whose local log could not be opened at start (a
	// damaged directory, a followed one the broker has not created): stopped, with the
	// error and what to do, while the others run.
	unopened []actors.StreamStatus
	// stopWatch ends the watch of the embedded servers, before they are closed on purpose.
	stopWatch context.CancelFunc
}

// fault records an embedded server that stopped on its own: loudly in the log and on
// stderr, then in /status, /metrics and /readyz for as long as the process runs.
func (p *process) fault(server string, err error) {
	cause := actors.ExhaustedResource(err)
	p.log.Error().Err(err).Str("server", server).Str("exhausted", cause).
		Msg("an embedded server failed: the node cannot use it until it is restarted (streams stall and retry)")
	fmt.Fprintf(p.stderr, "node: %s failed (%s): %v\n", server, orOther(cause), err)
	p.mu.Lock()
	p.faults = append(p.faults, admin.Fault{Server: server, Exhausted: cause, Error: err.Error()})
	p.mu.Unlock()
}

// faultList is a copy of the faults recorded so far.
func (p *process) faultList() []admin.Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]admin.Fault(nil), p.faults...)
}

// openStreams is a copy of the streams opened so far.
func (p *process) openStreams() []*openStream {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*openStream(nil), p.streams...)
}

func (p *process) start(ctx context.Context) error {
	s := p.s
	watchCtx, stopWatch := context.WithCancel(context.Background())
	p.stopWatch = stopWatch
	p.b.Watch(watchCtx, p.fault)
	p.etcdMetrics = admin.InstrumentEtcd(p.b.EtcdClient)
	var node *actors.Node
	if s.Cluster {
		lis := p.lis
		p.lis = nil // the cluster owns it now, also when it fails to start
		c, err := cluster.Start(ctx, lis, s.NodeConfig(p.log), s.ClusterConfig(p.openClusterStream), p.b.Store, p.b.Meta)
		if err != nil {
			return fmt.Errorf("start cluster member %s: %w", s.NodeID, err)
		}
		p.cluster, node = c, c.Node()
		p.node = node
	} else {
		n, err := actors.Start(ctx, s.NodeConfig(p.log), p.b.Store, p.b.Meta)
		if err != nil {
			return err
		}
		p.node, node = n, n
		if err := p.addStreams(s.Streams); err != nil {
			return err
		}
	}
	if s.Demo {
		if err := p.addStream(s.DemoStreamSettings(), &s); err != nil {
			return err
		}
	}
	var adminNode admin.Node = node
	if p.cluster == nil {
		adminNode = &followedNode{Node: node, p: p} // lists followed streams out of the node
	}
	opts := admin.Options{
		Node: adminNode, NodeID: s.NodeID, Started: p.started, S3: p.b.Store.Metrics(), Etcd: p.etcdMetrics,
		RebalanceThreshold: s.RebalanceThreshold, Log: p.log, Faults: p.faultList,
		Ready: []admin.Check{{Name: "etcd", Check: p.b.ProbeEtcd}, {Name: "metadata", Check: node.MetadataReady}, {Name: "local_logs", Check: p.unopenedReady}},
		Prices: &admin.Prices{PutPer1000: s.CostPutPer1000, ListPer1000: s.CostListPer1000, GetPer1000: s.CostGetPer1000,
			StoragePerGBMonth: s.CostStoragePerGBMonth},
	}
	if s.S3ProbeInterval > 0 {
		probe, err := s3io.NewBucketProbe(p.b.Store, p.b.KeyPrefix+"/", s.S3ProbeInterval, p.log.With().Str("component", "bucket-probe").Logger())
		if err != nil {
			return err
		}
		p.probe = probe
		probe.Start(context.Background()) // stopped by close
		opts.Bucket = probe
	} else {
		opts.Ready = append(opts.Ready, admin.Check{Name: "s3", Check: p.b.ProbeS3})
	}
	if s.GCInterval > 0 {
		sw, err := gc.NewSweeper(gc.SweeperConfig{
			Options:  gc.Options{Store: p.b.Store, Meta: p.b.Meta, KeyPrefix: p.b.KeyPrefix, Grace: s.GCGracePeriod},
			Interval: s.GCInterval, Mode: gc.Mode(s.GCMode), NodeID: s.NodeID, Log: p.log.With().Str("component", "gc").Logger(),
		})
		if err != nil {
			return err
		}
		p.sweeper = sw
		sw.Start(context.Background()) // stopped by close
		opts.GC = sw
		p.log.Info().Str("mode", s.GCMode).Str("interval", s.GCInterval.String()).Str("grace", s.GCGracePeriod.String()).Msg("automatic garbage collection on")
	}
	info := backends.RunInfo{PID: os.Getpid(), NodeID: s.NodeID, Started: p.started}
	opts.Reads = node
	if p.cluster != nil {
		opts.Cluster = p.cluster
		opts.Reads = p.cluster
		info.ClusterAddress = p.cluster.Address()
	}
	var err error
	if p.admin, err = admin.Start(s.AdminAddr, opts); err != nil {
		return err
	}
	info.AdminURL = p.admin.URL()
	if err := backends.WriteRunInfo(s.DataDir, p.b.RunInfoFor(info)); err != nil {
		return err
	}
	var ids []string
	for _, st := range p.openStreams() {
		ids = append(ids, st.id)
	}
	ev := p.log.Info().Str("admin", p.admin.URL()).Str("backends", p.b.Describe()).Strs("streams", ids)
	if p.cluster != nil {
		ev = ev.Str("cluster_address", p.cluster.Address())
	}
	ev.Dur("startup", time.Since(p.started)).Msg("node ready")
	return nil
}

// openClusterStream is the cluster's OpenStream: the local log of a stream the placement
// gives this node (to write or to replicate), opened once and kept open until the process
// stops. The log must exist: this binary is not the broker, and a writer started on an
// empty log behind the persisted manifest would take it for a previous timeline.
func (p *process) openClusterStream(id string) (actors.StreamSpec, error) {
	st, err := p.s.ClusterStream(id)
	if err != nil {
		return actors.StreamSpec{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return actors.StreamSpec{}, fmt.Errorf("stream %s: the node is stopping", id)
	}
	ost, ok := p.byID[id]
	if !ok {
		if fi, err := os.Stat(st.LogDir); err != nil || !fi.IsDir() {
			return actors.StreamSpec{}, fmt.Errorf("stream %s: no local log directory %s (the placement names this node; the stream's log must be there, or declare the stream with its log_dir)", id, st.LogDir)
		}
		lg, err := segments.Open(st.LogDir, segments.Options{MaxSegmentBytes: p.s.SegmentMaxBytes})
		if err != nil {
			return actors.StreamSpec{}, fmt.Errorf("stream %s: %w%s", id, err, exhaustedHint(err, "the stream's log"))
		}
		if last, ok := lg.LastChunkID(); ok {
			if err := lg.SetCommitted(last); err != nil {
				return actors.StreamSpec{}, errors.Join(fmt.Errorf("stream %s: commit the recovered log: %w", id, err), lg.Close())
			}
		}
		ost = &openStream{id: id, log: lg}
		p.streams = append(p.streams, ost)
		p.byID[id] = ost
		p.log.Info().Str("stream", id).Str("log_dir", st.LogDir).Uint64("local_first", lg.FirstOffset()).
			Uint64("local_next", lg.NextOffset()).Msg("stream log opened for the cluster")
	}
	return actors.StreamSpec{
		Log: ost.log, Retention: p.s.Retention(st), Options: st.Options(),
	}, nil
}

// addStream opens a stream's local log, commits what it holds (this process is the
// broker), and adds it to the node; demo settings start the load generator on it.
func (p *process) addStream(st nodeconfig.StreamSettings, demo *nodeconfig.Settings) error {
	if st.Follow {
		return p.addFollowed(st)
	}
	if err := os.MkdirAll(st.LogDir, 0o755); err != nil {
		return fmt.Errorf("stream %s: log dir: %w", st.ID, err)
	}
	lg, err := segments.Open(st.LogDir, segments.Options{MaxSegmentBytes: p.s.SegmentMaxBytes})
	if err != nil {
		return p.refuseUnopened(st, fmt.Errorf("stream %s: %w%s", st.ID, err, exhaustedHint(err, "the stream's log")))
	}
	ost := &openStream{id: st.ID, log: lg, cfg: st}
	p.register(ost)
	if err := commitComplete(lg); err != nil {
		return fmt.Errorf("stream %s: %w", st.ID, err)
	}
	if demo != nil {
		if ost.demo, err = newDemoLoad(lg, demo.DemoSeed, demo.DemoRate, p.log.With().Str("stream", st.ID).Logger()); err != nil {
			return fmt.Errorf("stream %s: %w", st.ID, err)
		}
	}
	if err := p.addToNode(ost); err != nil {
		return p.refuseDeleted(ost, err)
	}
	p.log.Info().Str("stream", st.ID).Str("log_dir", st.LogDir).Uint64("local_first", lg.FirstOffset()).
		Uint64("local_next", lg.NextOffset()).Msg("stream opened")
	return nil
}

// refuseDeleted keeps the node running when a declared stream was deleted (AddStream
// refuses its id, metadata.ErrStreamDeleted): the refusal is logged and shown in status
// as a stopped stream, and the other streams are tiered. Any other error is returned.
func (p *process) refuseDeleted(ost *openStream, err error) error {
	if !errors.Is(err, metadata.ErrStreamDeleted) {
		return err
	}
	reason := err.Error()
	var de *metadata.DeletedError
	if errors.As(err, &de) {
		reason = de.Error()
	}
	reason += "; remove it from the configuration or use a new stream id"
	p.mu.Lock()
	ost.refused = reason
	p.mu.Unlock()
	p.log.Error().Str("stream", ost.id).Str("reason", reason).Msg("stream refused: it was deleted; nothing is written for it")
	return nil
}

// refuseUnopened keeps the node running when a declared stream's local log cannot be
// opened (a damaged directory: a truncated segment, an index that disagrees with it; a
// followed directory that does not exist yet): one
// broken log must not stop the tiering of every other stream, whose local retention goes
// on meanwhile. The stream is listed as stopped with the error and the repair, /readyz
// fails naming it, and nothing of it is touched. Errors of the whole process (out of
// descriptors or disk) and a directory another process holds still fail the start.
func (p *process) refuseUnopened(st nodeconfig.StreamSettings, err error) error {
	if actors.ExhaustedResource(err) != "" || errors.Is(err, segments.ErrLocked) {
		return err
	}
	reason := fmt.Sprintf("%v; the local log cannot be opened: nothing of it is tiered or changed; repair the directory "+
		"(`node segments dump %s` lists its chunks) or move it aside, then restart the node", err, st.LogDir)
	p.mu.Lock()
	p.unopened = append(p.unopened, actors.StreamStatus{Stream: st.ID, Phase: "stopped", StopReason: reason})
	p.mu.Unlock()
	p.log.Error().Str("stream", st.ID).Str("log_dir", st.LogDir).Err(err).Msg("stream not opened: its local log could not be opened; the other streams run")
	return nil
}

// unopenedReady is the /readyz check of the declared streams: an error naming those whose
// local log could not be opened.
func (p *process) unopenedReady(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.unopened) == 0 {
		return nil
	}
	ids := make([]string, len(p.unopened))
	for i, u := range p.unopened {
		ids[i] = u.Stream
	}
	return fmt.Errorf("%d declared streams not opened, their local logs could not be opened (%s): see `node status`", len(ids), strings.Join(ids, ", "))
}

// register makes ost one of the process's streams: close closes its log, status and the
// stop see it.
func (p *process) register(ost *openStream) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.streams = append(p.streams, ost)
	p.byID[ost.id] = ost
}

// addToNode remembers the stream's root objects from before this run (the stop waits only
// for the roots this run supersedes to be reaped) and adds the stream to the node, at the
// epoch openSpec gives (never below the epoch etcd stores for it). Both reads are retried
// while they fail transiently, for up to restartTimeout.
func (p *process) addToNode(ost *openStream) error {
	rctx, cancel := context.WithTimeout(context.Background(), restartTimeout)
	defer cancel()
	err := retryTransient(rctx, p.log, "stream "+ost.id+": roots", func(ctx context.Context) (err error) {
		ost.oldRoots, err = p.roots(ctx, ost.id)
		return err
	})
	if err != nil {
		return fmt.Errorf("stream %s: %w", ost.id, err)
	}
	var spec actors.StreamSpec
	err = retryTransient(rctx, p.log, "stream "+ost.id+": stored epoch", func(ctx context.Context) (err error) {
		spec, err = p.openSpec(ctx, ost.cfg, ost.log) // never below the epoch etcd stores
		return err
	})
	if err != nil {
		return err
	}
	return p.node.AddStream(spec)
}

// streamSpec is what the node tiers of a declared stream whose log is lg.
func (p *process) streamSpec(st nodeconfig.StreamSettings, lg *segments.Log) actors.StreamSpec {
	return actors.StreamSpec{
		ID: st.ID, Log: lg, Epoch: max(st.Epoch, lg.Epoch(), 1), Retention: p.s.Retention(st), Options: st.Options(),
	}
}

// shutdown stops cleanly: wait (bounded) until everything committed is persisted and the
// superseded roots are reaped, take the summary, stop the node, the admin server and the
// backends, and print the summary.
func (p *process) shutdown() int {
	ctx, cancel := context.WithTimeout(context.Background(), p.s.StopTimeout)
	defer cancel()
	code := exitOK
	if err := p.quiesce(ctx); err != nil {
		p.log.Warn().Err(err).Msg("stopping with work in flight: uploads not persisted become orphans for `node gc`")
	}
	sum := p.summary(context.Background())
	if err := p.close(); err != nil {
		fmt.Fprintf(p.stderr, "node: stop: %v\n", err)
		code = exitFailed
	}
	sum.print(p.stdout, p.s)
	return code
}

// close stops everything this process started, in order; calling it again does nothing.
func (p *process) close() error {
	if p.closed {
		return nil
	}
	if p.stopWatch != nil {
		p.stopWatch() // what follows stops the embedded servers on purpose
	}
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch {
	case p.cluster != nil: // its role loop ends before the logs close below
		if err := p.cluster.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	case p.node != nil:
		if err := p.node.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if p.lis != nil { // the cluster never started
		p.lis.Close()
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	if p.probe != nil {
		p.probe.Stop()
	}
	if p.sweeper != nil {
		p.sweeper.Stop()
	}
	if p.admin != nil {
		if err := p.admin.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	for _, st := range p.openStreams() {
		if err := st.log.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close log of %s: %w", st.id, err))
		}
	}
	if err := backends.RemoveRunInfo(p.s.DataDir); err != nil {
		errs = append(errs, err)
	}
	if err := p.b.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// roots lists the stream's root objects other than the one its manifest record names (nil
// when there are none: a stream keeps its set for the run, and most have none).
func (p *process) roots(ctx context.Context, stream string) (map[string]bool, error) {
	rec, _, found, err := p.b.Meta.ReadManifest(ctx, stream)
	if err != nil {
		return nil, err
	}
	current := ""
	if found {
		current = rec.RootKey(p.b.KeyPrefix, stream)
	}
	var out map[string]bool
	err = p.b.Store.List(ctx, manifest.StreamPrefix(p.b.KeyPrefix, stream)+"meta/root-", func(o s3io.ObjectInfo) error {
		if o.Key != current {
			if out == nil {
				out = map[string]bool{}
			}
			out[o.Key] = true
		}
		return nil
	})
	return out, err
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// exhaustedHint says what to do about a local resource that ran out ("" for other errors).
func exhaustedHint(err error, where string) string {
	switch actors.ExhaustedResource(err) {
	case "EMFILE":
		return " (EMFILE: this process is out of file descriptors; raise its limit, ulimit -n or LimitNOFILE)"
	case "ENFILE":
		return " (ENFILE: the system is out of file descriptors; raise fs.file-max)"
	case "ENOSPC", "EDQUOT":
		return " (" + actors.ExhaustedResource(err) + ": the disk under " + where + " is full)"
	}
	return ""
}

// backendsHint says what to do when the backends did not open: a full disk, or an embedded
// etcd that gave up on its data directory (the bucket holds what etcd would: recover from it).
func backendsHint(err error, dataDir string) string {
	if hint := exhaustedHint(err, "the data directory "+dataDir); hint != "" {
		return hint
	}
	// A failure with a cause (a WAL it cannot read) or a panic can be a damaged directory; one
	// without (etcd's descriptor-limit check, say) says what to change itself.
	var f metadata.EtcdFailure
	if errors.As(err, &f) && f.Err != nil {
		return fmt.Sprintf("\n  if the embedded etcd's directory is damaged, move %s aside (keep it), then `node recover` and "+
			"`node recover --yes` re-anchor every stream from the bucket before the node starts again (docs/operations.md, \"etcd lost\")", backends.EtcdDir(dataDir))
	}
	return ""
}

// printStartError reports why the node did not start; a refused key prefix (the claim, or a
// store without conditional creates) is said as such, with where to look next.
func printStartError(stderr io.Writer, err error) {
	if errors.Is(err, claim.ErrRefused) || errors.Is(err, claim.ErrChanged) || errors.Is(err, s3io.ErrNoConditionalCreate) {
		fmt.Fprintf(stderr, "node: REFUSED to start, nothing written: %v\n"+
			"  `node status --from-bucket` shows what the bucket holds without etcd; docs/operations.md, \"Metadata disaster recovery\", says how to recover\n", err)
		return
	}
	fmt.Fprintf(stderr, "node: %v\n", err)
}
