package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/nodeconfig"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// uploadFlags are the flags of upload and requests.
type uploadFlags struct {
	common      commonFlags
	bytes       sizeFlag // record bytes per stream
	fragment    sizeFlag
	streams     int
	rounds      int
	warmup      int
	rawInFlight int
	maxUploads  int // the node's max_concurrent_uploads, for the report
	minChunk    int
	maxChunk    int
	seed        uint64
	timeline    bool // print the node's pipeline every 100 ms of each counted round
}

func (u *uploadFlags) register(fs *flag.FlagSet) {
	u.common.register(fs)
	fs.Var(&u.bytes, "bytes", "record bytes written into each stream's local log")
	fs.Var(&u.fragment, "fragment", "fragment target size (the node's fragment_target_size)")
	fs.IntVar(&u.streams, "streams", 1, "streams tiered at once; the baseline PUTs with as many workers")
	fs.IntVar(&u.rounds, "rounds", 3, "counted rounds, each the node (A) then the raw PUTs (B)")
	fs.IntVar(&u.warmup, "warmup", 1, "rounds run first and not counted")
	fs.IntVar(&u.rawInFlight, "raw-inflight", 0, "PUTs each baseline worker keeps in flight; 0: the node's max_concurrent_uploads in all, shared by the workers (the node's node-wide concurrency)")
	fs.IntVar(&u.minChunk, "min-chunk", 1000, "smallest chunk's record bytes (loadgen)")
	fs.IntVar(&u.maxChunk, "max-chunk", 4000, "largest chunk's record bytes (loadgen)")
	fs.Uint64Var(&u.seed, "seed", 1, "load generator seed (stream i uses seed+i)")
	fs.BoolVar(&u.timeline, "timeline", false, "print the node's uploads running, fragments uploaded and persists (with their recent latency) every 100 ms of each counted round to stderr: where a round waits")
}

func (u *uploadFlags) check() error {
	switch {
	case u.bytes == 0:
		return fmt.Errorf("%w: --bytes must be positive", errUsage)
	case u.streams < 1:
		return fmt.Errorf("%w: --streams %d: at least 1", errUsage, u.streams)
	case u.rounds < 1 || u.warmup < 0:
		return fmt.Errorf("%w: --rounds %d --warmup %d: want at least one round and no negative warm-up", errUsage, u.rounds, u.warmup)
	case u.rawInFlight < 0:
		return fmt.Errorf("%w: --raw-inflight %d: 0 (the node's concurrency) or more", errUsage, u.rawInFlight)
	}
	return nil
}

