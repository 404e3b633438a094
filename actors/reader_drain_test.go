package actors

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// jumpAt returns a batch hook that makes the local log's chunk id sequence jump at chunk id
// at (its header says at+1000, as a log whose ids skip would), while on is set; hits counts
// the batches it altered.
func jumpAt(at uint64, on *atomic.Bool, hits *atomic.Int64) func(*chunksDrained) {
	return func(b *chunksDrained) {
		if !on.Load() {
			return
		}
		for i := range b.Chunks {
			if b.Chunks[i].Header.ChunkID == at {
				b.Chunks[i].Header.ChunkID = at + 1000
				hits.Add(1)
			}
		}
	}
}

// stuckAt waits until the core's drain position is at, the committed log well past it.
func stuckAt(t *testing.T, n *Node, stream string, at uint64) {
	t.Helper()
	until(t, 30*time.Second, fmt.Sprintf("the drain of %s to stop at %d", stream, at), func() (bool, string) {
		st, err := n.Status(context.Background(), stream)
		return err == nil && st.Core.DrainNext == at, fmt.Sprintf("%v; %s", err, st.Core)
	})
}

// TestDrainRefusedChunkStallsWithoutSpinning: the local log's chunk id sequence jumps, so
// the core refuses the chunk at its drain position while the drain has read past it. The
// core repositions the drain once, then stalls with the reason in status and retries on a
// growing delay: the drain wakes a bounded number of times, not in a loop. Once the log
// reads right again, the next retry gets past and every offset is persisted.
func TestDrainRefusedChunkStallsWithoutSpinning(t *testing.T) {
	w := newWorld(t, worldOptions{})
	log, logs := testLogger(t)
	var on atomic.Bool
	var hits atomic.Int64
	on.Store(true)
	lg := openLog(t, segments.Options{MaxSegmentBytes: 256 << 10})
	writeLog(t, lg, 31, loadgen.Limit{Chunks: 40})
	at := nthChunk(t, lg, 25)
	n := startNode(w, Config{Logger: log, faults: &faultHooks{batch: jumpAt(at, &on, &hits)}, Stream: StreamOptions{
		FragmentTargetSize: 16 << 10, PersistThreshold: 2, PersistInterval: 50 * time.Millisecond,
		UploadRetryDelay: 200 * time.Millisecond, UploadRetryMaxDelay: time.Second,
	}})
	if err := n.AddStream(StreamSpec{ID: "jump", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	stuckAt(t, n, "jump", at)
	m := n.Metrics()
	w0 := m.DrainWakeups.Load()
	time.Sleep(3 * time.Second) // a window of time: what is measured is how little happens in it
	woke := m.DrainWakeups.Load() - w0
	st, err := n.Status(context.Background(), "jump")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("over 3 s stuck at %d: %d drain wake-ups, %d batches altered, core errors %d; %s", at, woke, hits.Load(), m.CoreErrors.Load(), st.Core)
	// 200 ms doubling to 1 s: at most about 5 retries in 3 s, two reads each.
	if woke > 20 {
		t.Fatalf("the drain woke %d times in 3 s stuck at one chunk: it spins", woke)
	}
	if !st.Core.DrainStalled || st.Core.DrainStalledOffset != at || !strings.Contains(st.Core.DrainStallReason, fmt.Sprintf("chunk %d", at)) {
		t.Fatalf("status does not show the drain stalled at %d with a reason: %s", at, st.Core)
	}
	if k := st.Core.Counters; k.DrainRepositions < 1 || k.DrainStalls < 2 {
		t.Fatalf("repositions %d, stalls %d: want a reposition, then stalls retried", k.DrainRepositions, k.DrainStalls)
	}
	if logs.Count("drain stalled") == 0 {
		t.Fatal("the stall was not logged")
	}
	on.Store(false)
	persisted(t, n, "jump", lg.NextOffset(), 30*time.Second)
	st, _ = n.Status(context.Background(), "jump")
	if st.Core.DrainStalled {
		t.Fatalf("still stalled after the log reads right: %s", st.Core)
	}
	if logs.Count("drain unstalled") == 0 {
		t.Fatal("the end of the stall was not logged")
	}
}

// TestDrainRepositionedOnce: a single batch in which the log's ids seem to jump (a drain
// out of step with the core, once). The core repositions the drain at its own position,
// the re-read chunk is accepted, and the stream tiers on without a stall.
func TestDrainRepositionedOnce(t *testing.T) {
	w := newWorld(t, worldOptions{})
	log, logs := testLogger(t)
	var on atomic.Bool
	var hits atomic.Int64
	on.Store(true)
	lg := openLog(t, segments.Options{MaxSegmentBytes: 256 << 10})
	writeLog(t, lg, 32, loadgen.Limit{Chunks: 40})
	hook := jumpAt(nthChunk(t, lg, 12), &on, &hits)
	n := startNode(w, Config{Logger: log, faults: &faultHooks{batch: func(b *chunksDrained) {
		hook(b)
		if hits.Load() > 0 {
			on.Store(false)
		}
	}}, Stream: StreamOptions{FragmentTargetSize: 16 << 10, PersistThreshold: 2, PersistInterval: 50 * time.Millisecond}})
	if err := n.AddStream(StreamSpec{ID: "once", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, "once", lg.NextOffset(), 30*time.Second)
	st, err := n.Status(context.Background(), "once")
	if err != nil {
		t.Fatal(err)
	}
	if k := st.Core.Counters; hits.Load() != 1 || k.DrainRepositions != 1 || k.DrainStalls != 0 {
		t.Fatalf("%d batches altered, %d repositions, %d stalls: want one reposition and no stall", hits.Load(), k.DrainRepositions, k.DrainStalls)
	}
	if logs.Count("drain repositioned") != 1 {
		t.Fatalf("%d reposition log lines, want 1", logs.Count("drain repositioned"))
	}
}

// nthChunk is the id of the k-th chunk (from 0) of lg.
func nthChunk(t *testing.T, lg *segments.Log, k int) uint64 {
	t.Helper()
	rd, err := lg.NewReader(lg.FirstOffset())
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	for i := 0; ; i++ {
		h, _, err := rd.Next()
		if err != nil {
			t.Fatalf("chunk %d of the log: %v", k, err)
		}
		if i == k {
			return h.ChunkID
		}
	}
}
