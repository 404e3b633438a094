package actors

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// poke is a message only the tests send, for a fault hook to fail on.
type poke struct{}

// running reports whether the stream's reader is running (resolved, log opened).
func running(n *Node, stream string) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	st, err := n.Status(ctx, stream)
	return err == nil && st.Phase == "running", fmt.Sprintf("phase %q, %v", st.Phase, err)
}

// TestSupervisorRestartsReaderWithBackoff: a reader that keeps failing is restarted at once
// the first time, then only when the doubling delay has passed on the clock; between the
// two its stream waits, and it resumes tiering after.
func TestSupervisorRestartsReaderWithBackoff(t *testing.T) {
	w := newWorld(t, worldOptions{})
	log, logs := testLogger(t)
	clock := newManualClock()
	var armed atomic.Bool // the fault is armed once the stream is quiet (below)
	n := startNode(w, Config{Logger: log, clock: clock, faults: &faultHooks{reader: func(msg any) {
		if _, ok := msg.(forceCutMsg); ok && armed.Load() {
			panic("injected reader fault")
		}
	}}, Stream: StreamOptions{FragmentTargetSize: 16 << 10, PersistThreshold: 1, PersistInterval: time.Hour}})
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 4, loadgen.Limit{Bytes: 40 << 10})
	if err := n.AddStream(StreamSpec{ID: "sv", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	h, _ := n.handle("sv")
	// Quiet first (everything persisted, nothing in flight), so that each failure below
	// interrupts nothing but the forced cut: this test is about the restart delays.
	persisted(t, n, "sv", lg.NextOffset(), 20*time.Second)
	until(t, 10*time.Second, "reader running", func() (bool, string) { return running(n, "sv") })
	if r, i := h.restarts.Load(), h.incarnations.Load(); r != 0 || i != 1 {
		t.Fatalf("before any fault: %d restarts, %d incarnations", r, i)
	}
	armed.Store(true)
	_ = n.ForceCut("sv") // first failure: restarted at once
	until(t, 10*time.Second, "reader restarted at once", func() (bool, string) {
		ok, st := running(n, "sv")
		return ok && h.restarts.Load() == 1 && h.incarnations.Load() == 2, fmt.Sprintf("%s; %d restarts, %d incarnations", st, h.restarts.Load(), h.incarnations.Load())
	})
	_ = n.ForceCut("sv") // second failure within a minute: 100 ms on the clock
	if d := clock.AwaitTimer(t, 100*time.Millisecond, "restart delay"); d != 100*time.Millisecond {
		t.Fatalf("restart in %v, want 100ms", d)
	}
	if h.incarnations.Load() != 2 || h.restarts.Load() != 2 {
		t.Fatalf("restarted before its delay: %d incarnations, %d restarts", h.incarnations.Load(), h.restarts.Load())
	}
	clock.Advance(100 * time.Millisecond)
	until(t, 10*time.Second, "reader restarted after its delay", func() (bool, string) {
		ok, st := running(n, "sv")
		return ok && h.incarnations.Load() == 3, st
	})
	if n.Metrics().ReaderCrashes.Load() != 2 || logs.Count("reader failed; restarting") != 2 {
		t.Fatalf("%d crashes counted, want 2", n.Metrics().ReaderCrashes.Load())
	}
	armed.Store(false)
	writeLog(t, lg, 5, loadgen.Limit{Bytes: 40 << 10})
	persisted(t, n, "sv", lg.NextOffset(), 20*time.Second)
}

// TestSupervisorRestartStartsFreshReader: a panic in a stream supervisor restarts it under
// the guardian; the new incarnation logs it and starts a fresh reader, and the stream goes
// on being tiered.
func TestSupervisorRestartStartsFreshReader(t *testing.T) {
	w := newWorld(t, worldOptions{})
	log, logs := testLogger(t)
	n := startNode(w, Config{Logger: log, faults: &faultHooks{stream: func(msg any) {
		if _, ok := msg.(poke); ok {
			panic("injected supervisor fault")
		}
	}}, Stream: StreamOptions{FragmentTargetSize: 16 << 10, PersistThreshold: 1, PersistInterval: 50 * time.Millisecond}})
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 6, loadgen.Limit{Bytes: 40 << 10})
	if err := n.AddStream(StreamSpec{ID: "ss", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, "ss", lg.NextOffset(), 20*time.Second)
	h, _ := n.handle("ss")
	n.root.Send(h.supervisor, poke{})
	until(t, 10*time.Second, "a fresh reader under the restarted supervisor", func() (bool, string) {
		ok, st := running(n, "ss")
		return ok && h.incarnations.Load() == 2 && logs.Count("stream supervisor restarted") == 1, st
	})
	writeLog(t, lg, 7, loadgen.Limit{Bytes: 40 << 10})
	persisted(t, n, "ss", lg.NextOffset(), 20*time.Second)
	if n.Metrics().ActorRestarts.Load() != 1 {
		t.Fatalf("%d actor restarts, want 1", n.Metrics().ActorRestarts.Load())
	}
}

// TestReaderRestartedMidPersistComesBackOnce: a reader that fails while its persist is
// under way is restarted once, after the persist actor stopped (its attempt cancelled, its
// outcome settled by the next incarnation's resolution); the new incarnation resolves
// without a conflict, persists everything and is not restarted again.
func TestReaderRestartedMidPersistComesBackOnce(t *testing.T) {
	w := newWorld(t, worldOptions{})
	log, logs := testLogger(t)
	var armed, held atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	n := startNode(w, Config{Logger: log, clock: newManualClock(), faults: &faultHooks{
		reader: func(msg any) {
			if _, ok := msg.(forceCutMsg); ok && armed.Load() {
				panic("injected reader fault")
			}
		},
		task: func(name string) {
			if name == "persist" && held.CompareAndSwap(false, true) { // the first persist only
				close(entered)
				<-release
			}
		},
	}, Stream: StreamOptions{FragmentTargetSize: 16 << 10, PersistThreshold: 1, PersistInterval: time.Hour}})
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 8, loadgen.Limit{Bytes: 40 << 10})
	if err := n.AddStream(StreamSpec{ID: "mp", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	h, _ := n.handle("mp")
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("no persist started")
	}
	armed.Store(true)
	_ = n.ForceCut("mp") // the reader fails; its restart waits for the persist actor
	until(t, 10*time.Second, "the failure seen", func() (bool, string) {
		return h.restarts.Load() == 1, fmt.Sprintf("%d restarts", h.restarts.Load())
	})
	armed.Store(false)
	close(release)
	persisted(t, n, "mp", lg.NextOffset(), 20*time.Second)
	if r, i, re := h.restarts.Load(), h.incarnations.Load(), n.Metrics().Reinitializations.Load(); r != 1 || i != 2 || re != 0 {
		t.Fatalf("%d restarts, %d incarnations, %d reinitializations; want 1, 2, 0", r, i, re)
	}
	if c := logs.Count("reader failed; restarting"); c != 1 {
		t.Fatalf("%d reader failures logged, want 1", c)
	}
}
