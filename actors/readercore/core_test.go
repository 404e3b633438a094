package readercore

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/manifest"
)

func TestNewFillsDefaults(t *testing.T) {
	c, err := New(Config{StreamID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		StreamID:             "s",
		FragmentTargetSize:   64 << 20,
		FragmentMaxAge:       60 * time.Second,
		PersistThreshold:     5,
		PersistInterval:      2 * time.Second,
		RebalanceThreshold:   1024,
		UploadRetryDelay:     time.Second,
		UploadRetryMaxDelay:  30 * time.Second,
		TransientBackoffBase: 10 * time.Millisecond,
		TransientBackoffMax:  5 * time.Second,
		TransferDeadline:     20 * time.Minute,
		RetentionTimeout:     60 * time.Second,
		MaxUnpersistedBytes:  384 << 20, // (2 x 2 uploads in flight + 2) fragments
		UploadsInFlight:      DefaultUploadsInFlight,
	}
	if c.cfg != want {
		t.Fatalf("defaults:\n got %+v\nwant %+v", c.cfg, want)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{}, "stream id"},
		{Config{StreamID: "a/b"}, "stream id"},
		{Config{StreamID: "s", PersistThreshold: -1}, "persist_threshold"},
		{Config{StreamID: "s", PersistInterval: -time.Second}, "persist_interval"},
		{Config{StreamID: "s", RebalanceThreshold: 1}, "rebalance_threshold"},
		{Config{StreamID: "s", UploadRetryDelay: 40 * time.Second}, "upload_retry_max_delay"},
		{Config{StreamID: "s", TransientBackoffBase: 10 * time.Second}, "transient_backoff_max"},
		{Config{StreamID: "s", TransferDeadline: -1}, "transfer_deadline"},
		{Config{StreamID: "s", RetentionTimeout: -1}, "retention_task_timeout"},
		{Config{StreamID: "s", FragmentTargetSize: 1 << 40}, "fragment_target_size"},
		{Config{StreamID: "s", FragmentTargetSize: 1000, MaxUnpersistedBytes: 999}, "max_unpersisted_bytes"},
	}
	for _, tc := range cases {
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config %+v: err %v, want one naming %q", tc.cfg, err, tc.want)
		}
	}
}

