// Command clusternode is one streamtier cluster node for the multi-process tests in
// tests/cluster_test.go: a node on an external etcd and S3, configured by flags, whose
// streams' local logs are written by the deterministic load generator (the same bytes on
// every node, standing in for the broker's replication), with an HTTP endpoint for status
// and test controls (faults, forced cuts, where the load stops).
//
// It prints one line "READY {json}" on stdout once it serves, with the HTTP and actor
// addresses, and stops cleanly on SIGTERM or SIGINT.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/actors/cluster"
	"github.com/streamtier/streamtier/admin"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// options are the flags.
type options struct {
	node       string
	etcd       string
	etcdPrefix string
	s3         s3io.Config
	dataDir    string
	listen     string
	httpAddr   string
	streams    string

	loadSeed     uint64
	loadStart    int64
	loadInterval time.Duration
	loadUntil    int64
	minBytes     int
	maxBytes     int

	segmentBytes     int64
	fragmentBytes    uint64
	persistThreshold int
	persistInterval  time.Duration
	rebalance        int
	retentionBytes   uint64
	memberTTL        time.Duration
	resyncRetry      time.Duration
	drop, reorder    int
	staleWriters     staleFlag
	logLevel         string
}

// staleFlag collects -stale-writer stream=epoch: writers started at that epoch directly on
// the node, outside the placement (a deposed writer that does not know it).
type staleFlag map[string]uint64

func (s staleFlag) String() string { return fmt.Sprint(map[string]uint64(s)) }

func (s staleFlag) Set(v string) error {
	stream, epoch, ok := strings.Cut(v, "=")
	e, err := strconv.ParseUint(epoch, 10, 64)
	if !ok || err != nil || stream == "" {
		return fmt.Errorf("want stream=epoch, got %q", v)
	}
	s[stream] = e
	return nil
}

func parseFlags(args []string) (options, error) {
	o := options{staleWriters: staleFlag{}}
	fs := flag.NewFlagSet("clusternode", flag.ContinueOnError)
	fs.StringVar(&o.node, "node", "", "node id")
	fs.StringVar(&o.etcd, "etcd", "", "etcd endpoints, comma separated")
	fs.StringVar(&o.etcdPrefix, "etcd-prefix", "/streamtier", "etcd key prefix")
	fs.StringVar(&o.s3.Endpoint, "s3-endpoint", "", "S3 endpoint URL")
	fs.StringVar(&o.s3.Bucket, "s3-bucket", "", "S3 bucket")
	fs.StringVar(&o.s3.Region, "s3-region", "us-east-1", "S3 signing region")
	fs.StringVar(&o.s3.AccessKey, "s3-access-key", "", "S3 access key (default: the AWS credential chain, e.g. AWS_ACCESS_KEY_ID)")
	fs.StringVar(&o.s3.SecretKey, "s3-secret-key", "", "S3 secret key (default: the AWS credential chain)")
	fs.StringVar(&o.dataDir, "data", "", "data directory (one local log per stream)")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:0", "actor system address")
	fs.StringVar(&o.httpAddr, "http", "127.0.0.1:0", "status and control address")
	fs.StringVar(&o.streams, "streams", "", "streams whose local logs this node holds, comma separated")
	fs.Uint64Var(&o.loadSeed, "load-seed", 1, "load generator seed (each stream adds its own)")
	fs.Int64Var(&o.loadStart, "load-start-ms", 0, "wall-clock ms of chunk 0 (shared by all nodes; default now)")
	fs.DurationVar(&o.loadInterval, "load-interval", 20*time.Millisecond, "one chunk per stream every this long")
	fs.Int64Var(&o.loadUntil, "load-chunks", 0, "stop each stream's load at this many chunks (0: no limit)")
	fs.IntVar(&o.minBytes, "load-min-bytes", 1000, "smallest chunk data")
	fs.IntVar(&o.maxBytes, "load-max-bytes", 3000, "largest chunk data")
	fs.Int64Var(&o.segmentBytes, "segment-bytes", 128<<10, "local segment size")
	fs.Uint64Var(&o.fragmentBytes, "fragment-bytes", 32<<10, "fragment target size")
	fs.IntVar(&o.persistThreshold, "persist-threshold", 2, "edits per persist")
	fs.DurationVar(&o.persistInterval, "persist-interval", 500*time.Millisecond, "longest wait for a persist")
	fs.IntVar(&o.rebalance, "rebalance-threshold", 0, "entries per group object (0: the default)")
	fs.Uint64Var(&o.retentionBytes, "retention-bytes", 0, "remote retention: keep at most this many bytes of each stream in S3 (0: no limit)")
	fs.DurationVar(&o.memberTTL, "member-ttl", 2*time.Second, "membership lease")
	fs.DurationVar(&o.resyncRetry, "resync-retry", 500*time.Millisecond, "replica sync request retry")
	fs.IntVar(&o.drop, "drop-percent", 0, "broadcasts dropped by the transport (fault injection)")
	fs.IntVar(&o.reorder, "reorder-percent", 0, "broadcasts reordered by the transport (fault injection)")
	fs.Var(o.staleWriters, "stale-writer", "stream=epoch: run this writer at this epoch regardless of placement (repeatable)")
	fs.StringVar(&o.logLevel, "log", "warn", "log level")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case o.node == "":
		return o, errors.New("-node is required")
	case o.etcd == "":
		return o, errors.New("-etcd is required")
	case o.dataDir == "":
		return o, errors.New("-data is required")
	case o.loadInterval <= 0:
		return o, errors.New("-load-interval must be positive")
	}
	if o.loadStart == 0 {
		o.loadStart = time.Now().UnixMilli()
	}
	return o, nil
}

