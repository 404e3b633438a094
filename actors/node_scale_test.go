package actors

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/segments"
)

// processFootprint is the process's own accounting: goroutines, open descriptors (the
// logs' directory locks apart), and the live heap after a collection.
type processFootprint struct {
	goroutines int
	fds        int // open descriptors but the locks
	locks      int // descriptors of log directory lock files (segments.LockFileName)
	heap       uint64
}

func footprint(t *testing.T) processFootprint {
	t.Helper()
	// Goroutines that are finishing work (mailboxes emptying, timers' functions) come and
	// go: the fewest of a few samples is the standing count.
	g := runtime.NumGoroutine()
	for range 20 {
		time.Sleep(50 * time.Millisecond) // sampling, not synchronisation
		g = min(g, runtime.NumGoroutine())
	}
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	fp := processFootprint{goroutines: g, heap: ms.HeapAlloc}
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && filepath.Base(target) == segments.LockFileName {
			fp.locks++
		} else {
			fp.fds++
		}
	}
	return fp
}

// idleFleet is a node with many idle streams, each on a real log in a temp dir.
type idleFleet struct {
	t    *testing.T
	w    *world
	node *Node
	dir  string
	logs []*segments.Log
	// goroutines is the node's standing goroutine count before any stream was added.
	goroutines int
}

// scaleLogIdle is the idle close of the fleet's logs: short, so the test need not wait 10 s.
const scaleLogIdle = 100 * time.Millisecond

func newIdleFleet(t *testing.T, cfg Config) *idleFleet {
	f := &idleFleet{t: t, w: newWorld(t, worldOptions{}), dir: t.TempDir()}
	f.node = startNode(f.w, cfg)
	// Format version 3 resolves every stream with S3 requests (the roots' listing, the
	// marker's HEAD), so the start-up fills the S3 connection pool: a node-wide cost bounded
	// by s3io's MaxConns, not a per-stream one. Fill it before the baseline.
	var wg sync.WaitGroup
	for i := 0; i < s3io.DefaultMaxConns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = f.w.Store.HasMarker(context.Background(), manifest.DefaultKeyPrefix, "warm")
		}()
	}
	wg.Wait()
	f.goroutines = footprint(t).goroutines
	t.Cleanup(func() {
		for _, lg := range f.logs {
			lg.Close()
		}
	})
	return f
}

// grow adds streams until there are n, and waits until all of them run and hold no
// descriptor of their own.
func (f *idleFleet) grow(n int) {
	t := f.t
	for i := len(f.logs); i < n; i++ {
		lg, err := segments.Open(filepath.Join(f.dir, fmt.Sprintf("s%05d", i)), segments.Options{IdleClose: scaleLogIdle})
		if err != nil {
			t.Fatal(err)
		}
		f.logs = append(f.logs, lg)
		if err := f.node.AddStream(StreamSpec{ID: fmt.Sprintf("s%05d", i), Log: lg, Epoch: 1}); err != nil {
			t.Fatal(err)
		}
	}
	m := f.node.Metrics()
	until(t, 2*time.Minute, fmt.Sprintf("%d streams running", n), func() (bool, string) {
		return m.StreamsRunning.Load() == int64(n), fmt.Sprintf("%d running, %d stalled", m.StreamsRunning.Load(), m.StreamsStalled.Load())
	})
	until(t, 30*time.Second, "idle logs closed their files", func() (bool, string) {
		open := 0
		for _, lg := range f.logs {
			open += lg.OpenFiles()
		}
		return open == 0, fmt.Sprintf("%d descriptors held by logs", open)
	})
	// Format version 3 resolves each stream with S3 requests (the roots' listing, the
	// marker): wait until every stream resolved, not only until its reader started.
	until(t, 5*time.Minute, fmt.Sprintf("%d streams resolved", n), func() (bool, string) {
		return m.Resolutions.Load() >= int64(n), fmt.Sprintf("%d resolved", m.Resolutions.Load())
	})
	// Streams that run have finished starting, but on a loaded machine their last start-up
	// messages and tasks may still be on their way: wait until the goroutines are back to
	// what the per-stream bound allows. A goroutine per stream never gets there.
	allowed := f.goroutines + 10 + n/100
	until(t, time.Minute, "start-up goroutines gone", func() (bool, string) {
		g := runtime.NumGoroutine()
		return g <= allowed, fmt.Sprintf("%d goroutines, want at most %d", g, allowed)
	})
	if f.node.cfg.DormantAfter > 0 {
		until(t, 2*time.Minute, fmt.Sprintf("%d streams dormant", n), func() (bool, string) {
			return m.StreamsDormant.Load() == int64(n), fmt.Sprintf("%d dormant", m.StreamsDormant.Load())
		})
	}
}

