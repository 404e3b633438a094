package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/segments"
)

// idleFlags are the flags of idle.
type idleFlags struct {
	common  commonFlags
	streams int
	windows int
	window  time.Duration
	settle  time.Duration
	heapOut string
}

func runIdle(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("idle", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var fl idleFlags
	fl.common.register(fs)
	fs.IntVar(&fl.streams, "streams", 10000, "idle streams to add, each with its own empty local log")
	fs.IntVar(&fl.windows, "windows", 3, "measurement windows before and after adding the streams")
	fs.DurationVar(&fl.window, "window", 5*time.Second, "length of one CPU measurement window")
	fs.DurationVar(&fl.settle, "settle", 2*time.Second, "wait after start and after the streams run, before measuring")
	fs.StringVar(&fl.heapOut, "heap-profile", "", "write an in-use heap profile (after a GC) to this file once the streams were measured: what an idle stream holds")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fl.streams < 1 || fl.windows < 1 || fl.window <= 0 || fl.settle < 0 {
		return fmt.Errorf("%w: --streams, --windows and --window must be positive", errUsage)
	}
	if fl.heapOut != "" {
		runtime.MemProfileRate = 1 // every allocation: the per-stream structures are small
	}
	ctx, cancel := context.WithTimeout(ctx, fl.common.timeout)
	defer cancel()
	f, err := startFixture(ctx, fl.common, nil, stderr)
	if err != nil {
		return err
	}
	var logs []*segments.Log
	defer func() {
		if serr := f.stopNode(); serr != nil && err == nil { // before the logs close
			err = serr
		}
		for _, l := range logs {
			l.Close()
		}
		closeErr(f, &err)
	}()
	f.header(stdout, "idle")
	if err := sleepCtx(ctx, fl.settle); err != nil {
		return err
	}
	before, err := measureWindows(ctx, fl.windows, fl.window)
	if err != nil {
		return err
	}

	start := time.Now()
	ids := make([]string, 0, fl.streams)
	var addErr error
	for i := range fl.streams {
		id := fmt.Sprintf("idle-%05d", i)
		lg, err := segments.Open(f.logDir(id), segments.Options{})
		if err != nil {
			addErr = fmt.Errorf("open the local log of stream %d: %w", i, err)
			break
		}
		logs = append(logs, lg)
		if err := f.node.AddStream(actors.StreamSpec{ID: id, Log: lg, Epoch: 1}); err != nil {
			addErr = fmt.Errorf("add stream %d: %w", i, err)
			break
		}
		ids = append(ids, id)
	}
	added := time.Since(start)
	if addErr != nil {
		fmt.Fprintf(stdout, "FAILED after %d of %d streams: %v\n", len(ids), fl.streams, addErr)
		return fmt.Errorf("%d of %d streams added: %w (try a smaller --streams)", len(ids), fl.streams, addErr)
	}
	if err := waitRunning(ctx, f.node, ids); err != nil {
		return err
	}
	running := time.Since(start)
	dormant, err := waitDormant(ctx, f.node, len(ids))
	if err != nil {
		return err
	}
	if err := sleepCtx(ctx, fl.settle); err != nil {
		return err
	}
	after, err := measureWindows(ctx, fl.windows, fl.window)
	if err != nil {
		return err
	}
	if fl.heapOut != "" {
		if err := writeHeapProfile(fl.heapOut); err != nil {
			return err
		}
	}
	n := float64(len(ids))
	fmt.Fprintf(stdout, "A = the node with %d idle streams (own empty local logs), B = the same node before they were added; %d windows of %v each; streams added in %v, all running after %v%s\n",
		len(ids), fl.windows, fl.window, added.Round(time.Millisecond), running.Round(time.Millisecond), dormant)
	col := func(ss []procSample, get func(procSample) float64) []float64 {
		out := make([]float64, len(ss))
		for i, s := range ss {
			out[i] = get(s)
		}
		return out
	}
	perStream := func(get func(procSample) float64) []float64 {
		out := make([]float64, 0, len(after))
		for i := range min(len(after), len(before)) {
			out = append(out, (get(after[i])-get(before[i]))/n)
		}
		return out
	}
	rss := func(s procSample) float64 { return float64(s.rss) }
	heap := func(s procSample) float64 { return float64(s.heap) }
	gor := func(s procSample) float64 { return float64(s.goroutines) }
	fds := func(s procSample) float64 { return float64(s.fds) }
	cpu := func(s procSample) float64 { return s.cpuPercent }
	kib := func(g func(procSample) float64) func(procSample) float64 {
		return func(s procSample) float64 { return g(s) / 1024 }
	}
	mibOf := func(g func(procSample) float64) func(procSample) float64 {
		return func(s procSample) float64 { return g(s) / (1 << 20) }
	}
	r := report{w: stdout}
	r.columns("")
	r.row("B RSS MiB", col(before, mibOf(rss)), 1)
	r.row("A RSS MiB", col(after, mibOf(rss)), 1)
	r.row("B heap after GC MiB", col(before, mibOf(heap)), 1)
	r.row("A heap after GC MiB", col(after, mibOf(heap)), 1)
	r.row("B goroutines", col(before, gor), 0)
	r.row("A goroutines", col(after, gor), 0)
	r.row("B descriptors", col(before, fds), 0)
	r.row("A descriptors", col(after, fds), 0)
	r.row("B CPU % of a core", col(before, cpu), 2)
	r.row("A CPU % of a core", col(after, cpu), 2)
	r.row("per stream: RSS KiB", perStream(kib(rss)), 2)
	r.row("per stream: heap KiB", perStream(kib(heap)), 2)
	r.row("per stream: goroutines", perStream(gor), 2)
	r.row("per stream: descriptors", perStream(fds), 2)
	r.row("per 1000 streams: CPU % of a core", perStream(func(s procSample) float64 { return s.cpuPercent * 1000 }), 3)
	r.row("ratio A/B RSS", ratios(col(after, rss), col(before, rss)), 3)
	r.row("ratio A/B heap", ratios(col(after, heap), col(before, heap)), 3)
	r.row("ratio A/B goroutines", ratios(col(after, gor), col(before, gor)), 3)
	r.row("ratio A/B descriptors", ratios(col(after, fds), col(before, fds)), 3)
	r.row("ratio A/B CPU", ratios(col(after, cpu), col(before, cpu)), 3)
	return nil
}

// waitDormant waits until the node's streams are all dormant, where the node lets idle
// streams go dormant (stream_dormant_after): an idle stream's steady state. It says when
// ("" where they never go dormant).
func waitDormant(ctx context.Context, node *actors.Node, streams int) (string, error) {
	if node.Config().DormantAfter <= 0 {
		return "", nil
	}
	start := time.Now()
	for node.Metrics().StreamsDormant.Load() < int64(streams) {
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return "", fmt.Errorf("%d of %d streams dormant: %w", node.Metrics().StreamsDormant.Load(), streams, err)
		}
	}
	return fmt.Sprintf(", all dormant %v later (stream_dormant_after %v)", time.Since(start).Round(time.Millisecond), node.Config().DormantAfter), nil
}