func main() {
	zerolog.DurationFieldFormat = zerolog.DurationFormatString // durations with their unit, as cmd/node logs them
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "clusternode:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "clusternode:", err)
		os.Exit(1)
	}
}

// loader writes one stream's load into its log, chunk i at loadStart + i*interval, until
// the limit (which the test can set while it runs).
type loader struct {
	stream string
	log    *segments.Log
	gen    *loadgen.Generator
	chunks atomic.Int64 // chunks in the log
}

type node struct {
	o       options
	cluster *cluster.Cluster
	logs    map[string]*segments.Log
	loaders map[string]*loader
	until   atomic.Int64
	wake    chan struct{} // closed and replaced when until changes
	wakeMu  sync.Mutex
}

func run(o options) error {
	level, err := zerolog.ParseLevel(o.logLevel)
	if err != nil {
		return fmt.Errorf("-log: %w", err)
	}
	logger := zerolog.New(os.Stderr).Level(level).With().Timestamp().Str("node", o.node).Logger()
	// The actor system and protoactor remote come first, before any gRPC (etcd) in the process.
	lis, err := cluster.Listen(o.listen, logger)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	n := &node{o: o, logs: map[string]*segments.Log{}, loaders: map[string]*loader{}, wake: make(chan struct{})}
	n.until.Store(o.loadUntil)
	defer func() {
		for _, lg := range n.logs {
			lg.Close()
		}
	}()
	for _, s := range strings.Split(o.streams, ",") {
		if s == "" {
			continue
		}
		l, err := n.openLoader(s)
		if err != nil {
			lis.Close()
			return err
		}
		// Catch up to the wall clock before anything reads the log: a writer that starts on
		// a log behind the persisted manifest would take it for a previous timeline.
		if err := n.catchUp(l, time.Now()); err != nil {
			lis.Close()
			return err
		}
	}

	cli, err := metadata.NewClient(ctx, metadata.ClientConfig{Endpoints: strings.Split(o.etcd, ",")})
	if err != nil {
		lis.Close()
		return err
	}
	defer cli.Close()
	meta := metadata.NewStore(cli, o.etcdPrefix)
	store, err := s3io.NewStore(ctx, o.s3)
	if err != nil {
		lis.Close()
		return err
	}
	cfg := actors.Config{NodeID: o.node, Logger: logger, Stream: actors.StreamOptions{
		FragmentTargetSize: o.fragmentBytes, PersistThreshold: o.persistThreshold, PersistInterval: o.persistInterval,
		UploadRetryDelay: 200 * time.Millisecond, UploadRetryMaxDelay: time.Second, RebalanceThreshold: o.rebalance,
	}}
	cc := cluster.Config{MemberTTL: o.memberTTL, ResyncRetry: o.resyncRetry, OpenStream: n.openStream}
	n.cluster, err = cluster.Start(ctx, lis, cfg, cc, store, meta)
	if err != nil {
		return err
	}
	n.cluster.SetFaults(cluster.TransportFaults{DropPercent: o.drop, ReorderPercent: o.reorder})
	for stream, epoch := range o.staleWriters {
		lg, ok := n.logs[stream]
		if !ok {
			return fmt.Errorf("-stale-writer %s: not in -streams", stream)
		}
		if err := n.cluster.Node().AddStream(actors.StreamSpec{ID: stream, Log: lg, Epoch: epoch}); err != nil {
			return err
		}
	}

	var wg sync.WaitGroup
	lctx, cancelLoad := context.WithCancel(ctx)
	for _, l := range n.loaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.load(lctx, l); err != nil && lctx.Err() == nil {
				logger.Error().Err(err).Str("stream", l.stream).Msg("load generator stopped")
			}
		}()
	}
	hl, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		cancelLoad()
		wg.Wait()
		return errors.Join(err, n.cluster.Stop(context.Background()))
	}
	// Requests end with the process's context: a following read would hold Shutdown up.
	srv := &http.Server{Handler: n.mux(), ReadHeaderTimeout: 5 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error().Err(err).Msg("http server")
		}
	}()
	ready, _ := json.Marshal(map[string]string{"http": hl.Addr().String(), "cluster": n.cluster.Address()})
	fmt.Printf("READY %s\n", ready)

	<-ctx.Done()
	cancelLoad()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = errors.Join(srv.Shutdown(sctx), n.cluster.Stop(sctx))
	wg.Wait()
	return err
}