// Ten thousand streams on one node: an idle stream costs no goroutine, no descriptor but
// its log's directory lock (held by the broker's segments.Log while it is open, whether the
// node tiers it or not), and a few KiB of heap. Compared between 500 and 3000 streams,
// goroutines and other descriptors do not grow with the number of streams; locks grow by one.
func TestIdleStreamsCostNoGoroutineNorDescriptor(t *testing.T) {
	if testing.Short() {
		t.Skip("adds thousands of streams")
	}
	small, large := 500, 3000
	if v := os.Getenv("STREAMTIER_SCALE_STREAMS"); v != "" { // to measure at 10,000
		if _, err := fmt.Sscan(v, &large); err != nil || large <= small {
			t.Fatalf("STREAMTIER_SCALE_STREAMS=%q: want a number above %d", v, small)
		}
	}
	f := newIdleFleet(t, Config{Logger: zerolog.Nop(), DrainIdleClose: 50 * time.Millisecond, DormantAfter: 100 * time.Millisecond,
		RetentionInterval: time.Hour, Stream: StreamOptions{PersistInterval: time.Hour}})
	base := footprint(t)
	actors := localActors(f.node)
	f.grow(small)
	at500 := footprint(t)
	f.grow(large)
	at3000 := footprint(t)
	if path := os.Getenv("STREAMTIER_SCALE_DUMP"); path != "" { // what the goroutines are
		if out, err := os.Create(path); err == nil {
			pprof.Lookup("goroutine").WriteTo(out, 1)
			out.Close()
		}
	}
	per := func(a, b int) float64 { return float64(b-a) / float64(large-small) }
	g, d, l := per(at500.goroutines, at3000.goroutines), per(at500.fds, at3000.fds), per(at500.locks, at3000.locks)
	h := (float64(at3000.heap) - float64(at500.heap)) / float64(large-small)
	t.Logf("no streams: %d goroutines, %d fds, heap %.1f MiB", base.goroutines, base.fds, float64(base.heap)/(1<<20))
	t.Logf("%d streams: %d goroutines, %d fds + %d locks, heap %.1f MiB", small, at500.goroutines, at500.fds, at500.locks, float64(at500.heap)/(1<<20))
	t.Logf("%d streams: %d goroutines, %d fds + %d locks, heap %.1f MiB", large, at3000.goroutines, at3000.fds, at3000.locks, float64(at3000.heap)/(1<<20))
	t.Logf("per idle stream: %.4f goroutines, %.4f fds and %.4f lock fds, %.1f KiB heap", g, d, l, h/1024)
	if g > 0.01 {
		t.Errorf("goroutines grow by %.4f per idle stream (want at most 0.01)", g)
	}
	if a := localActors(f.node); a != actors { // dormant: the handle is all that is left
		t.Errorf("%d actors with %d dormant streams, %d without: want no actor per dormant stream", a, large, actors)
	}
	if d > 0.1 {
		t.Errorf("descriptors other than the logs' locks grow by %.4f per idle stream (want at most 0.1)", d)
	}
	if l != 1 {
		t.Errorf("lock descriptors grow by %.4f per idle stream (want 1: each log holds its directory's lock)", l)
	}
	// Guard with headroom (the race detector's shadow heap is not in HeapAlloc, but the
	// runtime's own structures are); the figure is in the log for docs/performance.md.
	if h > 64<<10 {
		t.Errorf("heap grows by %.1f KiB per idle stream (want well under 64)", h/1024)
	}
}

