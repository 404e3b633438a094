package actors

import (
	"context"
	"fmt"
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

// taskOwner is a minimal owner of tasks, as the reader owns them: it spawns what it is
// sent and hands the one result of each task to the test.
type taskOwner struct {
	ctx    context.Context
	tasks  taskSet
	timers timers
	out    chan any
}

func (o *taskOwner) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case taskSpec:
		o.tasks.spawn(c, o.ctx, &o.timers, m)
	case taskDone:
		if res, ok := o.tasks.done(&o.timers, m); ok {
			o.out <- res
		}
	case taskOverdue:
		if res, _, ok := o.tasks.overdue(m); ok {
			o.out <- res
		}
	}
}

type taskFixture struct {
	clock   *manualClock
	sys     *actor.ActorSystem
	pid     *actor.PID
	out     chan any
	metrics *Metrics
	cancel  context.CancelFunc
}

func newTaskFixture(t *testing.T) *taskFixture {
	log, _ := testLogger(t)
	f := &taskFixture{clock: newManualClock(), sys: newSystem(t, log), out: make(chan any, 16), metrics: &Metrics{}}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	t.Cleanup(cancel)
	o := &taskOwner{ctx: ctx, out: f.out, timers: timers{clock: f.clock}, tasks: taskSet{log: log, metrics: f.metrics}}
	f.pid = f.sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return o }))
	return f
}

func failedWith(reason string) any { return "failed: " + reason }

func (f *taskFixture) result(t *testing.T) any {
	t.Helper()
	select {
	case r := <-f.out:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no task result within 10 s")
		return nil
	}
}

func (f *taskFixture) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case r := <-f.out:
		t.Fatalf("unexpected task result %v", r)
	case <-time.After(d):
	}
}

// TestTaskResultOnce: a result is delivered once and its overdue timer is cancelled.
func TestTaskResultOnce(t *testing.T) {
	f := newTaskFixture(t)
	f.sys.Root.Send(f.pid, taskSpec{name: "ok", timeout: time.Minute, failed: failedWith,
		run: func(context.Context) any { return "done" }})
	if r := f.result(t); r != "done" {
		t.Fatalf("result %v", r)
	}
	until(t, 5*time.Second, "overdue timer cancelled", func() (bool, string) {
		n, _ := f.clock.pending()
		return n == 0, fmt.Sprintf("%d timers", n)
	})
}

// TestTaskPanicAndNoResultBecomeFailures: a panic, or no result at all, comes back as the
// failure the owner expects.
func TestTaskPanicAndNoResultBecomeFailures(t *testing.T) {
	f := newTaskFixture(t)
	f.sys.Root.Send(f.pid, taskSpec{name: "boom", timeout: time.Minute, failed: failedWith,
		run: func(context.Context) any { panic("injected task fault") }})
	if r, _ := f.result(t).(string); !strings.Contains(r, "failed: boom task panicked: injected task fault") {
		t.Fatalf("panicking task: %q", r)
	}
	f.sys.Root.Send(f.pid, taskSpec{name: "empty", timeout: time.Minute, failed: failedWith,
		run: func(context.Context) any { return nil }})
	if r, _ := f.result(t).(string); !strings.Contains(r, "failed: empty task returned no result") {
		t.Fatalf("task without a result: %q", r)
	}
	if f.metrics.TaskPanics.Load() != 1 {
		t.Fatalf("task panics %d, want 1", f.metrics.TaskPanics.Load())
	}
}

// TestTaskDeadline: the operation's context carries the task's deadline.
func TestTaskDeadline(t *testing.T) {
	f := newTaskFixture(t)
	f.sys.Root.Send(f.pid, taskSpec{name: "slow", timeout: 50 * time.Millisecond, failed: failedWith,
		run: func(ctx context.Context) any {
			<-ctx.Done()
			return "gave up: " + ctx.Err().Error()
		}})
	if r := f.result(t); r != "gave up: context deadline exceeded" {
		t.Fatalf("result %v", r)
	}
}

