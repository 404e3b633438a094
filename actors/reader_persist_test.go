package actors

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/claim"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// persistFixture drives persist actors directly through protoactor, on a real etcd (behind
// a partitionable proxy) and a real S3 server; their answers go to a probe.
type persistFixture struct {
	w       *world
	sys     *actor.ActorSystem
	probe   *probe
	deps    persistDeps
	metrics *Metrics
	ctx     context.Context
	cancel  context.CancelFunc
	nextID  uint64
	// Per stream: the seq the next attempt takes (every attempt a new one), the root of the
	// last success (the next attempt's parent) and the attempt in doubt.
	seqs   map[string]uint64
	last   map[string]readercore.RootRef
	doubts map[string]*atomic.Pointer[inDoubt]
	sent   map[uint64]readercore.StartPersist
}

func newPersistFixture(t *testing.T, timeout time.Duration, faults *faultHooks) *persistFixture {
	t.Helper()
	log, _ := testLogger(t)
	f := &persistFixture{w: newWorld(t, worldOptions{EtcdFaults: true}), sys: newSystem(t, log), metrics: &Metrics{}}
	f.probe = newProbe(t, f.sys)
	f.ctx, f.cancel = context.WithCancel(context.Background())
	t.Cleanup(f.cancel)
	opened, err := claim.Open(context.Background(), claim.Options{Store: f.w.Store, Meta: f.w.Meta})
	if err != nil {
		t.Fatal(err)
	}
	f.deps = persistDeps{store: f.w.Store, meta: f.w.Meta, keyPrefix: manifest.DefaultKeyPrefix, timeout: timeout,
		log: log, metrics: f.metrics, faults: faults, claim: &claimState{opened: opened}}
	f.seqs, f.last, f.doubts = map[string]uint64{}, map[string]readercore.RootRef{}, map[string]*atomic.Pointer[inDoubt]{}
	f.sent = map[uint64]readercore.StartPersist{}
	return f
}

// send spawns a persist actor and asks it to persist root for stream at epoch, expecting
// revision expected; it returns the request's id.
func (f *persistFixture) send(stream string, epoch uint64, expected int64, root manifest.Manifest) uint64 {
	f.nextID++
	ctx, deps := f.ctx, f.deps
	if f.doubts[stream] == nil {
		f.doubts[stream] = &atomic.Pointer[inDoubt]{}
	}
	deps.stream, deps.doubt = stream, f.doubts[stream]
	f.seqs[stream]++
	sp := readercore.StartPersist{Ref: readercore.Ref(100 + f.nextID), Root: root, ExpectedRevision: expected, Epoch: epoch,
		Seq: f.seqs[stream], Parent: f.last[stream]}
	f.sent[f.nextID] = sp
	pid := f.sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return newPersister(ctx, deps) }))
	f.sys.Root.Send(pid, &persistRequest{ID: f.nextID, Stream: stream, ReplyTo: f.probe.PID, Persist: sp})
	return f.nextID
}

// persist sends a request and returns its one answer.
func (f *persistFixture) persist(t *testing.T, stream string, epoch uint64, expected int64, root manifest.Manifest) persistDone {
	t.Helper()
	id := f.send(stream, epoch, expected, root)
	d, _ := expect[persistDone](t, f.probe, 15*time.Second)
	if d.ID != id || d.Result.Ref != readercore.Ref(100+id) {
		t.Fatalf("answer %+v to request %d", d, id)
	}
	if d.Result.Now == 0 {
		t.Fatalf("answer %+v carries no time", d)
	}
	quiet[persistDone](t, f.probe, 20*time.Millisecond) // exactly one answer
	if d.Result.Outcome == readercore.PersistOK {
		f.last[stream] = readercore.RootRef{Seq: f.sent[id].Seq, Epoch: epoch, UID: d.Result.RootUID}
	}
	return d
}

