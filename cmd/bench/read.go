package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/nodeconfig"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// readFlags are the flags of read.
type readFlags struct {
	common    commonFlags
	bytes     sizeFlag
	fragment  sizeFlag
	segment   sizeFlag
	rangeSize sizeFlag
	rawN      string
	rounds    int
	warmup    int
	minChunk  int
	maxChunk  int
	seed      uint64
}

func (r *readFlags) register(fs *flag.FlagSet) {
	r.common.register(fs)
	fs.Var(&r.bytes, "bytes", "record bytes written into the stream (then tiered and read back)")
	fs.Var(&r.fragment, "fragment", "fragment target size (the node's fragment_target_size)")
	fs.Var(&r.segment, "segment", "local segment size: local retention deletes whole uploaded segments, so the last one stays local")
	fs.Var(&r.rangeSize, "raw-range", "range size of the raw GETs")
	fs.StringVar(&r.rawN, "raw-n", "", "raw GET concurrencies swept each round, the fastest the round's baseline (default: 2, 4, 8 ... up to the node's read_max_concurrency, every level the node's search may use)")
	fs.IntVar(&r.rounds, "rounds", 3, "counted rounds, each a raw sweep, then the node (A) and raw at the round's N (B) back to back, order alternating")
	fs.IntVar(&r.warmup, "warmup", 1, "rounds run first and not counted")
	fs.IntVar(&r.minChunk, "min-chunk", 64<<10, "smallest chunk's record bytes (loadgen)")
	fs.IntVar(&r.maxChunk, "max-chunk", 256<<10, "largest chunk's record bytes (loadgen)")
	fs.Uint64Var(&r.seed, "seed", 1, "load generator seed")
}

func (r *readFlags) check() ([]int, error) {
	var ns []int
	if r.rawN == "" {
		return nil, nil // the node's levels: sweepLevels, once its settings are known
	}
	for _, s := range strings.Split(r.rawN, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w: --raw-n %q: want positive concurrencies separated by commas", errUsage, r.rawN)
		}
		ns = append(ns, n)
	}
	switch {
	case r.bytes == 0 || r.fragment == 0 || r.segment == 0 || r.rangeSize == 0:
		return nil, fmt.Errorf("%w: --bytes, --fragment, --segment and --raw-range must be positive", errUsage)
	case r.rounds < 1 || r.warmup < 0:
		return nil, fmt.Errorf("%w: --rounds %d --warmup %d: want at least one round and no negative warm-up", errUsage, r.rounds, r.warmup)
	case r.minChunk < 1 || r.maxChunk < r.minChunk:
		return nil, fmt.Errorf("%w: --min-chunk %d --max-chunk %d: want 1 <= min <= max", errUsage, r.minChunk, r.maxChunk)
	}
	return ns, nil
}

// readSide is one side's measurement of a round.
type readSide struct {
	elapsed time.Duration
	cpu     time.Duration // the process's CPU (user + system) over the side: the reader, and the embedded endpoint and proxy serving it
	first   time.Duration // to the first chunk (node) or the first range (raw)
	bytes   int64
	peak    uint64 // node: peak live heap above the start of the read
	remote  int64  // node: chunk bytes from the remote tier
	n       int    // raw: concurrency
	level   levelStats
}

// levelStats is the node's concurrency search over a read: the range GETs it allowed in
// flight (RemoteStats.Concurrency), sampled every 5 ms.
type levelStats struct {
	mean float64
	last int64 // the last sample with the reader open
}

// sampleLevel samples the node's remote readers' concurrency until stop.
func sampleLevel(m *actors.Metrics) *sampler[levelStats] {
	var sum, n, last int64
	return startSampler(func() {
		if v := m.RemoteRead.Concurrency.Load(); v > 0 {
			sum, n, last = sum+v, n+1, v
		}
	}, func() levelStats { return levelStats{mean: float64(sum) / float64(max(n, 1)), last: last} })
}

// readRound is one counted round.
type readRound struct {
	node, raw, best readSide
}

// rawObject is one fragment object of the stream, read whole by the baseline.
type rawObject struct {
	key  string
	size int64
}

