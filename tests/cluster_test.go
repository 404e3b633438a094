package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/actors/cluster"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// The cluster test runs three node processes (tests/clusternode) on loopback against a real
// etcd (embedded in this process; the nodes are its clients) and a real S3 server. Every node
// holds the local logs of all five streams, written by the deterministic load generator in
// step with the wall clock, so that the logs are the same everywhere, as the broker's
// replication would make them.

const (
	clusterLoadInterval = 20 * time.Millisecond
	clusterMinBytes     = 1000
	clusterMaxBytes     = 3000
	clusterSeed         = 11
)

var (
	clusterNodes   = []string{"n1", "n2", "n3"}
	clusterStreams = []string{"s1", "s2", "s3", "s4", "s5"}
)

// clusterLoad is the load of one stream: clusternode's loadConfig, repeated here to
// generate the reference log.
func clusterLoad(stream string, start int64) loadgen.Config {
	h := fnv.New64a()
	h.Write([]byte(stream))
	return loadgen.Config{Seed: clusterSeed ^ h.Sum64(), MinDataBytes: clusterMinBytes, MaxDataBytes: clusterMaxBytes, StartTimestamp: start}
}

var (
	clusterBinOnce sync.Once
	clusterBin     string
	clusterBinErr  error
)

// buildClusterNode builds tests/clusternode once per test binary, with the race detector
// when this binary has it, so that the actor code runs under it in every node process.
func buildClusterNode(t *testing.T) string {
	t.Helper()
	clusterBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "clusternode-")
		if err != nil {
			clusterBinErr = err
			return
		}
		clusterBin = filepath.Join(dir, "clusternode")
		args := []string{"build", "-o", clusterBin}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append(args, "github.com/streamtier/streamtier/tests/clusternode")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			clusterBinErr = fmt.Errorf("build clusternode: %v\n%s", err, out)
		}
	})
	if clusterBinErr != nil {
		t.Fatal(clusterBinErr)
	}
	return clusterBin
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// nodeProc is one running clusternode process.
type nodeProc struct {
	name    string
	cmd     *exec.Cmd
	out     *lockedBuffer
	http    string
	cluster string
	started time.Time
	done    chan struct{}
}

// nodeStatus is what a node's GET /status answers (the fields the test reads).
type nodeStatus struct {
	Node    string
	Cluster cluster.Status
	Writers map[string]struct {
		Epoch         uint64
		Phase         string
		Revision      int64
		Digest        uint64
		PersistedNext uint64
		Error         string
	}
	Logs map[string]struct {
		First, Next, Committed uint64
		Segments               int
		Chunks                 int64
	}
	Metrics   map[string]int64
	Transport map[string]int64
	Retention map[string]struct {
		PersistedNext uint64
		Overdue       int
	}
}

// persistSeen is one persist of a stream as the test's etcd watch saw it, with the root it
// names (fetched at once, before the next persist's reaper may delete it).
type persistSeen struct {
	version int64
	rec     metadata.ManifestRecord
	m       manifest.Manifest
	digest  uint64
	fetched bool
	seen    time.Time
}

// clusterWorld is the test's cluster: etcd, S3, the node processes and the persist watch.
type clusterWorld struct {
	t         *testing.T
	bin       string
	etcd      *metadata.Embedded
	meta      *metadata.Store
	store     *s3io.Store
	s3cfg     s3io.Config
	dir       string
	loadStart int64
	nodes     map[string]*nodeProc
	dead      map[string]bool // killed node processes' outputs, kept for the race check
	outputs   []*nodeProc

	wmu       sync.Mutex
	persists  map[string][]persistSeen
	placement map[string]metadata.Placement
	stopWatch context.CancelFunc
	watchDone chan struct{}
}

func newClusterWorld(t *testing.T) *clusterWorld {
	t.Helper()
	w := &clusterWorld{t: t, bin: buildClusterNode(t), dir: t.TempDir(), nodes: map[string]*nodeProc{},
		dead: map[string]bool{}, persists: map[string][]persistSeen{}, placement: map[string]metadata.Placement{}}
	w.etcd = etcdtest.Start(t)
	w.meta = etcdtest.Store(t, w.etcd)
	srv := s3test.Start(t, s3test.Options{})
	w.s3cfg = srv.NewBucket(t)
	var err error
	if w.store, err = s3io.NewStore(context.Background(), w.s3cfg); err != nil {
		t.Fatal(err)
	}
	w.loadStart = time.Now().Add(500 * time.Millisecond).UnixMilli()
	w.watch()
	t.Cleanup(w.shutdown) // runs before etcd and S3 stop
	return w
}

