package tests

import (
	"context"
	"testing"
	"time"

	"streamtier/actors"
	"streamtier/actors/readercore"
	"streamtier/segments"
	"streamtier/segments/loadgen"
)

// TestTierGeneratedStream tiers a generated stream with small fragments and checks that
// every committed offset ends up in S3 exactly once, byte for byte, and that local retention
// deleted exactly the segments wholly below the persisted next offset.
func TestTierGeneratedStream(t *testing.T) {
	e := newEnv(t, envOptions{node: actors.Config{Stream: readercore.Config{
		FragmentTargetSize: 256 << 10, PersistThreshold: 3, PersistInterval: 200 * time.Millisecond, RebalanceThreshold: 8,
	}}})
	gen := loadgen.Config{Seed: 7, MinDataBytes: 2000, MaxDataBytes: 30000, StartTimestamp: 1_700_000_000_000}
	limit := loadgen.Limit{Bytes: 24 << 20}
	opts := segments.Options{MaxSegmentBytes: 2 << 20}
	lg := genLog(t, t.TempDir(), gen, limit, opts)
	ref := genLog(t, t.TempDir(), gen, limit, opts)
	next := lg.NextOffset()

	if err := e.node.AddStream(actors.StreamSpec{ID: "orders", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	// The tail below the target size is cut by force once the rest is persisted.
	ctx := context.Background()
	waitFor(t, 60*time.Second, "full fragments persisted", func() bool {
		st, err := e.node.Status(ctx, "orders")
		return err == nil && st.Core.DrainNext == next && st.Core.InFlight == 0 && st.Core.Buffered == 0
	})
	if err := e.node.ForceCut("orders"); err != nil {
		t.Fatal(err)
	}
	e.await("orders", next-1, 60*time.Second)

	m, frags := e.verifyRemote("orders", ref)
	if m.FirstOffset != 0 || m.NextOffset != next {
		t.Fatalf("remote tier covers [%d,%d), want [0,%d)", m.FirstOffset, m.NextOffset, next)
	}
	if frags < 90 {
		t.Fatalf("only %d fragments for 24 MiB at 256 KiB: cutting is off", frags)
	}
	grouped := false
	for _, en := range m.Entries {
		grouped = grouped || en.Kind != 0
	}
	if !grouped {
		t.Fatalf("no group in the root after %d fragments with M=8: rebalancing did not run", frags)
	}
	// Local retention: every segment but the active one was durable and is gone.
	segs := lg.Segments()
	if len(segs) != 1 || !segs[0].Active {
		t.Fatalf("local log keeps %d segments after everything was persisted, want only the active one", len(segs))
	}
}

// waitFor polls cond (a status query, not a sleep standing in for an event) until it holds.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