// TestTaskOverdueBecomesFailure: a task stuck outside its context (a lost result) is given
// up on by the clock past its deadline and grace; its late result is dropped.
func TestTaskOverdueBecomesFailure(t *testing.T) {
	f := newTaskFixture(t)
	release := make(chan struct{})
	finished := make(chan struct{})
	f.sys.Root.Send(f.pid, taskSpec{name: "stuck", timeout: 2 * time.Second, failed: failedWith,
		run: func(context.Context) any {
			defer close(finished)
			<-release // ignores its context
			return "late"
		}})
	d := f.clock.awaitTimer(t, time.Hour, "overdue timer")
	if d != 2*time.Second+taskGrace(2*time.Second) {
		t.Fatalf("overdue in %v, want %v", d, 2*time.Second+taskGrace(2*time.Second))
	}
	f.clock.Advance(d - time.Millisecond)
	f.none(t, 50*time.Millisecond)
	f.clock.Advance(time.Millisecond)
	if r, _ := f.result(t).(string); !strings.Contains(r, "failed: stuck task gave no result within") {
		t.Fatalf("overdue task: %q", r)
	}
	close(release)
	<-finished
	f.none(t, 100*time.Millisecond)
}

// TestTaskOfStoppedOwnerIsSilent: when the owner's context ends, the result is dropped.
func TestTaskOfStoppedOwnerIsSilent(t *testing.T) {
	f := newTaskFixture(t)
	started := make(chan struct{})
	f.sys.Root.Send(f.pid, taskSpec{name: "orphan", timeout: time.Minute, failed: failedWith,
		run: func(ctx context.Context) any {
			close(started)
			<-ctx.Done()
			return "cancelled"
		}})
	<-started
	f.cancel()
	f.none(t, 100*time.Millisecond)
}

// TestPersistDeadlineDuringEtcdPartition: with etcd partitioned away, a persist fails at its
// deadline instead of staying in flight: failures are counted, the core retries, and the
// stream persists once the partition heals.
func TestPersistDeadlineDuringEtcdPartition(t *testing.T) {
	w := newWorld(t, worldOptions{etcdFaults: true})
	log, _ := testLogger(t)
	n := w.startNode(Config{Logger: log, PersistTimeout: 300 * time.Millisecond,
		Stream: readercore.Config{FragmentTargetSize: 16 << 10, PersistThreshold: 1, PersistInterval: 100 * time.Millisecond}})
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 1, loadgen.Limit{Bytes: 64 << 10})
	if err := n.AddStream(StreamSpec{ID: "p", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, "p", lg.NextOffset(), 30*time.Second)
	w.proxy.Partition()
	failures := n.Metrics().PersistFailures.Load()
	writeLog(t, lg, 2, loadgen.Limit{Bytes: 64 << 10})
	_ = n.ForceCut("p")
	until(t, 10*time.Second, "persists failing at their deadline", func() (bool, string) {
		st, _ := n.Status(context.Background(), "p")
		return n.Metrics().PersistFailures.Load() >= failures+3 && strings.Contains(st.Core.LastPersistError, "deadline exceeded"),
			fmt.Sprintf("%d failures, last %q", n.Metrics().PersistFailures.Load()-failures, st.Core.LastPersistError)
	})
	w.proxy.Heal()
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
	n := w.startNode(Config{Logger: log, faults: &faultHooks{task: func(name string) {
		mu.Lock()
		first := !panicked[name]
		panicked[name] = true
		mu.Unlock()
		if first {
			panic("injected " + name + " fault")
		}
	}}, Stream: readercore.Config{FragmentTargetSize: 8 << 10, PersistThreshold: 1, PersistInterval: 50 * time.Millisecond, RebalanceThreshold: 4}})
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
	tasks, persists := logs.count(`"message":"task panicked; reported as a failure"`), logs.count(`"message":"persist panicked; reported as a failure"`)
	if tasks != 3 || persists != 1 {
		t.Fatalf("%d task panics and %d persist panics logged, want 3 and 1", tasks, persists)
	}
}
