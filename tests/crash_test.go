package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// crashChildEnv carries the child's configuration; when set, the test binary runs as a
// node process (see TestMain) instead of running tests.
const crashChildEnv = "STREAMTIER_CRASH_CHILD"

// crashConfig is what the crash test's node process needs to run.
type crashConfig struct {
	EtcdEndpoints []string
	EtcdPrefix    string
	S3            s3io.Config
	LogDir        string
	Stream        string
	Finish        bool // tier everything written so far, then exit 0
}

var crashLoad = loadgen.Config{Seed: 99, MinDataBytes: 2000, MaxDataBytes: 12000}

var crashSegments = segments.Options{MaxSegmentBytes: 1 << 20}

// TestCrashRestart kills a node process with SIGKILL at random moments of a tiering run and
// restarts it, twenty times. After every kill: the persisted manifest never regresses, the
// local log still holds every offset at or above the persisted next offset, and the remote
// tier is byte for byte the reference log. At the end everything written is tiered, and the
// objects nothing references are only orphans of interrupted work.
func TestCrashRestart(t *testing.T) {
	etcd := etcdtest.Start(t)
	meta := etcdtest.Store(t, etcd)
	srv := s3test.Start(t, s3test.Options{})
	cfg := crashConfig{
		EtcdEndpoints: etcd.Endpoints(), EtcdPrefix: meta.Prefix(), S3: srv.NewBucket(t),
		LogDir: t.TempDir(), Stream: "crashy",
	}
	store, err := s3io.NewStore(context.Background(), cfg.S3)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, meta: meta, store: store}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 7))
	t.Logf("kill schedule seed %d", seed)

	var lastNext uint64
	var lastRev int64
	for i := 0; i < 20; i++ {
		child := startCrashChild(t, cfg)
		time.Sleep(time.Duration(150+rng.IntN(1200)) * time.Millisecond) // the random moment of the kill
		child.Process.Kill()
		child.Wait()

		rec, rev, found, err := meta.ReadManifest(context.Background(), cfg.Stream)
		if err != nil {
			t.Fatal(err)
		}
		if !found {
			continue // killed before the first persist
		}
		if rev < lastRev || rec.NextOffset < lastNext {
			t.Fatalf("kill %d: manifest regressed from revision %d next %d to revision %d next %d", i, lastRev, lastNext, rev, rec.NextOffset)
		}
		lastNext, lastRev = rec.NextOffset, rev
		lg, err := segments.Open(cfg.LogDir, crashSegments)
		if err != nil {
			t.Fatalf("kill %d: reopen the local log: %v", i, err)
		}
		first, next := lg.FirstOffset(), lg.NextOffset()
		lg.Close()
		if first > rec.NextOffset {
			t.Fatalf("kill %d: local log starts at %d above the persisted next offset %d: offsets [%d,%d) are nowhere", i, first, rec.NextOffset, rec.NextOffset, first)
		}
		if rec.NextOffset > next {
			t.Fatalf("kill %d: persisted next offset %d above the local log's end %d", i, rec.NextOffset, next)
		}
	}

	// Last run: tier everything, exit cleanly.
	finish := cfg
	finish.Finish = true
	child := startCrashChild(t, finish)
	if err := child.Wait(); err != nil {
		t.Fatalf("final run: %v", err)
	}
	lg, err := segments.Open(cfg.LogDir, crashSegments)
	if err != nil {
		t.Fatal(err)
	}
	next := lg.NextOffset()
	lg.Close()
	g, _ := loadgen.New(crashLoad)
	chunks, err := skipTo(g, next)
	if err != nil {
		t.Fatal(err)
	}
	ref := genLog(t, t.TempDir(), crashLoad, loadgen.Limit{Chunks: chunks}, crashSegments)
	if ref.NextOffset() != next {
		t.Fatalf("reference log ends at %d, the crashed log at %d", ref.NextOffset(), next)
	}
	m, frags := e.verifyRemote(cfg.Stream, ref)
	if m.FirstOffset != 0 || m.NextOffset != next {
		t.Fatalf("remote tier [%d,%d) after the crashes, want [0,%d)", m.FirstOffset, m.NextOffset, next)
	}
	// Orphans: every object is referenced by the persisted tree, or is an object of a kind
	// and key the upload path writes (a fragment or root whose persist never happened).
	referenced := e.referencedKeys(cfg.Stream)
	orphans := 0
	for k := range e.objectKeys(cfg.Stream) {
		if referenced[k] {
			continue
		}
		orphans++
		if !strings.HasSuffix(k, ".fragment") && !strings.HasSuffix(k, ".manifest") && !strings.Contains(k, "/meta/") {
			t.Errorf("unexpected object %s", k)
		}
	}
	t.Logf("after 20 kills: %d offsets in %d fragments, %d orphans", next, frags, orphans)
}

