package actors

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// recorder is an EventListener that keeps every event, in the order the node called it.
type recorder struct {
	mu  sync.Mutex
	evs []any
}

func (r *recorder) add(e any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, e)
}

func (r *recorder) listener() EventListener {
	return EventListener{
		OnPersisted: func(i PersistedInfo) { r.add(i) }, OnStall: func(i StallInfo) { r.add(i) },
		OnStallCleared: func(i StallInfo) { r.add(stallCleared(i)) }, OnPause: func(i PauseInfo) { r.add(i) },
		OnResume: func(i ResumeInfo) { r.add(i) }, OnGap: func(i GapInfo) { r.add(i) },
		OnDiverged: func(i DivergedInfo) { r.add(i) }, OnDeposed: func(i DeposedInfo) { r.add(i) },
		OnParked: func(i ParkedInfo) { r.add(i) }, OnStopped: func(i StoppedInfo) { r.add(i) },
		OnFatal: func(err error) { r.add(err) },
	}
}

// stallCleared tells OnStallCleared's info from OnStall's in the record.
type stallCleared StallInfo

// all returns the events of type T that match, in order.
func all[T any](r *recorder, match func(T) bool) []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []T
	for _, e := range r.evs {
		if v, ok := e.(T); ok && (match == nil || match(v)) {
			out = append(out, v)
		}
	}
	return out
}

