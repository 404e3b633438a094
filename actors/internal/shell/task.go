package actors

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
)

// taskSpec is one blocking operation (a group upload, a retention fetch, a resolution) run
// as a task (a persist has its own actor kind, persist.go): run does it within timeout; failed builds the failure result
// its owner's core expects, used when the operation panics, returns nothing, or its result
// never arrives.
type taskSpec struct {
	name    string
	timeout time.Duration
	run     func(ctx context.Context) any
	failed  func(reason string) any
}

// taskDone carries a task's result (its own, or the failure its panic was turned into).
type taskDone struct {
	id     uint64
	result any
}

// taskOverdue fires when a task's result is late past its timeout and a grace period.
type taskOverdue struct{ id uint64 }

// taskGrace is how long past its timeout a task's result may take before its owner gives up
// on it: the operation honours its context, so only a lost result or a task stuck outside
// its context gets there.
func taskGrace(timeout time.Duration) time.Duration {
	return min(max(timeout/4, time.Second), 30*time.Second)
}

// task is a one-shot child actor: it runs one operation under its deadline with its owner's
// context, sends the result to its parent as taskDone and stops. A panic becomes the
// failure result. Cancelling the owner's context (the owner stops or restarts) ends it and
// drops the result.
type task struct {
	id      uint64
	ctx     context.Context
	spec    taskSpec
	log     zerolog.Logger
	metrics *Metrics
	faults  *faultHooks
}

func (t *task) Receive(c actor.Context) {
	if _, ok := c.Message().(*actor.Started); !ok {
		return
	}
	defer c.Stop(c.Self())
	res := t.execute()
	if t.ctx.Err() == nil {
		c.Send(c.Parent(), taskDone{id: t.id, result: res})
	}
}

func (t *task) execute() (res any) {
	ctx, cancel := context.WithTimeout(t.ctx, t.spec.timeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			t.metrics.TaskPanics.Add(1)
			t.log.Error().Str("task", t.spec.name).Str("panic", fmt.Sprint(p)).Str("stack", string(debug.Stack())).
				Msg("task panicked; reported as a failure")
			res = t.spec.failed(fmt.Sprintf("%s task panicked: %v", t.spec.name, p))
		}
	}()
	t.faults.atTask(t.spec.name)
	if res = t.spec.run(ctx); res == nil {
		res = t.spec.failed(t.spec.name + " task returned no result")
	}
	return res
}

// taskSet is one owner incarnation's operations in flight: its tasks and its persist
// actors. Each delivers exactly one result to the owner: its own, or, when it is overdue,
// its failure (a late result is then dropped).
type taskSet struct {
	log     zerolog.Logger
	metrics *Metrics
	faults  *faultHooks

	next uint64
	live map[uint64]liveTask
}

type liveTask struct {
	name    string
	timeout time.Duration
	failed  func(reason string) any
	timer   uint64
}

// track registers an operation that a child of the actor behind c runs within timeout, and
// arms its overdue timer on tm; failed builds the failure delivered when its result does
// not come. It returns the operation's id, which its result must carry.
func (s *taskSet) track(c actor.Context, tm *timers, name string, timeout time.Duration, failed func(reason string) any) uint64 {
	if s.live == nil {
		s.live = make(map[uint64]liveTask)
	}
	s.next++
	id := s.next
	timer := tm.after(c.ActorSystem().Root, c.Self(), timeout+taskGrace(timeout), taskOverdue{id: id})
	s.live[id] = liveTask{name: name, timeout: timeout, failed: failed, timer: timer}
	return id
}

// spawn starts spec as a child task of the actor behind c, with the owner's context ctx,
// tracked on tm, and returns its id (what settle takes to stop waiting for it).
func (s *taskSet) spawn(c actor.Context, ctx context.Context, tm *timers, spec taskSpec) uint64 {
	id := s.track(c, tm, spec.name, spec.timeout, spec.failed)
	t := &task{id: id, ctx: ctx, spec: spec, log: s.log, metrics: s.metrics, faults: s.faults}
	c.Spawn(actor.PropsFromProducer(func() actor.Actor { return t }))
	return id
}

// settle reports whether the operation id is still waited for, and stops waiting for it.
func (s *taskSet) settle(tm *timers, id uint64) bool {
	lt, ok := s.live[id]
	if !ok {
		return false
	}
	delete(s.live, id)
	tm.cancel(lt.timer)
	return true
}

// done returns the result to deliver for m, if its task is still waited for.
func (s *taskSet) done(tm *timers, m taskDone) (any, bool) {
	if !s.settle(tm, m.id) {
		return nil, false
	}
	return m.result, true
}

// overdue returns the failure to deliver for an overdue operation, and its name, if it is
// still waited for.
func (s *taskSet) overdue(m taskOverdue) (any, string, bool) {
	lt, ok := s.live[m.id]
	if !ok {
		return nil, "", false
	}
	delete(s.live, m.id)
	reason := fmt.Sprintf("%s task gave no result within %s", lt.name, lt.timeout+taskGrace(lt.timeout))
	return lt.failed(reason), lt.name, true
}
