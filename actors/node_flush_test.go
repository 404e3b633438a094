package actors

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// flushConfig is a node that, left alone, persists nothing for an hour: fragments far
// larger than what is written, an idle cut, a persist threshold and interval of an hour. A
// Flush that returns proves the flush, not a timer, moved the data.
func flushConfig(t *testing.T) Config {
	log, _ := testLogger(t)
	return Config{Logger: log, Stream: StreamOptions{FragmentTargetSize: 64 << 20, FragmentMaxAge: time.Hour,
		PersistThreshold: 1000, PersistInterval: time.Hour}}
}

// TestFlushQuietTail: Flush of a quiet stream's last offset returns once it is persisted,
// without the idle cut (an hour here); an AwaitOffset of the same offset would wait for it.
func TestFlushQuietTail(t *testing.T) {
	w := newWorld(t, worldOptions{})
	n := startNode(w, flushConfig(t))
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 3, loadgen.Limit{Bytes: 40 << 10})
	if err := n.AddStream(StreamSpec{ID: "quiet", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	last := lg.NextOffset() - 1
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	if err := n.AwaitOffset(ctx, "quiet", last); err == nil {
		t.Fatal("an await of the quiet tail returned before any cut: the test proves nothing")
	}
	cancel()
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	started := time.Now()
	if err := n.Flush(ctx, "quiet", last); err != nil {
		t.Fatal(err)
	}
	t.Logf("flush of a quiet tail: %v (the idle cut it replaces: %v by default)", time.Since(started), readercore.DefaultFragmentMaxAge)
	if p, ok := n.Cached("quiet"); !ok || p.Manifest.NextOffset <= last {
		t.Fatalf("flushed through %d, the cache holds %+v", last, p.Manifest)
	}
	if err := n.AwaitOffset(ctx, "quiet", last); err != nil {
		t.Fatalf("await after the flush: %v", err)
	}
}

// TestFlushUnderSteadyWrite: a broker appends without pause while it flushes offset after
// offset; every Flush returns, although the assembly is never empty and neither the
// threshold nor the interval (an hour) is reached.
func TestFlushUnderSteadyWrite(t *testing.T) {
	w := newWorld(t, worldOptions{})
	n := startNode(w, flushConfig(t))
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 5, loadgen.Limit{Bytes: 8 << 10})
	if err := n.AddStream(StreamSpec{ID: "busy", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the broker: owned by the test, stopped by stop, joined by wg
		defer wg.Done()
		g, err := loadgen.New(loadgen.Config{Seed: 9, MinDataBytes: 500, MaxDataBytes: 2000})
		if err != nil {
			t.Error(err)
			return
		}
		for wctx.Err() == nil {
			if _, err := loadgen.Write(wctx, lg, g, loadgen.Limit{Chunks: 1}, loadgen.WriteOptions{Commit: true}); err != nil && wctx.Err() == nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { stop(); wg.Wait() }()
	for i := 0; i < 5; i++ {
		target := lg.CommittedNext() - 1
		if err := n.Flush(ctx, "busy", target); err != nil {
			t.Fatalf("flush %d of offset %d: %v", i, target, err)
		}
	}
}