func runRead(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("read", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fl := readFlags{bytes: 1 << 30, fragment: 16 << 20, segment: 4 << 20, rangeSize: 4 << 20}
	fl.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ns, err := fl.check()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, fl.common.timeout)
	defer cancel()
	f, err := startFixture(ctx, fl.common, map[string]string{
		"fragment_target_size":   fmt.Sprint(uint64(fl.fragment)),
		"local_hot_window_bytes": "0", // uploaded segments are deleted at once: the read is remote
		"local_hot_window_age":   "0",
	}, stderr)
	if err != nil {
		return err
	}
	var lg *segments.Log
	defer func() {
		if serr := f.stopNode(); serr != nil && err == nil {
			err = serr
		}
		if lg != nil {
			lg.Close()
		}
		closeErr(f, &err)
	}()
	f.header(stdout, "read")
	if ns == nil {
		ns = sweepLevels(f.s.ReadMaxConcurrency)
		fl.rawN = strings.Trim(strings.ReplaceAll(fmt.Sprint(ns), " ", ","), "[]")
	}
	const id = "read-bench"
	genStart := time.Now()
	if lg, err = segments.Open(f.logDir(id), segments.Options{MaxSegmentBytes: int64(fl.segment)}); err != nil {
		return err
	}
	gen, err := loadgen.New(loadgen.Config{Seed: fl.seed, MinDataBytes: fl.minChunk, MaxDataBytes: fl.maxChunk, StartTimestamp: time.Now().UnixMilli()})
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if _, err := loadgen.Write(ctx, lg, gen, loadgen.Limit{Bytes: int64(fl.bytes)}, loadgen.WriteOptions{Commit: true}); err != nil {
		return err
	}
	next := lg.NextOffset()
	if err := f.node.AddStream(actors.StreamSpec{ID: id, Log: lg, Epoch: 1}); err != nil {
		return err
	}
	if err := tierAll(ctx, f.node, id, next); err != nil {
		return err
	}
	if err := awaitLocalRetention(ctx, lg); err != nil {
		return err
	}
	var objects []rawObject
	if err := f.b.Store.List(ctx, streamPrefix(f, id), func(o s3io.ObjectInfo) error {
		if strings.HasSuffix(o.Key, ".fragment") {
			objects = append(objects, rawObject{o.Key, o.Size})
		}
		return nil
	}); err != nil {
		return err
	}
	stderr = f.errw // from here on the node logs to it too
	fmt.Fprintf(stderr, "bench read: %s generated and tiered in %v: %d fragment objects; local log from offset %d of %d\n",
		nodeconfig.FormatSize(float64(fl.bytes)), time.Since(genStart).Round(time.Millisecond), len(objects), lg.FirstOffset(), next)
	var counted []readRound
	for r := range fl.warmup + fl.rounds {
		var rd readRound
		for _, n := range ns {
			s, err := rawRead(ctx, f.b.Store, objects, n, int64(fl.rangeSize))
			if err != nil {
				return fmt.Errorf("round %d, raw sweep N=%d: %w", r, n, err)
			}
			if rd.best.elapsed == 0 || s.elapsed < rd.best.elapsed {
				rd.best = s
			}
		}
		warm := r < fl.warmup
		node := func() error {
			return profiled(fl.common.cpuProfile, "node", r, warm, func() (err error) {
				rd.node, err = nodeRead(ctx, f.node, id, next)
				return err
			})
		}
		raw := func() error {
			return profiled(fl.common.cpuProfile, "raw", r, warm, func() (err error) {
				rd.raw, err = rawRead(ctx, f.b.Store, objects, rd.best.n, int64(fl.rangeSize))
				return err
			})
		}
		order := []func() error{node, raw}
		if r%2 == 1 {
			order = []func() error{raw, node}
		}
		for _, run := range order {
			if err := run(); err != nil {
				return fmt.Errorf("round %d: %w", r, err)
			}
		}
		fmt.Fprintf(stderr, "bench read: round %d%s: node %v, raw N=%d %v (sweep best %v)\n", r, map[bool]string{true: " (warm-up)"}[warm],
			rd.node.elapsed.Round(time.Millisecond), rd.best.n, rd.raw.elapsed.Round(time.Millisecond), rd.best.elapsed.Round(time.Millisecond))
		if !warm {
			counted = append(counted, rd)
		}
	}
	printRead(stdout, fl, f.s.ReadBudgetBytes, len(objects), counted)
	return nil
}

