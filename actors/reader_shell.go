package actors

import (
	"fmt"
	"sort"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/actors/readercore"
)

// restartDrain is the reader's (possibly delayed) restart of its failed drain.
type restartDrain struct{ pid *actor.PID }

// readerShell is the reader incarnation's bookkeeping around its children and the governor:
// its node-wide owner number, its tasks in flight, the attempts submitted to the governor
// and not yet admitted (with the deadline the core asked for, armed only at admission), and
// the restart delays of its drain.
type readerShell struct {
	owner   uint64
	self    *actor.PID
	tasks   shell.TaskSet
	held    map[readercore.Ref]*heldSubmit
	backoff restartBackoff
	born    time.Time // the origin of the core's retry clock (TransferResult.At, RetryTimer.At)
	// deadlines are the armed transfer deadline timers, one per transfer: the latest
	// attempt's, cancelled when it answers (the core ignores a stale deadline anyway; this
	// keeps the timers of a long outage from piling up).
	deadlines map[readercore.Ref]armedDeadline
	// retryTimer is the stream's one transfer retry timer (ArmRetryTimer), by its core ref.
	retryTimer struct {
		ref readercore.Ref
		id  uint64
	}
	// cutTimer is the stream's one idle cut timer (ArmCutTimer), by its core ref.
	cutTimer struct {
		ref readercore.Ref
		id  uint64
	}
}

// armedDeadline is the deadline timer of one attempt.
type armedDeadline struct {
	attempt int
	id      uint64
}

// heldSubmit is an attempt submitted to the governor and not yet admitted.
type heldSubmit struct {
	sub      *submitTransfer
	deadline *readercore.ArmTransferDeadline // nil until the core arms it
}

// submitted records an attempt sent to the governor; it replaces an earlier attempt of the
// same ref (the governor supersedes that one too).
func (s *readerShell) submitted(sub *submitTransfer) {
	s.held[sub.Ref] = &heldSubmit{sub: sub}
}

// settled forgets an attempt that answered: held if its admission was not seen yet, and
// its deadline timer.
func (s *readerShell) settled(t *shell.Timers, ref readercore.Ref, attempt int) {
	if h := s.held[ref]; h != nil && h.sub.Attempt == attempt {
		delete(s.held, ref)
	}
	if d, ok := s.deadlines[ref]; ok && d.attempt <= attempt {
		t.Cancel(d.id)
		delete(s.deadlines, ref)
	}
}

// armDeadline arms the deadline of one attempt, replacing the timer of an earlier attempt
// of the same transfer (superseded: the core would ignore it).
func (s *readerShell) armDeadline(t *shell.Timers, root *actor.RootContext, e readercore.ArmTransferDeadline) {
	if d, ok := s.deadlines[e.Ref]; ok {
		t.Cancel(d.id)
	}
	id := t.After(root, s.self, e.After, readercore.TransferDeadline{Ref: e.Ref, Attempt: e.Attempt})
	s.deadlines[e.Ref] = armedDeadline{attempt: e.Attempt, id: id}
}

func (r *reader) initShell(c actor.Context) {
	r.timers.Clock = r.n.cfg.clock
	r.shell = readerShell{
		owner: r.n.owners.Add(1), self: c.Self(),
		tasks:     shell.TaskSet{Log: r.log, Panics: &r.n.metrics.TaskPanics, AtTask: r.n.cfg.faults.atTask},
		held:      make(map[readercore.Ref]*heldSubmit),
		born:      r.n.cfg.clock.Now(),
		deadlines: make(map[readercore.Ref]armedDeadline),
	}
}

// spawnTask runs spec as a child task with this incarnation's context; its result (or the
// failure it is turned into) comes back as shell.TaskDone or shell.TaskOverdue, exactly once.
func (r *reader) spawnTask(c actor.Context, spec shell.TaskSpec) {
	r.shell.tasks.Spawn(c, r.ctx, &r.timers, spec)
}