func (n *node) openLoader(stream string) (*loader, error) {
	lg, err := segments.Open(filepath.Join(n.o.dataDir, stream), segments.Options{MaxSegmentBytes: n.o.segmentBytes})
	if err != nil {
		return nil, err
	}
	n.logs[stream] = lg
	g, err := loadgen.New(loadConfig(n.o.loadSeed, stream, n.o.loadStart, n.o.minBytes, n.o.maxBytes))
	if err != nil {
		return nil, err
	}
	// Resume after a restart: skip the chunks the log already holds (from offset 0 on, as
	// local retention may have deleted the first segments).
	var off uint64
	var chunks int64
	for next := lg.NextOffset(); off < next; chunks++ {
		for _, e := range g.Next().Entries {
			off += uint64(e.RecordCount())
		}
	}
	if off != lg.NextOffset() {
		return nil, fmt.Errorf("stream %s: the log ends at %d, inside load chunk %d (written by another load?)", stream, lg.NextOffset(), chunks)
	}
	if last, ok := lg.LastChunkID(); ok { // what a node wrote before it stopped was committed
		if err := lg.SetCommitted(last); err != nil {
			return nil, err
		}
	}
	l := &loader{stream: stream, log: lg, gen: g}
	l.chunks.Store(chunks)
	n.loaders[stream] = l
	return l, nil
}

// loadConfig is the load of one stream; the test generates the same to check S3's content.
func loadConfig(seed uint64, stream string, start int64, minBytes, maxBytes int) loadgen.Config {
	h := fnv.New64a()
	h.Write([]byte(stream))
	return loadgen.Config{Seed: seed ^ h.Sum64(), MinDataBytes: minBytes, MaxDataBytes: maxBytes, StartTimestamp: start}
}

