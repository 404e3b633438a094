package tests

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// steadyWriter appends the generator's chunks to a log at a steady rate (a few chunks every
// tick) and commits them, as a broker would, until stopped.
type steadyWriter struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	chunks int64
	bytes  int64 // record bytes
	err    error
}

func startWriter(lg *segments.Log, g *loadgen.Generator, every time.Duration, perTick int64) *steadyWriter {
	ctx, cancel := context.WithCancel(context.Background())
	w := &steadyWriter{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			st, err := loadgen.Write(context.Background(), lg, g, loadgen.Limit{Chunks: perTick}, loadgen.WriteOptions{Commit: true})
			w.mu.Lock()
			w.chunks += st.Chunks
			w.bytes += st.Bytes
			if err != nil && w.err == nil {
				w.err = err
			}
			w.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return w
}

// written is how many record bytes the writer appended so far.
func (w *steadyWriter) written() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bytes
}

// stop stops the writer and returns how many chunks it wrote.
func (w *steadyWriter) stop(t *testing.T) int64 {
	t.Helper()
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		t.Fatalf("writer: %v", w.err)
	}
	return w.chunks
}

// TestS3OutageBoundsMemory: S3 answers every PUT with 503 (fragments) or 500 (roots and
// groups) while the writer appends at a steady rate. The outage lasts 20 s here (set
// STREAMTIER_OUTAGE, e.g. 2m, for a longer one); with 64 KiB fragments and a 256 KiB bound
// the writer appends about 60 times the bound meanwhile, so the bound is crossed many times
// over. Throughout, the reader holds no more than the bound plus one chunk drained and not
// yet durable, the drain is paused ("paused: N bytes awaiting upload"), and the reader's
// timers stay a handful however many retries fail. Once S3 answers again the drain resumes
// by itself, and every offset the writer committed ends up durable, byte for byte.
func TestS3OutageBoundsMemory(t *testing.T) {
	outage := 20 * time.Second
	if v := os.Getenv("STREAMTIER_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("STREAMTIER_OUTAGE=%q: %v", v, err)
		}
		outage = d
	}
	if testing.Short() && outage > 5*time.Second {
		outage = 5 * time.Second
	}
	const bound = 256 << 10
	e := newEnv(t, envOptions{faults: true, node: actors.Config{Stream: actors.StreamOptions{
		FragmentTargetSize: 64 << 10, MaxUnpersistedBytes: bound, PersistThreshold: 4, PersistInterval: 100 * time.Millisecond,
		UploadRetryDelay: 100 * time.Millisecond, UploadRetryMaxDelay: time.Second, TransientBackoffMax: time.Second,
	}}})
	gen := loadgen.Config{Seed: 41, MinDataBytes: 2000, MaxDataBytes: 6000}
	opts := segments.Options{MaxSegmentBytes: 1 << 20}
	lg, err := segments.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lg.Close() })
	g, err := loadgen.New(gen)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.node.AddStream(actors.StreamSpec{ID: "outage", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	w := startWriter(lg, g, 10*time.Millisecond, 2) // about 800 KB/s
	e.await("outage", 0, 30*time.Second)            // tiering runs before the outage

	e.inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: `\.fragment$`, Fault: s3test.FaultSlowDown})
	e.inj.Add(s3test.Rule{Method: "PUT", Fault: s3test.FaultInternalError})
	bytesAtStart := w.written()
	var (
		maxHeld, maxTimers           uint64
		samples, pausedSamples       int
		heapBase, heapPeak           uint64
		pausedText                   string
		retriesAtStart, retriesAtEnd uint64
	)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heapBase = ms.HeapAlloc
	start := time.Now()
	lastHeap := start
	for time.Since(start) < outage {
		st, err := e.node.Status(context.Background(), "outage")
		if err != nil {
			t.Fatal(err)
		}
		c := st.Core
		if samples == 0 {
			retriesAtStart = c.Counters.TransientRetries
		}
		retriesAtEnd = c.Counters.TransientRetries
		samples++
		maxHeld = max(maxHeld, c.HeldBytes)
		maxTimers = max(maxTimers, uint64(st.Timers))
		if c.Paused {
			pausedSamples++
			if pausedText == "" {
				pausedText = c.String()
			}
		}
		if c.HeldBound != bound {
			t.Fatalf("the stream runs with a bound of %d bytes, want %d", c.HeldBound, bound)
		}
		if time.Since(lastHeap) > time.Second {
			runtime.ReadMemStats(&ms)
			heapPeak = max(heapPeak, ms.HeapAlloc)
			lastHeap = time.Now()
		}
		time.Sleep(20 * time.Millisecond) // a sampling period, not a synchronization
	}
	written := w.written() - bytesAtStart
	before := e.node.Metrics().DrainWakeups.Load()
	e.inj.Clear()
	chunks := w.stop(t)
	next := lg.NextOffset()
	forceTail(t, e, "outage", next)
	st, err := e.node.Status(context.Background(), "outage")
	if err != nil {
		t.Fatal(err)
	}
	ref := genLog(t, t.TempDir(), gen, loadgen.Limit{Chunks: chunks}, opts)
	if ref.NextOffset() != next {
		t.Fatalf("reference log ends at %d, the log at %d", ref.NextOffset(), next)
	}
	maxChunk := maxChunkSize(t, ref)
	k := st.Core.Counters
	t.Logf("outage %v: %d record bytes written meanwhile (%d chunks in all); held at most %d bytes (bound %d, largest chunk %d); paused in %d of %d samples; "+
		"at most %d reader timers armed while %d retriable failures were retried; heap %d -> peak %d bytes; pauses %d, deferred chunks %d, retry timers armed %d, drain wake-ups after the outage %d",
		outage, written, chunks, maxHeld, uint64(bound), maxChunk, pausedSamples, samples, maxTimers, retriesAtEnd-retriesAtStart,
		heapBase, heapPeak, k.DrainPauses, k.DeferredChunks, k.RetryTimers, e.node.Metrics().DrainWakeups.Load()-before)
	if maxHeld > bound+maxChunk {
		t.Fatalf("held %d bytes not yet durable during the outage, above the bound %d plus one chunk (%d)", maxHeld, bound, maxChunk)
	}
	if pausedSamples == 0 || !strings.Contains(pausedText, "paused: ") || !strings.Contains(pausedText, "bytes awaiting upload") {
		t.Fatalf("the drain was never seen paused during the outage (%d samples): %s", samples, pausedText)
	}
	if retriesAtEnd-retriesAtStart < uint64(outage/time.Second) {
		t.Fatalf("only %d retriable failures during the outage: it did not last", retriesAtEnd-retriesAtStart)
	}
	if maxTimers > 12 {
		t.Fatalf("the reader had %d timers armed at once during the outage: they pile up", maxTimers)
	}
	if st.Core.Paused || st.Core.HeldBytes != 0 || k.DrainPauses == 0 {
		t.Fatalf("after the outage: paused %t, held %d, pauses %d; want resumed, nothing held, at least one pause", st.Core.Paused, st.Core.HeldBytes, k.DrainPauses)
	}
	if written < 10*bound {
		t.Fatalf("%d bytes written during the outage, not ten times the bound %d: the writer was held back or the outage too short", written, bound)
	}
	// Every offset durable, byte for byte the chunks the writer wrote.
	m, frags := e.verifyRemote("outage", ref)
	if m.FirstOffset != 0 || m.NextOffset != next {
		t.Fatalf("remote tier [%d,%d) after the outage, want [0,%d)", m.FirstOffset, m.NextOffset, next)
	}
	got, gaps, _ := e.durableChunks("outage")
	if len(gaps) != 0 || int64(len(got)) != chunks {
		t.Fatalf("%d chunks durable and gaps %v, want all %d and none", len(got), gaps, chunks)
	}
	sameAsLog(t, got, ref, "remote tier after the outage")
	t.Logf("%d fragments verified", frags)
}

// maxChunkSize is the largest chunk of lg on disk (the bound's slack).
func maxChunkSize(t *testing.T, lg *segments.Log) uint64 {
	t.Helper()
	rd, err := lg.NewReader(lg.FirstOffset())
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var m uint64
	for rd.NextOffset() < lg.NextOffset() {
		_, loc, err := rd.Next()
		if err != nil {
			t.Fatal(fmt.Errorf("largest chunk: %w", err))
		}
		m = max(m, uint64(loc.Size))
	}
	return m
}
