package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/nodeconfig"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// latencyFlags are the flags of latency.
type latencyFlags struct {
	common   commonFlags
	rate     rateFlag
	fragment sizeFlag
	duration time.Duration
	rounds   int
	sample   time.Duration
	minChunk int
	maxChunk int
	seed     uint64
}

func runLatency(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("latency", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fl := latencyFlags{rate: 20_000_000, fragment: 8 << 20}
	fl.common.register(fs)
	fs.Var(&fl.rate, "rate", "record bytes per second the writer appends and commits")
	fs.Var(&fl.fragment, "fragment", "fragment target size (the node's fragment_target_size)")
	fs.DurationVar(&fl.duration, "duration", 10*time.Second, "how long the writer writes in each round")
	fs.IntVar(&fl.rounds, "rounds", 3, "rounds, each the node (A) then the ideal tierer replaying its fragments (B)")
	fs.DurationVar(&fl.sample, "sample", 10*time.Millisecond, "one commit in this interval is timed to persisted")
	fs.IntVar(&fl.minChunk, "min-chunk", 1000, "smallest chunk's record bytes (loadgen)")
	fs.IntVar(&fl.maxChunk, "max-chunk", 4000, "largest chunk's record bytes (loadgen)")
	fs.Uint64Var(&fl.seed, "seed", 1, "load generator seed")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fl.rate <= 0 || fl.duration <= 0 || fl.rounds < 1 || fl.sample <= 0 {
		return fmt.Errorf("%w: --rate, --duration, --rounds and --sample must be positive", errUsage)
	}
	ctx, cancel := context.WithTimeout(ctx, fl.common.timeout)
	defer cancel()
	f, err := startFixture(ctx, fl.common, map[string]string{"fragment_target_size": fmt.Sprint(uint64(fl.fragment))}, stderr)
	if err != nil {
		return err
	}
	defer closeErr(f, &err)
	f.header(stdout, "latency")
	buf := make([]byte, 2*f.s.FragmentTargetSize+(1<<20)) // a fragment is at most the target plus one chunk and its index
	rand.Read(buf)
	var node, raw [][]float64 // per round: p50, p90, p99, max in ms
	samples, fragments := 0, 0
	for r := range fl.rounds {
		res, err := latencyNodeRound(ctx, f, fl, r)
		if err != nil {
			return fmt.Errorf("round %d, node: %w", r, err)
		}
		if len(res.samples) == 0 {
			return fmt.Errorf("round %d: no timed commit below the last fragment: give a longer --duration or a smaller --fragment", r)
		}
		rawLat, err := latencyRawRound(ctx, f, res, buf, r)
		if err != nil {
			return fmt.Errorf("round %d, ideal tierer: %w", r, err)
		}
		node = append(node, percentiles(res.latencies()))
		raw = append(raw, percentiles(rawLat))
		samples += len(res.samples)
		fragments += len(res.fragments) - 1
		fmt.Fprintf(stderr, "bench latency: round %d: %d timed commits over %d fragments, node p50 %.0f ms, ideal p50 %.0f ms\n",
			r, len(res.samples), len(res.fragments)-1, node[r][0], raw[r][0])
	}
	fmt.Fprintf(stdout, "A = the node: SetCommitted to AwaitOffset return, one commit every %v; B = an ideal tierer that PUTs each fragment once its last chunk is committed (the same objects, at the same moments) and persists nothing\n", fl.sample)
	fmt.Fprintf(stdout, "writer: %s/s for %v per round (chunks of %d to %d bytes), fragment target %s; %d rounds A B A B ..., %d timed commits in %d fragments (the last, force-cut fragment of each round left out)\n",
		nodeconfig.FormatSize(float64(fl.rate)), fl.duration, fl.minChunk, fl.maxChunk, nodeconfig.FormatSize(float64(f.s.FragmentTargetSize)), fl.rounds, samples, fragments)
	rep := report{w: stdout}
	rep.columns("")
	col := func(xs [][]float64, i int) []float64 {
		out := make([]float64, len(xs))
		for r := range xs {
			out[r] = xs[r][i]
		}
		return out
	}
	names := []string{"p50", "p90", "p99", "max"}
	for i, q := range names {
		rep.row("A node "+q+" ms", col(node, i), 1)
	}
	for i, q := range names {
		rep.row("B ideal "+q+" ms", col(raw, i), 1)
	}
	for i, q := range names {
		rep.row("ratio A/B "+q, ratios(col(node, i), col(raw, i)), 3)
	}
	return nil
}

// percentiles are p50, p90, p99 and max of xs.
func percentiles(xs []float64) []float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return []float64{quantile(s, 0.5), quantile(s, 0.9), quantile(s, 0.99), quantile(s, 1)}
}

// commit is one chunk the writer committed: its offset and when, since the round started.
type commit struct {
	offset uint64
	at     time.Duration
}

// timed is one timed commit and how long it took to be persisted.
type timed struct {
	commit
	latency time.Duration
}

// fragmentObject is one fragment the node uploaded: its first offset and object size.
type fragmentObject struct {
	first uint64
	size  int64
}

// latencyRound is what a node round leaves for the ideal tierer's replay.
type latencyRound struct {
	commits   []commit // every chunk, in order
	samples   []timed  // the timed ones below the last fragment
	fragments []fragmentObject
}

func (l latencyRound) latencies() []float64 {
	out := make([]float64, len(l.samples))
	for i, s := range l.samples {
		out[i] = float64(s.latency) / float64(time.Millisecond)
	}
	return out
}

