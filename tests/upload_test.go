package tests

import (
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// TestTierGeneratedStream tiers a generated stream of 1 GiB with small fragments (so many
// fragments, groups and kilo-groups) and a remote max-bytes policy, and checks: every
// committed offset above the remote first offset is in S3 exactly once, byte for byte; the
// bucket holds exactly the objects the persisted tree references (retention's and replaced
// roots' deletions done, nothing else); local retention deleted every segment but the active one.
func TestTierGeneratedStream(t *testing.T) {
	if testing.Short() {
		t.Skip("tiers 1 GiB; TestTierRabbitMQDirectory and the others cover the same path in short mode")
	}
	e := newEnv(t, envOptions{node: actors.Config{Stream: actors.StreamOptions{
		FragmentTargetSize: 1 << 20, PersistThreshold: 8, PersistInterval: 200 * time.Millisecond, RebalanceThreshold: 16,
	}}})
	gen := loadgen.Config{Seed: 7, MinDataBytes: 16 << 10, MaxDataBytes: 128 << 10, MinEntries: 1, MaxEntries: 8, StartTimestamp: 1_700_000_000_000}
	limit := loadgen.Limit{Bytes: 1 << 30}
	opts := segments.Options{MaxSegmentBytes: 32 << 20}
	lg := genLog(t, t.TempDir(), gen, limit, opts)
	next := lg.NextOffset()
	const keep = 768 << 20

	start := time.Now()
	if err := e.node.AddStream(actors.StreamSpec{ID: "orders", Log: lg, Epoch: 1, Retention: manifest.Policy{MaxBytes: keep}}); err != nil {
		t.Fatal(err)
	}
	forceTail(t, e, "orders", next)
	t.Logf("tiered 1 GiB (%d offsets) in %v", next, time.Since(start))
	if err := e.node.EvaluateRetention("orders"); err != nil {
		t.Fatal(err)
	}
	ref := genLog(t, t.TempDir(), gen, limit, opts)
	m, frags := e.verifyRemote("orders", ref)
	if m.NextOffset != next || m.FirstOffset == 0 || m.TotalSize > keep || m.TotalSize < keep-(2<<20) {
		t.Fatalf("remote tier [%d,%d) holding %d bytes; want next %d and retention down to about %d bytes", m.FirstOffset, m.NextOffset, m.TotalSize, next, keep)
	}
	kinds := map[manifest.Kind]int{}
	for _, en := range m.Entries {
		kinds[en.Kind]++
	}
	if kinds[manifest.KindKiloGroup] == 0 || kinds[manifest.KindGroup] == 0 {
		t.Fatalf("root holds %v after %d fragments with M=16: no kilo-group", kinds, frags)
	}
	// The bucket holds exactly what the persisted tree references.
	want := e.referencedKeys("orders")
	waitFor(t, 60*time.Second, "the reaper to delete what retention and persists dropped", func() bool {
		return sameKeys(e.objectKeys("orders"), want)
	})
	// Local retention: every segment but the active one was durable and is gone.
	segs := lg.Segments()
	if len(segs) != 1 || !segs[0].Active {
		t.Fatalf("local log keeps %d segments after everything was persisted, want only the active one", len(segs))
	}
	t.Logf("%d fragments, root %v, %d objects", frags, kinds, len(want))
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