// awaitLocalRetention waits until local retention deleted every uploaded segment but the
// last (the one being written is never deleted).
func awaitLocalRetention(ctx context.Context, lg *segments.Log) error {
	for len(lg.Segments()) > 1 {
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			return fmt.Errorf("local retention kept %d segments: %w", len(lg.Segments()), err)
		}
	}
	return nil
}

// nodeRead reads the stream through the node's cross-tier reader from the first offset to
// next, dropping the chunks as they come (each valid until the next Next).
func nodeRead(ctx context.Context, node *actors.Node, id string, next uint64) (readSide, error) {
	runtime.GC()
	hs, ls := startHeapSampler(), sampleLevel(node.Metrics())
	s, err := readAll(ctx, node, id, next)
	s.peak, s.level = hs.stop(), ls.stop()
	return s, err
}

// readAll is nodeRead's read, timed from OpenReader to the last chunk.
func readAll(ctx context.Context, node *actors.Node, id string, next uint64) (readSide, error) {
	var s readSide
	start, cpu := time.Now(), cpuTime()
	rd, err := node.OpenReader(ctx, id, read.FromFirst())
	if err != nil {
		return s, err
	}
	defer rd.Close()
	for rd.Position() < next {
		it, err := rd.Next(ctx)
		if err != nil {
			return s, fmt.Errorf("node read at %d: %w", rd.Position(), err)
		}
		if it.Kind != read.ItemChunk {
			return s, fmt.Errorf("node read: %s [%d, %d) in a stream with no gaps", it.Kind, it.Offset, it.End)
		}
		if s.first == 0 {
			s.first = time.Since(start)
		}
		s.bytes += int64(len(it.Chunk))
		if it.Tier == read.TierRemote {
			s.remote += int64(len(it.Chunk))
		}
	}
	s.elapsed, s.cpu = time.Since(start), cpuTime()-cpu
	return s, nil
}

