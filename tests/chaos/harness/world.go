// Package harness runs the chaos soak: it owns a three-member etcd cluster (embedded) and a
// versitygw S3 server behind the fault injector, writes each stream's local log with the
// deterministic load as the broker would, runs the real node binary on them as a child
// process, injects the faults the seeded schedule draws, records the history, and has the
// independent checker judge the remote tier after every cycle and at the end.
package harness

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments/loadgen"
	"github.com/streamtier/streamtier/tests/chaos/check"
	"github.com/streamtier/streamtier/tests/chaos/etcdcluster"
	"github.com/streamtier/streamtier/tests/chaos/faults"
	"github.com/streamtier/streamtier/tests/chaos/history"
)

// Config is what a soak runs.
type Config struct {
	Seed     uint64
	Duration time.Duration // cycles start while this has not passed
	Streams  int
	Dir      string // work directory; empty: a new temporary one, removed after a clean run
	Keep     bool   // keep the work directory even after a clean run
	NodeBin  string // a built node binary; empty: build one
	Live     io.Writer
	Progress io.Writer     // one line per cycle; nil: none
	LagBound time.Duration // after the faults stop, every stream's lag must be zero within this
	// AvoidKnownBugs keeps the schedule off the faults that trip the bugs this soak found
	// and that are not fixed yet (docs/soak.md lists them): a lost tail then cuts the log
	// only where a persisted fragment starts, never inside one.
	AvoidKnownBugs bool
	Schedule       faults.Options
}

func (c *Config) defaults() {
	if c.Streams == 0 {
		c.Streams = 3
	}
	if c.Duration == 0 {
		c.Duration = 2 * time.Minute
	}
	if c.LagBound == 0 {
		c.LagBound = 90 * time.Second
	}
	if c.Schedule.Streams == 0 {
		c.Schedule = faults.DefaultOptions(c.Streams)
	}
	c.Schedule.Streams = c.Streams
}

// Settings of the node under test and of the streams (see nodeYAML).
const (
	etcdPrefix     = "/chaos"
	keyPrefix      = "chaos"
	fragmentTarget = 256 << 10
	segmentBytes   = 256 << 10
	maxChunkBytes  = 8 << 10
	configMaxBytes = 24 << 20 // each stream's remote retention in the node's configuration
	uploadRate     = 640 << 10
	followInterval = 200 * time.Millisecond
)

type world struct {
	cfg        Config
	dir        string
	hist       *history.History
	etcd       *etcdcluster.Cluster
	cli        *clientv3.Client
	s3         *s3test.Server
	inj        *s3test.Injector
	bucket     string
	chk        *check.Checker
	streams    []string
	logs       []*streamLog
	nodeBin    string
	nodeConfig string
	nodeData   string
	node       *nodeProc
	runs       int
	cycle      int
	plans      []faults.Cycle
	counts     map[string]int // fault counts by detailed kind (s3-storm/503, ...)
	skipped    map[string]int // faults that found no room to act
	awaits     map[string]int // await answers by outcome (persisted, or the error class)
	rules      map[int][]s3test.Rule
	nextRule   int
	// localAheadRule is the rule blocking a local-ahead stream's uploads (0: none).
	localAheadRule int
	// rewrite is what the first half of the cycle's broker rewrite left for the second
	// (nil: none this cycle).
	rewrite *rewriteState
	// writers are the live writers appending to the logs during a node run (nil: none
	// open); nodeUp says whether a node process runs, for their counts; appends sums
	// what closed writers appended.
	writers   []*liveWriter
	nodeUp    atomic.Bool
	appends   AppendStats
	stopWatch context.CancelFunc
	watchDone chan struct{}
	closers   []func()
	start     time.Time
	mu        sync.Mutex // guards counts for the observer, and awaits
}

// load is stream id's deterministic load.
func (w *world) load(id string) loadgen.Config {
	h := fnv.New64a()
	h.Write([]byte(id))
	return loadgen.Config{Seed: w.cfg.Seed ^ h.Sum64(), MinDataBytes: 300, MaxDataBytes: 6000, MinEntries: 1, MaxEntries: 8,
		SubBatchPercent: 20, TrackingEvery: 53, StartTimestamp: w.start.UnixMilli(), BytesPerSecond: 150_000}
}

