package tests

import (
	"context"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/gc"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// TestGCDuringStallKeepsPending stalls a stream behind a 403 on one fragment while the ones
// cut after it upload, runs `node gc --delete` (grace 0) during the stall, then lifts the
// 403: nothing the writer later persists was collected, the persisted manifest references
// only objects that exist, and verify passes. Before the epoch rule gc deleted the uploaded,
// not yet persisted fragments above next offset, and the manifest then named them.
func TestGCDuringStallKeepsPending(t *testing.T) {
	cfg := smallFragments
	e := newEnv(t, envOptions{faults: true, node: cfg})
	gen := loadgen.Config{Seed: 31, MinDataBytes: 2000, MaxDataBytes: 8000}
	opts := segments.Options{MaxSegmentBytes: 1 << 20}
	lg := genLog(t, t.TempDir(), gen, loadgen.Limit{Bytes: 1 << 20}, opts)
	ref := genLog(t, t.TempDir(), gen, loadgen.Limit{Bytes: 3 << 20}, opts)
	g, _ := loadgen.New(gen)
	if _, err := loadgen.Write(context.Background(), genSink(t, opts), g, loadgen.Limit{Bytes: 1 << 20}, loadgen.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.node.AddStream(actors.StreamSpec{ID: "stall", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	forceTail(t, e, "stall", lg.NextOffset())
	stalledAt := lg.NextOffset()

	// The next fragment (it starts at stalledAt) is refused; the ones after it go through.
	e.inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: `/data/` + pad20(stalledAt) + `-.*\.fragment$`, Fault: s3test.FaultForbidden})
	if _, err := loadgen.Write(context.Background(), lg, g, loadgen.Limit{Bytes: 2 << 20}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the stall and later fragments uploaded", func() bool {
		st, err := e.node.Status(context.Background(), "stall")
		return err == nil && st.Core.Stalled && st.Core.StalledOffset == stalledAt && st.Core.Buffered >= 2
	})
	// Every object aged past the shortest grace delete mode accepts (the store's clock an
	// hour ahead), so that gc collects all it ever would.
	gcOpts := gc.Options{Store: e.store, Meta: e.meta, KeyPrefix: prefix(e.cfg), Stream: "stall", Grace: gc.MinDeleteGrace,
		Now: func() time.Time { return time.Now().Add(time.Hour) }}
	plan, err := gc.Scan(context.Background(), gcOpts)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Pending) < 2 {
		t.Fatalf("gc lists %d pending objects during the stall, want the buffered fragments (orphans %v)", len(plan.Pending), plan.Orphans)
	}
	for _, o := range plan.Orphans {
		t.Logf("collected during the stall: %s (%s)", o.Key, o.Reason)
	}
	if _, err := gc.Delete(context.Background(), gcOpts, plan); err != nil {
		t.Fatal(err)
	}

	e.inj.Clear()
	forceTail(t, e, "stall", lg.NextOffset())
	got, gaps, m := e.durableChunks("stall") // fails on any referenced object that is missing
	if len(gaps) != 0 || m.NextOffset != lg.NextOffset() {
		t.Fatalf("remote ends at %d with gaps %v, want %d and none", m.NextOffset, gaps, lg.NextOffset())
	}
	sameAsLog(t, got, ref, "remote tier after the stall")
	if rep := e.verify("stall"); len(rep.Findings) != 0 {
		t.Fatalf("verify after the stall: %v", rep.Findings)
	}
}

func pad20(v uint64) string {
	s := []byte("00000000000000000000")
	for i := len(s) - 1; v > 0; i-- {
		s[i] = byte('0' + v%10)
		v /= 10
	}
	return string(s)
}