func (f *persistFixture) anchor(t *testing.T, stream string) {
	t.Helper()
	if err := f.w.Meta.Anchor(context.Background(), stream); err != nil {
		t.Fatal(err)
	}
}

// otherWriter persists a record for stream at epoch as another node would, on top of
// revision expected, and returns the new revision.
func otherWriter(t *testing.T, meta *metadata.Store, stream string, epoch uint64, expected int64, rec metadata.ManifestRecord) int64 {
	t.Helper()
	rec.Epoch = epoch
	res, err := meta.Persist(context.Background(), stream, epoch, expected, rec)
	if err != nil || res.Outcome != metadata.PersistOK {
		t.Fatalf("the other writer's persist: %+v %v", res, err)
	}
	return res.Revision
}

// TestPersistActorOutcomes: each outcome of the etcd transaction reaches the owner as the
// result the core expects, once: ok (the root object is written first), a conflict at the
// writer's epoch, a fence by a higher epoch, not-found (no anchor; no record after a
// success) and a tombstone, which becomes StreamDeleted whatever revision was expected.
func TestPersistActorOutcomes(t *testing.T) {
	f := newPersistFixture(t, 10*time.Second, nil)
	ctx := context.Background()
	root := manifest.EmptyAt(10)

	f.anchor(t, "ok")
	d := f.persist(t, "ok", 1, 0, root)
	if r := d.Result; r.Outcome != readercore.PersistOK || r.Revision != 1 || r.RootUID == 0 || d.Deleted != "" {
		t.Fatalf("ok: %+v", d)
	}
	if _, err := f.w.Store.GetObject(ctx, manifest.SeqRootKey(manifest.DefaultKeyPrefix, "ok", 1)); err != nil {
		t.Fatalf("ok: the root object the record names: %v", err)
	}
	if rec, rev, found, err := f.w.Meta.ReadManifest(ctx, "ok"); err != nil || !found || rev != 1 || rec.Seq != 1 || rec.RootUID != d.Result.RootUID || rec.NextOffset != 10 {
		t.Fatalf("ok: stored record %+v at %d (found %t, %v)", rec, rev, found, err)
	}
	if d := f.persist(t, "ok", 1, 1, manifest.EmptyAt(20)); d.Result.Outcome != readercore.PersistOK || d.Result.Revision != 2 {
		t.Fatalf("ok, second persist: %+v", d)
	}

	f.anchor(t, "conflict")
	otherWriter(t, f.w.Meta, "conflict", 1, 0, metadata.ManifestRecord{RootUID: 9, FirstOffset: 5, NextOffset: 5, FirstTimestamp: -1})
	d = f.persist(t, "conflict", 1, 0, root)
	if r := d.Result; r.Outcome != readercore.PersistConflict || !strings.Contains(r.Reason, "expected version 0 at epoch 1") {
		t.Fatalf("conflict: %+v", d)
	}

	f.anchor(t, "fenced")
	otherWriter(t, f.w.Meta, "fenced", 2, 0, metadata.ManifestRecord{RootUID: 9, FirstOffset: 5, NextOffset: 5, FirstTimestamp: -1})
	d = f.persist(t, "fenced", 1, 1, root)
	if r := d.Result; r.Outcome != readercore.PersistFenced || r.StoredEpoch != 2 {
		t.Fatalf("fenced: %+v", d)
	}

	d = f.persist(t, "unanchored", 1, 0, root)
	if r := d.Result; r.Outcome != readercore.PersistNotFound || !strings.Contains(r.Reason, "stream unanchored: the anchor") || d.Deleted != "" {
		t.Fatalf("not-found at revision 0: %+v", d)
	}
	f.anchor(t, "vanished")
	if d := f.persist(t, "vanished", 1, 0, root); d.Result.Outcome != readercore.PersistOK {
		t.Fatalf("vanished, first persist: %+v", d)
	}
	if _, err := f.w.Meta.Client().Delete(ctx, metadata.StreamPrefix(f.w.Meta.Prefix(), "vanished"), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	d = f.persist(t, "vanished", 1, 1, root)
	if r := d.Result; r.Outcome != readercore.PersistNotFound || !strings.Contains(r.Reason, "the manifest record at version 1") || d.Deleted != "" {
		t.Fatalf("not-found after a success: %+v", d)
	}

	f.anchor(t, "deleted")
	if d := f.persist(t, "deleted", 1, 0, root); d.Result.Outcome != readercore.PersistOK {
		t.Fatalf("deleted, first persist: %+v", d)
	}
	if err := f.w.Meta.DeleteStream(ctx, "deleted"); err != nil {
		t.Fatal(err)
	}
	for _, expected := range []int64{1, 0} { // whatever the writer expected
		d = f.persist(t, "deleted", 1, expected, root)
		ev, ok := d.event().(readercore.StreamDeleted)
		if !ok || !strings.Contains(ev.Reason, "stream deleted was deleted") || !strings.Contains(ev.Reason, deletedHint) {
			t.Fatalf("tombstone, expecting revision %d: %+v -> %+v", expected, d, d.event())
		}
	}
	m := f.metrics
	if m.Persists.Load() != 4 || m.PersistConflicts.Load() != 2 || m.PersistNotFound.Load() != 4 || m.PersistFailures.Load() != 0 {
		t.Fatalf("metrics: %d persists, %d conflicts, %d not-found, %d failures", m.Persists.Load(), m.PersistConflicts.Load(), m.PersistNotFound.Load(), m.PersistFailures.Load())
	}
}

// TestPersistActorFailsAtDeadlineDuringPartition: with etcd partitioned away (connections
// open, no byte passing) the transaction hangs; the persist actor answers PersistFailed at
// its deadline, not later, and persists again once the partition heals.
func TestPersistActorFailsAtDeadlineDuringPartition(t *testing.T) {
	const timeout = 400 * time.Millisecond
	f := newPersistFixture(t, timeout, nil)
	f.anchor(t, "p")
	if d := f.persist(t, "p", 1, 0, manifest.EmptyAt(1)); d.Result.Outcome != readercore.PersistOK {
		t.Fatalf("before the partition: %+v", d)
	}
	f.w.Proxy.Partition()
	start := time.Now()
	d := f.persist(t, "p", 1, 1, manifest.EmptyAt(2))
	took := time.Since(start)
	if r := d.Result; r.Outcome != readercore.PersistFailed || !strings.Contains(r.Reason, "persist p: etcd (outcome unknown") || !strings.Contains(r.Reason, "deadline exceeded") {
		t.Fatalf("during the partition: %+v", d)
	}
	if took < timeout || took > timeout+2*time.Second {
		t.Fatalf("failed after %v, want its deadline %v", took, timeout)
	}
	if f.metrics.PersistFailures.Load() != 1 {
		t.Fatalf("%d failures counted, want 1", f.metrics.PersistFailures.Load())
	}
	f.w.Proxy.Heal()
	// The timed-out transaction may still reach etcd once the bytes flow again (an
	// ambiguous outcome: the core treats the conflict it then meets as a reinitialize).
	// Persist on from whatever revision etcd holds.
	until(t, 10*time.Second, "a persist after the partition healed", func() (bool, string) {
		_, rev, _, err := f.w.Meta.ReadManifest(context.Background(), "p")
		if err != nil {
			return false, err.Error()
		}
		d := f.persist(t, "p", 1, rev, manifest.EmptyAt(3))
		return d.Result.Outcome == readercore.PersistOK, d.Result.Reason
	})
}

// TestPersistActorPanicIsFailure: a persist that panics answers PersistFailed (counted and
// logged), and the next attempt persists.
func TestPersistActorPanicIsFailure(t *testing.T) {
	var once sync.Once
	f := newPersistFixture(t, 10*time.Second, &faultHooks{task: func(name string) {
		if name == "persist" {
			once.Do(func() { panic("injected persist fault") })
		}
	}})
	f.anchor(t, "boom")
	d := f.persist(t, "boom", 1, 0, manifest.EmptyAt(1))
	if r := d.Result; r.Outcome != readercore.PersistFailed || r.Reason != "persist boom: persist panicked: injected persist fault" {
		t.Fatalf("panicking persist: %+v", d)
	}
	if f.metrics.TaskPanics.Load() != 1 || f.metrics.PersistFailures.Load() != 1 {
		t.Fatalf("%d panics, %d failures counted", f.metrics.TaskPanics.Load(), f.metrics.PersistFailures.Load())
	}
	if d := f.persist(t, "boom", 1, 0, manifest.EmptyAt(1)); d.Result.Outcome != readercore.PersistOK {
		t.Fatalf("after the panic: %+v", d)
	}
}

// TestPersistActorOfEndedOwnerIsSilent: once its owner's context ends (the reader stopped
// or restarted), a persist actor answers nothing.
func TestPersistActorOfEndedOwnerIsSilent(t *testing.T) {
	f := newPersistFixture(t, 10*time.Second, nil)
	f.anchor(t, "orphan")
	f.w.Proxy.Partition()
	f.send("orphan", 1, 0, manifest.EmptyAt(1))
	time.Sleep(50 * time.Millisecond) // in the transaction
	f.cancel()
	quiet[persistDone](t, f.probe, 300*time.Millisecond)
	f.w.Proxy.Heal()
}

// TestPersistOverdueBecomesFailure: a persist actor whose answer never comes (here it is
// stuck outside its context) is given up on by the reader's overdue timer on the clock:
// the core sees PersistFailed, retries at once and persists; the late answer is dropped.
func TestPersistOverdueBecomesFailure(t *testing.T) {
	w := newWorld(t, worldOptions{})
	log, _ := testLogger(t)
	clock := newManualClock()
	release := make(chan struct{})
	var stuck atomic.Bool
	n := startNode(w, Config{Logger: log, clock: clock, PersistTimeout: 2 * time.Second, faults: &faultHooks{task: func(name string) {
		if name == "persist" && stuck.CompareAndSwap(false, true) {
			<-release // the first persist ignores its deadline
		}
	}}, Stream: StreamOptions{FragmentTargetSize: 16 << 10, PersistThreshold: 1, PersistInterval: time.Hour}})
	t.Cleanup(func() { // before the node stops: a stuck child holds its reader's stop
		select {
		case <-release:
		default:
			close(release)
		}
	})
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 5, loadgen.Limit{Bytes: 40 << 10})
	if err := n.AddStream(StreamSpec{ID: "od", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	grace := 2*time.Second + shell.TaskGrace(2*time.Second)
	until(t, 10*time.Second, "a persist in flight with its overdue timer", func() (bool, string) {
		st, _ := n.Status(context.Background(), "od")
		_, first := clock.Pending()
		return st.Core.PersistState == "in-flight" && first == grace, st.Core.PersistState
	})
	clock.Advance(grace)
	until(t, 10*time.Second, "the overdue persist failed and the retry persisted", func() (bool, string) {
		st, _ := n.Status(context.Background(), "od")
		return st.Core.Counters.Persists > 0 && st.Core.Counters.PersistFailures == 1, st.Core.String()
	})
	close(release)
	persisted(t, n, "od", lg.NextOffset(), 20*time.Second)
	m := n.Metrics()
	if m.TasksOverdue.Load() != 1 || m.CoreErrors.Load() != 0 || m.StrayMessages.Load() != 0 {
		t.Fatalf("%d overdue, %d core errors, %d strays", m.TasksOverdue.Load(), m.CoreErrors.Load(), m.StrayMessages.Load())
	}
}
