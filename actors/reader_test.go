package actors

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// readerStream starts a node on w with small fragments and quick persists, adds stream on a
// fresh log holding some data, and waits until all of it is persisted.
func readerStream(t *testing.T, w *world, cfg Config, stream string) (*Node, *segments.Log) {
	t.Helper()
	if cfg.Stream.FragmentTargetSize == 0 {
		cfg.Stream = StreamOptions{FragmentTargetSize: 16 << 10, PersistThreshold: 1, PersistInterval: 100 * time.Millisecond}
	}
	n := startNode(w, cfg)
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 7, loadgen.Limit{Bytes: 48 << 10})
	if err := n.AddStream(StreamSpec{ID: stream, Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, stream, lg.NextOffset(), 30*time.Second)
	return n, lg
}

func status(t *testing.T, n *Node, stream string) StreamStatus {
	t.Helper()
	st, err := n.Status(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestReaderPersistFailureRetriedAndReported: every root PUT is refused (403): the
// persists fail, are counted and shown in status, and are retried at the persist interval
// (once at once, then on the timer: no spin); once S3 accepts roots again the stream
// persists by itself.
func TestReaderPersistFailureRetriedAndReported(t *testing.T) {
	w := newWorld(t, worldOptions{})
	log, _ := testLogger(t)
	n, lg := readerStream(t, w, Config{Logger: log}, "pf")
	w.Inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: `/meta/root-`, Fault: s3test.FaultForbidden})
	failures := n.Metrics().PersistFailures.Load()
	writeLog(t, lg, 8, loadgen.Limit{Bytes: 48 << 10})
	_ = n.ForceCut("pf")
	until(t, 10*time.Second, "persist failures in status", func() (bool, string) {
		st := status(t, n, "pf")
		return n.Metrics().PersistFailures.Load() >= failures+3 && strings.Contains(st.Core.LastPersistError, "put root"), st.Core.LastPersistError
	})
	hits := w.Inj.Hits()
	time.Sleep(time.Second)
	if d := w.Inj.Hits() - hits; d < 5 || d > 14 { // the persist interval is 100 ms
		t.Fatalf("%d refused root PUTs in a second, want about 10", d)
	}
	if st := status(t, n, "pf"); st.Core.PersistState != "backoff" && st.Core.PersistState != "in-flight" {
		t.Fatalf("persist state %q while failing", st.Core.PersistState)
	}
	w.Inj.Clear()
	persisted(t, n, "pf", lg.NextOffset(), 10*time.Second)
	if st := status(t, n, "pf"); st.Core.LastPersistError != "" || n.Metrics().Reinitializations.Load() != 0 {
		t.Fatalf("after recovery: last error %q, %d reinitializations", st.Core.LastPersistError, n.Metrics().Reinitializations.Load())
	}
}

// TestReaderConflictReinitializes: another writer at the same epoch persists behind the
// reader's back; the reader's next persist conflicts, it reinitializes (a supervised
// restart, not a crash), resolves the other writer's record and goes on tiering.
func TestReaderConflictReinitializes(t *testing.T) {
	w := newWorld(t, worldOptions{})
	log, _ := testLogger(t)
	n, lg := readerStream(t, w, Config{Logger: log}, "cf")
	rec, rev, _, err := w.Meta.ReadManifest(context.Background(), "cf")
	if err != nil {
		t.Fatal(err)
	}
	other := otherWriter(t, w.Meta, "cf", 1, rev, rec) // the same root, one revision up
	writeLog(t, lg, 9, loadgen.Limit{Bytes: 48 << 10})
	persisted(t, n, "cf", lg.NextOffset(), 30*time.Second)
	h, _ := n.handle("cf")
	m := n.Metrics()
	if m.Reinitializations.Load() != 1 || h.restarts.Load() != 1 || h.incarnations.Load() != 2 || m.ReaderCrashes.Load() != 0 {
		t.Fatalf("%d reinitializations, %d restarts, %d incarnations, %d crashes", m.Reinitializations.Load(), h.restarts.Load(), h.incarnations.Load(), m.ReaderCrashes.Load())
	}
	if st := status(t, n, "cf"); st.Core.Revision <= other || st.Phase != "running" {
		t.Fatalf("after the conflict: phase %s at revision %d, the other writer's was %d", st.Phase, st.Core.Revision, other)
	}
}