// shutdown stops every node (SIGTERM: a clean exit is checked), the watch, and checks that
// no node process reported a data race.
func (w *clusterWorld) shutdown() {
	for _, name := range clusterNodes {
		if p := w.nodes[name]; p != nil {
			w.stopNode(name)
		}
	}
	w.stopWatch()
	<-w.watchDone
	for _, p := range w.outputs {
		if out := p.out.String(); strings.Contains(out, "WARNING: DATA RACE") {
			w.t.Errorf("node %s reported a data race:\n%s", p.name, out)
		}
	}
	if w.t.Failed() {
		for _, p := range w.outputs {
			out := p.out.String()
			if len(out) > 8000 {
				out = out[len(out)-8000:]
			}
			w.t.Logf("output of %s (started %s):\n%s", p.name, p.started.Format("15:04:05.000"), out)
		}
	}
}

// watch follows every persist of the five streams from the start, fetching each root at once.
func (w *clusterWorld) watch() {
	ctx, cancel := context.WithCancel(context.Background())
	w.stopWatch, w.watchDone = cancel, make(chan struct{})
	keys := map[string]string{}
	for _, s := range clusterStreams {
		keys[metadata.ManifestKey(w.meta.Prefix(), s)] = s
	}
	wch := w.meta.Client().Watch(ctx, w.meta.Prefix()+"/streams/", clientv3.WithPrefix())
	t := w.t // the top-level test: it outlives the goroutine
	go func() {
		defer close(w.watchDone)
		for resp := range wch {
			for _, ev := range resp.Events {
				stream, ok := keys[string(ev.Kv.Key)]
				if !ok || ev.Type != clientv3.EventTypePut {
					continue
				}
				p := persistSeen{version: ev.Kv.Version, seen: time.Now()}
				rec, err := metadata.DecodeManifestRecord(string(ev.Kv.Key), ev.Kv.Value)
				if err != nil {
					t.Errorf("stream %s: record version %d: %v", stream, p.version, err)
					continue
				}
				p.rec = rec
				fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
				body, err := w.store.GetObject(fctx, rec.RootKey(manifest.DefaultKeyPrefix, stream))
				fcancel()
				if err == nil {
					if p.m, err = manifest.DecodeRoot(body); err != nil {
						t.Errorf("stream %s: root of version %d: %v", stream, p.version, err)
						continue
					}
					p.digest, p.fetched = manifest.Digest(p.m), true
				}
				w.wmu.Lock()
				w.persists[stream] = append(w.persists[stream], p)
				w.wmu.Unlock()
			}
		}
	}()
}

func (w *clusterWorld) seen(stream string) []persistSeen {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	return append([]persistSeen(nil), w.persists[stream]...)
}

func (w *clusterWorld) latest(stream string) (persistSeen, bool) {
	s := w.seen(stream)
	if len(s) == 0 {
		return persistSeen{}, false
	}
	return s[len(s)-1], true
}

func (w *clusterWorld) place(p metadata.Placement) {
	w.t.Helper()
	if err := w.meta.PutPlacement(context.Background(), p); err != nil {
		w.t.Fatal(err)
	}
	w.placement[p.Stream] = p
}

// startNode runs a node process and waits until it serves.
func (w *clusterWorld) startNode(name string, extra ...string) *nodeProc {
	w.t.Helper()
	args := []string{
		"-node", name, "-etcd", strings.Join(w.etcd.Endpoints(), ","), "-etcd-prefix", w.meta.Prefix(),
		"-s3-endpoint", w.s3cfg.Endpoint, "-s3-bucket", w.s3cfg.Bucket, "-s3-region", w.s3cfg.Region,
		"-data", filepath.Join(w.dir, name), "-streams", strings.Join(clusterStreams, ","),
		"-load-seed", fmt.Sprint(clusterSeed), "-load-start-ms", fmt.Sprint(w.loadStart),
		"-load-interval", clusterLoadInterval.String(), "-load-min-bytes", fmt.Sprint(clusterMinBytes),
		"-load-max-bytes", fmt.Sprint(clusterMaxBytes),
	}
	cmd := exec.Command(w.bin, append(args, extra...)...)
	// Credentials through the standard AWS chain, not the command line.
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+w.s3cfg.AccessKey, "AWS_SECRET_ACCESS_KEY="+w.s3cfg.SecretKey)
	p := &nodeProc{name: name, cmd: cmd, out: &lockedBuffer{}, started: time.Now(), done: make(chan struct{})}
	cmd.Stderr = p.out
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.outputs = append(w.outputs, p)
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, "READY "); ok {
				ready <- rest
				continue
			}
			fmt.Fprintln(p.out, line)
		}
		cmd.Wait()
		close(p.done)
	}()
	select {
	case line := <-ready:
		var addrs struct{ HTTP, Cluster string }
		if err := json.Unmarshal([]byte(line), &addrs); err != nil {
			w.t.Fatalf("%s: ready line %q: %v", name, line, err)
		}
		p.http, p.cluster = addrs.HTTP, addrs.Cluster
	case <-p.done:
		w.t.Fatalf("%s exited before it was ready: %v\n%s", name, cmd.ProcessState, p.out.String())
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		w.t.Fatalf("%s not ready after 60 s:\n%s", name, p.out.String())
	}
	w.nodes[name] = p
	return p
}

