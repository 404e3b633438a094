package harness

import (
	"context"
	"testing"
	"time"
)

// TestLostTailInsideFragmentKeepsAcknowledgedData is the bug the soak found (docs/soak.md,
// "Bugs found"), now a regression test: a lost tail cuts the local log inside a fragment
// whose first chunk the log still holds, and the broker writes on. Before the fix the node
// persisted the remote tier cut back to that fragment's first offset, below the divergence
// point, and meant to drain the prefix again (acknowledged offsets in no persisted
// manifest; the broker's retention could then turn them into a gap). Now a log that merely
// ends waits behind, and a fork copies the prefix from the remote object before the
// truncation persists: the checker must find no violation at all.
func TestLostTailInsideFragmentKeepsAcknowledgedData(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := BuildNode(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := newWorld(Config{Seed: 7, Streams: 1, NodeBin: bin, Dir: t.TempDir(), Live: testWriter{t}})
	defer w.teardown()
	if err := w.setup(ctx); err != nil {
		t.Fatal(err)
	}
	id, lg := w.streams[0], w.logs[0]
	start := func() {
		t.Helper()
		if w.node, err = w.startNode(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	// Tier 100 KiB, then 3 MiB (fragments then start 100 KiB off the segment boundaries),
	// stopping cleanly each time: everything persisted, the last 1 MiB kept locally.
	var end uint64
	for _, n := range []int64{100 << 10, 3 << 20} {
		if err := w.appendLogs([]int64{n}); err != nil {
			t.Fatal(err)
		}
		_, end, _, _ = lg.bounds()
		start()
		if ok, last := w.awaitZeroLag(ctx, map[string]uint64{id: end}); !ok {
			t.Fatalf("no catch-up: %s", last)
		}
		w.node.term(time.Minute)
	}
	if err := w.chk.Check(ctx, false); err != nil {
		t.Fatal(err)
	}

	// Cut the log inside a fragment that starts in the local log and crosses a segment
	// boundary, above that boundary: the last such fragment (an unsynced tail is lost at
	// the end; the stream is followed, so the node's retention left the whole log).
	first, _, segs, err := lg.bounds()
	if err != nil {
		t.Fatal(err)
	}
	starts := append(w.chk.FragmentStarts(id), end)
	var f, cut uint64
	for i := len(starts) - 2; i >= 0 && cut == 0; i-- {
		if starts[i] < first {
			continue
		}
		for _, s := range segs {
			if s.FirstOffset > starts[i] && s.FirstOffset < starts[i+1] {
				if b, err := lg.boundaries(s.FirstOffset+1, starts[i+1]); err == nil && len(b) > 0 {
					f, cut = starts[i], b[0]
					break
				}
			}
		}
	}
	if cut == 0 {
		t.Fatalf("no fragment of %v crosses a segment boundary in the local log from %d", starts, first)
	}
	w.chk.Truncated(id, cut)
	if err := lg.truncateTail(cut); err != nil {
		t.Fatal(err)
	}
	t.Logf("log cut at %d, inside the fragment starting at %d (persisted next %d)", cut, f, end)

	// The broker writes on past the loss and past the old end (its log refills: the same
	// chunks if its load is replayed, other ones otherwise), then the node resolves. A
	// truncation is allowed down to the cut, never below it (the checker knows the cut).
	if err := w.appendLogs([]int64{2 << 20}); err != nil {
		t.Fatal(err)
	}
	_, end, _, _ = lg.bounds()
	start()
	if ok, last := w.awaitZeroLag(ctx, map[string]uint64{id: end}); !ok {
		t.Fatalf("no catch-up: %s", last)
	}
	w.node.term(time.Minute)
	if err := w.chk.Check(ctx, true); err != nil {
		t.Fatal(err)
	}
	for _, v := range w.chk.Violations() {
		t.Errorf("violation %s: %s", v.Rule, v.Detail)
	}
}

// testWriter sends the live history to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
