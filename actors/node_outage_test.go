package actors

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors/internal/actortest"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
	"github.com/streamtier/streamtier/verify"
)

type restartableEtcd = actortest.RestartableEtcd

var newRestartableEtcd = actortest.NewRestartableEtcd

// steadyWriter appends two chunks to a log every 50 ms until stopped.
type steadyWriter struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	err    error
}

func startSteadyWriter(t *testing.T, lg *segments.Log, seed uint64) *steadyWriter {
	t.Helper()
	g, err := loadgen.New(loadgen.Config{Seed: seed, MinDataBytes: 1000, MaxDataBytes: 3000})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sw := &steadyWriter{cancel: cancel}
	sw.wg.Add(1)
	go func() {
		defer sw.wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if _, err := loadgen.Write(ctx, lg, g, loadgen.Limit{Chunks: 2}, loadgen.WriteOptions{Commit: true}); err != nil && ctx.Err() == nil {
				sw.err = err
				return
			}
		}
	}()
	t.Cleanup(func() { sw.stop(t) })
	return sw
}

func (sw *steadyWriter) stop(t *testing.T) {
	t.Helper()
	sw.once.Do(func() {
		sw.cancel()
		sw.wg.Wait()
		if sw.err != nil {
			t.Errorf("writer: %v", sw.err)
		}
	})
}

// TestEtcdOutageMidRun: while a writer appends at a steady rate, etcd is stopped (the
// embedded server closed) and started again on the same data directory and ports. The
// outage lasts 8 s by default (STREAMTIER_ETCD_OUTAGE=30s for the 30 s): with a 1 s
// persist timeout it crosses the deadline several times, and the client's reconnect
// backoff is capped at 2 s, so a longer outage shows little more. Persist failures are counted and shown in status while it lasts,
// the stream resumes by itself within seconds of etcd's return, and nothing is lost: every
// offset is durable at the end and the remote tier matches the local log chunk for chunk.
func TestEtcdOutageMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("an 8 s etcd outage")
	}
	outage := 8 * time.Second
	if v := os.Getenv("STREAMTIER_ETCD_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("STREAMTIER_ETCD_OUTAGE=%q: %v", v, err)
		}
		outage = d
	}
	w := newWorld(t, worldOptions{EtcdRestart: true})
	log, _ := testLogger(t)
	n := startNode(w, Config{Logger: log, PersistTimeout: time.Second, LocalHotWindowBytes: 1 << 40, // keep the log to compare with
		Stream: StreamOptions{FragmentTargetSize: 32 << 10, PersistThreshold: 2, PersistInterval: 200 * time.Millisecond}})
	lg := openLog(t, segments.Options{MaxSegmentBytes: 256 << 10})
	if err := n.AddStream(StreamSpec{ID: "eo", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	writer := startSteadyWriter(t, lg, 30)
	time.Sleep(time.Second)
	persisted(t, n, "eo", lg.CommittedNext(), 20*time.Second)

	m := n.Metrics()
	failures := m.PersistFailures.Load()
	w.Etcd.Stop()
	down := time.Now()
	until(t, outage, "persist failures counted and in status", func() (bool, string) {
		st := status(t, n, "eo")
		return m.PersistFailures.Load() >= failures+3 && st.Core.LastPersistError != "" && st.Core.Counters.PersistFailures >= 3,
			fmt.Sprintf("%d failures; %q", m.PersistFailures.Load()-failures, st.Core.LastPersistError)
	})
	time.Sleep(time.Until(down.Add(outage)))
	st := status(t, n, "eo")
	t.Logf("after %v without etcd: %d persist failures, last %q, %d unpersisted edits, phase %s",
		outage, m.PersistFailures.Load()-failures, st.Core.LastPersistError, st.Core.UnpersistedEdits, st.Phase)
	if st.Phase != "running" || st.Core.UnpersistedEdits == 0 {
		t.Fatalf("during the outage: phase %s, %d unpersisted edits", st.Phase, st.Core.UnpersistedEdits)
	}

	persists := m.Persists.Load()
	w.Etcd.Start()
	back := time.Now()
	until(t, 10*time.Second, "a persist after etcd's return", func() (bool, string) {
		return m.Persists.Load() > persists, status(t, n, "eo").Core.LastPersistError
	})
	t.Logf("first persist %v after etcd's return", time.Since(back).Round(time.Millisecond))
	persisted(t, n, "eo", lg.CommittedNext(), 20*time.Second) // the writer still appends
	writer.stop(t)
	persisted(t, n, "eo", lg.NextOffset(), 20*time.Second)

	st = status(t, n, "eo")
	if st.Core.LastPersistError != "" || st.Phase != "running" || m.CoreErrors.Load() != 0 {
		t.Fatalf("after the outage: phase %s, last error %q, %d core errors", st.Phase, st.Core.LastPersistError, m.CoreErrors.Load())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := verify.Stream(ctx, verify.Options{Store: w.Store, Meta: w.Meta, Stream: "eo", LogDir: lg.Dir()})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.FirstOffset != lg.FirstOffset() || rep.NextOffset != lg.NextOffset() || rep.Gaps != 0 ||
		rep.LocalAbsent != 0 || rep.LocalCompared != rep.Chunks || rep.Chunks == 0 {
		t.Fatalf("remote tier against the log [%d,%d): %+v", lg.FirstOffset(), lg.NextOffset(), rep)
	}
	t.Logf("verified [%d,%d): %d fragments, %d chunks compared with the log; %d reinitializations", rep.FirstOffset, rep.NextOffset,
		rep.Fragments, rep.LocalCompared, m.Reinitializations.Load())
}
