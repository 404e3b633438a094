package shell_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/streamtier/streamtier/actors/internal/actortest"
	"github.com/streamtier/streamtier/actors/internal/shell"
)

// taskOwner is a minimal owner of tasks, as the reader owns them: it spawns what it is
// sent (as a child task actor, or with owned in a goroutine of its own: TaskSet.Go) and
// hands the one result of each task to the test.
type taskOwner struct {
	ctx    context.Context
	tasks  shell.TaskSet
	timers shell.Timers
	out    chan any
	owned  bool
	wg     *sync.WaitGroup
}

func (o *taskOwner) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case shell.TaskSpec:
		if o.owned {
			o.tasks.Go(c, o.ctx, &o.timers, o.wg, m)
		} else {
			o.tasks.Spawn(c, o.ctx, &o.timers, m)
		}
	case shell.TaskDone:
		if res, ok := o.tasks.Done(&o.timers, m); ok {
			o.out <- res
		}
	case shell.TaskOverdue:
		if res, _, ok := o.tasks.Overdue(m); ok {
			o.out <- res
		}
	}
}

type taskFixture struct {
	clock  *actortest.ManualClock
	sys    *actor.ActorSystem
	pid    *actor.PID
	out    chan any
	panics *atomic.Int64
	cancel context.CancelFunc
	wg     *sync.WaitGroup // the owned goroutines (TaskSet.Go)
}

func newTaskFixture(t *testing.T, owned bool) *taskFixture {
	log, _ := actortest.Logger(t)
	f := &taskFixture{clock: actortest.NewManualClock(), sys: actortest.NewSystem(t, log), out: make(chan any, 16), panics: new(atomic.Int64), wg: new(sync.WaitGroup)}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	t.Cleanup(cancel)
	o := &taskOwner{ctx: ctx, out: f.out, timers: shell.Timers{Clock: f.clock}, tasks: shell.TaskSet{Log: log, Panics: f.panics}, owned: owned, wg: f.wg}
	f.pid = f.sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return o }))
	return f
}

// bothWays runs a test with tasks as child actors (Spawn) and in owned goroutines (Go).
func bothWays(t *testing.T, test func(t *testing.T, f *taskFixture)) {
	for _, owned := range []bool{false, true} {
		name := "spawn"
		if owned {
			name = "go"
		}
		t.Run(name, func(t *testing.T) { test(t, newTaskFixture(t, owned)) })
	}
}

// awaitGoroutines waits until the owned goroutines returned (a guard against a hang, not a
// timing assertion).
func (f *taskFixture) awaitGoroutines(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("an owned task goroutine did not return within 10 s of its owner's context ending")
	}
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
	bothWays(t, func(t *testing.T, f *taskFixture) {
		f.sys.Root.Send(f.pid, shell.TaskSpec{Name: "ok", Timeout: time.Minute, Failed: failedWith,
			Run: func(context.Context) any { return "done" }})
		if r := f.result(t); r != "done" {
			t.Fatalf("result %v", r)
		}
		actortest.Eventually(t, 5*time.Second, "overdue timer cancelled", func() (bool, string) {
			n, _ := f.clock.Pending()
			return n == 0, fmt.Sprintf("%d timers", n)
		})
	})
}

// TestTaskPanicAndNoResultBecomeFailures: a panic, or no result at all, comes back as the
// failure the owner expects.
func TestTaskPanicAndNoResultBecomeFailures(t *testing.T) {
	bothWays(t, func(t *testing.T, f *taskFixture) {
		f.sys.Root.Send(f.pid, shell.TaskSpec{Name: "boom", Timeout: time.Minute, Failed: failedWith,
			Run: func(context.Context) any { panic("injected task fault") }})
		if r, _ := f.result(t).(string); !strings.Contains(r, "failed: boom task panicked: injected task fault") {
			t.Fatalf("panicking task: %q", r)
		}
		f.sys.Root.Send(f.pid, shell.TaskSpec{Name: "empty", Timeout: time.Minute, Failed: failedWith,
			Run: func(context.Context) any { return nil }})
		if r, _ := f.result(t).(string); !strings.Contains(r, "failed: empty task returned no result") {
			t.Fatalf("task without a result: %q", r)
		}
		if f.panics.Load() != 1 {
			t.Fatalf("task panics %d, want 1", f.panics.Load())
		}
	})
}

// TestTaskDeadline: the operation's context carries the task's deadline.
func TestTaskDeadline(t *testing.T) {
	bothWays(t, func(t *testing.T, f *taskFixture) {
		f.sys.Root.Send(f.pid, shell.TaskSpec{Name: "slow", Timeout: 50 * time.Millisecond, Failed: failedWith,
			Run: func(ctx context.Context) any {
				<-ctx.Done()
				return "gave up: " + ctx.Err().Error()
			}})
		if r := f.result(t); r != "gave up: context deadline exceeded" {
			t.Fatalf("result %v", r)
		}
	})
}

// TestTaskOverdueBecomesFailure: a task stuck outside its context (a lost result) is given
// up on by the clock past its deadline and grace; its late result is dropped.
func TestTaskOverdueBecomesFailure(t *testing.T) {
	bothWays(t, func(t *testing.T, f *taskFixture) {
		release := make(chan struct{})
		finished := make(chan struct{})
		f.sys.Root.Send(f.pid, shell.TaskSpec{Name: "stuck", Timeout: 2 * time.Second, Failed: failedWith,
			Run: func(context.Context) any {
				defer close(finished)
				<-release // ignores its context
				return "late"
			}})
		d := f.clock.AwaitTimer(t, time.Hour, "overdue timer")
		if d != 2*time.Second+shell.TaskGrace(2*time.Second) {
			t.Fatalf("overdue in %v, want %v", d, 2*time.Second+shell.TaskGrace(2*time.Second))
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
	})
}

// TestTaskOfStoppedOwnerIsSilent: when the owner's context ends, the result is dropped.
func TestTaskOfStoppedOwnerIsSilent(t *testing.T) {
	bothWays(t, func(t *testing.T, f *taskFixture) {
		started := make(chan struct{})
		f.sys.Root.Send(f.pid, shell.TaskSpec{Name: "orphan", Timeout: time.Minute, Failed: failedWith,
			Run: func(ctx context.Context) any {
				close(started)
				<-ctx.Done()
				return "cancelled"
			}})
		<-started
		f.cancel()
		f.none(t, 100*time.Millisecond)
		f.awaitGoroutines(t)
	})
}
