package actors

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// sinkCall is one call a fakeSink received.
type sinkCall struct {
	sync    bool // Sync; otherwise Broadcast
	stream  string
	to      []string // Broadcast
	replica string   // Sync
	root    readercore.RootRef
	parent  readercore.RootRef // Broadcast
	epoch   uint64
	edits   int
	next    uint64 // Sync: the manifest's next offset
}

func (c sinkCall) String() string {
	if c.sync {
		return fmt.Sprintf("sync %s to %s root %d/%d next %d", c.stream, c.replica, c.root.Seq, c.root.UID, c.next)
	}
	return fmt.Sprintf("broadcast %s to %v root %d/%d parent %d/%d (%d edits)", c.stream, c.to, c.root.Seq, c.root.UID, c.parent.Seq, c.parent.UID, c.edits)
}

// fakeSink is a ReplicaSender standing for the cluster layer: it records every call.
// While blocked, every call waits until unblock; panicAt makes the n-th call (from 1) panic.
type fakeSink struct {
	mu      sync.Mutex
	calls   []sinkCall
	entered int
	blocked chan struct{} // nil: calls return at once
	once    sync.Once
	panicAt int
}

func (s *fakeSink) call(c sinkCall) {
	s.mu.Lock()
	s.entered++
	n, blocked := s.entered, s.blocked
	s.mu.Unlock()
	if blocked != nil {
		<-blocked
	}
	if n == s.panicAt {
		panic("injected replica sink fault")
	}
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
}

func (s *fakeSink) Broadcast(stream string, to []string, edits []manifest.Edit, root, parent readercore.RootRef, epoch uint64) {
	s.call(sinkCall{stream: stream, to: slices.Clone(to), root: root, parent: parent, epoch: epoch, edits: len(edits)})
}

func (s *fakeSink) Sync(stream, replica string, m manifest.Manifest, root readercore.RootRef, epoch uint64) {
	s.call(sinkCall{sync: true, stream: stream, replica: replica, root: root, epoch: epoch, next: m.NextOffset})
}

func (s *fakeSink) unblock() { s.once.Do(func() { close(s.blocked) }) }

func (s *fakeSink) snapshot() []sinkCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func (s *fakeSink) enteredCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.entered
}

// TestBroadcastActorCarriesEditsAndSyncs: broadcasts and syncs reach the replica sink in
// the order the reader sent them, with what the core said; a panicking sink loses that one
// request (counted), not the actor.
func TestBroadcastActorCarriesEditsAndSyncs(t *testing.T) {
	log, logs := testLogger(t)
	sys := newSystem(t, log)
	sink := &fakeSink{panicAt: 4}
	m := &Metrics{}
	pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return newBroadcaster(sink, log, m) }))
	t.Cleanup(func() { sys.Root.Stop(pid) })
	edit := manifest.Edit{}
	root := func(seq, uid uint64) readercore.RootRef { return readercore.RootRef{Seq: seq, Epoch: 2, UID: uid} }
	sys.Root.Send(pid, &broadcastEdits{Stream: "b", Edits: readercore.Broadcast{To: []string{"r1", "r2"}, Edits: []manifest.Edit{edit}, Root: root(3, 33), Parent: root(2, 22), Epoch: 2}})
	sys.Root.Send(pid, &syncReplica{Stream: "b", Sync: readercore.SyncReplica{Replica: "r3", Manifest: manifest.EmptyAt(40), Root: root(3, 33), Epoch: 2}})
	sys.Root.Send(pid, &broadcastEdits{Stream: "b", Edits: readercore.Broadcast{To: []string{"r1", "r2", "r3"}, Edits: []manifest.Edit{edit, edit}, Root: root(5, 55), Parent: root(3, 33), Epoch: 2}})
	sys.Root.Send(pid, &broadcastEdits{Stream: "b", Edits: readercore.Broadcast{To: []string{"r1"}, Root: root(6, 66), Parent: root(5, 55), Epoch: 2}}) // the sink panics
	sys.Root.Send(pid, &syncReplica{Stream: "b", Sync: readercore.SyncReplica{Replica: "r1", Manifest: manifest.EmptyAt(50), Root: root(6, 66), Epoch: 2}})
	until(t, 5*time.Second, "every request handled", func() (bool, string) { return sink.enteredCalls() == 5, fmt.Sprint(sink.snapshot()) })
	want := []string{
		"broadcast b to [r1 r2] root 3/33 parent 2/22 (1 edits)",
		"sync b to r3 root 3/33 next 40",
		"broadcast b to [r1 r2 r3] root 5/55 parent 3/33 (2 edits)",
		"sync b to r1 root 6/66 next 50",
	}
	until(t, 5*time.Second, "the calls recorded", func() (bool, string) {
		got := fmt.Sprint(sink.snapshot())
		return got == fmt.Sprint(want), got
	})
	for _, c := range sink.snapshot() {
		if c.epoch != 2 {
			t.Fatalf("%s at epoch %d", c, c.epoch)
		}
	}
	if m.BroadcastsDropped.Load() != 1 || logs.Count("replica sink panicked; broadcast dropped") != 1 {
		t.Fatalf("%d dropped, %d panics logged", m.BroadcastsDropped.Load(), logs.Count("replica sink panicked"))
	}
}

