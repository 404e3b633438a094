package actors

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors/governorcore"
	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/s3io"
)

// submitTransfer asks the governor to upload one attempt of a fragment. The governor
// answers transferAdmitted when it starts the upload; the upload's result goes to ReplyTo as
// a readercore.TransferResult.
type submitTransfer struct {
	Ctx      context.Context // the reader incarnation's: cancelled when it stops or restarts
	Owner    uint64          // the reader incarnation (node-wide): cancelOwner drops its queue
	Stream   string
	Epoch    uint64 // the writer's (the core's) epoch: it goes into the fragment's key
	Dir      string // the stream's local log directory
	Ref      readercore.Ref
	Attempt  int
	Fragment *fragment.Description
	Size     int64
	ReplyTo  *actor.PID
}

// transferAdmitted tells a reader that the governor admitted an attempt and started its
// upload: the attempt's transfer deadline runs from here, not from the submission.
type transferAdmitted struct {
	Ref     readercore.Ref
	Attempt int
}

// governorRestarted tells every reader that the governor restarted with an empty queue:
// each resubmits the attempts it submitted and has not seen admitted.
type governorRestarted struct{}

// transferDone tells the governor a task it started has finished.
type transferDone struct{ id uint64 }

// governorTick wakes the governor when the bucket may cover the head of the queue.
type governorTick struct{}

// cancelStream drops a stream's queued (not yet started) transfers.
type cancelStream struct{ Stream string }

// cancelOwner drops the queued transfers of a reader incarnation that ended, uncharged.
type cancelOwner struct{ Owner uint64 }

// governorStatusRequest asks for a snapshot; the answer is a GovernorStatus.
type governorStatusRequest struct{}

// GovernorStatus is the governor's state for status and metrics.
type GovernorStatus struct {
	governorcore.Status
	Running int // transfer tasks in flight, abandoned ones not counted
	// AbandonedRunning is how many transfer tasks this incarnation abandoned (their reader
	// resubmitted after the deadline) have not ended yet: hung outside their context.
	AbandonedRunning int
	Incarnation      uint64 // 1 until the governor first restarts
}

// errGovernorRestart and errAbandoned are why the governor cancels an upload whose reader
// lives (the cause of the task's context): it restarts, or the reader gave the attempt up.
var (
	errGovernorRestart = errors.New("cancelled by the governor's restart")
	errAbandoned       = errors.New("abandoned by the governor: the reader resubmitted it after its transfer deadline")
)

// governorMemo is what outlives the governor's incarnations: the bucket's level (so that a
// restart grants no fresh burst), the submission id counter (so that a late transferDone
// of a previous incarnation's task never matches a new one) and the transfers started and
// not yet ended (so that a restarted governor counts their slots until they end).
type governorMemo struct {
	mu       sync.Mutex
	saved    bool
	tokens   int64
	at       time.Time
	nextID   uint64
	inflight map[uint64]governorcore.Submission
}

// started records a transfer task the governor started.
func (m *governorMemo) started(s governorcore.Submission) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inflight == nil {
		m.inflight = make(map[uint64]governorcore.Submission)
	}
	m.inflight[s.ID] = s
}

// ended records that a transfer no longer holds a slot (it reported, or it was abandoned).
func (m *governorMemo) ended(id uint64) {
	m.mu.Lock()
	delete(m.inflight, id)
	m.mu.Unlock()
}

// carried lists the transfers started and not ended, in id order, for a new incarnation.
func (m *governorMemo) carried() []governorcore.Submission {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]governorcore.Submission, 0, len(m.inflight))
	for _, s := range m.inflight {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b governorcore.Submission) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

func (m *governorMemo) save(tokens int64, at time.Time) {
	m.mu.Lock()
	m.saved, m.tokens, m.at = true, tokens, at
	m.mu.Unlock()
}

func (m *governorMemo) core(cfg governorcore.Config, now time.Time) *governorcore.Governor {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.saved {
		return governorcore.New(cfg, now)
	}
	return governorcore.Resume(cfg, m.tokens, m.at)
}

func (m *governorMemo) id() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nextID++
	return m.nextID
}

