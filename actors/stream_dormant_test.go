package actors

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// dormantConfig is a node whose idle streams go dormant within tens of milliseconds.
func dormantConfig(t *testing.T) Config {
	cfg := v3Config(t)
	cfg.DrainIdleClose = 20 * time.Millisecond
	cfg.DormantAfter = 30 * time.Millisecond
	return cfg
}

// awaitDormant waits until stream is dormant for the count-th time.
func awaitDormant(t *testing.T, n *Node, stream string, count int64) StreamStatus {
	t.Helper()
	var st StreamStatus
	until(t, 20*time.Second, fmt.Sprintf("%s dormant (%d)", stream, count), func() (bool, string) {
		var err error
		st, err = n.Status(t.Context(), stream)
		return err == nil && st.Dormant && n.Metrics().Dormancies.Load() >= count,
			fmt.Sprintf("dormant %t, %d dormancies, phase %s, waiting %q, %v", st.Dormant, n.Metrics().Dormancies.Load(), st.Phase, st.Waiting, err)
	})
	return st
}

// A stream whose everything is persisted goes dormant (no actor left), answers status from
// its snapshot without waking, and wakes for data committed later: every offset is
// persisted, its counts go on from where they were, and it goes dormant again.
func TestDormantStreamWakesOnDataAndLosesNothing(t *testing.T) {
	w := newWorld(t, worldOptions{})
	n := startNode(w, dormantConfig(t))
	base := localActors(n)
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 1, loadgen.Limit{Bytes: 40 << 10})
	if err := n.AddStream(StreamSpec{ID: "s", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	m := n.Metrics()
	persisted(t, n, "s", lg.NextOffset(), 30*time.Second)
	var persists uint64
	for cycle := int64(1); cycle <= 4; cycle++ {
		st := awaitDormant(t, n, "s", cycle)
		if st.Phase != "running" || st.Core.PersistedNext != lg.NextOffset() || st.LagBytes != 0 {
			t.Fatalf("cycle %d: dormant status %+v, want running with everything persisted", cycle, st)
		}
		if st.Core.Counters.Persists < persists || st.Core.Counters.Persists == 0 {
			t.Fatalf("cycle %d: %d persists counted, %d before: the counts restarted", cycle, st.Core.Counters.Persists, persists)
		}
		persists = st.Core.Counters.Persists
		until(t, 10*time.Second, fmt.Sprintf("cycle %d: no actor of the stream left", cycle), func() (bool, string) {
			return localActors(n) == base, fmt.Sprintf("%d actors, the node's own %d", localActors(n), base)
		})
		if got := m.StreamsDormant.Load(); got != 1 {
			t.Fatalf("cycle %d: %d streams dormant, want 1", cycle, got)
		}
		if got := m.StreamsRunning.Load(); got != 1 {
			t.Fatalf("cycle %d: %d streams running, want 1 (a dormant stream runs)", cycle, got)
		}
		wakes := m.Wakes.Load()
		if _, err := n.Status(t.Context(), "s"); err != nil || m.Wakes.Load() != wakes {
			t.Fatalf("cycle %d: a status woke the stream (%d wakes, %d before) or failed: %v", cycle, m.Wakes.Load(), wakes, err)
		}
		// Data alone wakes it: nothing but the commit asks.
		writeLog(t, lg, 10+uint64(cycle), loadgen.Limit{Bytes: 20 << 10})
		until(t, 10*time.Second, fmt.Sprintf("cycle %d: the commit woke the stream", cycle), func() (bool, string) {
			return m.Wakes.Load() > wakes, fmt.Sprintf("%d wakes", m.Wakes.Load())
		})
		persisted(t, n, "s", lg.NextOffset(), 30*time.Second)
	}
	// Bursts one after the other, each as soon as the last is persisted: some are committed
	// while the stream goes dormant, some once it is.
	for i := range 20 {
		before := m.Dormancies.Load() // it goes dormant after this write at least once more
		writeLog(t, lg, 100+uint64(i), loadgen.Limit{Chunks: 1})
		persisted(t, n, "s", lg.NextOffset(), 30*time.Second)
		if i%5 == 4 {
			awaitDormant(t, n, "s", before+1)
		}
	}
	checkNothingLost(t, n, "s", lg)
}

// checkNothingLost checks that the stream's persisted manifest covers [0, next) with no gap
// declared, and that a reader opened on the (dormant) stream reads every chunk in order.
func checkNothingLost(t *testing.T, n *Node, stream string, lg *segments.Log) {
	t.Helper()
	next := lg.NextOffset()
	p, ok := n.Cached(stream)
	if !ok || p.Manifest.FirstOffset != 0 || p.Manifest.NextOffset != next || n.Metrics().Gaps.Load() != 0 {
		t.Fatalf("persisted manifest of %s: [%d, %d) (found %t, %d gaps), want [0, %d)",
			stream, p.Manifest.FirstOffset, p.Manifest.NextOffset, ok, n.Metrics().Gaps.Load(), next)
	}
	r, err := n.OpenReader(t.Context(), stream, read.FromFirst())
	if err != nil {
		t.Fatalf("open a reader on %s: %v", stream, err)
	}
	defer r.Close()
	readAll(t, r, lg, next)
}

// Awaits, commands and a runtime retention policy reach a dormant stream: each wakes it,
// the policy outlives the wake, and removing a dormant stream or stopping the node ends it
// at once.
func TestDormantStreamAnswersAwaitsAndCommands(t *testing.T) {
	w := newWorld(t, worldOptions{})
	cfg := dormantConfig(t)
	cfg.Stream.FragmentTargetSize = 8 << 10
	n := startNode(w, cfg)
	m := n.Metrics()
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 1, loadgen.Limit{Bytes: 64 << 10})
	if err := n.AddStream(StreamSpec{ID: "s", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, "s", lg.NextOffset(), 30*time.Second)
	awaitDormant(t, n, "s", 1)

	// An await of a persisted offset wakes it and is answered.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := n.AwaitOffset(ctx, "s", lg.NextOffset()-1); err != nil {
		t.Fatalf("await on a dormant stream: %v", err)
	}
	awaitDormant(t, n, "s", 2)

	// A command wakes it and reaches its new reader; the policy stays for later ones.
	if err := n.SetRetention("s", manifest.Policy{MaxBytes: 24 << 10}); err != nil {
		t.Fatalf("set retention on a dormant stream: %v", err)
	}
	awaitDormant(t, n, "s", 3)
	before := m.Dormancies.Load()
	writeLog(t, lg, 2, loadgen.Limit{Bytes: 64 << 10})
	persisted(t, n, "s", lg.NextOffset(), 30*time.Second)
	until(t, 20*time.Second, "retention by the runtime policy after wakes", func() (bool, string) {
		_ = n.EvaluateRetention("s")
		p, _ := n.Cached("s")
		return p.Manifest.FirstOffset > 0 && p.Manifest.TotalSize <= 24<<10+cfg.Stream.FragmentTargetSize*2,
			fmt.Sprintf("remote [%d, %d), %d bytes", p.Manifest.FirstOffset, p.Manifest.NextOffset, p.Manifest.TotalSize)
	})
	awaitDormant(t, n, "s", before+1)

	// Removing a dormant stream ends it at once, its waiters answered.
	ctx2, cancel2 := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel2()
	if err := n.RemoveStream(ctx2, "s"); err != nil {
		t.Fatalf("remove a dormant stream: %v", err)
	}
	if got := m.StreamsDormant.Load(); got != 0 {
		t.Fatalf("%d streams dormant after the removal", got)
	}
	if got := m.StreamsRunning.Load(); got != 0 {
		t.Fatalf("%d streams running after the removal", got)
	}
	if err := n.ForceCut("s"); !errors.Is(err, ErrUnknownStream) {
		t.Fatalf("cut of a removed stream: %v", err)
	}

	// The node stops at once with dormant streams.
	before = m.Dormancies.Load()
	lg2 := openLog(t, segments.Options{})
	writeLog(t, lg2, 3, loadgen.Limit{Bytes: 16 << 10})
	if err := n.AddStream(StreamSpec{ID: "t", Log: lg2, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, "t", lg2.NextOffset(), 30*time.Second)
	awaitDormant(t, n, "t", before+1)
	ctx3, cancel3 := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel3()
	if err := n.Stop(ctx3); err != nil {
		t.Fatalf("stop with a dormant stream: %v", err)
	}
}

// A dormant stream whose remote retention has an age limit is woken when its oldest
// fragment comes due, with no data and no request: retention removes what expired and the
// stream goes dormant again.
func TestDormantStreamWakesForRetentionByAge(t *testing.T) {
	w := newWorld(t, worldOptions{})
	cfg := dormantConfig(t)
	cfg.RetentionInterval = 50 * time.Millisecond
	n := startNode(w, cfg)
	m := n.Metrics()
	lg := openLog(t, segments.Options{})
	g, err := loadgen.New(loadgen.Config{Seed: 1, MinDataBytes: 2000, MaxDataBytes: 6000, StartTimestamp: time.Now().UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadgen.Write(t.Context(), lg, g, loadgen.Limit{Bytes: 32 << 10}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	const maxAge = 3 * time.Second
	if err := n.AddStream(StreamSpec{ID: "s", Log: lg, Epoch: 1, Retention: manifest.Policy{MaxAgeMillis: maxAge.Milliseconds()}}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, "s", lg.NextOffset(), 30*time.Second)
	st := awaitDormant(t, n, "s", 1)
	if st.Core.PersistedFirst == st.Core.PersistedNext {
		t.Fatalf("the data expired before the stream went dormant (persisted [%d, %d)): a slower machine than the test expects", st.Core.PersistedFirst, st.Core.PersistedNext)
	}
	wakes := m.Wakes.Load()
	until(t, maxAge+20*time.Second, "retention by age ran on the dormant stream", func() (bool, string) {
		p, _ := n.Cached("s")
		return p.Manifest.FirstOffset == lg.NextOffset(), fmt.Sprintf("remote [%d, %d)", p.Manifest.FirstOffset, p.Manifest.NextOffset)
	})
	if m.Wakes.Load() == wakes {
		t.Fatalf("retention ran without a wake")
	}
	st = awaitDormant(t, n, "s", 2)
	if st.Core.PersistedFirst != lg.NextOffset() || st.Core.PersistedNext != lg.NextOffset() {
		t.Fatalf("dormant again with remote [%d, %d), want everything expired", st.Core.PersistedFirst, st.Core.PersistedNext)
	}
}

// TestDormantWakesLeaveNoListenerBehind: a dormant stream woken again and again by requests
// while nothing is written (consumers awaiting an idle stream) keeps one commit listener
// in its log, its dormancy's: each incarnation's drain and reader forget theirs when they
// stop, and a dormancy woken otherwise than by a commit forgets its own. Before, each wake
// left two or three in the log until its next commit.
func TestDormantWakesLeaveNoListenerBehind(t *testing.T) {
	w := newWorld(t, worldOptions{})
	n := startNode(w, dormantConfig(t))
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 1, loadgen.Limit{Bytes: 32 << 10})
	if err := n.AddStream(StreamSpec{ID: "s", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, "s", lg.NextOffset(), 30*time.Second)
	awaitDormant(t, n, "s", 1)
	if got := lg.Listeners(); got != 1 {
		t.Fatalf("dormant: %d commit listeners in the log, want 1", got)
	}
	for cycle := int64(2); cycle <= 6; cycle++ {
		if cycle%2 == 0 {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			err := n.AwaitOffset(ctx, "s", lg.NextOffset()-1)
			cancel()
			if err != nil {
				t.Fatalf("await: %v", err)
			}
		} else if err := n.ForceCut("s"); err != nil {
			t.Fatalf("cut: %v", err)
		}
		awaitDormant(t, n, "s", cycle)
		if got := lg.Listeners(); got != 1 {
			t.Fatalf("dormant again (%d): %d commit listeners in the log, want 1", cycle, got)
		}
	}
	// The one left still wakes it.
	before := n.Metrics().Wakes.Load()
	writeLog(t, lg, 2, loadgen.Limit{Bytes: 8 << 10})
	persisted(t, n, "s", lg.NextOffset(), 30*time.Second)
	if n.Metrics().Wakes.Load() <= before {
		t.Fatal("a commit did not wake the dormant stream")
	}
}