func (n *node) openStream(stream string) (actors.StreamSpec, error) {
	lg, ok := n.logs[stream]
	if !ok {
		return actors.StreamSpec{}, fmt.Errorf("no local log for stream %s on %s", stream, n.o.node)
	}
	return actors.StreamSpec{Log: lg, Retention: manifest.Policy{MaxBytes: n.o.retentionBytes}}, nil
}

// due is how many chunks should be in the log at time t, within the limit.
func (n *node) due(t time.Time) int64 {
	d := (t.UnixMilli()-n.o.loadStart)/n.o.loadInterval.Milliseconds() + 1
	if u := n.until.Load(); u > 0 {
		d = min(d, u)
	}
	return max(d, 0)
}

// catchUp appends every chunk due by t.
func (n *node) catchUp(l *loader, t time.Time) error {
	for l.chunks.Load() < n.due(t) {
		h, _, err := l.log.Append(l.gen.Next())
		if err != nil {
			return fmt.Errorf("stream %s: append: %w", l.stream, err)
		}
		if err := l.log.SetCommitted(h.ChunkID); err != nil {
			return fmt.Errorf("stream %s: commit: %w", l.stream, err)
		}
		l.chunks.Add(1)
	}
	return nil
}

// load keeps the log at the wall clock's chunk count until ctx ends.
func (n *node) load(ctx context.Context, l *loader) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		n.wakeMu.Lock()
		wake := n.wake
		n.wakeMu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-wake:
		}
		if err := n.catchUp(l, time.Now()); err != nil {
			return err
		}
		next := time.UnixMilli(n.o.loadStart + l.chunks.Load()*n.o.loadInterval.Milliseconds())
		if u := n.until.Load(); u > 0 && l.chunks.Load() >= u {
			next = time.Now().Add(time.Hour) // done; a new limit wakes it
		}
		t.Reset(max(time.Until(next), 0))
	}
}

// status is what GET /status answers.
type status struct {
	Node      string                         `json:"node"`
	Cluster   cluster.Status                 `json:"cluster"`
	Writers   map[string]writerStatus        `json:"writers"`
	Logs      map[string]logStatus           `json:"logs"`
	Metrics   map[string]int64               `json:"metrics"`
	Transport map[string]int64               `json:"transport"`
	Retention map[string]replicaRetentionGap `json:"retention"`
}

type writerStatus struct {
	Epoch         uint64 `json:"epoch"`
	Phase         string `json:"phase"`
	Revision      int64  `json:"revision"`
	Digest        uint64 `json:"digest"`
	PersistedNext uint64 `json:"persistedNext"`
	Error         string `json:"error,omitempty"`
}

type logStatus struct {
	First     uint64 `json:"first"`
	Next      uint64 `json:"next"`
	Committed uint64 `json:"committed"`
	Segments  int    `json:"segments"`
	Chunks    int64  `json:"chunks"`
}

// replicaRetentionGap counts a replica's local segments that local retention should have
// deleted: not active and wholly below the replica's persisted next offset.
type replicaRetentionGap struct {
	PersistedNext uint64 `json:"persistedNext"`
	Overdue       int    `json:"overdue"`
}