// TestBroadcastActorBlockedSinkDropsOldest: while the sink blocks, sending to the broadcast
// actor never blocks and its queue stays bounded: the oldest requests are dropped and
// counted, the newest are kept and delivered in order once the sink returns.
func TestBroadcastActorBlockedSinkDropsOldest(t *testing.T) {
	log, _ := testLogger(t)
	sys := newSystem(t, log)
	sink := &fakeSink{blocked: make(chan struct{})}
	t.Cleanup(sink.unblock)
	m := &Metrics{}
	pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return newBroadcaster(sink, log, m) }))
	t.Cleanup(func() { sys.Root.Stop(pid) })
	send := func(n uint64) {
		sys.Root.Send(pid, &broadcastEdits{Stream: "b", Edits: readercore.Broadcast{To: []string{"r1"},
			Root: readercore.RootRef{Seq: n, Epoch: 1, UID: n}, Parent: readercore.RootRef{Seq: n - 1, Epoch: 1, UID: n - 1}, Epoch: 1}})
	}
	send(1)
	until(t, 5*time.Second, "the sink holds the first call", func() (bool, string) { return sink.enteredCalls() == 1, "" })
	const total = 5000
	start := time.Now()
	for n := uint64(2); n <= total; n++ {
		send(n)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("sending %d requests to a blocked broadcaster took %v", total-1, took)
	}
	until(t, 10*time.Second, "every request queued or dropped", func() (bool, string) {
		got := m.BroadcastsDropped.Load()
		return got == total-1-broadcastQueue, fmt.Sprint(got)
	})
	sink.unblock()
	until(t, 10*time.Second, "the newest request delivered", func() (bool, string) {
		calls := sink.snapshot()
		return len(calls) > 0 && calls[len(calls)-1].root.Seq == total, fmt.Sprint(len(calls))
	})
	calls := sink.snapshot()
	if len(calls) != broadcastQueue+1 || calls[0].root.Seq != 1 || calls[1].root.Seq != total-broadcastQueue+1 {
		t.Fatalf("%d calls delivered (seq %d, %d, ...), want the first and the %d newest", len(calls), calls[0].root.Seq, calls[1].root.Seq, broadcastQueue)
	}
	for i := 1; i < len(calls); i++ {
		if calls[i].root.Seq <= calls[i-1].root.Seq {
			t.Fatalf("out of order: seq %d after %d", calls[i].root.Seq, calls[i-1].root.Seq)
		}
	}
	if got := m.BroadcastsDropped.Load(); got != int64(total-len(calls)) {
		t.Fatalf("%d counted as dropped, %d delivered of %d", got, len(calls), total)
	}
}

// replicaNode starts a node whose replica sink is sink, with a stream whose spec names
// replica r1, and waits until it runs.
func replicaNode(t *testing.T, w *world, sink ReplicaSender, stream string) (*Node, *segments.Log) {
	t.Helper()
	log, _ := testLogger(t)
	n := startNode(w, Config{Logger: log, Replicas: sink,
		Stream: StreamOptions{FragmentTargetSize: 16 << 10, PersistThreshold: 1, PersistInterval: 100 * time.Millisecond}})
	lg := openLog(t, segments.Options{})
	if err := n.AddStream(StreamSpec{ID: stream, Log: lg, Epoch: 1, Replicas: []string{"r1"}}); err != nil {
		t.Fatal(err)
	}
	until(t, 10*time.Second, "reader running", func() (bool, string) { return running(n, stream) })
	return n, lg
}

// callsAfter lists what the sink received from the mark-th call on, as strings.
func callsAfter(sink *fakeSink, mark int) []string {
	var out []string
	for _, c := range sink.snapshot()[mark:] {
		out = append(out, c.String())
	}
	return out
}

