package read

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors/read/fetchcore"
	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
)

// benchTier is a remote tier written for the benchmark: objects of objBytes chunk-region
// bytes each, chunks of 100 KiB to 400 KiB, a manifest of fragment entries.
type benchTier struct {
	store *s3io.Store
	m     manifest.Manifest
	keys  []string
	sizes []uint64 // chunk-region bytes per object
	total int64
}

func writeBenchTier(b *testing.B, store *s3io.Store, stream string, objects int, objBytes int) benchTier {
	rnd := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 512<<10)
	for i := range data {
		data[i] = byte(rnd.Uint32())
	}
	t := benchTier{store: store, m: manifest.Empty()}
	next := uint64(0)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	errs := make(chan error, objects)
	for o := 0; o < objects; o++ {
		obj := fragment.AppendObjectHeader(make([]byte, 0, objBytes+64<<10))
		var recs []fragment.IndexRecord
		first := next
		for len(obj)-fragment.ObjectHeaderSize < objBytes {
			n := 100<<10 + rnd.IntN(300<<10)
			h := chunk.Header{Type: chunk.TypeUser, Entries: 1, Records: 1, Timestamp: int64(next), Epoch: 1, ChunkID: next,
				DataCRC: crc32.ChecksumIEEE(data[:n]), DataLen: uint32(n)}
			recs = append(recs, fragment.IndexRecord{ChunkID: next, Timestamp: int64(next), Position: uint32(len(obj))})
			obj = chunk.AppendHeader(obj, h)
			obj = append(obj, data[:n]...)
			next++
		}
		size := uint64(len(obj) - fragment.ObjectHeaderSize)
		for _, r := range recs {
			obj = fragment.AppendIndexRecord(obj, r)
		}
		e := manifest.Entry{FirstOffset: first, FirstTimestamp: int64(first), LastTimestamp: int64(next - 1), Size: size, UID: uint64(o + 1), Kind: manifest.KindFragment}
		ed, err := manifest.AppendEdit(t.m, e, next)
		if err == nil {
			t.m, err = t.m.Apply(ed)
		}
		if err != nil {
			b.Fatal(err)
		}
		key := manifest.FragmentKey(manifest.DefaultKeyPrefix, stream, first, 1, e.UID)
		t.keys, t.sizes, t.total = append(t.keys, key), append(t.sizes, size), t.total+int64(size)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := store.PutObject(context.Background(), key, obj); err != nil {
				errs <- err
			}
			mu.Lock()
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return t
}

// rawRead GETs every object's chunk region in 4 MiB ranges with n parallel workers, no
// verification, buffers reused: the baseline. It returns the time and the time to the first
// range.
func (t benchTier) rawRead(n int, rangeSize int64) (time.Duration, time.Duration, error) {
	type job struct {
		key      string
		off, len int64
	}
	jobs := make(chan job, 64)
	go func() {
		for i, k := range t.keys {
			end := int64(fragment.ObjectHeaderSize) + int64(t.sizes[i])
			for off := int64(fragment.ObjectHeaderSize); off < end; off += rangeSize {
				jobs <- job{k, off, min(rangeSize, end-off)}
			}
		}
		close(jobs)
	}()
	start := time.Now()
	var first atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, rangeSize)
			for j := range jobs {
				if os.Getenv("RAW_ALLOC") != "" {
					buf = nil
				}
				got, err := t.store.GetRangePartial(context.Background(), j.key, j.off, j.len, buf)
				if err == nil && int64(len(got)) != j.len {
					err = fmt.Errorf("short read of %s", j.key)
				}
				if err != nil {
					errs <- err
					for range jobs {
					}
					return
				}
				first.CompareAndSwap(0, int64(time.Since(start)))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return 0, 0, err
	}
	return time.Since(start), time.Duration(first.Load()), nil
}

// heapSampler records the peak of live heap objects while it runs.
type heapSampler struct {
	stop chan struct{}
	done chan struct{}
	peak atomic.Uint64
}

