package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
	"github.com/streamtier/streamtier/tests/chaos/check"
)

// TestLiveWriterUnderFollowerAndRetention runs a live writer while a follower (the node's
// view: a read-only Log refreshed in a loop) reads the directory and deletes the segments
// it has seen whole, as the node's local retention does. The writer must keep appending
// through the deletions, write its whole budget (the part added late too), and leave
// exactly the load's chunks, byte for byte, which the follower sees to the end.
func TestLiveWriterUnderFollowerAndRetention(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dir := filepath.Join(t.TempDir(), "s0")
	lin, err := check.NewLineage(loadgen.Config{Seed: 11, MinDataBytes: 300, MaxDataBytes: 6000, MinEntries: 1, MaxEntries: 8,
		SubBatchPercent: 20, TrackingEvery: 53, StartTimestamp: 1_700_000_000_000, BytesPerSecond: 150_000})
	if err != nil {
		t.Fatal(err)
	}
	sl := &streamLog{id: "s0", dir: dir, segBytes: 32 << 10, lin: lin}
	var up atomic.Bool
	up.Store(true)
	lw, err := openWriter(sl, 300<<10, 400*time.Millisecond, &up)
	if err != nil {
		t.Fatal(err)
	}
	follower, err := segments.Open(dir, segments.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer follower.Close()
	lw.start()
	lw.addBudget(100<<10, 200*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	met := make(chan error, 1)
	go func() { met <- lw.wait(ctx) }()
	deleted := 0
	follow := func() {
		t.Helper()
		if _, err := follower.Refresh(); err != nil {
			t.Fatalf("refresh: %v", err)
		}
		// Retention: every segment but the last two the follower sees.
		segs := follower.Segments()
		for _, s := range segs[:max(0, len(segs)-2)] {
			for _, name := range []string{s.Name, segments.IndexName(s.FirstOffset)} {
				if err := os.Remove(filepath.Join(dir, name)); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
			}
			deleted++
		}
		if len(segs) > 2 {
			if _, err := follower.Refresh(); err != nil { // the deleted segments leave the view
				t.Fatalf("refresh after retention: %v", err)
			}
		}
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case err := <-met:
			if err != nil {
				t.Fatalf("the writer did not write its budget: %v", err)
			}
			break wait
		case <-tick.C:
			follow()
		}
	}
	st, next, err := lw.close()
	if err != nil {
		t.Fatal(err)
	}
	follow()
	if got := follower.NextOffset(); got != next {
		t.Fatalf("the follower sees up to %d, the writer wrote up to %d", got, next)
	}
	if st.LiveBytes < 400<<10 || st.DownChunks != 0 || st.LiveChunks == 0 {
		t.Fatalf("stats %+v: want at least %d bytes, all while the node was up", st, 400<<10)
	}
	if deleted < 3 {
		t.Fatalf("only %d segments deleted under the writer: the test proved little", deleted)
	}
	first, end, segs, err := sl.bounds()
	if err != nil {
		t.Fatal(err)
	}
	if end != next || first == 0 {
		t.Fatalf("reopened log [%d,%d), want its end at %d and its head trimmed", first, end, next)
	}
	ref := lin.Latest()
	compared := 0
	for _, seg := range segs {
		b, err := os.ReadFile(filepath.Join(dir, seg.Name))
		if err != nil {
			t.Fatal(err)
		}
		recs, err := chunkStarts(dir, seg)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			i, ok := ref.Index(r.ChunkID)
			if !ok {
				t.Fatalf("chunk %d of %s is not a chunk of the load", r.ChunkID, seg.Name)
			}
			err := ref.Walk(i, 1, func(c check.RefChunk, want []byte) error {
				if end := int(r.Position) + len(want); end > len(b) || !bytes.Equal(b[r.Position:end], want) {
					return fmt.Errorf("chunk %d of %s differs from the load's", r.ChunkID, seg.Name)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			compared++
		}
	}
	if compared == 0 {
		t.Fatal("no chunk compared")
	}
}