func runUpload(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("upload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fl := uploadFlags{bytes: 2 << 30, fragment: 64 << 20}
	fl.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return uploadRounds(ctx, "upload", fl, stdout, stderr, printThroughput)
}

// uploadStream is one stream's generated local log and the fragment objects the node cuts
// from it (computed with the node's own assembly, so the baseline PUTs the same sizes).
type uploadStream struct {
	log     *segments.Log
	next    uint64  // one past the last offset
	objects []int64 // fragment object sizes, in offset order
	bytes   int64   // their sum
}

// side is one side's measurement in a round: wall time, object bytes, the S3 requests it
// made and, for the node, how many uploads it had in flight.
type side struct {
	elapsed  time.Duration
	cpu      time.Duration // the process's CPU (user + system) over the side: the node or the raw PUTs, and the embedded endpoint and proxy serving them
	bytes    int64
	requests s3io.MetricsSnapshot
	inFlight inFlightStats
	streams  []time.Duration // the node's: each stream's time to persisted
}

// pair is one round: the node (A) and the baseline (B).
type pair struct{ node, raw side }

// uploadRounds prepares the logs, runs warm-up and counted rounds (node then raw PUTs each)
// and hands the counted rounds to print.
func uploadRounds(ctx context.Context, name string, fl uploadFlags, stdout, stderr io.Writer, print func(w io.Writer, fl uploadFlags, streams []uploadStream, rounds []pair)) (err error) {
	if err := fl.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, fl.common.timeout)
	defer cancel()
	f, err := startFixture(ctx, fl.common, map[string]string{
		"fragment_target_size": fmt.Sprint(uint64(fl.fragment)),
		// Keep the logs whole: every round tiers them again as a new stream.
		"local_hot_window_bytes": "1TiB",
	}, stderr)
	if err != nil {
		return err
	}
	streams := make([]uploadStream, fl.streams)
	defer func() {
		if serr := f.stopNode(); serr != nil && err == nil { // before the logs close
			err = serr
		}
		for _, s := range streams {
			if s.log != nil {
				s.log.Close()
			}
		}
		closeErr(f, &err)
	}()
	f.header(stdout, name)
	fl.maxUploads = f.s.MaxConcurrentUploads
	genStart := time.Now()
	for i := range streams {
		if streams[i], err = prepareStream(ctx, f.logDir(fmt.Sprintf("s%d", i)), fl, fl.seed+uint64(i), f.s.FragmentTargetSize); err != nil {
			return err
		}
	}
	fmt.Fprintf(stderr, "bench %s: %d log(s) of %s generated in %v\n", name, fl.streams, nodeconfig.FormatSize(float64(fl.bytes)), time.Since(genStart).Round(time.Millisecond))
	largest := int64(0)
	for _, s := range streams {
		for _, o := range s.objects {
			largest = max(largest, o)
		}
	}
	buf := make([]byte, largest)
	rand.Read(buf)
	var counted []pair
	for r := range fl.warmup + fl.rounds {
		var p pair
		warm := r < fl.warmup
		if err := profiled(fl.common.cpuProfile, "node", r, warm, func() (err error) {
			var timeline io.Writer
			if fl.timeline && !warm {
				timeline = stderr
			}
			p.node, err = nodeRound(ctx, f, streams, r, timeline)
			return err
		}); err != nil {
			return fmt.Errorf("round %d, node: %w", r, err)
		}
		if err := profiled(fl.common.cpuProfile, "raw", r, warm, func() (err error) {
			p.raw, err = rawRound(ctx, f, streams, buf, fl.rawInFlight, f.s.MaxConcurrentUploads, r)
			return err
		}); err != nil {
			return fmt.Errorf("round %d, raw PUTs: %w", r, err)
		}
		fmt.Fprintf(stderr, "bench %s: round %d%s: node %v, raw %v\n", name, r, map[bool]string{true: " (warm-up)"}[warm],
			p.node.elapsed.Round(time.Millisecond), p.raw.elapsed.Round(time.Millisecond))
		if !warm {
			counted = append(counted, p)
		}
	}
	print(stdout, fl, streams, counted)
	return nil
}

// closeErr closes the fixture and keeps the first error.
func closeErr(f *fixture, err *error) {
	if cerr := f.close(); cerr != nil && *err == nil {
		*err = cerr
	}
}

// prepareStream writes a committed log of fl.bytes record bytes into dir and computes the
// fragments the node will cut from it at target (the last one cut by ForceCut).
func prepareStream(ctx context.Context, dir string, fl uploadFlags, seed uint64, target uint64) (uploadStream, error) {
	lg, err := segments.Open(dir, segments.Options{})
	if err != nil {
		return uploadStream{}, err
	}
	st := uploadStream{log: lg}
	gen, err := loadgen.New(loadgen.Config{Seed: seed, MinDataBytes: fl.minChunk, MaxDataBytes: fl.maxChunk, StartTimestamp: time.Now().UnixMilli()})
	if err != nil {
		return st, fmt.Errorf("%w: %v", errUsage, err)
	}
	if _, err := loadgen.Write(ctx, lg, gen, loadgen.Limit{Bytes: int64(fl.bytes)}, loadgen.WriteOptions{Commit: true}); err != nil {
		return st, err
	}
	st.next = lg.NextOffset()
	r, err := lg.NewReader(lg.FirstOffset())
	if err != nil {
		return st, err
	}
	defer r.Close()
	asm, err := fragment.NewAssembly(target)
	if err != nil {
		return st, err
	}
	add := func(d fragment.Description) {
		st.objects = append(st.objects, d.ObjectSize())
		st.bytes += d.ObjectSize()
	}
	for {
		h, loc, err := r.Next()
		if errors.Is(err, segments.ErrEndOfStream) {
			break
		}
		if err != nil {
			return st, err
		}
		cut, err := asm.Add(h, loc)
		if err != nil {
			return st, err
		}
		if cut {
			d, _ := asm.Cut()
			add(d)
		}
	}
	if d, ok := asm.Cut(); ok {
		add(d)
	}
	return st, nil
}

