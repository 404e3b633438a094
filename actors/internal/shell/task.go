package shell

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
)

// TaskSpec is one blocking operation (a group upload, a retention fetch, a resolution, a
// range GET) run as a task: Run does it within Timeout; Failed builds the failure result its
// owner's core expects, used when the operation panics, returns nothing, or its result never
// arrives.
type TaskSpec struct {
	Name    string
	Timeout time.Duration
	Run     func(ctx context.Context) any
	Failed  func(reason string) any
}

// TaskDone carries a task's result (its own, or the failure its panic was turned into) to
// its owner.
type TaskDone struct {
	ID     uint64
	Result any
}

// TaskOverdue fires when a task's result is late past its timeout and a grace period.
type TaskOverdue struct{ ID uint64 }

// TaskGrace is how long past its timeout a task's result may take before its owner gives up
// on it: the operation honours its context, so only a lost result or a task stuck outside
// its context gets there.
func TaskGrace(timeout time.Duration) time.Duration {
	return min(max(timeout/4, time.Second), 30*time.Second)
}

// task is a one-shot child actor: it runs one operation under its deadline with its owner's
// context, sends the result to its parent as TaskDone and stops. A panic becomes the
// failure result. Cancelling the owner's context (the owner stops or restarts) ends it and
// drops the result.
type task struct {
	id   uint64
	ctx  context.Context
	spec TaskSpec
	set  *TaskSet
}

func (t *task) Receive(c actor.Context) {
	if _, ok := c.Message().(*actor.Started); !ok {
		return
	}
	defer c.Stop(c.Self())
	t.run(c.ActorSystem().Root, c.Parent())
}

// run executes the task and sends its result to owner, unless the owner's context was
// cancelled meanwhile (it stopped or restarted: nobody waits for the result).
func (t *task) run(root *actor.RootContext, owner *actor.PID) {
	res := t.execute()
	if t.ctx.Err() == nil {
		root.Send(owner, TaskDone{ID: t.id, Result: res})
	}
}

func (t *task) execute() (res any) {
	ctx, cancel := context.WithTimeout(t.ctx, t.spec.Timeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			if t.set.Panics != nil {
				t.set.Panics.Add(1)
			}
			t.set.Log.Error().Str("task", t.spec.Name).Str("panic", fmt.Sprint(p)).Str("stack", string(debug.Stack())).
				Msg("task panicked; reported as a failure")
			res = t.spec.Failed(fmt.Sprintf("%s task panicked: %v", t.spec.Name, p))
		}
	}()
	if t.set.AtTask != nil {
		t.set.AtTask(t.spec.Name)
	}
	if res = t.spec.Run(ctx); res == nil {
		res = t.spec.Failed(t.spec.Name + " task returned no result")
	}
	return res
}

// TaskSet is one owner incarnation's operations in flight: its tasks and whatever other
// children it tracks (the persist actors). Each delivers exactly one result to the owner:
// its own, or, when it is overdue, its failure (a late result is then dropped).
type TaskSet struct {
	Log zerolog.Logger
	// Panics counts tasks that panicked; nil: not counted.
	Panics *atomic.Int64
	// AtTask is a test's fault hook, called in a task before its operation; nil: none.
	AtTask func(name string)

	next uint64
	live map[uint64]liveTask
}

type liveTask struct {
	name    string
	timeout time.Duration
	failed  func(reason string) any
	timer   uint64
}

// Track registers an operation that a child of the actor behind c runs within timeout, and
// arms its overdue timer on tm; failed builds the failure delivered when its result does
// not come. It returns the operation's id, which its result must carry.
func (s *TaskSet) Track(c actor.Context, tm *Timers, name string, timeout time.Duration, failed func(reason string) any) uint64 {
	if s.live == nil {
		s.live = make(map[uint64]liveTask)
	}
	s.next++
	id := s.next
	timer := tm.After(c.ActorSystem().Root, c.Self(), timeout+TaskGrace(timeout), TaskOverdue{ID: id})
	s.live[id] = liveTask{name: name, timeout: timeout, failed: failed, timer: timer}
	return id
}

// Spawn starts spec as a child task of the actor behind c, with the owner's context ctx,
// tracked on tm, and returns its id (what Settle takes to stop waiting for it).
func (s *TaskSet) Spawn(c actor.Context, ctx context.Context, tm *Timers, spec TaskSpec) uint64 {
	t := s.track(c, ctx, tm, spec)
	c.Spawn(actor.PropsFromProducer(func() actor.Actor { return t }))
	return t.id
}

// track registers spec as an operation of the actor behind c (Track) and returns its task.
func (s *TaskSet) track(c actor.Context, ctx context.Context, tm *Timers, spec TaskSpec) *task {
	return &task{id: s.Track(c, tm, spec.Name, spec.Timeout, spec.Failed), ctx: ctx, spec: spec, set: s}
}

// Go starts spec in a goroutine the actor behind c owns, instead of a child task actor (no
// actor to spawn, start and stop per operation: for the many short operations of one
// owner, such as range GETs). It is tracked on tm like Spawn's tasks, with the same
// contract: it runs under spec.Timeout with ctx, a panic becomes its failure, its result
// comes to the actor as TaskDone (dropped once ctx is cancelled) or, when it does not
// come in time, TaskOverdue. wg counts the goroutine until it returns: the owner cancels
// ctx when it stops and waits on wg, so that none outlives it. It returns the
// operation's id (what Settle takes).
func (s *TaskSet) Go(c actor.Context, ctx context.Context, tm *Timers, wg *sync.WaitGroup, spec TaskSpec) uint64 {
	t := s.track(c, ctx, tm, spec)
	root, self := c.ActorSystem().Root, c.Self()
	wg.Add(1)
	go func() {
		defer wg.Done()
		t.run(root, self)
	}()
	return t.id
}

// Live is how many operations are waited for.
func (s *TaskSet) Live() int { return len(s.live) }

// Settle reports whether the operation id is still waited for, and stops waiting for it.
func (s *TaskSet) Settle(tm *Timers, id uint64) bool {
	lt, ok := s.live[id]
	if !ok {
		return false
	}
	s.forget(id)
	tm.Cancel(lt.timer)
	return true
}

// forget stops waiting for id. The map goes once empty: a reader keeps its TaskSet for its
// whole incarnation, and an idle one held the buckets of its resolution's map (about 400
// bytes a stream) for nothing.
func (s *TaskSet) forget(id uint64) {
	delete(s.live, id)
	if len(s.live) == 0 {
		s.live = nil
	}
}

// Done returns the result to deliver for m, if its task is still waited for.
func (s *TaskSet) Done(tm *Timers, m TaskDone) (any, bool) {
	if !s.Settle(tm, m.ID) {
		return nil, false
	}
	return m.Result, true
}

// Overdue returns the failure to deliver for an overdue operation, and its name, if it is
// still waited for.
func (s *TaskSet) Overdue(m TaskOverdue) (any, string, bool) {
	lt, ok := s.live[m.ID]
	if !ok {
		return nil, "", false
	}
	s.forget(m.ID)
	reason := fmt.Sprintf("%s task gave no result within %s", lt.name, lt.timeout+TaskGrace(lt.timeout))
	return lt.failed(reason), lt.name, true
}
