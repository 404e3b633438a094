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
