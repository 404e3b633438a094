package tests

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// persistAttempts counts every persist a node attempted, whatever its outcome.
func persistAttempts(n *actors.Node) int64 {
	m := n.Metrics()
	return m.Persists.Load() + m.PersistConflicts.Load() + m.PersistNotFound.Load() + m.PersistFailures.Load()
}

// persistTailOn cuts and persists everything below next on node n.
func persistTailOn(t *testing.T, n *actors.Node, stream string, next uint64) {
	t.Helper()
	waitFor(t, 60*time.Second, fmt.Sprintf("%s persisted up to %d", stream, next), func() bool {
		_ = n.ForceCut(stream)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		return n.AwaitOffset(ctx, stream, next-1) == nil
	})
}

// TestFencedWriterIsDeposed runs two writers of one stream on two nodes without the cluster
// layer, on the same etcd and S3: the writer at epoch 1 persists, the writer at epoch 2
// takes over and persists. The epoch-1 writer's next persist is fenced by the stored epoch:
// it is deposed and stops for good with "deposed by epoch 2" in its status, after exactly
// one refused attempt: no reinitialize, resolve, conflict loop. The epoch-2 writer goes on.
func TestFencedWriterIsDeposed(t *testing.T) {
	e := newEnv(t, envOptions{node: smallFragments})
	gen := loadgen.Config{Seed: 21, MinDataBytes: 3000, MaxDataBytes: 9000}
	opts := segments.Options{MaxSegmentBytes: 512 << 10}
	ctx := context.Background()

	// Writer 1 (this env's node, epoch 1) persists the first 200 chunks.
	lg1, err := segments.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer lg1.Close()
	g1, _ := loadgen.New(gen)
	if _, err := loadgen.Write(ctx, lg1, g1, loadgen.Limit{Chunks: 200}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.node.AddStream(actors.StreamSpec{ID: "contested", Log: lg1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persistTailOn(t, e.node, "contested", lg1.NextOffset())

	// Writer 2 (another node, epoch 2) holds the same chunks and more, and persists them.
	cfg2 := smallFragments
	cfg2.NodeID, cfg2.Logger = "n2", testLogger(t.Name()+"/n2")
	cfg2.LocalHotWindowBytes = 1 << 30 // keep its log whole: it is the reference at the end
	n2, err := actors.Start(ctx, cfg2, e.store, e.meta)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := n2.Stop(ctx); err != nil {
			t.Errorf("stop node 2: %v", err)
		}
	})
	lg2 := genLog(t, t.TempDir(), gen, loadgen.Limit{Chunks: 400}, opts)
	if err := n2.AddStream(actors.StreamSpec{ID: "contested", Log: lg2, Epoch: 2}); err != nil {
		t.Fatal(err)
	}
	persistTailOn(t, n2, "contested", lg2.NextOffset())
	if _, rec, _ := e.remote("contested"); rec.Epoch != 2 {
		t.Fatalf("record at epoch %d after writer 2 persisted, want 2", rec.Epoch)
	}

	// Writer 1 gets more data: its next persist is fenced by epoch 2.
	before := persistAttempts(e.node)
	if _, err := loadgen.Write(ctx, lg1, g1, loadgen.Limit{Chunks: 100}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	var st actors.StreamStatus
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_ = e.node.ForceCut("contested")
		if st, err = e.node.Status(ctx, "contested"); err == nil && st.Phase == "stopped" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writer 1 not deposed after 30s: %d persist attempts and %d reinitializations since writer 2 took over; status %+v %v",
				persistAttempts(e.node)-before, e.node.Metrics().Reinitializations.Load(), st, err)
		}
	}
	if !strings.Contains(st.StopReason, "deposed by epoch 2") {
		t.Fatalf("writer 1 stopped with %q, want it deposed by epoch 2", st.StopReason)
	}
	if got := persistAttempts(e.node) - before; got != 1 {
		t.Fatalf("writer 1 attempted %d persists after writer 2 took over, want exactly the one fenced", got)
	}
	if r := e.node.Metrics().Reinitializations.Load(); r != 0 {
		t.Fatalf("writer 1 reinitialized %d times: a fence is not a conflict", r)
	}
	if err := e.node.AwaitOffset(ctx, "contested", 0); !errors.Is(err, actors.ErrStreamStopped) || !strings.Contains(err.Error(), "deposed by epoch 2") {
		t.Fatalf("await on the deposed writer: %v, want ErrStreamStopped saying deposed", err)
	}

	// It stays stopped while writer 2 goes on: more data on both, writer 2 persists it (the
	// time that takes is the window in which a looping writer 1 would have tried again).
	attempts := persistAttempts(e.node)
	if _, err := loadgen.Write(ctx, lg1, g1, loadgen.Limit{Chunks: 100}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	g2, _ := loadgen.New(loadgen.Config{Seed: 22, MinDataBytes: 3000, MaxDataBytes: 9000})
	if _, err := loadgen.Write(ctx, lg2, g2, loadgen.Limit{Chunks: 100}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	persistTailOn(t, n2, "contested", lg2.NextOffset())
	if got := persistAttempts(e.node); got != attempts {
		t.Fatalf("the deposed writer attempted %d more persists", got-attempts)
	}
	if st, err := e.node.Status(ctx, "contested"); err != nil || st.Phase != "stopped" {
		t.Fatalf("deposed writer's status: %+v %v", st, err)
	}
	m, rec, _ := e.remote("contested")
	if rec.Epoch != 2 || m.NextOffset != lg2.NextOffset() {
		t.Fatalf("stored record epoch %d next %d, want writer 2's (epoch 2, next %d)", rec.Epoch, m.NextOffset, lg2.NextOffset())
	}
	e.verifyRemote("contested", lg2)
}