// skipTo advances g past the chunks that end at or before next (the log's next offset, even
// after local retention deleted its old segments) and returns how many it skipped.
func skipTo(g *loadgen.Generator, next uint64) (int64, error) {
	var id uint64
	var n int64
	for id < next {
		spec := g.Next()
		recs := uint32(1) // a tracking chunk uses one offset
		if spec.Type == chunk.TypeUser {
			recs = 0
			for _, en := range spec.Entries {
				recs += en.RecordCount()
			}
		}
		id += uint64(recs)
		n++
	}
	if id != next {
		return n, fmt.Errorf("the load's chunks do not end at offset %d (next chunk boundary %d)", next, id)
	}
	return n, nil
}

func startCrashChild(t *testing.T, cfg crashConfig) *exec.Cmd {
	t.Helper()
	b, _ := json.Marshal(cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+string(b))
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { // the child's log, shown when a test fails
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if os.Getenv("STREAMTIER_TEST_LOG") != "" {
				fmt.Fprintln(os.Stderr, "child:", sc.Text())
			}
		}
	}()
	return cmd
}

// runCrashChild is the node process of TestCrashRestart: it reopens the log (recovering a
// torn tail), resumes the deterministic load after the chunks already there, and tiers it.
func runCrashChild(raw string) int {
	var cfg crashConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "child: %s: %v\n", what, err)
		return 1
	}
	cli, err := metadata.NewClient(ctx, metadata.ClientConfig{Endpoints: cfg.EtcdEndpoints})
	if err != nil {
		return fail("etcd", err)
	}
	defer cli.Close()
	store, err := s3io.NewStore(ctx, cfg.S3)
	if err != nil {
		return fail("s3", err)
	}
	lg, err := segments.Open(cfg.LogDir, crashSegments)
	if err != nil {
		return fail("open log", err)
	}
	defer lg.Close()
	g, err := loadgen.New(crashLoad)
	if err != nil {
		return fail("loadgen", err)
	}
	if _, err := skipTo(g, lg.NextOffset()); err != nil {
		return fail("resume load", err)
	}
	if last, ok := lg.LastChunkID(); ok {
		if err := lg.SetCommitted(last); err != nil {
			return fail("commit", err)
		}
	}
	node, err := actors.Start(ctx, actors.Config{Stream: actors.StreamOptions{
		FragmentTargetSize: 192 << 10, PersistThreshold: 2, PersistInterval: 100 * time.Millisecond, RebalanceThreshold: 16,
	}, Logger: testLogger("crash-child")}, store, metadata.NewStore(cli, cfg.EtcdPrefix))
	if err != nil {
		return fail("node", err)
	}
	defer node.Stop(context.Background())
	if err := node.AddStream(actors.StreamSpec{ID: cfg.Stream, Log: lg, Epoch: 1}); err != nil {
		return fail("add stream", err)
	}
	if cfg.Finish {
		next := lg.NextOffset()
		for {
			st, err := node.Status(ctx, cfg.Stream)
			if err == nil && st.Core.DrainNext == next {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := node.ForceCut(cfg.Stream); err != nil {
			return fail("cut", err)
		}
		actx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := node.AwaitOffset(actx, cfg.Stream, next-1); err != nil {
			return fail("await", err)
		}
		return 0
	}
	// Write about 2 MB/s until killed.
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0
		case <-tick.C:
		}
		h, _, err := lg.Append(g.Next())
		if err != nil {
			return fail("append", err)
		}
		if err := lg.SetCommitted(h.ChunkID); err != nil {
			return fail("commit", err)
		}
	}
}
