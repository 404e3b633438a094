package tests

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// TestAwaitInGapSealedInGroupAfterRestart declares a gap (local retention outran the upload
// while S3 was down), tiers on until rebalancing seals the gap into a group object, and
// restarts the node: the new reader resolved a root that shows no gap, yet await_offset for
// an offset inside the gap must say it was lost (before, it answered "persisted": the core
// reads no group object), while an offset held by a fragment inside a group is persisted.
func TestAwaitInGapSealedInGroupAfterRestart(t *testing.T) {
	cfg := smallFragments
	cfg.Stream.RebalanceThreshold = 4
	e := newEnv(t, envOptions{faults: true, node: cfg})
	gen := loadgen.Config{Seed: 24, MinDataBytes: 2000, MaxDataBytes: 8000}
	opts := segments.Options{MaxSegmentBytes: 256 << 10}
	lg := genLog(t, t.TempDir(), gen, loadgen.Limit{Bytes: 1 << 20}, opts)
	g, err := loadgen.New(gen)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadgen.Write(context.Background(), genSink(t, opts), g, loadgen.Limit{Bytes: 1 << 20}, loadgen.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.node.AddStream(actors.StreamSpec{ID: "sealed", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	forceTail(t, e, "sealed", lg.NextOffset())
	_, _, m1 := e.durableChunks("sealed")

	lost := goLocalAhead(t, e, lg, g, 1<<20, 2<<20, m1.NextOffset)
	forceTail(t, e, "sealed", lg.NextOffset())
	_, gaps, m2 := e.durableChunks("sealed")
	if len(gaps) != 1 || gaps[0][0] != m1.NextOffset || gaps[0][1] != lost {
		t.Fatalf("gaps %v, want one [%d,%d)", gaps, m1.NextOffset, lost)
	}
	for _, en := range m2.Entries {
		if en.IsGap() {
			t.Fatalf("the gap is still a root entry (root %d entries): the test proves nothing", len(m2.Entries))
		}
	}
	if m2.Entries[0].IsLeaf() {
		t.Fatalf("the root's head is not a group: the test proves nothing")
	}

	e.stopNode()
	e.startNode()
	if err := e.node.AddStream(actors.StreamSpec{ID: "sealed", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, o := range []uint64{m1.NextOffset, (m1.NextOffset + lost) / 2, lost - 1} {
		err := e.node.AwaitOffset(ctx, "sealed", o)
		if !errors.Is(err, actors.ErrOffsetInGap) || errors.Is(err, actors.ErrStreamStopped) || !strings.Contains(err.Error(), "declared gap") {
			t.Fatalf("await offset %d inside the sealed gap [%d,%d): %v, want ErrOffsetInGap (the stream goes on)", o, m1.NextOffset, lost, err)
		}
	}
	for _, o := range []uint64{0, m1.NextOffset - 1, lost} {
		if err := e.node.AwaitOffset(ctx, "sealed", o); err != nil {
			t.Fatalf("await offset %d, held by a fragment: %v", o, err)
		}
	}
}
