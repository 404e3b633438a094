package actors

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// TestLagSecondsAcrossAnOutage (issue 22 item 8): one segment spans a broker outage: its
// first chunks were written 30 s ago and persisted, the next ones now, and those are held
// back from S3. The lag in seconds is the age of the oldest committed chunk not persisted
// (about 0 s here), not a timestamp interpolated inside the segment (about 15 s: the outage).
func TestLagSecondsAcrossAnOutage(t *testing.T) {
	w := newWorld(t, worldOptions{})
	cfg := Config{LocalHotWindowBytes: 1 << 30}
	cfg.Logger, _ = testLogger(t)
	cfg.Stream.FragmentTargetSize, cfg.Stream.PersistThreshold, cfg.Stream.PersistInterval = 16<<10, 1, 50*time.Millisecond
	n := startNode(w, cfg)
	lg := openLog(t, segments.Options{MaxSegmentBytes: 1 << 20})
	g, err := loadgen.New(loadgen.Config{Seed: 71, MinDataBytes: 2000, MaxDataBytes: 6000})
	if err != nil {
		t.Fatal(err)
	}
	write := func(chunks int, ts int64) {
		t.Helper()
		for range chunks {
			spec := g.Next()
			spec.Timestamp = ts
			h, _, err := lg.Append(spec)
			if err != nil {
				t.Fatal(err)
			}
			if err := lg.SetCommitted(h.ChunkID); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(40, time.Now().Add(-30*time.Second).UnixMilli()) // before the outage
	if err := n.AddStream(StreamSpec{ID: "lag", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, "lag", lg.NextOffset(), 30*time.Second)
	w.Inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: `/data/`, Fault: s3test.FaultForbidden})
	write(40, time.Now().UnixMilli()) // after it, in the same segment
	if segs := lg.Segments(); len(segs) != 1 {
		t.Fatalf("%d segments: want the outage inside one", len(segs))
	}
	committed := lg.CommittedNext()
	until(t, 10*time.Second, "status sees the new chunks", func() (bool, string) {
		st, err := n.Status(context.Background(), "lag")
		return err == nil && st.LocalCommitted == committed && st.Core.PersistedNext < committed, fmt.Sprintf("%+v %v", st, err)
	})
	st, err := n.Status(context.Background(), "lag")
	if err != nil {
		t.Fatal(err)
	}
	if st.LagBytes <= 0 || st.LagSeconds > 5 {
		t.Fatalf("lag %d bytes, %.1f s; want bytes and under 5 s (the chunks waiting were written just now)", st.LagBytes, st.LagSeconds)
	}
}

// TestOldestUnpersistedCached: the timestamp of the oldest unpersisted chunk is read from
// the log once per offset (a closed log still answers from the cache), and again when the
// offset moves.
func TestOldestUnpersistedCached(t *testing.T) {
	lg := openLog(t, segments.Options{MaxSegmentBytes: 1 << 20})
	g, err := loadgen.New(loadgen.Config{Seed: 73, MinDataBytes: 200, MaxDataBytes: 600})
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for i := range 3 {
		spec := g.Next()
		spec.Timestamp = int64(1000 * (i + 1))
		h, _, err := lg.Append(spec)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, h.ChunkID)
	}
	var o oldestUnpersisted
	if ts, ok := o.at(lg, ids[1], lg.NextOffset()); !ok || ts != 2000 {
		t.Fatalf("chunk %d: %d %v; want 2000", ids[1], ts, ok)
	}
	if _, ok := o.at(lg, lg.NextOffset(), lg.NextOffset()); ok {
		t.Fatal("nothing waiting, yet a timestamp")
	}
	if ts, ok := o.at(lg, ids[2], lg.NextOffset()); !ok || ts != 3000 {
		t.Fatalf("chunk %d: %d %v; want 3000", ids[2], ts, ok)
	}
	next := lg.NextOffset()
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	if ts, ok := o.at(lg, ids[2], next); !ok || ts != 3000 {
		t.Fatalf("cached chunk %d on a closed log: %d %v; want 3000 from the cache", ids[2], ts, ok)
	}
	if _, ok := o.at(lg, ids[1], next); ok {
		t.Fatal("a moved offset was answered without reading the (closed) log")
	}
}