func sampleHeap() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	go func() {
		defer close(h.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > h.peak.Load() {
				h.peak.Store(v)
			}
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return h
}

func (h *heapSampler) finish() uint64 {
	close(h.stop)
	<-h.done
	return h.peak.Load()
}

// BenchmarkRemoteRead reads a tiered stream of STREAMTIER_BENCH_MIB (default 1024) MiB from
// the remote tier through the remote source and, interleaved in the same run against the
// same server and objects, with raw parallel 4 MiB range GETs (N = 2, 4, 8, 16; the best
// per round is the baseline). It prints the throughput ratio source/baseline (min, median,
// max over STREAMTIER_BENCH_ROUNDS rounds, default 3), the times to the first chunk, and
// the peak live heap of the source's reads against its budget.
func BenchmarkRemoteRead(b *testing.B) {
	mib, rounds := envInt("STREAMTIER_BENCH_MIB", 1024), envInt("STREAMTIER_BENCH_ROUNDS", 3)
	budget := int64(envInt("STREAMTIER_BENCH_BUDGET_MIB", 256)) << 20
	srv := s3test.Start(b, s3test.Options{})
	store, err := s3io.NewStore(context.Background(), srv.NewBucket(b))
	if err != nil {
		b.Fatal(err)
	}
	const objBytes = 16 << 20
	tier := writeBenchTier(b, store, "bench", max(mib<<20/objBytes, 1), objBytes)
	mb := float64(tier.total) / (1 << 20)
	b.Logf("tier: %d objects, %.0f MiB, %d chunks", len(tier.keys), mb, tier.m.NextOffset)
	env := Env{Tier: s3io.Tier{Store: store, KeyPrefix: manifest.DefaultKeyPrefix, Stream: "bench"}, Log: zerolog.Nop(),
		Latest: func(context.Context) (manifest.Manifest, int64, error) { return tier.m, 1, nil },
		Budget: NewBudget(budget),
		Stats:  &RemoteStats{}, Fetch: fetchcore.Config{MaxConcurrency: envInt("STREAMTIER_BENCH_CEILING", 0), FixedConcurrency: envInt("STREAMTIER_BENCH_FIXED", 0)}}
	debug := os.Getenv("STREAMTIER_BENCH_DEBUG") != ""
	var sweep, paired, control []float64
	var srcTTFC, rawTTFC []time.Duration
	var peak uint64
	b.ResetTimer()
	for r := 0; r < rounds; r++ {
		// The sweep: raw reads at N = 2, 4, 8, 16; the best is the round's N.
		best, bestN := time.Duration(0), 0
		for _, n := range []int{2, 4, 8, 16} {
			rb := store.Metrics().Snapshot()[s3io.OpGetRange]
			cpu0 := cpuTime()
			d, _, err := tier.rawRead(n, 4<<20)
			cpuRaw := cpuTime() - cpu0
			if err != nil {
				b.Fatal(err)
			}
			if debug {
				ra := store.Metrics().Snapshot()[s3io.OpGetRange]
				fmt.Printf("raw N=%d: %v, GETs %d, mean latency %v, client CPU %v\n", n, d, ra.Requests-rb.Requests, (ra.Sum-rb.Sum)/time.Duration(max(ra.Requests-rb.Requests, 1)), cpuRaw)
			}
			if best == 0 || d < best {
				best, bestN = d, n
			}
		}
		// The pair: the source and one raw read at the round's N, back to back, the order
		// alternating between rounds.
		source := func() (time.Duration, error) {
			runtime.GC()
			before := store.Metrics().Snapshot()[s3io.OpGetRange]
			hs := sampleHeap()
			base := hs.peak.Load()
			allocs, reuses := env.Budget.bufs.allocs.Load(), env.Budget.bufs.reuses.Load()
			cpu0 := cpuTime()
			d, first, conc, err := readSource(env)
			cpuSrc := cpuTime() - cpu0
			allocs, reuses = env.Budget.bufs.allocs.Load()-allocs, env.Budget.bufs.reuses.Load()-reuses
			p := hs.finish()
			after := store.Metrics().Snapshot()[s3io.OpGetRange]
			if p > base {
				peak = max(peak, p-base)
			}
			if debug {
				fmt.Printf("source: GETs %d, mean latency %v, client CPU %v, wall %v, sum of GET latencies / c = %v\n", after.Requests-before.Requests,
					(after.Sum-before.Sum)/time.Duration(max(after.Requests-before.Requests, 1)), cpuSrc, d, (after.Sum-before.Sum)/time.Duration(max(conc, 1)))
			}
			fmt.Printf("round %d: source %.0f MiB/s (c=%d at the end, range buffers %d allocated %d reused)\n", r+1, mb/d.Seconds(), conc, allocs, reuses)
			srcTTFC = append(srcTTFC, first)
			return d, err
		}
		raw := func() (time.Duration, error) {
			d, first, err := tier.rawRead(bestN, 4<<20)
			rawTTFC = append(rawTTFC, first)
			return d, err
		}
		var ds, dr time.Duration
		var err1, err2 error
		if r%2 == 0 {
			ds, err1 = source()
			dr, err2 = raw()
		} else {
			dr, err2 = raw()
			ds, err1 = source()
		}
		if err := errors.Join(err1, err2); err != nil {
			b.Fatal(err)
		}
		sweep, paired, control = append(sweep, best.Seconds()/ds.Seconds()), append(paired, dr.Seconds()/ds.Seconds()), append(control, best.Seconds()/dr.Seconds())
		fmt.Printf("round %d: raw sweep best N=%d %.0f MiB/s, raw paired %.0f MiB/s; source/paired %.3f, source/sweep-best %.3f, paired-raw/sweep-best %.3f\n",
			r+1, bestN, mb/best.Seconds(), mb/dr.Seconds(), paired[r], sweep[r], control[r])
	}
	spread := func(name string, v []float64) {
		s := append([]float64(nil), v...)
		sort.Float64s(s)
		fmt.Printf("%s: min %.3f median %.3f max %.3f\n", name, s[0], s[len(s)/2], s[len(s)-1])
	}
	fmt.Printf("%d rounds, %.0f MiB\n", rounds, mb)
	spread("ratio source / raw paired at the round's best N", paired)
	spread("ratio source / raw best of the sweep (biased: best of four runs against one)", sweep)
	spread("control: raw paired / raw best of the sweep (the same reader: what the bias alone costs)", control)
	fmt.Printf("time to first chunk: source %v, raw first range %v (median)\n", medianDur(srcTTFC), medianDur(rawTTFC))
	fmt.Printf("peak live heap during a source read: %.1f MiB above the start, budget %.0f MiB\n", float64(peak)/(1<<20), float64(budget)/(1<<20))
}

// readSource reads the whole tier through a remote source, dropping the chunks as they
// come, and returns the time, the time to the first chunk and the concurrency at the end.
func readSource(env Env) (time.Duration, time.Duration, int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	src, err := openRemoteSource(ctx, env, 0)
	if err != nil {
		return 0, 0, 0, err
	}
	defer src.Close()
	var first time.Duration
	var trail []int64
	for {
		it, err := src.Next(ctx)
		if errors.Is(err, ErrRemoteEnd) {
			break
		}
		if c := env.Stats.Concurrency.Load(); len(trail) == 0 || trail[len(trail)-1] != c {
			trail = append(trail, c)
		}
		if err != nil {
			return 0, 0, 0, err
		}
		if first == 0 && it.Kind == ItemChunk {
			first = time.Since(start)
		}
	}
	if os.Getenv("STREAMTIER_BENCH_DEBUG") != "" {
		fmt.Printf("concurrency levels in order: %v\n", trail)
	}
	return time.Since(start), first, env.Stats.Concurrency.Load(), nil
}

// cpuTime is the CPU time this process used so far (user and system): the client's side
// of a read (the S3 server is another process).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func medianDur(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
