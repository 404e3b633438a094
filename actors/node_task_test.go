package actors

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// TestPersistDeadlineDuringEtcdPartition: with etcd partitioned away, a persist fails at its
// deadline instead of staying in flight: failures are counted, the core retries, and the
// stream persists once the partition heals.
func TestPersistDeadlineDuringEtcdPartition(t *testing.T) {
	w := newWorld(t, worldOptions{EtcdFaults: true})
	log, _ := testLogger(t)
	n := startNode(w, Config{Logger: log, PersistTimeout: 300 * time.Millisecond,
		Stream: StreamOptions{FragmentTargetSize: 16 << 10, PersistThreshold: 1, PersistInterval: 100 * time.Millisecond}})
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 1, loadgen.Limit{Bytes: 64 << 10})
	if err := n.AddStream(StreamSpec{ID: "p", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, "p", lg.NextOffset(), 30*time.Second)
	w.Proxy.Partition()
	failures := n.Metrics().PersistFailures.Load()
	writeLog(t, lg, 2, loadgen.Limit{Bytes: 64 << 10})
	_ = n.ForceCut("p")
	until(t, 10*time.Second, "persists failing at their deadline", func() (bool, string) {
		st, _ := n.Status(context.Background(), "p")
		return n.Metrics().PersistFailures.Load() >= failures+3 && strings.Contains(st.Core.LastPersistError, "deadline exceeded"),
			fmt.Sprintf("%d failures, last %q", n.Metrics().PersistFailures.Load()-failures, st.Core.LastPersistError)
	})
	w.Proxy.Heal()
	persisted(t, n, "p", lg.NextOffset(), 30*time.Second)
}

// TestTaskPanicsBecomeFailures: a panic in each kind of task (resolution, group upload,
// retention fetch) and in a persist actor reaches the core as a failure, which it retries:
// the stream resolves, persists, rebalances and trims as if the task had merely failed.
func TestTaskPanicsBecomeFailures(t *testing.T) {
	w := newWorld(t, worldOptions{})
	log, logs := testLogger(t)
	var mu sync.Mutex
	panicked := map[string]bool{}
	n := startNode(w, Config{Logger: log, faults: &faultHooks{task: func(name string) {
		mu.Lock()
		first := !panicked[name]
		panicked[name] = true
		mu.Unlock()
		if first {
			panic("injected " + name + " fault")
		}
	}}, Stream: StreamOptions{FragmentTargetSize: 8 << 10, PersistThreshold: 1, PersistInterval: 50 * time.Millisecond, RebalanceThreshold: 4}})
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 3, loadgen.Limit{Bytes: 400 << 10})
	if err := n.AddStream(StreamSpec{ID: "tp", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, "tp", lg.NextOffset(), 60*time.Second)
	kinds := func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprint(panicked)
	}
	// A group upload that failed (here: panicked) is given up until the next persist. When
	// its failure lands after the log's last persist (a loaded machine), nothing retries it:
	// each poll that finds the root still unfolded appends a little, so a persist comes.
	more := uint64(100)
	until(t, 30*time.Second, "groups uploaded after the group upload's panic", func() (bool, string) {
		st, _ := n.Status(context.Background(), "tp")
		if n.Metrics().TaskPanics.Load() == 3 && st.Core.Entries <= 4 {
			return true, ""
		}
		if st.Core.PersistedNext == lg.NextOffset() {
			more++
			writeLog(t, lg, more, loadgen.Limit{Bytes: 16 << 10})
		}
		return false, fmt.Sprint(kinds(), st.Core)
	})
	persisted(t, n, "tp", lg.NextOffset(), 60*time.Second) // what the loop appended, cut and persisted
	// The head is a group now: retention must fetch it.
	if err := n.SetRetention("tp", manifest.Policy{MaxBytes: 100 << 10}); err != nil {
		t.Fatal(err)
	}
	until(t, 30*time.Second, "the retention fetch panicked", func() (bool, string) {
		return n.Metrics().TaskPanics.Load() == 4, kinds()
	})
	until(t, 30*time.Second, "retention trims the stream after the fetch's panic", func() (bool, string) {
		_ = n.EvaluateRetention("tp")
		st, err := n.Status(context.Background(), "tp")
		return err == nil && st.Core.PersistedNext == lg.NextOffset() && st.Core.TotalSize <= 100<<10, fmt.Sprint(err, st.Core)
	})
	if n.Metrics().ResolveFailures.Load() == 0 || n.Metrics().PersistFailures.Load() == 0 {
		t.Fatalf("resolve failures %d, persist failures %d: the panics were not reported as failures", n.Metrics().ResolveFailures.Load(), n.Metrics().PersistFailures.Load())
	}
	tasks, persists := logs.Count(`"message":"task panicked; reported as a failure"`), logs.Count(`"message":"persist panicked; reported as a failure"`)
	if tasks != 3 || persists != 1 {
		t.Fatalf("%d task panics and %d persist panics logged, want 3 and 1", tasks, persists)
	}
}