func (n *node) status(ctx context.Context) status {
	st := status{Node: n.o.node, Cluster: n.cluster.Status(), Writers: map[string]writerStatus{}, Logs: map[string]logStatus{},
		Retention: map[string]replicaRetentionGap{}}
	for _, id := range n.cluster.Node().Streams() {
		ws := writerStatus{}
		if s, err := n.cluster.Node().Status(ctx, id); err != nil {
			ws.Error = err.Error()
		} else {
			ws.Epoch, ws.Phase, ws.PersistedNext = s.Epoch, s.Phase, s.Core.PersistedNext
		}
		if p, ok := n.cluster.Node().Cached(id); ok {
			ws.Revision, ws.Digest = p.Revision, manifest.Digest(p.Manifest)
		}
		st.Writers[id] = ws
	}
	for id, l := range n.loaders {
		segs := l.log.Segments()
		st.Logs[id] = logStatus{First: l.log.FirstOffset(), Next: l.log.NextOffset(), Committed: l.log.CommittedNext(),
			Segments: len(segs), Chunks: l.chunks.Load()}
		if r, ok := st.Cluster.Replicas[id]; ok && r.Synced {
			gap := replicaRetentionGap{PersistedNext: r.NextOffset}
			for _, s := range segs {
				if !s.Active && s.NextOffset <= r.NextOffset {
					gap.Overdue++
				}
			}
			st.Retention[id] = gap
		}
	}
	m := n.cluster.Node().Metrics()
	st.Metrics = map[string]int64{
		"persists": m.Persists.Load(), "persistConflicts": m.PersistConflicts.Load(), "persistFailures": m.PersistFailures.Load(),
		"reinitializations": m.Reinitializations.Load(), "gaps": m.Gaps.Load(), "truncations": m.Truncations.Load(), "fragmentsUploaded": m.FragmentsUploaded.Load(),
		"localSegmentsDeleted": m.LocalSegmentsDeleted.Load(), "readerCrashes": m.ReaderCrashes.Load(),
	}
	t := n.cluster.Stats()
	st.Transport = map[string]int64{
		"sent": t.Sent.Load(), "queueFull": t.QueueFull.Load(), "noRoute": t.NoRoute.Load(), "faultDropped": t.FaultDropped.Load(),
		"reordered": t.Reordered.Load(), "pausedDropped": t.PausedDropped.Load(), "received": t.Received.Load(),
		"rejected": t.Rejected.Load(), "recovered": t.Recovered.Load(), "badMessages": t.BadMessages.Load(),
		"unroutable": t.Unroutable.Load(), "registrations": t.Registrations.Load(), "notWriter": t.NotWriter.Load(),
	}
	return st
}

func (n *node) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(n.status(r.Context())); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	mux.HandleFunc("GET /lookup", func(w http.ResponseWriter, r *http.Request) {
		offset, err := strconv.ParseUint(r.FormValue("offset"), 10, 64)
		if err != nil {
			http.Error(w, "lookup: offset: "+err.Error(), http.StatusBadRequest)
			return
		}
		ref, err := n.cluster.ReplicaLookup(r.Context(), r.FormValue("stream"), offset)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]uint64{"first": ref.Entry.FirstOffset, "end": ref.End, "uid": ref.Entry.UID})
	})
	// The admin server's framed read stream, through the cluster: the writer's cache on the
	// writer node, the replica cache and the replica's own log elsewhere.
	mux.HandleFunc("GET /streams/{id}/read", admin.ReadHandler(n.cluster))
	mux.HandleFunc("POST /faults", func(w http.ResponseWriter, r *http.Request) {
		drop, err1 := strconv.Atoi(r.FormValue("drop"))
		reorder, err2 := strconv.Atoi(r.FormValue("reorder"))
		paused, err3 := strconv.ParseBool(r.FormValue("paused"))
		if err := errors.Join(err1, err2, err3); err != nil {
			http.Error(w, "faults: drop, reorder and paused are required: "+err.Error(), http.StatusBadRequest)
			return
		}
		n.cluster.SetFaults(cluster.TransportFaults{DropPercent: drop, ReorderPercent: reorder, Paused: paused})
	})
	mux.HandleFunc("POST /forcecut", func(w http.ResponseWriter, r *http.Request) {
		if err := n.cluster.Node().ForceCut(r.FormValue("stream")); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
		}
	})
	mux.HandleFunc("POST /load", func(w http.ResponseWriter, r *http.Request) {
		until, err := strconv.ParseInt(r.FormValue("until"), 10, 64)
		if err != nil || until < 0 {
			http.Error(w, "load: until must be a chunk count", http.StatusBadRequest)
			return
		}
		n.until.Store(until)
		n.wakeMu.Lock()
		close(n.wake)
		n.wake = make(chan struct{})
		n.wakeMu.Unlock()
	})
	return mux
}
