package tests

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/actors/governorcore"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// TestGovernorRate measures the upload rate over 10 s with a configured rate: it must be
// within 5% of the setting (after the first second, which the initial burst distorts).
func TestGovernorRate(t *testing.T) {
	if testing.Short() {
		t.Skip("measures a rate over 10 s")
	}
	const rate = 3 << 20
	e := newEnv(t, envOptions{node: actors.Config{
		Governor: governorcore.Config{RateBytesPerSec: rate},
		Stream:   actors.StreamOptions{FragmentTargetSize: 128 << 10, PersistThreshold: 4, PersistInterval: 200 * time.Millisecond},
	}})
	lg := genLog(t, t.TempDir(), loadgen.Config{Seed: 21, MinDataBytes: 4000, MaxDataBytes: 16000},
		loadgen.Limit{Bytes: 48 << 20}, segments.Options{MaxSegmentBytes: 4 << 20})
	if err := e.node.AddStream(actors.StreamSpec{ID: "paced", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	m := e.node.Metrics()
	waitFor(t, 10*time.Second, "uploads to start", func() bool { return m.BytesUploaded.Load() > 0 })
	time.Sleep(time.Second) // let the initial burst pass; the measurement below is what counts
	b0, t0 := m.BytesUploaded.Load(), time.Now()
	time.Sleep(10 * time.Second)
	b1, t1 := m.BytesUploaded.Load(), time.Now()
	got := float64(b1-b0) / t1.Sub(t0).Seconds()
	t.Logf("measured %.0f B/s against a setting of %d B/s (ratio %.3f)", got, rate, got/rate)
	if math.Abs(got-rate)/rate > 0.05 {
		t.Fatalf("upload rate %.0f B/s is not within 5%% of %d B/s", got, rate)
	}
}

// TestGovernorOversizedFragment admits fragments far larger than the bucket on credit.
func TestGovernorOversizedFragment(t *testing.T) {
	e := newEnv(t, envOptions{node: actors.Config{
		Governor: governorcore.Config{RateBytesPerSec: 4 << 20, BurstBytes: 32 << 10},
		Stream:   actors.StreamOptions{FragmentTargetSize: 1 << 20, PersistThreshold: 1},
	}})
	lg := genLog(t, t.TempDir(), loadgen.Config{Seed: 22, MinDataBytes: 8000, MaxDataBytes: 16000},
		loadgen.Limit{Bytes: 3 << 20}, segments.Options{})
	if err := e.node.AddStream(actors.StreamSpec{ID: "big", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	forceTail(t, e, "big", lg.NextOffset())
}

// TestGovernorManyStreams runs 100 streams through one paced bucket: every stream's data is
// persisted (FIFO admission starves none of them).
func TestGovernorManyStreams(t *testing.T) {
	e := newEnv(t, envOptions{node: actors.Config{
		Governor: governorcore.Config{RateBytesPerSec: 16 << 20},
		Stream:   actors.StreamOptions{FragmentTargetSize: 64 << 10, PersistThreshold: 1, PersistInterval: 100 * time.Millisecond},
	}})
	const streams = 100
	logs := make([]*segments.Log, streams)
	for i := range logs {
		logs[i] = genLog(t, t.TempDir(), loadgen.Config{Seed: uint64(100 + i), MinDataBytes: 4000, MaxDataBytes: 9000},
			loadgen.Limit{Bytes: 200 << 10}, segments.Options{})
		if err := e.node.AddStream(actors.StreamSpec{ID: fmt.Sprintf("s%03d", i), Log: logs[i], Epoch: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range logs {
		id := fmt.Sprintf("s%03d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		// Every stream has at least two full fragments; the first is persisted without a cut.
		err := e.node.AwaitOffset(ctx, id, 1)
		cancel()
		if err != nil {
			t.Fatalf("stream %s: %v", id, err)
		}
	}
	st, err := e.node.GovernorStatus(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("governor after 100 streams: %+v", st)
	if n := e.node.Metrics().CoreErrors.Load(); n != 0 {
		t.Fatalf("%d events refused by the core", n)
	}
}