// rawRead GETs every object whole in ranges of rangeSize with n workers, each reading into
// one buffer it reuses, no verification: the baseline.
func rawRead(ctx context.Context, store *s3io.Store, objects []rawObject, n int, rangeSize int64) (readSide, error) {
	type job struct {
		key      string
		off, len int64
	}
	jobs := make(chan job)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owned by rawRead: feeds the workers until done or cancelled
		defer wg.Done()
		defer close(jobs)
		for _, o := range objects {
			for off := int64(0); off < o.size; off += rangeSize {
				select {
				case jobs <- job{o.key, off, min(rangeSize, o.size-off)}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	start, cpu := time.Now(), cpuTime()
	var first atomic.Int64
	errs := make([]error, n)
	var total atomic.Int64
	for w := range n {
		wg.Add(1)
		go func() { // owned by rawRead: one worker
			defer wg.Done()
			buf := make([]byte, rangeSize)
			for j := range jobs {
				got, err := store.GetRangePartial(ctx, j.key, j.off, j.len, buf)
				if err == nil && int64(len(got)) != j.len {
					err = fmt.Errorf("short read of %s at %d: %d of %d bytes", j.key, j.off, len(got), j.len)
				}
				if err != nil {
					errs[w] = err
					cancel()
					return
				}
				total.Add(int64(len(got)))
				first.CompareAndSwap(0, int64(time.Since(start)))
			}
		}()
	}
	wg.Wait()
	s := readSide{elapsed: time.Since(start), cpu: cpuTime() - cpu, first: time.Duration(first.Load()), bytes: total.Load(), n: n}
	return s, errors.Join(errs...)
}

// startHeapSampler records the peak of live heap objects above where it started.
func startHeapSampler() *sampler[uint64] {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	base := s[0].Value.Uint64()
	var peak uint64
	return startSampler(func() {
		metrics.Read(s)
		if v := s[0].Value.Uint64(); v > base {
			peak = max(peak, v-base)
		}
	}, func() uint64 { return peak })
}

// printRead prints the read report.
func printRead(w io.Writer, fl readFlags, budget int64, objects int, rounds []readRound) {
	fmt.Fprintf(w, "A = the node's cross-tier reader (Node.OpenReader from first) over a tiered stream whose local log local retention removed; B = raw parallel GETs of the same %d fragment objects in %s ranges, buffers reused, no verification, at the round's best N of %s\n",
		objects, nodeconfig.FormatSize(float64(fl.rangeSize)), fl.rawN)
	fmt.Fprintf(w, "stream: %s of records (chunks of %d to %d bytes), fragment target %s; read budget %s; rounds: %d counted (raw sweep, then A and B back to back, order alternating), %d warm-up\n",
		nodeconfig.FormatSize(float64(fl.bytes)), fl.minChunk, fl.maxChunk, nodeconfig.FormatSize(float64(fl.fragment)), nodeconfig.FormatSize(float64(budget)), len(rounds), fl.warmup)
	var aTP, bTP, sweepTP, aFirst, bFirst, peak, remote, bestN, levelMean, levelLast []float64
	var aCPU, bCPU []cpuUse
	for _, r := range rounds {
		aCPU = append(aCPU, cpuUse{cpu: r.node.cpu, elapsed: r.node.elapsed, bytes: r.node.bytes})
		bCPU = append(bCPU, cpuUse{cpu: r.raw.cpu, elapsed: r.raw.elapsed, bytes: r.raw.bytes})
		aTP = append(aTP, mib(r.node.bytes)/r.node.elapsed.Seconds())
		bTP = append(bTP, mib(r.raw.bytes)/r.raw.elapsed.Seconds())
		sweepTP = append(sweepTP, mib(r.best.bytes)/r.best.elapsed.Seconds())
		aFirst = append(aFirst, float64(r.node.first)/float64(time.Millisecond))
		bFirst = append(bFirst, float64(r.raw.first)/float64(time.Millisecond))
		peak = append(peak, mib(int64(r.node.peak)))
		remote = append(remote, 100*float64(r.node.remote)/float64(max(r.node.bytes, 1)))
		bestN = append(bestN, float64(r.best.n))
		levelMean = append(levelMean, r.node.level.mean)
		levelLast = append(levelLast, float64(r.node.level.last))
	}
	r := report{w}
	r.columns("")
	r.row("A node read MiB/s", aTP, 1)
	r.row("B raw GET MiB/s (paired)", bTP, 1)
	r.row("B raw GET MiB/s (best of the sweep)", sweepTP, 1)
	r.row("B raw N (best of the sweep)", bestN, 0)
	r.row("A node GETs allowed in flight (search, mean)", levelMean, 1)
	r.row("A node GETs allowed in flight (search, last)", levelLast, 0)
	r.row("A node % of bytes from the remote tier", remote, 1)
	r.row("A node time to first chunk ms", aFirst, 1)
	r.row("B raw time to first range ms", bFirst, 1)
	r.row("A node peak live heap MiB", peak, 1)
	r.row("A node peak heap / read budget", ratios(peak, repeat(mib(budget), len(peak))), 3)
	cpuRatio := r.cpuRows("node side", "raw, paired", aCPU, bCPU)
	r.row("ratio A/B throughput (node/raw)", ratios(aTP, bTP), 3)
	r.row("ratio A/B throughput (node/sweep best)", ratios(aTP, sweepTP), 3)
	r.row("ratio B/A process CPU per byte (raw/node)", cpuRatio, 3)
}

// repeat is n copies of v.
func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// sweepLevels are the raw sweep's default concurrencies: 2, 4, 8 ... up to ceiling (and the
// ceiling itself), the levels the node's search may run at, so that the baseline is the
// best the same S3 gives at any of them.
func sweepLevels(ceiling int) []int {
	var ns []int
	for n := 2; n < ceiling; n *= 2 {
		ns = append(ns, n)
	}
	return append(ns, max(ceiling, 1))
}
