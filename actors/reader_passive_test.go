package actors

import (
	"fmt"
	"testing"
	"time"

	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// localActors counts the actors the node's actor system holds now.
func localActors(n *Node) int {
	count := 0
	for _, m := range n.system.ProcessRegistry.LocalPIDs.LocalPIDs {
		count += m.Count()
	}
	return count
}

// TestIdleDrainStopsAndDataStartsAFreshOne: a stream idle at the end of its log for
// DrainIdleClose keeps no drain actor (the reader waits on the log itself), and each burst
// of data written after that is drained and persisted by a fresh drain, cycle after cycle,
// with a burst committed right as the drain goes among them.
func TestIdleDrainStopsAndDataStartsAFreshOne(t *testing.T) {
	w := newWorld(t, worldOptions{})
	cfg := v3Config(t)
	cfg.DrainIdleClose = 30 * time.Millisecond
	n := startNode(w, cfg)
	base := localActors(n) // the node's own actors
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 1, loadgen.Limit{Bytes: 40 << 10})
	if err := n.AddStream(StreamSpec{ID: "s", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	m := n.Metrics()
	persisted(t, n, "s", lg.NextOffset(), 30*time.Second)
	for cycle := int64(1); cycle <= 4; cycle++ {
		until(t, 20*time.Second, fmt.Sprintf("cycle %d: the idle drain stopped", cycle), func() (bool, string) {
			return m.DrainPassivations.Load() >= cycle, fmt.Sprintf("%d passivations", m.DrainPassivations.Load())
		})
		// An idle stream's actors: its supervisor and its reader, no drain (once the
		// persist's tasks are gone).
		until(t, 10*time.Second, fmt.Sprintf("cycle %d: the stream's actors down to two", cycle), func() (bool, string) {
			return localActors(n) == base+2, fmt.Sprintf("%d actors, the node's own %d", localActors(n), base)
		})
		writeLog(t, lg, 10+uint64(cycle), loadgen.Limit{Bytes: 20 << 10})
		persisted(t, n, "s", lg.NextOffset(), 30*time.Second)
		if a := m.DrainActivations.Load(); a < cycle {
			t.Fatalf("cycle %d: %d drains started for new data, want %d", cycle, a, cycle)
		}
	}
	// Bursts one after the other, each as soon as the last is persisted: some are
	// committed while the drain idles, some as it is stopped, some once the reader waits.
	for i := range 20 {
		writeLog(t, lg, 100+uint64(i), loadgen.Limit{Chunks: 1})
		persisted(t, n, "s", lg.NextOffset(), 30*time.Second)
	}
	st, err := n.Status(t.Context(), "s")
	if err != nil || st.Phase != "running" || st.Core.PersistedNext != lg.NextOffset() {
		t.Fatalf("after the cycles: %+v %v", st, err)
	}
}