// TestReaderReplicasOutliveReinitialize: a replica registered at run time is synced and
// broadcast to; after a conflict makes the reader reinitialize, the new incarnation syncs it
// again with the spec's replica and keeps broadcasting to both.
func TestReaderReplicasOutliveReinitialize(t *testing.T) {
	w := newWorld(t, worldOptions{})
	sink := &fakeSink{}
	n, lg := replicaNode(t, w, sink, "rr")
	if err := n.ReplicaRegistered("rr", "", false); err == nil {
		t.Fatal("a registration without a replica name was accepted")
	}
	if err := n.ReplicaRegistered("rr", "r2", false); err != nil {
		t.Fatal(err)
	}
	until(t, 5*time.Second, "the run-time replica synced", func() (bool, string) {
		got := strings.Join(callsAfter(sink, 0), "; ")
		return strings.Contains(got, "sync rr to r1") && strings.Contains(got, "sync rr to r2"), got
	})
	writeLog(t, lg, 13, loadgen.Limit{Bytes: 48 << 10})
	persisted(t, n, "rr", lg.NextOffset(), 20*time.Second)
	until(t, 5*time.Second, "broadcast to both replicas", func() (bool, string) {
		got := strings.Join(callsAfter(sink, 0), "; ")
		return strings.Contains(got, "broadcast rr to [r1 r2]"), got
	})

	rec, rev, _, err := w.Meta.ReadManifest(context.Background(), "rr")
	if err != nil {
		t.Fatal(err)
	}
	otherWriter(t, w.Meta, "rr", 1, rev, rec)
	mark := len(sink.snapshot())
	writeLog(t, lg, 14, loadgen.Limit{Bytes: 48 << 10})
	persisted(t, n, "rr", lg.NextOffset(), 20*time.Second)
	if n.Metrics().Reinitializations.Load() != 1 || n.Metrics().Adoptions.Load() != 1 {
		t.Fatalf("%d reinitializations, %d adoptions, want 1 and 1", n.Metrics().Reinitializations.Load(), n.Metrics().Adoptions.Load())
	}
	// Format version 3: the conflicting persist left its root (seq rec.Seq+1), a child of
	// the record the other writer wrote again; the resolution adopts it. Replicas are synced
	// with that root and the next broadcast is built on it: replica messages name roots by
	// seq and uid, never by the record's etcd Version (rev+2 by now).
	var adopted readercore.RootRef
	until(t, 5*time.Second, "the new incarnation syncs both replicas with the adopted root", func() (bool, string) {
		for _, c := range sink.snapshot()[mark:] {
			if c.sync && c.replica == "r1" {
				adopted = c.root
			}
		}
		got := strings.Join(callsAfter(sink, mark), "; ")
		return adopted.Seq == rec.Seq+1 && adopted.UID != rec.RootUID &&
			strings.Contains(got, fmt.Sprintf("sync rr to r2 root %d/%d next", adopted.Seq, adopted.UID)), got
	})
	// The adopted root may already hold everything written: write more, so that a persist
	// after the adoption must come, built on the adopted root.
	writeLog(t, lg, 15, loadgen.Limit{Bytes: 20 << 10})
	persisted(t, n, "rr", lg.NextOffset(), 20*time.Second)
	until(t, 5*time.Second, "the next broadcast, to both replicas, built on the adopted root", func() (bool, string) {
		got := strings.Join(callsAfter(sink, mark), "; ")
		return strings.Contains(got, fmt.Sprintf("broadcast rr to [r1 r2] root %d/", adopted.Seq+1)) &&
			strings.Contains(got, fmt.Sprintf("parent %d/%d", adopted.Seq, adopted.UID)), got
	})
	if got := strings.Join(callsAfter(sink, mark), "; "); strings.Contains(got, "broadcast rr to [r1] ") {
		t.Fatalf("the new incarnation forgot r2: %s", got)
	}
}

// TestReaderNotBlockedBySlowReplicaSink: a replica sink that never returns holds the
// broadcast actor only: the reader keeps persisting and answering, reinitializes after a
// conflict, and its stream is removed promptly.
func TestReaderNotBlockedBySlowReplicaSink(t *testing.T) {
	w := newWorld(t, worldOptions{})
	sink := &fakeSink{blocked: make(chan struct{})}
	n, lg := replicaNode(t, w, sink, "sl")
	t.Cleanup(sink.unblock) // before the node stops
	until(t, 5*time.Second, "the sink holds the first sync", func() (bool, string) { return sink.enteredCalls() == 1, "" })
	for i := range 3 {
		writeLog(t, lg, uint64(20+i), loadgen.Limit{Bytes: 48 << 10})
		persisted(t, n, "sl", lg.NextOffset(), 10*time.Second)
	}
	rec, rev, _, err := w.Meta.ReadManifest(context.Background(), "sl")
	if err != nil {
		t.Fatal(err)
	}
	otherWriter(t, w.Meta, "sl", 1, rev, rec)
	writeLog(t, lg, 23, loadgen.Limit{Bytes: 48 << 10})
	persisted(t, n, "sl", lg.NextOffset(), 10*time.Second)
	h, _ := n.handle("sl")
	if h.incarnations.Load() != 2 {
		t.Fatalf("%d incarnations after the conflict, want 2", h.incarnations.Load())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.RemoveStream(ctx, "sl"); err != nil {
		t.Fatalf("remove the stream while its replica sink blocks: %v", err)
	}
	if len(sink.snapshot()) != 0 {
		t.Fatalf("calls returned from a blocked sink: %v", sink.snapshot())
	}
}
