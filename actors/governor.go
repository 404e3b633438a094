package actors

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"streamtier/actors/governorcore"
	"streamtier/actors/readercore"
	"streamtier/fragment"
	"streamtier/manifest"
	"streamtier/s3io"
)

// submitTransfer asks the governor to upload one attempt of a fragment; the result goes to
// ReplyTo as a readercore.TransferResult.
type submitTransfer struct {
	Ctx      context.Context // the reader incarnation's: cancelled when it stops or restarts
	Stream   string
	Epoch    uint64 // the writer's (the core's) epoch: it goes into the fragment's key
	Dir      string // the stream's local log directory
	Ref      readercore.Ref
	Attempt  int
	Fragment *fragment.Description
	Size     int64
	ReplyTo  *actor.PID
}

// transferDone tells the governor a task it started has finished.
type transferDone struct{ id uint64 }

// governorTick wakes the governor when the bucket may cover the head of the queue.
type governorTick struct{}

// cancelStream drops a stream's queued (not yet started) transfers.
type cancelStream struct{ Stream string }

// governorStatusRequest asks for a snapshot; the answer is a GovernorStatus.
type governorStatusRequest struct{}

// GovernorStatus is the governor's state for status and metrics.
type GovernorStatus struct {
	governorcore.Status
	Running int // transfer tasks in flight
}

// governor is the node's single pacing point: every fragment upload is submitted here and
// runs as a transfer task once the pacing core admits it.
type governor struct {
	store     *s3io.Store
	keyPrefix string
	log       zerolog.Logger
	metrics   *Metrics
	now       func() time.Time

	core    *governorcore.Governor
	next    uint64
	queued  map[uint64]*submitTransfer
	running int
	timers  timers
	wakeAt  time.Time
}

func newGovernor(cfg governorcore.Config, store *s3io.Store, keyPrefix string, log zerolog.Logger, m *Metrics) *governor {
	return &governor{
		store: store, keyPrefix: keyPrefix, log: log, metrics: m, now: time.Now,
		core:   governorcore.New(cfg, time.Now()),
		queued: make(map[uint64]*submitTransfer),
	}
}

func (g *governor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Stopping, *actor.Restarting:
		g.timers.stopAll()
	case *submitTransfer:
		g.next++
		g.queued[g.next] = m
		g.execute(c, g.core.Submit(g.now(), governorcore.Submission{ID: g.next, Size: m.Size}))
	case governorTick:
		g.wakeAt = time.Time{}
		g.execute(c, g.core.Tick(g.now()))
	case transferDone:
		g.running--
		g.metrics.TransfersRunning.Add(-1)
	case cancelStream:
		for id, s := range g.queued {
			if s.Stream == m.Stream && g.core.Cancel(id) {
				delete(g.queued, id)
			}
		}
	case governorStatusRequest:
		c.Respond(GovernorStatus{Status: g.core.Status(), Running: g.running})
	}
	st := g.core.Status()
	g.metrics.GovernorQueued.Store(int64(st.Queued))
	g.metrics.GovernorTokens.Store(st.Tokens)
}

func (g *governor) execute(c actor.Context, d governorcore.Decision) {
	for _, s := range d.Admit {
		sub := g.queued[s.ID]
		delete(g.queued, s.ID)
		g.running++
		g.metrics.TransfersRunning.Add(1)
		id := s.ID
		c.Spawn(actor.PropsFromProducer(func() actor.Actor {
			return &transferTask{id: id, sub: sub, g: g}
		}))
	}
	if d.Wake > 0 {
		at := g.now().Add(d.Wake)
		if g.wakeAt.IsZero() || at.Before(g.wakeAt) {
			g.wakeAt = at
			g.timers.after(c.ActorSystem().Root, c.Self(), d.Wake, governorTick{})
		}
	}
}

// transferTask uploads one attempt of one fragment and reports the result to the stream's
// reader, then stops. The upload runs inside Started with the node's context: stopping the
// node cancels it.
type transferTask struct {
	id  uint64
	sub *submitTransfer
	g   *governor
}

func (t *transferTask) Receive(c actor.Context) {
	if _, ok := c.Message().(*actor.Started); !ok {
		return
	}
	defer func() {
		c.Send(c.Parent(), transferDone{id: t.id})
		c.Stop(c.Self())
	}()
	s := t.sub
	uid := rand.Uint64()
	key := manifest.FragmentKey(t.g.keyPrefix, s.Stream, s.Fragment.FirstOffset, s.Epoch, uid)
	start := time.Now()
	if s.Ctx.Err() != nil {
		return // the reader is gone: nobody waits for this result
	}
	info, err := t.g.store.PutFragment(s.Ctx, key, s.Dir, *s.Fragment)
	class := s3io.Classify(err)
	t.g.metrics.observeTransfer(class, info.ObjectSize, time.Since(start))
	res := readercore.TransferResult{Ref: s.Ref, Attempt: s.Attempt, UID: uid, Jitter: rand.Float64()}
	switch class {
	case s3io.ClassNone:
		res.Outcome = readercore.OK
	case s3io.ClassCanceled:
		return // the node is stopping: nobody waits for this result
	case s3io.ClassRetriable:
		res.Outcome = readercore.Retriable
	case s3io.ClassSegmentGone:
		res.Outcome = readercore.SegmentGone
	default:
		res.Outcome = readercore.NonTransient
	}
	if err != nil {
		res.Reason = fmt.Sprintf("upload %s: %v", key, err)
		t.g.log.Warn().Err(err).Str("stream", s.Stream).Uint64("offset", s.Fragment.FirstOffset).
			Str("class", class.String()).Int("attempt", s.Attempt).Msg("fragment upload failed")
	}
	c.Send(s.ReplyTo, res)
}