// await waits until an event of type T matching arrives and returns the first such.
func await[T any](t *testing.T, r *recorder, what string, match func(T) bool) T {
	t.Helper()
	var got T
	until(t, 30*time.Second, what, func() (bool, string) {
		evs := all(r, match)
		if len(evs) > 0 {
			got = evs[0]
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(evs) > 0, fmt.Sprintf("events so far: %+v", r.evs)
	})
	return got
}

func eventConfig(rec *recorder) Config {
	return Config{Events: rec.listener(), StallRetry: 100 * time.Millisecond,
		Stream: StreamOptions{FragmentTargetSize: 16 << 10, PersistThreshold: 1, PersistInterval: 50 * time.Millisecond}}
}

// TestEventsPersistedInOrder: OnPersisted reports every persist of a stream, in order, with
// rising offsets and revisions, up to what Flush made durable.
func TestEventsPersistedInOrder(t *testing.T) {
	w := newWorld(t, worldOptions{})
	rec := &recorder{}
	cfg := eventConfig(rec)
	cfg.Logger, _ = testLogger(t)
	n := startNode(w, cfg)
	lg := openLog(t, segments.Options{})
	if err := n.AddStream(StreamSpec{ID: "p", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		writeLog(t, lg, uint64(10+i), loadgen.Limit{Bytes: 24 << 10})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := n.Flush(ctx, "p", lg.NextOffset()-1)
		cancel()
		if err != nil {
			t.Fatalf("flush %d: %v", i, err)
		}
	}
	evs := all[PersistedInfo](rec, func(p PersistedInfo) bool { return p.Stream == "p" })
	if len(evs) < 5 {
		t.Fatalf("%d persisted events, want one per flush at least: %+v", len(evs), evs)
	}
	for i := 1; i < len(evs); i++ {
		a, b := evs[i-1], evs[i]
		if b.NextOffset < a.NextOffset || b.Revision < a.Revision || (b.NextOffset > a.NextOffset && b.Revision == a.Revision) {
			t.Fatalf("persisted events out of order at %d: %+v then %+v (all %+v)", i, a, b, evs)
		}
	}
	if last := evs[len(evs)-1]; last.NextOffset != lg.NextOffset() || last.FirstOffset != 0 {
		t.Fatalf("last persisted event %+v, want [0, %d)", last, lg.NextOffset())
	}
	st, err := n.Status(context.Background(), "p")
	if err != nil || st.Core.Revision != evs[len(evs)-1].Revision {
		t.Fatalf("status revision %d (%v), last event %+v", st.Core.Revision, err, evs[len(evs)-1])
	}
}

// TestEventsStallPauseResume: S3 refuses fragment uploads (403) while the broker writes on:
// the upload stalls (OnStall with the offset and reason), the drain pauses at the bound on
// bytes not yet durable (OnPause: the local log grows); once S3 takes uploads again the
// stall clears at the offset it began, the drain resumes and everything is persisted.
func TestEventsStallPauseResume(t *testing.T) {
	w := newWorld(t, worldOptions{})
	rec := &recorder{}
	cfg := eventConfig(rec)
	cfg.Logger, _ = testLogger(t)
	cfg.Stream.MaxUnpersistedBytes = 48 << 10
	cfg.Stream.UploadRetryDelay, cfg.Stream.UploadRetryMaxDelay = 50*time.Millisecond, 200*time.Millisecond
	n := startNode(w, cfg)
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 3, loadgen.Limit{Bytes: 32 << 10})
	if err := n.AddStream(StreamSpec{ID: "s", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, "s", lg.NextOffset(), 30*time.Second)
	durable := lg.NextOffset()

	w.Inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: `/data/`, Fault: s3test.FaultForbidden})
	writeLog(t, lg, 4, loadgen.Limit{Bytes: 256 << 10})
	stall := await(t, rec, "an upload stall", func(s StallInfo) bool { return s.Stream == "s" && s.Cause == StallUpload })
	if stall.Offset < durable || stall.Failures < 1 || !strings.Contains(stall.Reason, "403") {
		t.Fatalf("stall %+v: want a fragment at or above %d, failed with a 403", stall, durable)
	}
	pause := await(t, rec, "a pause at the bound", func(p PauseInfo) bool { return p.Stream == "s" })
	if pause.BoundBytes != 48<<10 || pause.HeldBytes < pause.BoundBytes {
		t.Fatalf("pause %+v: want the bound of 48 KiB reached", pause)
	}
	if n := len(all[ResumeInfo](rec, nil)); n != 0 {
		t.Fatalf("%d resumes while S3 refuses every upload", n)
	}

	w.Inj.Clear()
	await(t, rec, "the stall cleared where it began", func(s stallCleared) bool {
		return s.Stream == "s" && s.Cause == StallUpload && s.Offset == stall.Offset
	})
	resume := await(t, rec, "the drain resumed", func(r ResumeInfo) bool { return r.Stream == "s" })
	if resume.From <= durable || resume.BoundBytes != 48<<10 {
		t.Fatalf("resume %+v: want past %d, bound 48 KiB", resume, durable)
	}
	persisted(t, n, "s", lg.NextOffset(), 30*time.Second)
	await(t, rec, "persisted to the end", func(p PersistedInfo) bool { return p.NextOffset == lg.NextOffset() })
}