// killNode kills a node with SIGKILL: no goodbye, its lease expires.
func (w *clusterWorld) killNode(name string) {
	p := w.nodes[name]
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	delete(w.nodes, name)
}

// stopNode stops a node with SIGTERM and checks that it exits cleanly.
func (w *clusterWorld) stopNode(name string) {
	p := w.nodes[name]
	delete(w.nodes, name)
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			w.t.Errorf("%s exited with %d after SIGTERM", name, code)
		}
	case <-time.After(40 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		w.t.Errorf("%s did not stop within 40 s of SIGTERM", name)
	}
}

func (w *clusterWorld) status(name string) (nodeStatus, error) {
	var st nodeStatus
	p := w.nodes[name]
	if p == nil {
		return st, fmt.Errorf("%s is not running", name)
	}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + p.http + "/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return st, fmt.Errorf("%s status: %s: %s", name, resp.Status, b)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func (w *clusterWorld) mustStatus(name string) nodeStatus {
	w.t.Helper()
	st, err := w.status(name)
	if err != nil {
		w.t.Fatal(err)
	}
	return st
}

func (w *clusterWorld) post(name, path string, form url.Values) error {
	p := w.nodes[name]
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.PostForm("http://"+p.http+path, form)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s %s: %s: %s", name, path, resp.Status, b)
	}
	return nil
}

// lookup asks a node's replica cache which fragment holds offset of stream; it returns the
// fragment's uid.
func (w *clusterWorld) lookup(name, stream string, offset uint64) (uint64, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + w.nodes[name].http + "/lookup?" + url.Values{"stream": {stream}, "offset": {fmt.Sprint(offset)}}.Encode())
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return 0, fmt.Errorf("%s: %s", resp.Status, b)
	}
	var ref struct{ First, End, UID uint64 }
	if err := json.NewDecoder(resp.Body).Decode(&ref); err != nil {
		return 0, err
	}
	if offset < ref.First || offset >= ref.End {
		return 0, fmt.Errorf("fragment [%d,%d) does not hold %d", ref.First, ref.End, offset)
	}
	return ref.UID, nil
}

func (w *clusterWorld) setFaults(name string, drop, reorder int, paused bool) {
	w.t.Helper()
	if err := w.post(name, "/faults", url.Values{"drop": {fmt.Sprint(drop)}, "reorder": {fmt.Sprint(reorder)}, "paused": {fmt.Sprint(paused)}}); err != nil {
		w.t.Fatal(err)
	}
}