// forkLoad is the load of stream id's timeline k (k >= 1: the k-th fork), starting at
// timestamp ts: another seed, so other chunks, and epoch k+1, as a new leader writes them.
func (w *world) forkLoad(id string, k int, ts int64) loadgen.Config {
	cfg := w.load(id)
	cfg.Seed ^= uint64(k) * 0x9e3779b97f4a7c15
	cfg.Epoch = uint64(k) + 1
	cfg.StartTimestamp = ts
	return cfg
}

// setup starts etcd, S3, the injector, the checker and the observer, and writes the node's
// configuration.
func (w *world) setup(ctx context.Context) error {
	var err error
	if w.dir = w.cfg.Dir; w.dir == "" {
		if w.dir, err = os.MkdirTemp("", "streamtier-chaos-"); err != nil {
			return err
		}
	}
	for _, d := range []string{"node-logs", "logs", "s3", "etcd", "node", "bin"} {
		if err := os.MkdirAll(filepath.Join(w.dir, d), 0o755); err != nil {
			return err
		}
	}
	if w.nodeBin = w.cfg.NodeBin; w.nodeBin == "" {
		bctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		if w.nodeBin, err = BuildNode(bctx, filepath.Join(w.dir, "bin")); err != nil {
			return err
		}
	}
	w.etcd, err = etcdcluster.Start(ctx, filepath.Join(w.dir, "etcd"), etcdcluster.Options{Members: 3})
	if err != nil {
		return err
	}
	w.closers = append(w.closers, w.etcd.Close)
	w.cli, err = clientv3.New(clientv3.Config{Endpoints: w.etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	w.closers = append(w.closers, func() { w.cli.Close() })
	if w.s3, err = s3test.Launch(filepath.Join(w.dir, "s3"), s3test.Options{}); err != nil {
		return err
	}
	w.closers = append(w.closers, w.s3.Stop)
	bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if w.bucket, err = w.s3.CreateBucket(bctx); err != nil {
		return err
	}
	w.s3.Bucket = w.bucket
	if w.inj, err = s3test.NewProxy(w.s3); err != nil {
		return err
	}
	w.closers = append(w.closers, w.inj.Close)

	var scs []check.StreamConfig
	for i := range w.cfg.Streams {
		id := fmt.Sprintf("s%d", i)
		w.streams = append(w.streams, id)
		lin, err := check.NewLineage(w.load(id))
		if err != nil {
			return err
		}
		w.logs = append(w.logs, &streamLog{id: id, dir: filepath.Join(w.dir, "logs", id), segBytes: segmentBytes, lin: lin})
		scs = append(scs, check.StreamConfig{ID: id, Load: w.load(id), Policy: check.Policy{MaxBytes: configMaxBytes}})
	}
	w.chk, err = check.New(check.Config{
		Bucket:     check.NewBucket(check.BucketConfig{Endpoint: w.s3.Endpoint, Region: s3test.Region, Bucket: w.bucket, AccessKey: w.s3.AccessKey, SecretKey: w.s3.SecretKey}),
		Etcd:       w.cli,
		EtcdPrefix: etcdPrefix, KeyPrefix: keyPrefix, Streams: scs,
		RetentionSlack: fragmentTarget + maxChunkBytes + 1024,
		History:        w.hist,
	})
	if err != nil {
		return err
	}
	w.nodeData = filepath.Join(w.dir, "node")
	w.nodeConfig = filepath.Join(w.dir, "node.yaml")
	if err := os.WriteFile(w.nodeConfig, []byte(w.nodeYAML()), 0o644); err != nil {
		return err
	}
	w.watch()
	return nil
}

// nodeYAML is the node's configuration: external etcd (all three members) and S3 (through
// the injector), small fragments and segments, short retry delays and deadlines, so that
// a cycle of a few seconds sees uploads, persists, rebalances and retention.
func (w *world) nodeYAML() string {
	var b strings.Builder
	fmt.Fprintf(&b, "data_dir: %s\nnode_id: chaos\nlog_format: json\nprogress: \"off\"\n", w.nodeData)
	fmt.Fprintf(&b, "etcd_endpoints: [%s]\netcd_prefix: %s\netcd_dial_timeout: 3s\n", strings.Join(w.etcd.Endpoints(), ", "), etcdPrefix)
	fmt.Fprintf(&b, "s3_endpoint: %s\ns3_bucket: %s\ns3_path_style: true\ns3_region: %s\n", w.inj.Endpoint(), w.bucket, s3test.Region)
	fmt.Fprintf(&b, "s3_access_key: %s\ns3_secret_key: %s\n", w.s3.AccessKey, w.s3.SecretKey)
	fmt.Fprintf(&b, "s3_request_timeout: 5s\ns3_transfer_timeout: 10s\nkey_prefix: %s\n", keyPrefix)
	fmt.Fprintf(&b, "fragment_target_size: %d\npersist_threshold: 3\npersist_interval: 300ms\nrebalance_threshold: 8\n", fragmentTarget)
	fmt.Fprintf(&b, "upload_retry_delay: 200ms\nupload_retry_max_delay: 2s\ntransient_backoff_base: 10ms\ntransient_backoff_max: 1s\n")
	fmt.Fprintf(&b, "persist_timeout: 10s\ngroup_upload_timeout: 10s\nresolve_timeout: 10s\nretention_task_timeout: 10s\n")
	// Uploads paced below the load's peak, so that the node is still tiering when the
	// cycle's faults strike rather than idle after a burst.
	fmt.Fprintf(&b, "max_transfer_bytes_per_sec: %d\n", uploadRate)
	fmt.Fprintf(&b, "local_hot_window_bytes: 1MiB\nsegment_max_bytes: %d\nstop_timeout: 20s\n", segmentBytes)
	// The harness writes the followed logs while the node runs: the node follows them
	// (read-only); it opens the unfollowed one as its own (see followed).
	fmt.Fprintf(&b, "follow_interval: %v\n", followInterval)
	// The stream the node opens as its own is written only before the node starts: once
	// persisted it goes dormant, and wakes for the cycles' commands and restarts, under the
	// faults and the checker like the others.
	b.WriteString("stream_dormant_after: 300ms\n")
	b.WriteString("streams:\n")
	for i, l := range w.logs {
		fmt.Fprintf(&b, "  - id: %s\n    log_dir: %s\n    follow: %v\n    retention_max_bytes: %d\n", l.id, l.dir, w.followed(i), configMaxBytes)
	}
	return b.String()
}

// watch follows every manifest record put in etcd and hands it to the checker: the
// acknowledgements of persisted offsets, as they happen. It resumes after etcd outages.
func (w *world) watch() {
	ctx, cancel := context.WithCancel(context.Background())
	w.stopWatch, w.watchDone = cancel, make(chan struct{})
	prefix := etcdPrefix + "/streams/"
	go func() { // owned by w: stopWatch and watchDone end it
		defer close(w.watchDone)
		var rev int64
		for ctx.Err() == nil {
			opts := []clientv3.OpOption{clientv3.WithPrefix()}
			if rev > 0 {
				opts = append(opts, clientv3.WithRev(rev+1))
			}
			for resp := range w.cli.Watch(clientv3.WithRequireLeader(ctx), prefix, opts...) {
				if resp.Err() != nil {
					break
				}
				for _, ev := range resp.Events {
					rev = max(rev, ev.Kv.ModRevision)
					rest := strings.TrimPrefix(string(ev.Kv.Key), prefix)
					stream, key, ok := strings.Cut(rest, "/")
					if !ok || key != "manifest" || ev.Type != clientv3.EventTypePut {
						continue
					}
					w.chk.Observe(stream, ev.Kv)
					if r, _, err := check.DecodeRecord(ev.Kv.Value); err == nil {
						w.hist.Add(w.currentCycle(), "persisted", stream, false, "revision %d: [%d,%d) %d bytes epoch %d", ev.Kv.Version, r.FirstOffset, r.NextOffset, r.TotalSize, r.Epoch)
					}
				}
			}
			select { // the watch ended (no leader, an outage): watch again shortly
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
}

func (w *world) currentCycle() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cycle
}

func (w *world) setCycle(c int) {
	w.mu.Lock()
	w.cycle = c
	w.mu.Unlock()
	w.chk.SetCycle(c)
}

// teardown stops everything setup started, in reverse order.
func (w *world) teardown() {
	if w.node != nil {
		w.node.kill()
	}
	if w.writers != nil {
		w.closeWriters() // a harness error left them open: their own errors add nothing
	}
	if w.stopWatch != nil {
		w.stopWatch()
		<-w.watchDone
	}
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
}