// Out of descriptors: the streams whose drain cannot open its log are reported stalled
// with EMFILE named (status, metrics), never as running, and they recover by themselves
// once descriptors are free again. In its own process: the test lowers the descriptor
// limit and takes every free descriptor.
func TestOutOfDescriptorsStallsAndRecovers(t *testing.T) {
	if !isolated(t) {
		return
	}
	const streams = 20
	log, _ := testLogger(t)
	// The streams stay awake: this is the drains' stall on EMFILE (a dormant stream woken
	// while descriptors are exhausted retries its resolution instead, "resolving" with the
	// error in status).
	f := newIdleFleet(t, Config{Logger: log, DrainIdleClose: 50 * time.Millisecond, DormantAfter: -1,
		Stream: StreamOptions{PersistInterval: 100 * time.Millisecond}})
	f.grow(streams)
	var next []uint64
	for _, lg := range f.logs {
		for range 3 {
			if _, _, err := lg.Append(segments.ChunkSpec{Type: chunk.TypeUser, Epoch: 1, Timestamp: time.Now().UnixMilli(),
				Entries: []segments.Entry{segments.SimpleEntry([]byte(strings.Repeat("x", 3000)))}}); err != nil {
				t.Fatal(err)
			}
		}
		next = append(next, lg.NextOffset())
	}
	// Written, not committed: the drains do not read yet; the logs close their files.
	until(t, 30*time.Second, "logs idle", func() (bool, string) {
		open := 0
		for _, lg := range f.logs {
			open += lg.OpenFiles()
		}
		return open == 0, fmt.Sprintf("%d held", open)
	})

	t.Logf("%d streams written, logs idle", streams)
	held := takeEveryDescriptor(t)
	for _, lg := range f.logs {
		last, _ := lg.LastChunkID()
		if err := lg.SetCommitted(last); err != nil {
			t.Fatal(err)
		}
	}
	m := f.node.Metrics()
	until(t, 30*time.Second, "every stream stalled by EMFILE", func() (bool, string) {
		return m.StreamsStalled.Load() == streams && m.StalledBy[causeIndex("EMFILE")].Load() == streams,
			fmt.Sprintf("%d stalled (%d EMFILE), %d running", m.StreamsStalled.Load(), m.StalledBy[causeIndex("EMFILE")].Load(), m.StreamsRunning.Load())
	})
	if r := m.StreamsRunning.Load(); r != 0 {
		t.Errorf("%d streams counted as running while stalled", r)
	}
	st, err := f.node.Status(context.Background(), "s00000")
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != "stalled" || st.Exhausted != "EMFILE" || !strings.Contains(st.LocalError, "too many open files") {
		t.Fatalf("status of a stalled stream: phase %q, exhausted %q, error %q", st.Phase, st.Exhausted, st.LocalError)
	}
	if m.LocalErrors[causeIndex("EMFILE")].Load() < streams {
		t.Errorf("local EMFILE errors counted: %d, want at least %d", m.LocalErrors[causeIndex("EMFILE")].Load(), streams)
	}

	t.Logf("every stream stalled by EMFILE; releasing %d descriptors", len(held.files))
	held.release()
	until(t, 30*time.Second, "every stream running again", func() (bool, string) {
		return m.StreamsRunning.Load() == streams && m.StreamsStalled.Load() == 0,
			fmt.Sprintf("%d running, %d stalled", m.StreamsRunning.Load(), m.StreamsStalled.Load())
	})
	t.Logf("every stream reads again")
	for i := range f.logs {
		persisted(t, f.node, fmt.Sprintf("s%05d", i), next[i], 30*time.Second)
	}
	t.Logf("every stream persisted")
	if st, _ := f.node.Status(context.Background(), "s00000"); st.Phase != "running" || st.LocalError != "" || st.Exhausted != "" {
		t.Fatalf("status after recovery: phase %q, error %q, exhausted %q", st.Phase, st.LocalError, st.Exhausted)
	}
}

// heldDescriptors are the descriptors a test took on purpose, and the limit it lowered.
type heldDescriptors struct {
	files []*os.File
	old   syscall.Rlimit
}

// takeEveryDescriptor lowers the soft descriptor limit a little above what is open and
// takes the rest, so that the next open fails with EMFILE.
func takeEveryDescriptor(t *testing.T) *heldDescriptors {
	t.Helper()
	h := &heldDescriptors{}
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &h.old); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	low := h.old
	low.Cur = uint64(len(ents)) + 256
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		h.files = append(h.files, f)
	}
	t.Cleanup(h.release)
	return h
}

func (h *heldDescriptors) release() {
	for _, f := range h.files {
		f.Close()
	}
	h.files = nil
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &h.old)
}