// governorDeps is what every governor incarnation is built from.
type governorDeps struct {
	cfg       governorcore.Config
	store     *s3io.Store
	keyPrefix string
	log       zerolog.Logger
	metrics   *Metrics
	clock     shell.Clock
	memo      *governorMemo
	readers   func() []*actor.PID // the node's current readers, told of a restart
	faults    *faultHooks
	uploads   *sync.WaitGroup // the node's: every upload goroutine, waited for by Node.Stop
	nodeCtx   context.Context // the node's, cancelled by Stop: a late upload then reports to nobody
	keys      *read.Keys      // the node's known fragment keys: an upload adds its own
}

// governor is the node's single pacing point: every fragment upload is submitted here and
// runs as a transfer task once the pacing core admits it. Each incarnation is a fresh value:
// a restarted governor resumes the bucket from the memo, cancels its predecessor's uploads
// (they report a retriable failure) and tells every reader to resubmit what was queued.
type governor struct {
	governorDeps
	incarnation uint64

	core    *governorcore.Governor
	queued  map[uint64]*submitTransfer
	running map[uint64]runningTransfer
	// abandoned are the tasks the core abandoned whose transferDone has not come (hung).
	abandoned map[uint64]runningTransfer
	timers    shell.Timers
	wakeAt    time.Time
}

// runningTransfer is a transfer task the governor started: how to cancel it, what it
// uploads and since when.
type runningTransfer struct {
	cancel  context.CancelCauseFunc
	sub     *submitTransfer
	started time.Time
}

func newGovernor(d governorDeps, incarnation uint64) *governor {
	return &governor{
		governorDeps: d, incarnation: incarnation,
		queued: make(map[uint64]*submitTransfer), running: make(map[uint64]runningTransfer),
		abandoned: make(map[uint64]runningTransfer), timers: shell.Timers{Clock: d.clock},
	}
}

func (g *governor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		g.start(c)
		return
	case *actor.Stopping, *actor.Restarting:
		g.timers.StopAll()
		for _, r := range g.running {
			r.cancel(errGovernorRestart) // a restart must not wait minutes for uploads: they report retriable
		}
		return
	case *actor.Terminated: // a transfer task ended
		shell.Release(c, m.Who)
		return
	case actor.SystemMessage, actor.AutoReceiveMessage:
		return
	default:
		g.faults.atGovernor(m)
	}
	switch m := c.Message().(type) {
	case *submitTransfer:
		id := g.memo.id()
		g.queued[id] = m
		d := g.core.Submit(g.clock.Now(), governorcore.Submission{ID: id, Size: m.Size, Owner: m.Owner, Ref: uint64(m.Ref), Stream: m.Stream})
		g.execute(c, d)
	case governorTick:
		g.wakeAt = time.Time{}
		g.execute(c, g.core.Tick(g.clock.Now()))
	case transferDone:
		delete(g.running, m.id) // unknown: a previous incarnation's task, or abandoned
		if r, ok := g.abandoned[m.id]; ok {
			delete(g.abandoned, m.id)
			g.log.Info().Str("stream", r.sub.Stream).Uint64("ref", uint64(r.sub.Ref)).Int("attempt", r.sub.Attempt).
				Str("ran", g.clock.Now().Sub(r.started).Round(time.Millisecond).String()).
				Msg("abandoned transfer task ended at last; its slot was freed at its abandonment")
		}
		g.execute(c, g.core.Done(g.clock.Now(), m.id)) // an abandoned id: the core frees nothing
	case cancelStream:
		for id, s := range g.queued {
			if s.Stream == m.Stream && g.core.Cancel(id) {
				delete(g.queued, id)
			}
		}
	case cancelOwner:
		for _, id := range g.core.CancelOwner(m.Owner) {
			delete(g.queued, id)
		}
	case governorStatusRequest:
		c.Respond(GovernorStatus{Status: g.core.Status(), Running: len(g.running), AbandonedRunning: len(g.abandoned), Incarnation: g.incarnation})
	}
	st := g.core.Status()
	g.metrics.GovernorQueued.Store(int64(st.Queued))
	g.metrics.GovernorTokens.Store(st.Tokens)
}