// TestRefusedEventChangesNothing: an event that breaks the contract returns an error, no
// effects, and leaves the core exactly as it was.
func TestRefusedEventChangesNothing(t *testing.T) {
	c, err := New(Config{StreamID: "s", FragmentTargetSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	mustStep(t, c, Resolved{Manifest: manifest.Empty()})
	mustStep(t, c, LogOpened{})
	h := chunk.Header{Records: 1, DataLen: 52}
	mustStep(t, c, ChunkDrained{Header: h, Location: chunk.Location{Segment: "s", Position: 8, Size: 100}})
	before := c.Status().String()
	bad := []Event{
		nil,
		ChunkDrained{Header: chunk.Header{ChunkID: 7, Records: 1, DataLen: 52}, Location: chunk.Location{Segment: "s", Position: 108, Size: 100}},
		ChunkDrained{Header: chunk.Header{ChunkID: 1, Records: 1, DataLen: 52}, Location: chunk.Location{Segment: "s", Position: 108, Size: 99}},
		Resolved{Manifest: manifest.Empty()},
		LogOpened{},
		TransferResult{Ref: 1, Attempt: 1, Outcome: Outcome(9)},
		PersistResult{Ref: 1, Outcome: PersistOutcome(9)},
		GroupUploadResult{Ref: 1, Attempt: 1, Outcome: SegmentGone},
		ReplicaRegistered{},
		DrainSegmentGone{LocalFirst: 1},
	}
	for _, ev := range bad {
		effs, err := c.Step(ev)
		if err == nil {
			t.Errorf("%T%+v accepted", ev, ev)
		}
		if len(effs) != 0 {
			t.Errorf("%T%+v: effects %v with an error", ev, ev, effs)
		}
		if after := c.Status().String(); after != before {
			t.Errorf("%T%+v changed the core:\n%s\n%s", ev, ev, before, after)
		}
	}
	mustStep(t, c, AwaitOffset{Offset: 1, Waiter: 1})
	if _, err := c.Step(AwaitOffset{Offset: 2, Waiter: 1}); err == nil {
		t.Error("a waiter id used twice was accepted")
	}
}

// TestStepReusesItsSlice documents the Ready-like contract: the slice is the core's.
func TestStepReusesItsSlice(t *testing.T) {
	c, err := New(Config{StreamID: "s", FragmentTargetSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	first := mustStep(t, c, Resolved{Manifest: manifest.Empty()})
	if len(first) != 0 {
		t.Fatalf("effects before the log is open: %v", first)
	}
	start := append([]Effect(nil), mustStep(t, c, LogOpened{})...)
	if len(start) != 3 || start[2].String() != "start-drain from=0" {
		t.Fatalf("start effects %v", start)
	}
	h := chunk.Header{Records: 1, DataLen: 52}
	effs := mustStep(t, c, ChunkDrained{Header: h, Location: chunk.Location{Segment: "s", Position: 8, Size: 100}})
	if len(effs) != 2 {
		t.Fatalf("cut effects %v", effs)
	}
	sub, ok := effs[0].(SubmitTransfer)
	if !ok || sub.Fragment.NextOffset != 1 || sub.Size != 8+100+20 {
		t.Fatalf("submit %v", effs[0])
	}
	// the description handed out stays valid after further steps
	mustStep(t, c, EndOfStream{})
	if sub.Fragment.FirstOffset != 0 || len(sub.Fragment.Chunks) != 1 {
		t.Fatalf("description changed under the shell: %+v", sub.Fragment)
	}
}

func mustStep(t *testing.T, c *Core, ev Event) []Effect {
	t.Helper()
	effs, err := c.Step(ev)
	if err != nil {
		t.Fatalf("%T: %v", ev, err)
	}
	return effs
}

func TestBackoffSchedules(t *testing.T) {
	c, err := New(Config{StreamID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	var transient []string
	for n := 2; n <= 13; n++ {
		transient = append(transient, c.transientDelay(n, 0).String())
	}
	if got := strings.Join(transient, " "); got != "10ms 20ms 40ms 80ms 160ms 320ms 640ms 1.28s 2.56s 5s 5s 5s" {
		t.Fatalf("transient schedule %s", got)
	}
	var upload []string
	for n := 1; n <= 8; n++ {
		upload = append(upload, c.uploadRetryDelay(n).String())
	}
	if got := strings.Join(upload, " "); got != "1s 2s 4s 8s 16s 30s 30s 30s" {
		t.Fatalf("non-transient schedule %s", got)
	}
	for _, j := range []float64{-1, 1, 2, 0.999999} {
		d := c.transientDelay(3, j)
		if d < 10*time.Millisecond || d > 20*time.Millisecond {
			t.Errorf("jitter %v gave %s, outside [10ms, 20ms]", j, d)
		}
	}
	if d := doubling(time.Hour, time.Duration(1<<62), 100); d != time.Duration(1<<62) {
		t.Errorf("doubling overflow: %s", d)
	}
}

// TestSupersededPersistKeepsWaitersWhileResetPending: a persist that does not carry the
// pending truncation (one started before it) succeeds while the truncation waits for its
// own persist. The manifest it published is the timeline being cut back, so no waiter is
// answered from it, and the truncation's own persist follows; only that persist's
// manifest releases waiters. No event sequence reaches this state today (a truncation
// starts at a resolution or at an operator's truncate of a diverged stream, both with no
// persist in flight), so the state is set by hand: the guard keeps it safe should one.
func TestSupersededPersistKeepsWaitersWhileResetPending(t *testing.T) {
	c, err := New(Config{StreamID: "s", FragmentTargetSize: 100, PersistThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	mustStep(t, c, Resolved{Manifest: manifest.Empty()})
	mustStep(t, c, LogOpened{})
	h := chunk.Header{Records: 1, DataLen: 52}
	effs := mustStep(t, c, ChunkDrained{Header: h, Location: chunk.Location{Segment: "s", Position: 8, Size: 100}})
	sub := effs[0].(SubmitTransfer)
	mustStep(t, c, AwaitOffset{Offset: 0, Waiter: 1})
	var persist StartPersist
	for _, e := range mustStep(t, c, TransferResult{Ref: sub.Ref, Attempt: 1, Outcome: OK, UID: 7}) {
		if p, ok := e.(StartPersist); ok {
			persist = p
		}
	}
	if persist.Ref == 0 || persist.Reset {
		t.Fatalf("no plain persist started: %+v", persist)
	}
	// A truncation back to the empty manifest arrives while that persist is in flight.
	c.reset = &pendingReset{reason: TruncateOperator, base: manifest.Empty()}
	c.mem, c.pending, c.nonAppend = manifest.Empty(), nil, 0
	effs = mustStep(t, c, PersistResult{Ref: persist.Ref, Outcome: PersistOK, Revision: 1, RootUID: 9})
	var next StartPersist
	for _, e := range effs {
		switch e := e.(type) {
		case ReplyWaiters:
			t.Fatalf("waiters answered from a persist the pending truncation supersedes: %v", e)
		case StartPersist:
			next = e
		}
	}
	if !next.Reset || next.ExpectedRevision != 1 || next.Root.NextOffset != 0 {
		t.Fatalf("the truncation's persist does not follow: %+v (effects %v)", next, effs)
	}
	if st := c.Status(); st.Waiters != 1 || !st.ResetPending {
		t.Fatalf("after the superseded persist: %d waiters, reset pending %v", st.Waiters, st.ResetPending)
	}
}

// TestPersistSeqs: the seq of each version 3 root and its parent. The first root after a
// resolution takes Resolved.NextSeq (a seq a stray took is skipped) with the resolved root
// as parent; a failed attempt keeps its seq for the retry; a success makes the next seq one
// above it with the new root as parent, and hands the replaced root to the reaper by seq.
// Replica messages name the same roots: a sync the resolved root, the persist's broadcast
// the new root and its parent (never the record's etcd Version).
func TestPersistSeqs(t *testing.T) {
	c, err := New(Config{StreamID: "s", FragmentTargetSize: 100, PersistThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	resolved := RootRef{Seq: 4, Epoch: 1, UID: 40}
	mustStep(t, c, Resolved{Manifest: manifest.Empty(), Revision: 3, Root: resolved, NextSeq: 6})
	mustStep(t, c, LogOpened{})
	var synced []SyncReplica
	for _, e := range mustStep(t, c, ReplicaRegistered{Replica: "r1"}) {
		if s, ok := e.(SyncReplica); ok {
			synced = append(synced, s)
		}
	}
	if len(synced) != 1 || synced[0].Root != resolved || synced[0].Replica != "r1" {
		t.Fatalf("registration of r1: syncs %+v, want one of the resolved root %+v", synced, resolved)
	}
	h := chunk.Header{Records: 1, DataLen: 52}
	persistOf := func(effs []Effect) StartPersist {
		t.Helper()
		for _, e := range effs {
			if p, ok := e.(StartPersist); ok {
				return p
			}
		}
		t.Fatalf("no persist in %v", effs)
		return StartPersist{}
	}
	effs := mustStep(t, c, ChunkDrained{Header: h, Location: chunk.Location{Segment: "s", Position: 8, Size: 100}})
	sub := effs[0].(SubmitTransfer)
	p := persistOf(mustStep(t, c, TransferResult{Ref: sub.Ref, Attempt: 1, Outcome: OK, UID: 7}))
	if p.Seq != 6 || p.Parent != resolved || p.ExpectedRevision != 3 {
		t.Fatalf("first persist: seq %d parent %+v expected %d, want seq 6 (NextSeq) on the resolved root", p.Seq, p.Parent, p.ExpectedRevision)
	}
	effs = mustStep(t, c, PersistResult{Ref: p.Ref, Outcome: PersistFailed, Reason: "timeout"})
	if c.inflight == nil { // retried on the timer, not at once
		effs = mustStep(t, c, PersistTimer{Ref: c.timer})
	}
	retry := persistOf(effs)
	if retry.Seq != 6 || retry.Parent != resolved {
		t.Fatalf("retry: seq %d parent %+v, want the same seq 6 on the resolved root", retry.Seq, retry.Parent)
	}
	effs = mustStep(t, c, PersistResult{Ref: retry.Ref, Outcome: PersistOK, Revision: 4, RootUID: 60})
	var del DeleteObjects
	var bc []Broadcast
	for _, e := range effs {
		switch e := e.(type) {
		case DeleteObjects:
			del = e
		case Broadcast:
			bc = append(bc, e)
		}
	}
	if len(del.Roots) != 1 || del.Roots[0] != resolved {
		t.Fatalf("replaced roots %+v, want the resolved root %+v", del.Roots, resolved)
	}
	if want := (RootRef{Seq: 6, Epoch: c.epoch, UID: 60}); len(bc) != 1 || bc[0].Root != want || bc[0].Parent != resolved || !slices.Equal(bc[0].To, []string{"r1"}) {
		t.Fatalf("broadcasts %+v, want one to r1 of root %+v on the resolved root %+v", bc, want, resolved)
	}
	h2 := h
	h2.ChunkID = 1
	effs = mustStep(t, c, ChunkDrained{Header: h2, Location: chunk.Location{Segment: "s", Position: 108, Size: 100}})
	var sub2 SubmitTransfer
	for _, e := range effs {
		if s, ok := e.(SubmitTransfer); ok {
			sub2 = s
		}
	}
	next := persistOf(mustStep(t, c, TransferResult{Ref: sub2.Ref, Attempt: 1, Outcome: OK, UID: 8}))
	if want := (RootRef{Seq: 6, Epoch: c.epoch, UID: 60}); next.Seq != 7 || next.Parent != want || next.ExpectedRevision != 4 {
		t.Fatalf("after a success: seq %d parent %+v expected %d, want seq 7 on %+v at 4", next.Seq, next.Parent, next.ExpectedRevision, want)
	}
}