// latencyNodeRound writes at the rate into a new stream's log for the duration, timing one
// commit per sample interval until persisted, then flushes the tail and lists the fragments.
func latencyNodeRound(ctx context.Context, f *fixture, fl latencyFlags, round int) (res latencyRound, err error) {
	id := fmt.Sprintf("lat-r%d", round)
	lg, err := segments.Open(f.logDir(id), segments.Options{})
	if err != nil {
		return res, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if derr := f.node.DeleteStream(dctx, id); derr != nil && err == nil {
			err = derr
		}
		cancel()
		lg.Close()
	}()
	if err := f.node.AddStream(actors.StreamSpec{ID: id, Log: lg, Epoch: 1}); err != nil {
		return res, err
	}
	if err := waitRunning(ctx, f.node, []string{id}); err != nil {
		return res, err
	}
	gen, err := loadgen.New(loadgen.Config{Seed: fl.seed + uint64(round), MinDataBytes: fl.minChunk, MaxDataBytes: fl.maxChunk, StartTimestamp: time.Now().UnixMilli()})
	if err != nil {
		return res, fmt.Errorf("%w: %v", errUsage, err)
	}
	var mu sync.Mutex
	var all []timed
	var waitErr error
	var wg sync.WaitGroup
	start := time.Now()
	nextSample := time.Duration(0)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for time.Since(start) < fl.duration {
		due := int64(time.Since(start).Seconds() * float64(fl.rate))
		for gen.Bytes() < due {
			spec := gen.Next()
			spec.Timestamp = time.Now().UnixMilli()
			h, _, err := lg.Append(spec)
			if err != nil {
				return res, err
			}
			if err := lg.SetCommitted(h.ChunkID); err != nil {
				return res, err
			}
			c := commit{offset: h.ChunkID, at: time.Since(start)}
			res.commits = append(res.commits, c)
			if c.at >= nextSample {
				nextSample = c.at + fl.sample
				wg.Add(1)
				go func() { // owned by this round: returns when persisted or ctx ends
					defer wg.Done()
					actx, cancel := context.WithTimeout(ctx, 5*time.Minute)
					defer cancel()
					err := f.node.AwaitOffset(actx, id, c.offset)
					lat := time.Since(start) - c.at
					mu.Lock()
					defer mu.Unlock()
					waitErr = errors.Join(waitErr, err)
					all = append(all, timed{commit: c, latency: lat})
				}()
			}
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			return res, ctx.Err()
		case <-tick.C:
		}
	}
	if err := tierAll(ctx, f.node, id, lg.NextOffset()); err != nil {
		wg.Wait()
		return res, err
	}
	wg.Wait()
	if waitErr != nil {
		return res, waitErr
	}
	err = f.b.Store.List(ctx, streamPrefix(f, id), func(o s3io.ObjectInfo) error {
		k, err := manifest.ParseKey(f.b.KeyPrefix, o.Key)
		if err != nil {
			return err
		}
		if k.Kind == manifest.ObjectFragment {
			res.fragments = append(res.fragments, fragmentObject{first: k.Offset, size: o.Size})
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	sort.Slice(res.fragments, func(i, j int) bool { return res.fragments[i].first < res.fragments[j].first })
	if len(res.fragments) < 2 {
		return res, nil
	}
	last := res.fragments[len(res.fragments)-1].first
	for _, s := range all {
		if s.offset < last {
			res.samples = append(res.samples, s)
		}
	}
	sort.Slice(res.samples, func(i, j int) bool { return res.samples[i].offset < res.samples[j].offset })
	return res, nil
}

// latencyRawRound replays a node round as an ideal tierer would run it: each fragment but
// the last is PUT (the same size, from memory) at the moment its last chunk was committed,
// and a timed commit is durable when its fragment's PUT returns. It returns the timed
// commits' latencies in ms, in the order of res.samples.
func latencyRawRound(ctx context.Context, f *fixture, res latencyRound, buf []byte, round int) ([]float64, error) {
	frags := res.fragments[:len(res.fragments)-1]
	done := make([]time.Duration, len(frags)) // PUT return, since the replay's start
	errs := make([]error, len(frags))
	keys := make([]string, len(frags))
	var wg sync.WaitGroup
	start := time.Now()
	for j, fr := range frags {
		end := res.fragments[j+1].first
		// the fragment's last chunk: the last commit below the next fragment's first offset
		i := sort.Search(len(res.commits), func(i int) bool { return res.commits[i].offset >= end }) - 1
		if i < 0 {
			return nil, fmt.Errorf("fragment at %d: no commit below %d", fr.first, end)
		}
		if err := sleepCtx(ctx, res.commits[i].at-time.Since(start)); err != nil {
			wg.Wait()
			return nil, err
		}
		if fr.size > int64(len(buf)) {
			wg.Wait()
			return nil, fmt.Errorf("fragment at %d: %d bytes, above the replay buffer's %d", fr.first, fr.size, len(buf))
		}
		keys[j] = fmt.Sprintf("bench-raw/lat-r%d/%06d", round, j)
		wg.Add(1)
		go func() { // owned by the replay: one PUT
			defer wg.Done()
			errs[j] = f.b.Store.PutObject(ctx, keys[j], buf[:fr.size])
			done[j] = time.Since(start)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if failed, err := f.b.Store.DeleteObjects(dctx, keys); err != nil || len(failed) > 0 {
		return nil, fmt.Errorf("delete replay objects: %v (%d failed)", err, len(failed))
	}
	out := make([]float64, len(res.samples))
	for i, s := range res.samples {
		j := sort.Search(len(frags), func(j int) bool { return frags[j].first > s.offset }) - 1
		if j < 0 {
			return nil, fmt.Errorf("timed commit at %d: in no fragment", s.offset)
		}
		out[i] = float64(done[j]-s.at) / float64(time.Millisecond)
	}
	return out, nil
}