func (g *governor) start(c actor.Context) {
	now := g.clock.Now()
	g.core = g.memo.core(g.cfg, now)
	g.metrics.GovernorQueued.Store(0)
	if g.incarnation == 1 {
		return
	}
	// The predecessor's tasks were cancelled and are ending: they keep their slots until
	// their transferDone comes here, so the bounds hold across the restart.
	carried := g.memo.carried()
	g.core.Adopt(carried)
	readers := g.readers()
	g.log.Warn().Uint64("incarnation", g.incarnation).Int64("tokens", g.core.Status().Tokens).Int("readers", len(readers)).
		Int("transfers_ending", len(carried)).
		Msg("governor restarted: bucket resumed, queue empty, the predecessor's uploads hold their slots until they end; readers resubmit what they had queued")
	for _, pid := range readers {
		c.Send(pid, governorRestarted{})
	}
}

func (g *governor) execute(c actor.Context, d governorcore.Decision) {
	now := g.clock.Now()
	g.memo.save(g.core.Status().Tokens, now) // the core refilled up to now
	for _, id := range d.Superseded {
		delete(g.queued, id)
	}
	for _, id := range d.Abandoned {
		g.abandon(id, now)
	}
	var unused []uint64
	for _, s := range d.Admit {
		sub := g.queued[s.ID]
		delete(g.queued, s.ID)
		if sub == nil || sub.Ctx.Err() != nil {
			unused = append(unused, s.ID) // its slot goes back to the core below
			continue                      // its reader ended (the cancel is on its way): nobody waits for it
		}
		ctx, cancel := context.WithCancelCause(sub.Ctx)
		g.running[s.ID] = runningTransfer{cancel: cancel, sub: sub, started: now}
		g.memo.started(s)
		g.metrics.TransfersRunning.Add(1)
		c.Send(sub.ReplyTo, transferAdmitted{Ref: sub.Ref, Attempt: sub.Attempt})
		t := &transferTask{id: s.ID, ctx: ctx, sub: sub, governorDeps: &g.governorDeps}
		c.Spawn(actor.PropsFromProducer(func() actor.Actor { return t }))
	}
	for _, id := range unused {
		// No task runs, so no transferDone comes: give the slot and the tokens back now
		// (what that admits is executed in turn; each round takes from the queue, so it ends).
		g.execute(c, g.core.Unused(now, id))
	}
	if d.Wake > 0 {
		at := now.Add(d.Wake)
		if g.wakeAt.IsZero() || at.Before(g.wakeAt) {
			g.wakeAt = at
			g.timers.After(c.ActorSystem().Root, c.Self(), d.Wake, governorTick{})
		}
	}
}

// abandon stops waiting for the running transfer id, which the core abandoned: its reader
// resubmitted the reference after the transfer deadline, so the task hangs outside its
// context (or its result was lost). Its context is cancelled (should it ever look) and it
// leaves running, so Running counts only the tasks holding a slot; TransfersRunning stays the
// task's own to decrement when it really ends, so it still counts a hung task.
func (g *governor) abandon(id uint64, now time.Time) {
	g.metrics.TransfersAbandoned.Add(1)
	g.memo.ended(id)
	r, ok := g.running[id]
	if !ok {
		// A predecessor's task (the core adopted it at the restart, which cancelled it).
		g.log.Warn().Uint64("id", id).Msg("transfer abandoned: a task of the governor before its restart, resubmitted by its reader, has not ended; its upload slot is freed")
		return
	}
	delete(g.running, id)
	r.cancel(errAbandoned)
	g.abandoned[id] = r
	g.log.Warn().Str("stream", r.sub.Stream).Uint64("ref", uint64(r.sub.Ref)).Int("attempt", r.sub.Attempt).
		Uint64("offset", r.sub.Fragment.FirstOffset).Str("ran", now.Sub(r.started).Round(time.Millisecond).String()).
		Msg("transfer abandoned: its reader resubmitted it after the transfer deadline; its upload slot is freed (the task may hang outside its context)")
}