// armTransferDeadline holds the core's deadline of an attempt still queued in the governor
// until its admission (queueing under a rate limit is not a lost result); an attempt
// already admitted, or unknown to the shell, is armed at once.
func (r *reader) armTransferDeadline(c actor.Context, e readercore.ArmTransferDeadline) {
	if h := r.shell.held[e.Ref]; h != nil && h.sub.Attempt == e.Attempt {
		h.deadline = &e
		return
	}
	r.shell.armDeadline(&r.timers, c.ActorSystem().Root, e)
}

func (r *reader) onShellMsg(c actor.Context, msg any) {
	switch m := msg.(type) {
	case shell.TaskDone:
		if res, ok := r.shell.tasks.Done(&r.timers, m); ok {
			r.deliver(c, res)
		}
	case shell.TaskOverdue:
		if res, name, ok := r.shell.tasks.Overdue(m); ok {
			r.n.metrics.TasksOverdue.Add(1)
			r.log.Error().Str("task", name).Msg("task result overdue: going on with a failure")
			r.deliver(c, res)
		}
	case transferAdmitted:
		h := r.shell.held[m.Ref]
		if h == nil || h.sub.Attempt != m.Attempt {
			return // superseded by a later attempt, or already answered
		}
		delete(r.shell.held, m.Ref)
		if e := h.deadline; e != nil {
			r.shell.armDeadline(&r.timers, c.ActorSystem().Root, *e)
		}
	case governorRestarted:
		// The governor's queue is gone: submit again, in cut order, what it had not admitted.
		refs := sortedRefs(r.shell.held)
		for _, ref := range refs {
			c.Send(r.n.governor, r.shell.held[ref].sub)
		}
		if len(refs) > 0 {
			r.log.Warn().Int("attempts", len(refs)).Msg("governor restarted: resubmitted the attempts it had queued")
		}
	case restartDrain:
		r.setLocalErr(nil) // a fresh drain reports afresh
		if sup, ok := c.(actor.Supervisor); ok {
			sup.RestartChildren(m.pid)
		}
		if r.running && r.core.Status().Phase == "running" {
			r.startDrain(c, r.core.Status().DrainNext)
		}
	}
}

// deliver hands the result of a task or a persist actor (or the failure it was turned
// into) to where it belongs: the resolution or the core. Only the result types of the
// reader's own operations are fed to the core; anything else is a stray.
func (r *reader) deliver(c actor.Context, res any) {
	switch m := res.(type) {
	case *resolvedMsg:
		r.onResolved(c, m)
	case persistDone:
		r.step(c, m.event())
	case readercore.GroupUploadResult:
		r.step(c, m)
	case readercore.RetentionGroupFetched:
		r.step(c, m)
	case readercore.RetentionGroupFailed:
		r.step(c, m)
	case readercore.RetentionTimeout:
		r.step(c, m)
	case readercore.LeavesLookedUp:
		r.step(c, m)
	default:
		r.stray(res)
	}
}

// HandleFailure makes the reader the supervision strategy of its children. A failed drain
// is restarted fresh (after a delay when it keeps failing) and reopened at the core's drain
// position, so draining never silently stops; any other failed child (a task recovers its
// own panics) is stopped, and its overdue timer answers for it.
func (r *reader) HandleFailure(system *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason any, _ any) {
	if !child.Equal(r.drain) {
		r.log.Error().Str("child", child.Id).Str("reason", fmt.Sprint(reason)).Msg("reader child failed; stopped")
		sup.StopChildren(child)
		return
	}
	r.n.metrics.ActorRestarts.Add(1)
	delay := r.shell.backoff.next(r.n.cfg.clock.Now())
	r.log.Error().Str("reason", fmt.Sprint(reason)).Dur("restart_in", delay).
		Msg("drain failed; restarting it at the core's drain position")
	r.timers.After(system.Root, r.shell.self, delay, restartDrain{pid: child})
}

// sortedRefs returns the refs of m in increasing order (cut order).
func sortedRefs[V any](m map[readercore.Ref]V) []readercore.Ref {
	refs := make([]readercore.Ref, 0, len(m))
	for r := range m {
		refs = append(refs, r)
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i] < refs[j] })
	return refs
}