// TestEventsGapDivergedDeposedStopped: a log that starts above 0 declares a gap (OnGap); a
// log that shares no chunk with the remote tier stalls as diverged, and the operator's
// truncation is reported too (OnDiverged); a writer fenced by a higher epoch on another node
// is deposed (OnDeposed, then OnStopped deposed); removal and the node's stop end the others
// (OnStopped removed, node_stopped).
func TestEventsGapDivergedDeposedStopped(t *testing.T) {
	w := newWorld(t, worldOptions{})
	rec := &recorder{}
	cfg := eventConfig(rec)
	cfg.Logger, _ = testLogger(t)
	n := startNode(w, cfg) // stopped below; its cleanup's second Stop does nothing
	ctx := context.Background()
	small := segments.Options{MaxSegmentBytes: 16 << 10}

	// A gap: the broker's retention took the log's first segments before the stream was added.
	gl := openLog(t, small)
	writeLog(t, gl, 1, loadgen.Limit{Bytes: 64 << 10})
	if _, err := gl.ApplyRetention(segments.RetentionPolicy{MayDelete: func(s segments.SegmentInfo) bool { return !s.Active }}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if gl.FirstOffset() == 0 {
		t.Fatal("retention kept the first segment")
	}
	if err := n.AddStream(StreamSpec{ID: "gap", Log: gl, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	gap := await(t, rec, "a gap", func(g GapInfo) bool { return g.Stream == "gap" })
	if gap.Reason != readercore.GapLocalAhead || gap.From != 0 || gap.To != gl.FirstOffset() {
		t.Fatalf("gap %+v: want local-ahead [0, %d)", gap, gl.FirstOffset())
	}

	// Divergence: the stream is re-added on a log that shares no chunk with what it persisted.
	al := openLog(t, small)
	writeLog(t, al, 2, loadgen.Limit{Bytes: 48 << 10})
	if err := n.AddStream(StreamSpec{ID: "div", Log: al, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, "div", al.NextOffset(), 30*time.Second)
	if err := n.RemoveStream(ctx, "div"); err != nil {
		t.Fatal(err)
	}
	if s := await(t, rec, "div stopped", func(s StoppedInfo) bool { return s.Stream == "div" }); s.Cause != StopRemoved {
		t.Fatalf("stopped %+v: want removed", s)
	}
	bl := openLog(t, small)
	writeLog(t, bl, 3, loadgen.Limit{Bytes: 24 << 10})
	if err := n.AddStream(StreamSpec{ID: "div", Log: bl, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	dv := await(t, rec, "a divergence", func(d DivergedInfo) bool { return d.Stream == "div" })
	if dv.Action != DivergenceStalled || dv.RemoteNext != al.NextOffset() || dv.LocalFirst != 0 || dv.LocalNext != bl.NextOffset() {
		t.Fatalf("divergence %+v: want stalled, remote next %d, local [0, %d)", dv, al.NextOffset(), bl.NextOffset())
	}
	if err := n.TruncateRemote(ctx, "div"); err != nil {
		t.Fatal(err)
	}
	tr := await(t, rec, "the truncation", func(d DivergedInfo) bool { return d.Stream == "div" && d.Action == DivergenceTruncated })
	if !tr.Operator || tr.At != 0 || tr.OldNext != al.NextOffset() {
		t.Fatalf("truncation %+v: want the operator's, from %d to 0", tr, al.NextOffset())
	}
	persisted(t, n, "div", bl.NextOffset(), 30*time.Second)

	// Deposition: a second node takes the stream over at epoch 2 and persists.
	dl, copyLog := openLog(t, small), openLog(t, small)
	writeLog(t, dl, 4, loadgen.Limit{Bytes: 24 << 10})
	writeLog(t, copyLog, 4, loadgen.Limit{Bytes: 24 << 10})
	if err := n.AddStream(StreamSpec{ID: "dep", Log: dl, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, "dep", dl.NextOffset(), 30*time.Second)
	other := startNode(w, Config{Logger: cfg.Logger, NodeID: "node-2", Stream: cfg.Stream})
	writeLog(t, copyLog, 5, loadgen.Limit{Bytes: 8 << 10})
	if err := other.AddStream(StreamSpec{ID: "dep", Log: copyLog, Epoch: 2}); err != nil {
		t.Fatal(err)
	}
	persisted(t, other, "dep", copyLog.NextOffset(), 30*time.Second)
	writeLog(t, dl, 6, loadgen.Limit{Bytes: 8 << 10})
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := n.Flush(fctx, "dep", dl.NextOffset()-1)
	cancel()
	if !errors.Is(err, ErrStreamStopped) {
		t.Fatalf("flush of the deposed writer: %v, want ErrStreamStopped", err)
	}
	dp := await(t, rec, "the deposition", func(d DeposedInfo) bool { return d.Stream == "dep" })
	if dp.Epoch != 1 || dp.ByEpoch != 2 || !strings.Contains(dp.Reason, "deposed by epoch 2") {
		t.Fatalf("deposed %+v: want epoch 1 fenced by 2", dp)
	}
	if s := await(t, rec, "dep stopped", func(s StoppedInfo) bool { return s.Stream == "dep" }); s.Cause != StopDeposed || s.Reason != dp.Reason {
		t.Fatalf("stopped %+v: want deposed, %q", s, dp.Reason)
	}

	stopNode(t, n)
	for _, id := range []string{"gap", "div"} {
		got := all(rec, func(s StoppedInfo) bool { return s.Stream == id })
		if len(got) == 0 || got[len(got)-1].Cause != StopNodeStopped {
			t.Fatalf("stopped events of %s: %+v, want node_stopped last", id, got)
		}
	}
	if d := all(rec, func(s StoppedInfo) bool { return s.Stream == "dep" }); len(d) != 1 {
		t.Fatalf("stopped events of dep: %+v, want the deposition's alone", d)
	}
}

// TestEventsParkedAndFatal: a reader that fails at every start parks the stream (OnParked,
// with its failure and next retry); a changed cluster claim is the node's fatal error
// (OnFatal, ErrClaimChanged).
func TestEventsParkedAndFatal(t *testing.T) {
	w := newWorld(t, worldOptions{})
	rec := &recorder{}
	cfg := eventConfig(rec)
	cfg.Logger, _ = testLogger(t)
	clock := newManualClock()
	const retry = 5 * time.Minute
	cfg.clock, cfg.ParkRetryInterval, cfg.ClaimRecheck = clock, retry, 100*time.Millisecond
	cfg.faults = &faultHooks{reader: func(msg any) {
		if _, ok := msg.(*actor.Started); ok {
			panic("injected: the reader cannot start")
		}
	}}
	n := startNode(w, cfg)
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 4, loadgen.Limit{Bytes: 8 << 10})
	if err := n.AddStream(StreamSpec{ID: "pk", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	for range 20 { // the doubling restart delays, on the manual clock, up to the park
		if len(all[ParkedInfo](rec, nil)) > 0 {
			break
		}
		d := clock.AwaitTimer(t, retry, "a restart or the park retry")
		if len(all[ParkedInfo](rec, nil)) > 0 {
			break
		}
		clock.Advance(d)
	}
	p := await(t, rec, "parked", func(p ParkedInfo) bool { return p.Stream == "pk" })
	st, err := n.Status(context.Background(), "pk")
	if err != nil || st.Parked == nil || !strings.Contains(p.Reason, "the reader cannot start") || p.Failures < 5 || !p.RetryAt.Equal(st.Parked.RetryAt) {
		t.Fatalf("parked %+v, status %+v (%v)", p, st.Parked, err)
	}

	rc, modRev, found, err := w.Meta.ReadCluster(context.Background())
	if err != nil || !found {
		t.Fatalf("cluster record: %v (found %t)", err, found)
	}
	rc.Generation++
	if _, err := w.Meta.UpdateCluster(context.Background(), modRev, rc); err != nil {
		t.Fatal(err)
	}
	fatal := await(t, rec, "the fatal error", func(err error) bool { return err != nil })
	if !errors.Is(fatal, ErrClaimChanged) || len(all[error](rec, nil)) != 1 {
		t.Fatalf("fatal %v (of %d): want ErrClaimChanged once", fatal, len(all[error](rec, nil)))
	}
}

// TestEventListenerPanicDropped: a listener that panics costs its event, not the stream.
func TestEventListenerPanicDropped(t *testing.T) {
	w := newWorld(t, worldOptions{})
	log, logs := testLogger(t)
	cfg := Config{Logger: log, Stream: StreamOptions{FragmentTargetSize: 16 << 10, PersistThreshold: 1, PersistInterval: 50 * time.Millisecond},
		Events: EventListener{OnPersisted: func(PersistedInfo) { panic("listener bug") }}}
	n := startNode(w, cfg)
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 7, loadgen.Limit{Bytes: 40 << 10})
	if err := n.AddStream(StreamSpec{ID: "x", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, "x", lg.NextOffset(), 30*time.Second)
	if logs.Count("event listener panicked") == 0 || n.Metrics().ReaderCrashes.Load() != 0 {
		t.Fatalf("%d panics logged, %d reader crashes", logs.Count("event listener panicked"), n.Metrics().ReaderCrashes.Load())
	}
}