// waitRunning polls each stream's status until its reader has resolved and runs.
func waitRunning(ctx context.Context, node *actors.Node, ids []string) error {
	pending := ids
	for len(pending) > 0 {
		var still []string
		for _, id := range pending {
			st, err := node.Status(ctx, id)
			if err != nil && ctx.Err() != nil {
				return err
			}
			if err != nil || st.Phase != "running" {
				still = append(still, id)
			}
		}
		pending = still
		if len(pending) == 0 {
			break
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("%d of %d streams not running (first %s): %w", len(pending), len(ids), pending[0], err)
		}
	}
	return nil
}

// procSample is what the process holds at one moment (after a GC), and the CPU it used
// over the window before it.
type procSample struct {
	rss        int64  // VmRSS, bytes
	heap       uint64 // live heap after GC (HeapAlloc), bytes
	goroutines int
	fds        int
	cpuPercent float64 // user+system CPU over the window, % of one core
}

// measureWindows takes n samples, each after a window of d over which CPU is measured.
func measureWindows(ctx context.Context, n int, d time.Duration) ([]procSample, error) {
	out := make([]procSample, 0, n)
	for range n {
		cpu0, t0 := cpuTime(), time.Now()
		if err := sleepCtx(ctx, d); err != nil {
			return nil, err
		}
		cpu := float64(cpuTime()-cpu0) / float64(time.Since(t0)) * 100
		s, err := sampleProc()
		if err != nil {
			return nil, err
		}
		s.cpuPercent = cpu
		out = append(out, s)
	}
	return out, nil
}

// cpuTime is the process's user plus system CPU time so far (getrusage).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sampleProc collects garbage (returning freed memory to the system, so RSS is comparable
// between samples) and reads the heap, RSS, goroutines and open descriptors.
func sampleProc() (procSample, error) {
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := procSample{heap: ms.HeapAlloc, goroutines: runtime.NumGoroutine()}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return s, fmt.Errorf("read /proc/self/status: %w", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return s, fmt.Errorf("VmRSS %q: %w", rest, err)
			}
			s.rss = kb << 10
		}
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return s, fmt.Errorf("read /proc/self/fd: %w", err)
	}
	s.fds = len(fds) - 1 // the directory read itself holds one
	return s, nil
}

// writeHeapProfile writes the in-use heap, after a collection, to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("heap profile %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("heap profile %s: %w", path, err)
	}
	return nil
}