// nodeRound tiers every stream's log as a new stream, all at once, and times it from
// AddStream until AwaitOffset of each log's last offset returns; then it deletes the
// streams (records and objects), outside the timed part. A timeline, when not nil, gets
// the pipeline every 100 ms.
func nodeRound(ctx context.Context, f *fixture, streams []uploadStream, round int, timeline io.Writer) (side, error) {
	ids := make([]string, len(streams))
	for i := range streams {
		ids[i] = fmt.Sprintf("up-r%d-s%d", round, i)
	}
	before := f.b.Store.Metrics().Snapshot()
	var fragments int64
	for _, s := range streams {
		fragments += int64(len(s.objects))
	}
	start, cpu := time.Now(), cpuTime()
	sampler := sampleInFlight(f.node.Metrics(), fragments, timeline)
	for i, s := range streams {
		if err := f.node.AddStream(actors.StreamSpec{ID: ids[i], Log: s.log, Epoch: 1}); err != nil {
			sampler.stop()
			return side{}, err
		}
	}
	errs := make([]error, len(streams))
	took := make([]time.Duration, len(streams))
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Add(1)
		go func() { // owned by nodeRound: returns when the stream is persisted or ctx ends
			defer wg.Done()
			errs[i] = tierAll(ctx, f.node, ids[i], s.next)
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	out := side{elapsed: time.Since(start), cpu: cpuTime() - cpu, inFlight: sampler.stop(), requests: delta(f.b.Store.Metrics().Snapshot(), before), streams: took}
	if err := errors.Join(errs...); err != nil {
		return out, err
	}
	for i, s := range streams {
		n, b, err := fragmentObjects(ctx, f, ids[i])
		if err != nil {
			return out, err
		}
		if n != len(s.objects) || b != s.bytes {
			return out, fmt.Errorf("stream %s: the node uploaded %d fragments of %d bytes, the baseline expects %d of %d: the comparison would be unfair", ids[i], n, b, len(s.objects), s.bytes)
		}
		out.bytes += b
	}
	for _, id := range ids {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := f.node.DeleteStream(dctx, id)
		cancel()
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// tierAll waits until the stream's drain has read the whole log, cuts the last fragment
// and waits until the last offset is persisted.
func tierAll(ctx context.Context, node *actors.Node, id string, next uint64) error {
	for {
		st, err := node.Status(ctx, id)
		if err == nil && st.Core.DrainNext >= next {
			break
		}
		if err != nil && !errors.Is(err, actors.ErrStreamStarting) {
			return err
		}
		if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			return fmt.Errorf("stream %s: drain did not reach offset %d: %w", id, next, err)
		}
	}
	if err := node.ForceCut(id); err != nil {
		return err
	}
	return node.AwaitOffset(ctx, id, next-1)
}

// fragmentObjects counts the fragment objects of a stream in the bucket, and their bytes.
func fragmentObjects(ctx context.Context, f *fixture, id string) (n int, bytes int64, err error) {
	err = f.b.Store.List(ctx, streamPrefix(f, id), func(o s3io.ObjectInfo) error {
		if strings.HasSuffix(o.Key, ".fragment") {
			n++
			bytes += o.Size
		}
		return nil
	})
	return n, bytes, err
}

// rawRound PUTs the same object sizes as the node's fragments to the same bucket, one
// worker per stream, from one random buffer in memory; then deletes them, outside the timed
// part. Each worker keeps perWorker PUTs in flight, or, with perWorker 0, the workers share
// total in flight (the node's max_concurrent_uploads: the concurrency the node may use).
func rawRound(ctx context.Context, f *fixture, streams []uploadStream, buf []byte, perWorker, total, round int) (side, error) {
	before := f.b.Store.Metrics().Snapshot()
	var keysMu sync.Mutex
	var keys []string
	errs := make([]error, len(streams))
	var wg sync.WaitGroup
	shared := make(chan struct{}, max(total, 1))
	start, cpu := time.Now(), cpuTime()
	for i, s := range streams {
		wg.Add(1)
		go func() { // owned by rawRound: one stream's PUTs
			defer wg.Done()
			sem := shared
			if perWorker > 0 {
				sem = make(chan struct{}, perWorker)
			}
			var inner sync.WaitGroup
			var mu sync.Mutex
			for j, size := range s.objects {
				key := fmt.Sprintf("bench-raw/r%d/s%d/%06d", round, i, j)
				sem <- struct{}{}
				inner.Add(1)
				go func() { // owned by this worker: one PUT
					defer inner.Done()
					defer func() { <-sem }()
					err := f.b.Store.PutObject(ctx, key, buf[:size])
					mu.Lock()
					errs[i] = errors.Join(errs[i], err)
					mu.Unlock()
					keysMu.Lock()
					keys = append(keys, key)
					keysMu.Unlock()
				}()
			}
			inner.Wait()
		}()
	}
	wg.Wait()
	out := side{elapsed: time.Since(start), cpu: cpuTime() - cpu, requests: delta(f.b.Store.Metrics().Snapshot(), before)}
	for _, s := range streams {
		out.bytes += s.bytes
	}
	if err := errors.Join(errs...); err != nil {
		return out, err
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	failed, err := f.b.Store.DeleteObjects(dctx, keys)
	if err == nil && len(failed) > 0 {
		err = fmt.Errorf("%d baseline objects not deleted", len(failed))
	}
	return out, err
}

// printThroughput prints the upload report.
func printThroughput(w io.Writer, fl uploadFlags, streams []uploadStream, rounds []pair) {
	objects, bytes := 0, int64(0)
	for _, s := range streams {
		objects += len(s.objects)
		bytes += s.bytes
	}
	inFlight := fmt.Sprintf("x %d in flight", fl.rawInFlight)
	if fl.rawInFlight == 0 {
		inFlight = fmt.Sprintf("sharing %d in flight (max_concurrent_uploads)", fl.maxUploads)
	}
	fmt.Fprintf(w, "A = the node tiering %d stream(s) until persisted (AddStream to AwaitOffset of the last offset); B = raw PutObject of the same %d objects (%s) with %d worker(s) %s\n",
		fl.streams, objects, nodeconfig.FormatSize(float64(bytes)), fl.streams, inFlight)
	fmt.Fprintf(w, "per stream: %s of records (chunks of %d to %d bytes), fragment target %s; rounds: %d counted A B A B ..., %d warm-up\n",
		nodeconfig.FormatSize(float64(fl.bytes)), fl.minChunk, fl.maxChunk, nodeconfig.FormatSize(float64(fl.fragment)), len(rounds), fl.warmup)
	var nodeTP, upTP, rawTP, nodeS, upS, rawS, meanIF, peakIF, spread []float64
	var nodeCPU, rawCPU []cpuUse
	for _, p := range rounds {
		nodeCPU = append(nodeCPU, cpuUse{cpu: p.node.cpu, elapsed: p.node.elapsed, bytes: p.node.bytes})
		rawCPU = append(rawCPU, cpuUse{cpu: p.raw.cpu, elapsed: p.raw.elapsed, bytes: p.raw.bytes})
		nodeTP = append(nodeTP, mib(p.node.bytes)/p.node.elapsed.Seconds())
		upTP = append(upTP, mib(p.node.bytes)/p.node.inFlight.uploaded.Seconds())
		upS = append(upS, p.node.inFlight.uploaded.Seconds())
		rawTP = append(rawTP, mib(p.raw.bytes)/p.raw.elapsed.Seconds())
		nodeS = append(nodeS, p.node.elapsed.Seconds())
		rawS = append(rawS, p.raw.elapsed.Seconds())
		meanIF = append(meanIF, p.node.inFlight.mean)
		peakIF = append(peakIF, float64(p.node.inFlight.peak))
		if len(p.node.streams) > 1 {
			spread = append(spread, slices.Max(p.node.streams).Seconds()/slices.Min(p.node.streams).Seconds())
		}
	}
	r := report{w}
	r.columns("")
	r.row("A node MiB/s (to persisted)", nodeTP, 1)
	r.row("A node MiB/s (to last upload)", upTP, 1)
	r.row("B raw PUT MiB/s", rawTP, 1)
	r.row("A node s (to persisted)", nodeS, 3)
	r.row("A node s (to last upload)", upS, 3)
	r.row("B raw PUT s", rawS, 3)
	r.row("A node uploads in flight (mean)", meanIF, 2)
	r.row("A node uploads in flight (peak)", peakIF, 0)
	if len(spread) > 0 {
		// Equal streams tiered at once: their shares were fair if they end together.
		r.row("A node slowest/fastest stream time", spread, 3)
	}
	cpuRatio := r.cpuRows("node side", "raw side", nodeCPU, rawCPU)
	r.row("ratio A/B throughput (node/raw)", ratios(nodeTP, rawTP), 3)
	r.row("ratio A/B to last upload (node/raw)", ratios(upTP, rawTP), 3)
	r.row("ratio B/A process CPU per byte (raw/node)", cpuRatio, 3)
}

// inFlightStats is how many uploads the node had running, sampled every 5 ms, and when
// (since the sampler started, to 5 ms) its last fragment upload had returned.
type inFlightStats struct {
	mean     float64
	peak     int64
	uploaded time.Duration
}

// timelineEvery is how often --timeline prints the node's pipeline.
const timelineEvery = 100 * time.Millisecond

// sampleInFlight samples the node's running-transfers gauge until stop; fragments is how
// many fragment uploads the round makes. With timeline set it prints the uploads running,
// the fragments uploaded and the persists every timelineEvery (--timeline).
func sampleInFlight(m *actors.Metrics, fragments int64, timeline io.Writer) *sampler[inFlightStats] {
	start, base := time.Now(), m.FragmentsUploaded.Load()
	var sum, n, peak int64
	var uploaded time.Duration
	var last time.Time
	return startSampler(func() {
		v := m.TransfersRunning.Load()
		if timeline != nil && time.Since(last) >= timelineEvery {
			last = time.Now()
			p50, p99, _, _ := m.LatencyQuantiles()
			fmt.Fprintf(timeline, "timeline %6d ms: uploads running %2d, fragments uploaded %4d, persists %4d (recent p50 %v, p99 %v)\n",
				time.Since(start).Milliseconds(), v, m.FragmentsUploaded.Load()-base, m.Persists.Load(),
				p50.Round(time.Millisecond), p99.Round(time.Millisecond))
		}
		sum, n, peak = sum+v, n+1, max(peak, v)
		if uploaded == 0 && m.FragmentsUploaded.Load()-base >= fragments {
			uploaded = time.Since(start)
		}
	}, func() inFlightStats {
		if uploaded == 0 {
			uploaded = time.Since(start)
		}
		return inFlightStats{mean: float64(sum) / float64(n), peak: peak, uploaded: uploaded}
	})
}