// waitFor polls cond every 100 ms until it holds, failing after d; it returns how long it took.
func (w *clusterWorld) waitFor(d time.Duration, what string, cond func() (bool, string)) time.Duration {
	w.t.Helper()
	start := time.Now()
	for {
		ok, state := cond()
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > d {
			w.t.Fatalf("%s: not after %s: %s", what, d, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// statuses reads the status of every running node, by name.
func (w *clusterWorld) statuses() (map[string]nodeStatus, error) {
	sts := map[string]nodeStatus{}
	for name := range w.nodes {
		st, err := w.status(name)
		if err != nil {
			return nil, err
		}
		sts[name] = st
	}
	return sts, nil
}

// caughtUp returns a condition for a wait while the load goes on: every stream persisted
// at least once after the wait began (the target: its first such persist the test fetched),
// and its writer's cache and every running replica hold that root or a later one. A strict
// converged would chase a target that moves with every persist (one per fragment under a
// steady write); which roots a replica held is checkHistories' business.
func (w *clusterWorld) caughtUp(streams ...string) func() (bool, string) {
	start := time.Now()
	targets := map[string]persistSeen{}
	return func() (bool, string) {
		for _, s := range streams {
			if _, ok := targets[s]; ok {
				continue
			}
			seen := w.seen(s)
			for i := len(seen) - 1; i >= 0 && seen[i].seen.After(start); i-- {
				if seen[i].fetched {
					targets[s] = seen[i]
					break
				}
			}
			if _, ok := targets[s]; !ok {
				return false, fmt.Sprintf("%s: no persist fetched since the wait began", s)
			}
		}
		sts, err := w.statuses()
		if err != nil {
			return false, err.Error()
		}
		for _, s := range streams {
			tg := targets[s]
			p := w.placement[s]
			if ws, ok := sts[p.Writer]; ok {
				if got := ws.Writers[s]; got.Revision < tg.version || (got.Revision == tg.version && got.Digest != tg.digest) {
					return false, fmt.Sprintf("%s: writer %s caches rev %d digest %x, the target is rev %d digest %x", s, p.Writer, got.Revision, got.Digest, tg.version, tg.digest)
				}
			}
			for _, r := range p.Replicas {
				st, ok := sts[r]
				if !ok {
					continue // not running
				}
				rs := st.Cluster.Replicas[s]
				if !rs.Synced || rs.Seq < tg.rec.Seq || (rs.Seq == tg.rec.Seq && (rs.UID != tg.rec.RootUID || rs.Digest != tg.digest)) {
					return false, fmt.Sprintf("%s: replica %s holds root %d/%016x digest %x (synced %t), the target is root %d/%016x digest %x",
						s, r, rs.Seq, rs.UID, rs.Digest, rs.Synced, tg.rec.Seq, tg.rec.RootUID, tg.digest)
				}
			}
		}
		return true, ""
	}
}

// converged says whether every running replica of every stream holds the writer's latest
// persisted manifest (same revision, same digest), and the writer's cache too: for a wait
// once the load has stopped (caughtUp while it goes on).
func (w *clusterWorld) converged(streams ...string) (bool, string) {
	sts, err := w.statuses()
	if err != nil {
		return false, err.Error()
	}
	for _, s := range streams {
		last, ok := w.latest(s)
		if !ok || !last.fetched {
			return false, fmt.Sprintf("%s: no persist seen yet", s)
		}
		p := w.placement[s]
		if ws, ok := sts[p.Writer]; ok {
			if got := ws.Writers[s]; got.Revision != last.version || got.Digest != last.digest {
				return false, fmt.Sprintf("%s: writer %s caches rev %d, etcd has %d", s, p.Writer, got.Revision, last.version)
			}
		}
		for _, r := range p.Replicas {
			st, ok := sts[r]
			if !ok {
				continue // not running
			}
			rs := st.Cluster.Replicas[s]
			if !rs.Synced || rs.Seq != last.rec.Seq || rs.UID != last.rec.RootUID || rs.Digest != last.digest {
				return false, fmt.Sprintf("%s: replica %s holds root %d/%016x digest %x (synced %t), etcd names root %d/%016x digest %x",
					s, r, rs.Seq, rs.UID, rs.Digest, rs.Synced, last.rec.Seq, last.rec.RootUID, last.digest)
			}
		}
	}
	return true, ""
}

// checkHistories is invariant 14 seen from outside: every manifest a replica held is the
// writer's persisted manifest of that root (seq and uid, as replica messages name it). When
// contiguousAfter names a stream, its replicas held every persisted root after the one of
// that record version, in the order the watch saw them (no broadcast was lost). It returns
// the replication delays (from the test seeing the persist in etcd to the replica taking it).
func (w *clusterWorld) checkHistories(contiguousAfter map[string]int64, dropsBefore map[string]int64) []time.Duration {
	w.t.Helper()
	var lags []time.Duration
	verified, unverifiable := 0, 0
	for name := range w.nodes {
		st := w.mustStatus(name)
		for stream, rs := range st.Cluster.Replicas {
			type rootID struct{ seq, uid uint64 }
			seen := w.seen(stream)
			byRoot := map[rootID]int{} // index into seen
			for i, p := range seen {
				byRoot[rootID{p.rec.Seq, p.rec.RootUID}] = i
			}
			for i, h := range rs.History {
				if h.Seq == 0 && h.UID == 0 { // a sync before the first persist: the empty manifest
					if h.Digest != manifest.Digest(manifest.Empty()) {
						w.t.Fatalf("replica %s of %s held root 0/0 with digest %x, not the empty manifest", name, stream, h.Digest)
					}
					continue
				}
				j, ok := byRoot[rootID{h.Seq, h.UID}]
				if !ok || !seen[j].fetched {
					unverifiable++
					continue
				}
				p := seen[j]
				if p.digest != h.Digest {
					w.t.Fatalf("replica %s of %s held root %d/%016x with digest %x; that persisted root has %x", name, stream, h.Seq, h.UID, h.Digest, p.digest)
				}
				verified++
				lags = append(lags, time.UnixMilli(h.At).Sub(p.seen))
				if from, ok := contiguousAfter[stream]; ok && i > 0 {
					prev, known := byRoot[rootID{rs.History[i-1].Seq, rs.History[i-1].UID}]
					if known && seen[prev].version >= from && j != prev+1 {
						writer := w.placement[stream].Writer
						if w.transportDrops()[writer] > dropsBefore[writer] {
							// The writer's transport dropped messages (a member's lease lapsed
							// under load: no route; a peer's queue full): the replica's
							// resync on the gap is the protocol working, not a lost persist.
							w.t.Logf("replica %s of %s went from root %d to %d after %s's transport dropped messages",
								name, stream, rs.History[i-1].Seq, h.Seq, writer)
							continue
						}
						w.t.Fatalf("replica %s of %s went from root %d/%016x to %d/%016x without a fault: a persist was not replicated (replica counters %+v; writer %s transport %v)",
							name, stream, rs.History[i-1].Seq, rs.History[i-1].UID, h.Seq, h.UID, rs.Counters, writer, w.mustStatus(writer).Transport)
					}
				}
			}
		}
	}
	if verified == 0 || unverifiable > verified/10 {
		w.t.Fatalf("replica histories: %d states verified against persisted roots, %d not verifiable", verified, unverifiable)
	}
	return lags
}

// transportDrops is, per running node, the cluster messages its transport dropped without
// an injected fault: no route to the peer (not a member, or its lease lapsed) or its queue full.
func (w *clusterWorld) transportDrops() map[string]int64 {
	w.t.Helper()
	sts, err := w.statuses()
	if err != nil {
		w.t.Fatal(err)
	}
	drops := map[string]int64{}
	for n, st := range sts {
		drops[n] = st.Transport["noRoute"] + st.Transport["queueFull"]
	}
	return drops
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(int(float64(len(s))*q), len(s)-1)]
}

// waitPersists waits until every stream has persisted n more times than it had.
func (w *clusterWorld) waitPersists(n int, d time.Duration, streams ...string) {
	w.t.Helper()
	base := map[string]int{}
	for _, s := range streams {
		base[s] = len(w.seen(s))
	}
	w.waitFor(d, fmt.Sprintf("%d more persists of %v", n, streams), func() (bool, string) {
		for _, s := range streams {
			if got := len(w.seen(s)) - base[s]; got < n {
				return false, fmt.Sprintf("%s persisted %d times", s, got)
			}
		}
		return true, ""
	})
}

// TestClusterReplication runs the replica protocol across three node processes through
// steady writing, dropped and reordered broadcasts, a replica node killed and restarted,
// the writer node killed and its streams moved to other nodes at epoch + 1 (the old writer
// revived at its old epoch never persists again), and a partition healed; at the end every
// byte written is in S3 exactly once and every replica holds its writer's last manifest.
func TestClusterReplication(t *testing.T) {
	w := newClusterWorld(t)
	// Writers spread over the nodes; every other node replicates.
	for i, s := range clusterStreams {
		writer := clusterNodes[i%3]
		var replicas []string
		for _, n := range clusterNodes {
			if n != writer {
				replicas = append(replicas, n)
			}
		}
		w.place(metadata.Placement{Stream: s, Writer: writer, Epoch: 1, Replicas: replicas})
	}
	for _, n := range clusterNodes {
		w.startNode(n)
	}
	figures := map[string]string{}
	// Each phase builds on the one before: stop at the first that fails.
	phase := func(name string, f func(t *testing.T)) {
		if t.Failed() {
			return
		}
		t.Run(name, func(t *testing.T) {
			w.t = t
			f(t)
		})
		w.t = t
	}

	phase("steady", func(t *testing.T) {
		// Once every replica has caught up with the start, each persist reaches each replica.
		w.waitFor(30*time.Second, "replicas synced at start", w.caughtUp(clusterStreams...))
		from := map[string]int64{}
		for _, s := range clusterStreams {
			last, _ := w.latest(s)
			from[s] = last.version
		}
		drops := w.transportDrops()
		w.waitPersists(6, 60*time.Second, clusterStreams...)
		took := w.waitFor(20*time.Second, "replicas converged", w.caughtUp(clusterStreams...))
		lags := w.checkHistories(from, drops)
		figures["steady replication delay p50/p99"] = fmt.Sprintf("%s / %s over %d persists", quantile(lags, 0.5), quantile(lags, 0.99), len(lags))
		figures["steady convergence wait"] = took.String()
		// Local retention on replicas follows the persisted next offset.
		w.waitFor(20*time.Second, "replica local retention", func() (bool, string) {
			for _, n := range clusterNodes {
				st := w.mustStatus(n)
				for s, rs := range st.Cluster.Replicas {
					if rs.LocalSegmentsDeleted == 0 || rs.LocalFirst == 0 || rs.LocalFirst > rs.NextOffset {
						return false, fmt.Sprintf("%s on %s: deleted %d, local first %d, replica next %d", s, n, rs.LocalSegmentsDeleted, rs.LocalFirst, rs.NextOffset)
					}
					if g := st.Retention[s]; g.Overdue > 0 {
						return false, fmt.Sprintf("%s on %s: %d segments wholly below %d not deleted", s, n, g.Overdue, g.PersistedNext)
					}
				}
			}
			return true, ""
		})
	})

	phase("drop-and-reorder", func(t *testing.T) {
		for _, n := range clusterNodes {
			w.setFaults(n, 30, 30, false)
		}
		w.waitPersists(6, 60*time.Second, clusterStreams...)
		for _, n := range clusterNodes {
			w.setFaults(n, 0, 0, false)
		}
		cleared := time.Now()
		w.waitFor(30*time.Second, "replicas converged after faults", w.caughtUp(clusterStreams...))
		figures["convergence after drop/reorder stops"] = time.Since(cleared).Round(time.Millisecond).String()
		w.checkHistories(nil, nil)
		var gaps, resyncs, dropped, reordered uint64
		for _, n := range clusterNodes {
			st := w.mustStatus(n)
			for _, rs := range st.Cluster.Replicas {
				gaps += rs.Counters.Gaps
				resyncs += rs.Counters.ResyncRequests
			}
			dropped += uint64(st.Transport["faultDropped"])
			reordered += uint64(st.Transport["reordered"])
		}
		if gaps == 0 || resyncs == 0 || dropped == 0 || reordered == 0 {
			t.Fatalf("faults left no trace: gaps %d, resync requests %d, dropped %d, reordered %d", gaps, resyncs, dropped, reordered)
		}
		figures["drop/reorder counters"] = fmt.Sprintf("dropped %d, reordered %d, gaps seen %d, resync requests %d", dropped, reordered, gaps, resyncs)
	})

	phase("kill-replica-node", func(t *testing.T) {
		w.killNode("n3")
		others := []string{"s1", "s2", "s4", "s5"} // s3's writer was n3
		w.waitPersists(4, 60*time.Second, others...)
		p := w.startNode("n3")
		took := w.waitFor(30*time.Second, "restarted node converged", w.caughtUp(clusterStreams...))
		figures["restarted replica node: ready to converged"] = took.Round(time.Millisecond).String()
		figures["restarted replica node: process start to converged"] = time.Since(p.started).Round(time.Millisecond).String()
		st := w.mustStatus("n3")
		for s, rs := range st.Cluster.Replicas {
			if rs.Counters.Registrations == 0 || rs.Counters.SyncsApplied == 0 {
				t.Fatalf("%s on the restarted n3: registrations %d, syncs %d", s, rs.Counters.Registrations, rs.Counters.SyncsApplied)
			}
		}
		w.waitPersists(2, 30*time.Second, "s3") // its own stream resumed too
	})

	phase("kill-writer-node", func(t *testing.T) {
		before := map[string]persistSeen{}
		w.killNode("n1") // writer of s1 and s4
		moves := map[string]string{"s1": "n2", "s4": "n3"}
		for s := range moves {
			last, _ := w.latest(s)
			before[s] = last
		}
		for s, to := range moves {
			var replicas []string
			for _, n := range clusterNodes {
				if n != to {
					replicas = append(replicas, n)
				}
			}
			w.place(metadata.Placement{Stream: s, Writer: to, Epoch: 2, Replicas: replicas})
		}
		took := w.waitFor(30*time.Second, "new writers persisted at epoch 2", func() (bool, string) {
			for s := range moves {
				last, _ := w.latest(s)
				if last.rec.Epoch != 2 {
					return false, fmt.Sprintf("%s: last persist at epoch %d", s, last.rec.Epoch)
				}
			}
			return true, ""
		})
		figures["failover: placement moved to first persist at epoch 2"] = took.Round(time.Millisecond).String()
		// The new writers continued from the persisted manifest: the old entries are a prefix.
		// The killed writer's last persists may reach the test's watch after the kill (it
		// persists once per fragment): the first persist at epoch 2 must extend the last one
		// before it, whenever the watch delivered that.
		for s := range moves {
			old := before[s]
			for _, p := range w.seen(s) {
				if p.version <= old.version || !p.fetched {
					continue
				}
				if p.rec.Epoch == 1 {
					old = p
					continue
				}
				if p.rec.Epoch != 2 || len(p.m.Entries) < len(old.m.Entries) || p.m.NextOffset < old.m.NextOffset {
					t.Fatalf("%s: first persist after the move (version %d, epoch %d, next %d) does not extend version %d (next %d)",
						s, p.version, p.rec.Epoch, p.m.NextOffset, old.version, old.m.NextOffset)
				}
				for i, e := range old.m.Entries {
					if p.m.Entries[i] != e {
						t.Fatalf("%s: entry %d changed across the move: %+v -> %+v", s, i, e, p.m.Entries[i])
					}
				}
				break
			}
		}
		w.waitFor(30*time.Second, "replicas converged on the new writers", w.caughtUp(clusterStreams...))

		// The old writer comes back believing it still writes s1 and s4 at epoch 1.
		w.startNode("n1", "-stale-writer", "s1=1", "-stale-writer", "s4=1")
		w.waitFor(30*time.Second, "the stale writer tried to persist and was refused", func() (bool, string) {
			st := w.mustStatus("n1")
			return st.Metrics["persistConflicts"] >= 2, fmt.Sprintf("metrics %v", st.Metrics)
		})
		w.waitPersists(2, 30*time.Second, "s1", "s4")
		st := w.mustStatus("n1")
		if st.Metrics["persists"] != 0 {
			t.Fatalf("the revived old writer persisted %d times", st.Metrics["persists"])
		}
		for s := range moves {
			// In version order the epoch never falls: once the new writer persisted at
			// epoch 2, nothing at epoch 1 follows (the killed writer's last persists,
			// delivered by the watch after the kill, come before it).
			moved := false
			for _, p := range w.seen(s) {
				if p.version <= before[s].version {
					continue
				}
				if p.rec.Epoch == 2 {
					moved = true
				} else if moved || p.rec.Epoch != 1 {
					t.Fatalf("%s: version %d persisted at epoch %d after the move to epoch 2", s, p.version, p.rec.Epoch)
				}
			}
			epoch, err := w.meta.Client().Get(context.Background(), metadata.EpochKey(w.meta.Prefix(), s))
			if err != nil || len(epoch.Kvs) != 1 || string(epoch.Kvs[0].Value) != metadata.FormatEpoch(2) {
				t.Fatalf("%s: stored epoch %v (%v), want 2", s, epoch, err)
			}
		}
		figures["stale writer refused"] = fmt.Sprintf("%d conflicts, %d reinitializations, 0 persists", st.Metrics["persistConflicts"], st.Metrics["reinitializations"])
		// Restarted without the stale writers, n1 is a replica of everything and converges.
		w.stopNode("n1")
		w.startNode("n1")
		w.waitFor(30*time.Second, "n1 converged as a replica", w.caughtUp(clusterStreams...))
	})

	phase("partition", func(t *testing.T) {
		w.setFaults("n2", 0, 0, true) // writes s1, s2, s5; replicates s3, s4
		w.waitPersists(4, 60*time.Second, clusterStreams...)
		st := w.mustStatus("n2")
		if st.Transport["pausedDropped"] == 0 {
			t.Fatal("the partition dropped nothing")
		}
		w.setFaults("n2", 0, 0, false)
		healed := time.Now()
		w.waitFor(30*time.Second, "converged after the partition healed", w.caughtUp(clusterStreams...))
		figures["partition healed to converged"] = time.Since(healed).Round(time.Millisecond).String()
		w.checkHistories(nil, nil)
	})

	phase("everything-in-s3-once", func(t *testing.T) {
		until := (time.Now().UnixMilli()-w.loadStart)/clusterLoadInterval.Milliseconds() + 25
		for _, n := range clusterNodes {
			if err := w.post(n, "/load", url.Values{"until": {fmt.Sprint(until)}}); err != nil {
				t.Fatal(err)
			}
		}
		w.waitFor(30*time.Second, "every log holds the last chunk", func() (bool, string) {
			for _, n := range clusterNodes {
				st := w.mustStatus(n)
				for _, s := range clusterStreams {
					if st.Logs[s].Chunks != until {
						return false, fmt.Sprintf("%s on %s: %d chunks of %d", s, n, st.Logs[s].Chunks, until)
					}
				}
			}
			return true, ""
		})
		ends := map[string]uint64{}
		for _, s := range clusterStreams {
			ends[s] = w.mustStatus(w.placement[s].Writer).Logs[s].Next
		}
		w.waitFor(60*time.Second, "every stream persisted to its end", func() (bool, string) {
			for _, s := range clusterStreams {
				last, ok := w.latest(s)
				if !ok || last.rec.NextOffset != ends[s] {
					if err := w.post(w.placement[s].Writer, "/forcecut", url.Values{"stream": {s}}); err != nil {
						return false, err.Error()
					}
					return false, fmt.Sprintf("%s persisted to %d of %d", s, last.rec.NextOffset, ends[s])
				}
			}
			return true, ""
		})
		w.waitFor(30*time.Second, "final convergence", func() (bool, string) { return w.converged(clusterStreams...) })
		for _, s := range clusterStreams {
			last, _ := w.latest(s)
			if !last.fetched {
				t.Fatalf("%s: final root not fetched", s)
			}
			w.verifyStream(s, last.m, until)
			// Replicas serve remote reads from their cache: each finds the fragment holding
			// an offset in the middle, the same one the persisted manifest names.
			off := last.m.NextOffset / 2
			want, err := manifest.LookupOffset(last.m, off, w.fetcher(s))
			if err != nil {
				t.Fatalf("%s: lookup %d in the persisted manifest: %v", s, off, err)
			}
			for _, r := range w.placement[s].Replicas {
				got, err := w.lookup(r, s, off)
				if err != nil || got != want.Entry.UID {
					t.Fatalf("%s: replica %s looked up %d: fragment uid %x (%v), the manifest names %x", s, r, off, got, err, want.Entry.UID)
				}
			}
		}
	})

	names := make([]string, 0, len(figures))
	for k := range figures {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		t.Logf("figure: %s: %s", k, figures[k])
	}
}

// fetcher reads group objects of stream from S3.
func (w *clusterWorld) fetcher(stream string) manifest.GroupFetcher {
	return func(e manifest.Entry) ([]manifest.Entry, error) {
		key, err := w.store.LocateEntry(context.Background(), manifest.DefaultKeyPrefix, stream, e)
		if err != nil {
			return nil, err
		}
		body, err := w.store.GetObject(context.Background(), key)
		if err != nil {
			return nil, err
		}
		_, children, err := manifest.DecodeGroup(body)
		return children, err
	}
}

// verifyStream checks that m covers every offset the load wrote ([0, next)), in fragments
// that follow each other exactly and hold the reference log's chunks byte for byte.
func (w *clusterWorld) verifyStream(stream string, m manifest.Manifest, chunks int64) {
	t := w.t
	t.Helper()
	ref, err := segments.Open(filepath.Join(t.TempDir(), stream), segments.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	g, err := loadgen.New(clusterLoad(stream, w.loadStart))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadgen.Write(context.Background(), ref, g, loadgen.Limit{Chunks: chunks}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	if m.FirstOffset != 0 || m.NextOffset != ref.NextOffset() {
		t.Fatalf("%s: remote tier [%d,%d), the load wrote [0,%d)", stream, m.FirstOffset, m.NextOffset, ref.NextOffset())
	}
	fetch := w.fetcher(stream)
	if err := manifest.CheckTree(m, fetch); err != nil {
		t.Fatalf("%s: %v", stream, err)
	}
	rd, err := ref.NewReader(0)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	it := manifest.Iterate(m, 0, fetch)
	next := uint64(0)
	for {
		fr, ok, err := it.Next()
		if err != nil {
			t.Fatalf("%s: %v", stream, err)
		}
		if !ok {
			break
		}
		if fr.Entry.FirstOffset != next {
			t.Fatalf("%s: fragment at %d, the previous one ends at %d", stream, fr.Entry.FirstOffset, next)
		}
		key, err := w.store.LocateEntry(context.Background(), manifest.DefaultKeyPrefix, stream, fr.Entry)
		if err != nil {
			t.Fatalf("%s: fragment at %d: %v", stream, fr.Entry.FirstOffset, err)
		}
		obj, err := w.store.ReadFragment(context.Background(), key)
		if err != nil {
			t.Fatalf("%s: fragment at %d: %v", stream, fr.Entry.FirstOffset, err)
		}
		for _, ch := range obj.Layout.Chunks {
			h, loc, err := rd.Next()
			if err != nil {
				t.Fatalf("%s: reference chunk after %d: %v", stream, next, err)
			}
			want, _, err := ref.ReadChunk(loc)
			if err != nil {
				t.Fatal(err)
			}
			if h.ChunkID != ch.Header.ChunkID || !bytes.Equal(obj.Bytes[ch.Position:ch.Position+int64(len(want))], want) {
				t.Fatalf("%s: fragment at %d: chunk %d differs from the load's chunk %d", stream, fr.Entry.FirstOffset, ch.Header.ChunkID, h.ChunkID)
			}
			next = h.NextID()
		}
		if next != fr.End {
			t.Fatalf("%s: fragment at %d ends at %d, the manifest says %d", stream, fr.Entry.FirstOffset, next, fr.End)
		}
	}
	if next != m.NextOffset {
		t.Fatalf("%s: fragments end at %d, next offset %d", stream, next, m.NextOffset)
	}
}
