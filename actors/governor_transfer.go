package actors

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io"
)

// transferTask uploads one attempt of one fragment and reports the result to the stream's
// reader, then stops. The upload runs on a goroutine the task starts at Started, with ctx:
// the reader incarnation's context, also cancelled when the governor restarts or abandons
// the attempt (it then reports a retriable failure, so the reader resubmits it). The actor
// itself never blocks, so the governor can restart (protoactor restarts a parent only once
// its children stopped) even while an upload hangs outside its context, reading a segment
// file of a hung disk: the goroutine then reports, whenever it ends, to the governor's PID,
// which outlives restarts. A panic in the upload is recovered and reported as a
// non-transient failure: the reader always hears of an attempt it is still waiting for. The
// governor hears transferDone before the reader hears the result, so that the reader's
// immediate resubmission of a retriable failure reaches the governor after the slot was
// freed (else the core would take it for an abandonment).
type transferTask struct {
	id  uint64
	ctx context.Context
	sub *submitTransfer
	// The governor's: the store, the log, metrics and fault hooks, the memo it tells when
	// the task ends (so that a restarted governor does not count it), the node's upload
	// wait group and context.
	*governorDeps

	mu      sync.Mutex
	stopped bool // the actor heard Stopping (its parent stopped it): the goroutine must not stop it again
}

func (t *transferTask) Receive(c actor.Context) {
	switch c.Message().(type) {
	case *actor.Started:
	case *actor.Stopping:
		t.mu.Lock()
		t.stopped = true
		t.mu.Unlock()
		return
	default:
		return
	}
	root, self, governor := c.ActorSystem().Root, c.Self(), c.Parent()
	t.uploads.Add(1)
	go func() { // owned by the task; stopped by ctx (an upload deaf to it ends when it ends)
		defer t.uploads.Done()
		res, reply := t.upload() // recovers its panics
		t.metrics.TransfersRunning.Add(-1)
		t.memo.ended(t.id) // before the message, which a governor that fails on it would lose
		if t.nodeCtx.Err() != nil {
			return // the node stopped (or is stopping): its actors are gone, nobody waits
		}
		root.Send(governor, transferDone{id: t.id})
		if reply {
			root.Send(t.sub.ReplyTo, res)
		}
		// Stopped already if the governor restarted meanwhile: stopping a gone actor would be
		// a dead letter. Under the lock, an actor not yet Stopping is still registered.
		t.mu.Lock()
		if !t.stopped {
			root.Stop(self)
		}
		t.mu.Unlock()
	}()
}

// upload runs the attempt and returns its result, or false when nobody waits for it (the
// reader incarnation ended).
func (t *transferTask) upload() (res readercore.TransferResult, reply bool) {
	s := t.sub
	res = readercore.TransferResult{Ref: s.Ref, Attempt: s.Attempt, UID: rand.Uint64(), Jitter: rand.Float64()}
	defer func() {
		if p := recover(); p != nil {
			t.metrics.TaskPanics.Add(1)
			res.Outcome = readercore.NonTransient
			res.Reason = fmt.Sprintf("transfer task panicked: %v", p)
			reply = s.Ctx.Err() == nil
			t.log.Error().Str("stream", s.Stream).Uint64("offset", s.Fragment.FirstOffset).Int("attempt", s.Attempt).
				Str("panic", fmt.Sprint(p)).Str("stack", string(debug.Stack())).Msg("transfer task panicked; reported as a non-transient failure")
		}
	}()
	if s.Ctx.Err() != nil {
		return res, false // the reader is gone: nobody waits for this result
	}
	key := manifest.FragmentKey(t.keyPrefix, s.Stream, s.Fragment.FirstOffset, s.Epoch, res.UID)
	start := time.Now()
	t.faults.atTransfer(s)
	info, err := t.store.PutFragment(t.ctx, key, s.Dir, *s.Fragment)
	class := s3io.Classify(err)
	t.metrics.observeTransfer(class, info.ObjectSize, time.Since(start))
	switch {
	case class == s3io.ClassCanceled && s.Ctx.Err() != nil:
		return res, false // the reader or the node is stopping: nobody waits for this result
	case class == s3io.ClassCanceled:
		// Only the governor cancels an upload whose reader lives: it is restarting, or it
		// abandoned the attempt (the reader has a later one: this result is stale to it).
		res.Outcome, res.Reason = readercore.Retriable, fmt.Sprintf("upload %s: %v", key, context.Cause(t.ctx))
		return res, true
	}
	switch class {
	case s3io.ClassNone:
		res.Outcome = readercore.OK
		t.keys.Put(s.Stream, manifest.Entry{Kind: manifest.KindFragment, FirstOffset: s.Fragment.FirstOffset, UID: res.UID}, key)
	case s3io.ClassRetriable:
		res.Outcome = readercore.Retriable
	case s3io.ClassSegmentGone:
		res.Outcome = readercore.SegmentGone
	default:
		res.Outcome = readercore.NonTransient
	}
	if err != nil {
		res.Reason = fmt.Sprintf("upload %s: %v", key, err)
		t.log.Warn().Err(err).Str("stream", s.Stream).Uint64("offset", s.Fragment.FirstOffset).
			Str("class", class.String()).Int("attempt", s.Attempt).Msg("fragment upload failed")
	}
	return res, true
}