// TestReaderNotFoundStops: the stream's records vanish (no tombstone) after it persisted;
// its next persist finds no record: the reader stops for good, says why, fails its
// waiters and writes nothing more.
func TestReaderNotFoundStops(t *testing.T) {
	w := newWorld(t, worldOptions{})
	log, _ := testLogger(t)
	n, lg := readerStream(t, w, Config{Logger: log}, "nf")
	ctx := context.Background()
	streamKeys := metadata.StreamPrefix(w.Meta.Prefix(), "nf")
	if _, err := w.Meta.Client().Delete(ctx, streamKeys, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	writeLog(t, lg, 10, loadgen.Limit{Bytes: 48 << 10})
	_ = n.ForceCut("nf")
	until(t, 10*time.Second, "the reader stopped", func() (bool, string) {
		st := status(t, n, "nf")
		return st.Phase == "stopped", st.Phase
	})
	if st := status(t, n, "nf"); !strings.Contains(st.StopReason, "manifest record not found after revision") {
		t.Fatalf("stop reason %q", st.StopReason)
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := n.AwaitOffset(actx, "nf", lg.NextOffset()-1); !errors.Is(err, ErrStreamStopped) {
		t.Fatalf("await after the stop: %v", err)
	}
	resp, err := w.Meta.Client().Get(ctx, streamKeys, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("records written after the stop: %d (%v)", resp.Count, err)
	}
	if n.Metrics().Reinitializations.Load() != 0 || n.Metrics().PersistNotFound.Load() != 1 {
		t.Fatalf("%d reinitializations, %d not-found", n.Metrics().Reinitializations.Load(), n.Metrics().PersistNotFound.Load())
	}
}

// TestReaderMissingAnchorReinitializesOnce: the stream's anchor is removed (no tombstone)
// before every persist of a stream that never persisted. Format version 3: the not-found
// makes the reader resolve again, which finds the root its persist PUT but no anchor: etcd
// lost the stream, so it stalls in metadata_missing and writes nothing (before version 3 it
// wrote the anchor again). Once an operator writes the anchor back, it adopts its root and
// persists by itself.
func TestReaderMissingAnchorReinitializesOnce(t *testing.T) {
	w := newWorld(t, worldOptions{})
	log, _ := testLogger(t)
	var removing atomic.Bool
	removing.Store(true)
	anchor := metadata.AnchorKey(w.Meta.Prefix(), "na")
	faults := &faultHooks{task: func(name string) {
		if name == "persist" && removing.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := w.Meta.Client().Delete(ctx, anchor); err != nil {
				panic(err)
			}
		}
	}}
	n := startNode(w, Config{Logger: log, faults: faults, StallRetry: 100 * time.Millisecond, // resolved again soon after the repair
		Stream: StreamOptions{FragmentTargetSize: 16 << 10, PersistThreshold: 1, PersistInterval: 200 * time.Millisecond}})
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 11, loadgen.Limit{Bytes: 48 << 10})
	if err := n.AddStream(StreamSpec{ID: "na", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	// Format version 3: the persist finds the anchor gone (metadata missing), the reader
	// resolves again and finds roots but no anchor: it stalls in metadata_missing and
	// writes nothing, not even the anchor, until an operator repairs etcd.
	until(t, 20*time.Second, "status says the metadata is missing", func() (bool, string) {
		st := status(t, n, "na")
		return st.Phase == "metadata_missing" && strings.Contains(st.MetadataReason, "node recover na"), st.Phase + " " + st.MetadataReason
	})
	m := n.Metrics()
	if _, _, found, err := w.Meta.ReadManifest(context.Background(), "na"); err != nil || found {
		t.Fatalf("a record was written for a stream stalled in metadata_missing (%v)", err)
	}
	if ok, err := w.Meta.HasAnchor(context.Background(), "na", true); err != nil || ok {
		t.Fatalf("the anchor was written back by the stalled stream (%v)", err)
	}
	removing.Store(false)
	if err := w.Meta.Anchor(context.Background(), "na"); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, "na", lg.NextOffset(), 10*time.Second)
	if st := status(t, n, "na"); st.Core.LastPersistError != "" || m.Adoptions.Load() != 1 || m.StreamsMetadataMissing.Load() != 0 {
		t.Fatalf("after the anchor came back: %q, %d adoptions, %d streams missing", st.Core.LastPersistError, m.Adoptions.Load(), m.StreamsMetadataMissing.Load())
	}
}

// TestReaderStrayMessagesNotFed: core events the reader does not expect from outside (a
// drained chunk, a persist result, a group result, an end of stream) and foreign values
// are logged, counted and dropped, never fed to the core; the stream goes on.
func TestReaderStrayMessagesNotFed(t *testing.T) {
	w := newWorld(t, worldOptions{})
	log, logs := testLogger(t)
	n, lg := readerStream(t, w, Config{Logger: log}, "st")
	h, _ := n.handle("st")
	before := status(t, n, "st").Core.Counters
	strays := []any{
		readercore.ChunkDrained{}, // out of sequence: the core would refuse it
		readercore.PersistResult{Ref: 1 << 50, Outcome: readercore.PersistOK, Revision: 99},
		readercore.GroupUploadResult{Ref: 1 << 50},
		readercore.EndOfStream{},
		"hello",
	}
	for _, m := range strays {
		n.root.Send(h.readerPID(), m)
	}
	until(t, 5*time.Second, "strays counted", func() (bool, string) {
		got := n.Metrics().StrayMessages.Load()
		return got == int64(len(strays)), fmt.Sprint(got)
	})
	writeLog(t, lg, 12, loadgen.Limit{Bytes: 48 << 10})
	persisted(t, n, "st", lg.NextOffset(), 20*time.Second)
	after := status(t, n, "st").Core.Counters
	if n.Metrics().CoreErrors.Load() != 0 || after.IgnoredResults != before.IgnoredResults {
		t.Fatalf("strays reached the core: %d core errors, ignored results %d -> %d", n.Metrics().CoreErrors.Load(), before.IgnoredResults, after.IgnoredResults)
	}
	if got := logs.Count("reader got a message it does not handle"); got != len(strays) {
		t.Fatalf("%d strays logged, want %d", got, len(strays))
	}
}

// TestReaderQuietStreamFullyPersisted: a stream that stops writing is fully persisted
// without a forced cut, within the fragment max age plus a margin for the upload and the
// persist, although its tail is far below the fragment target, below the persist threshold,
// and the persist interval is a minute: the idle cut cuts the tail once its oldest chunk
// waited the max age, and the persist follows the upload at once because the pipeline has
// drained. Without the idle cut the tail would stay local; without the settled persist it
// would wait for the interval. The same again for a second burst on the running stream.
func TestReaderQuietStreamFullyPersisted(t *testing.T) {
	const maxAge, margin = 300 * time.Millisecond, 10 * time.Second
	w := newWorld(t, worldOptions{})
	log, _ := testLogger(t)
	n := startNode(w, Config{Logger: log, Stream: StreamOptions{
		FragmentTargetSize: 8 << 20, PersistThreshold: 100, PersistInterval: time.Minute, FragmentMaxAge: maxAge,
	}})
	lg := openLog(t, segments.Options{})
	quiet := func(seed uint64) {
		t.Helper()
		writeLog(t, lg, seed, loadgen.Limit{Bytes: 96 << 10})
		next := lg.NextOffset()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), maxAge+margin)
		defer cancel()
		if err := n.AwaitOffset(ctx, "quiet", next-1); err != nil {
			t.Fatalf("offset %d not persisted within %s: %v; %s", next-1, maxAge+margin, err, status(t, n, "quiet").Core)
		}
		st := status(t, n, "quiet")
		if st.Core.PersistedNext != next {
			t.Fatalf("persisted next %d, the log's committed next %d", st.Core.PersistedNext, next)
		}
		t.Logf("persisted [.., %d) %s after the writes stopped (max age %s, persist interval 1m)", next, time.Since(start).Round(time.Millisecond), maxAge)
	}
	writeLog(t, lg, 21, loadgen.Limit{Bytes: 64 << 10})
	if err := n.AddStream(StreamSpec{ID: "quiet", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	quiet(22)
	quiet(23)
	st := status(t, n, "quiet")
	if k := st.Core.Counters; k.IdleCuts < 2 || k.IdleCuts != k.Cuts {
		t.Fatalf("%d idle cuts of %d cuts, want every cut an idle one (at least 2)", k.IdleCuts, k.Cuts)
	}
	if st.Core.HeldBytes != 0 || st.Core.CutTimerArmed || st.Core.PersistState != "idle" {
		t.Fatalf("quiet stream still holds work: %s", st.Core)
	}
}
