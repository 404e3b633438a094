package actors

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/segments"
)

// drainBatch is how many chunk headers the drain reads before it waits for its parent.
const drainBatch = 512

// drainRetryDelay is the wait after an unexpected local read error before trying again.
const drainRetryDelay = time.Second

// drainStart (re)opens the data reader at From; Gen tags every batch read from it. Budget,
// here and in drainAck and drainListen, is how many chunk bytes the core would take now
// (readercore.Core.DrainRoom): a batch ends once it holds that much, so that the drain reads
// little past a pause.
type drainStart struct {
	From   uint64
	Gen    uint64
	Budget uint64
}

// drainAck lets the drain read its next batch (the core's ContinueDrain): one batch is in
// flight at a time, so the drain never runs far ahead of the reader and memory stays
// bounded. A core that paused at its bound, or disagrees with the drain's position, sends
// none: the drain waits until it is reopened (drainStart).
type drainAck struct {
	Gen    uint64
	Budget uint64
}

// drainListen registers the one-shot offset listener at Offset, then checks once more.
type drainListen struct {
	Offset uint64
	Gen    uint64
	Budget uint64
}

// drainWake is sent by the offset listener (or a retry timer): try to read again.
type drainWake struct{ Gen uint64 }

// wakeOnCommit registers the one-shot listener of the first commit past offset (at once if
// it is committed already, or when the log closes) that posts drainWake{gen} to pid while
// live is set: a listener that outlives its actor posts nothing, and no goroutine waits.
// The drain registers it for itself, a passive reader for itself (reader_flow.go).
func wakeOnCommit(lg *segments.Log, offset uint64, root *actor.RootContext, pid *actor.PID, gen uint64, live *atomic.Bool) segments.ListenerID {
	// Called under the log's lock by whoever commits: a Send only posts to the mailbox. The
	// listener keeps a PID of its own, without the cached process a PID holds once used: a
	// listener left behind until the next commit must not keep a stopped reader (and the
	// dormant stream's whole former actor) in memory.
	target := actor.NewPID(pid.Address, pid.Id)
	return lg.OnCommittedPast(offset, func() {
		if live.Load() {
			root.Send(target, drainWake{Gen: gen})
		}
	})
}

// drainSuspend is the drain's idle timer: still at the end of the stream after
// Config.DrainIdleClose, it closes its data reader's file (the next read reopens it) and
// tells its reader (drainIdle).
type drainSuspend struct{ Gen uint64 }

// drainIdle tells the reader that its drain has waited at the end of the log for
// Config.DrainIdleClose, its file closed: the reader may stop it (passivate it) and wait on
// the log itself until data comes (reader_flow.go).
type drainIdle struct{ Gen uint64 }

// drainTrouble tells the reader that the drain cannot read its local log (Err, retried on the
// drain's timer) or, with Err nil, that it reads again. The reader shows it in status: the
// stream is stalled, not running, with the cause (EMFILE, ENOSPC, ...) named.
type drainTrouble struct {
	Gen uint64
	Err error
}

// chunksDrained carries a batch of committed chunk headers to the reader. End says the
// reader reached the end of committed data; Gone says the next segment was deleted. Next
// is where the drain's data reader stands after the batch (the chunk id it reads next): the
// core checks it against its own position.
type chunksDrained struct {
	Gen        uint64
	Chunks     []readercore.ChunkDrained
	Next       uint64
	End        bool
	Gone       bool
	LocalFirst uint64
}

// drain is the reader's child that reads committed chunk headers (never bodies) from the
// local log and hands them up in batches. The reader supervises it: a drain that fails is
// restarted fresh and reopened at the core's drain position (see reader.HandleFailure). It
// lives while there is data: one idle at the end of the log is stopped by its reader, which
// starts a fresh one when data comes (reader_flow.go, "passive").
type drain struct {
	log       *segments.Log
	logger    zerolog.Logger
	faults    *faultHooks
	metrics   *Metrics
	idleClose time.Duration // Config.DrainIdleClose

	// live is this incarnation's: the commit listener posts a wake only while it is set, so a
	// listener outliving its drain sends nothing. No goroutine waits for the commit. Its own
	// allocation: a listener that outlives a stopped drain (until the next commit) keeps
	// these 8 bytes, not the drain.
	live    *atomic.Bool
	listen  segments.ListenerID // its commit listener, forgotten when it registers again or stops
	timers  shell.Timers
	suspend uint64 // the armed idle timer, 0: none
	trouble bool   // the parent was told of a local read failure not yet recovered
	behind  bool   // the log ended below the drain's position at the last open (logged once)

	rd       *segments.Reader
	gen      uint64
	budget   uint64 // chunk bytes the core takes before it pauses, from its last word
	awaiting bool   // a batch is with the parent, waiting for its ack
	idle     bool   // end of stream reached: wait for a wake
}

func (d *drain) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		d.live = new(atomic.Bool)
		d.live.Store(true)
	case *actor.Stopping, *actor.Restarting:
		if d.live != nil {
			d.live.Store(false)
		}
		d.log.Forget(d.listen)
		d.timers.StopAll()
		d.closeReader()
	case actor.SystemMessage, actor.AutoReceiveMessage:
	default:
		d.faults.atDrain(m)
		d.handle(c, m)
	}
}

func (d *drain) handle(c actor.Context, msg any) {
	switch m := msg.(type) {
	case drainStart:
		d.closeReader()
		d.gen, d.awaiting, d.idle, d.budget = m.Gen, false, false, m.Budget
		rd, err := d.log.NewReader(m.From)
		if err != nil {
			d.openFailed(c, m.From, err)
			return
		}
		d.rd, d.behind = rd, false
		d.read(c, false)
	case drainAck:
		if m.Gen == d.gen {
			d.awaiting, d.budget = false, m.Budget
			d.read(c, false)
		}
	case drainListen:
		if m.Gen != d.gen {
			return
		}
		d.budget = m.Budget
		d.log.Forget(d.listen)
		d.listen = wakeOnCommit(d.log, m.Offset, c.ActorSystem().Root, c.Self(), d.gen, d.live)
		d.idle = false
		d.read(c, true) // the commit may have raced the registration
	case drainWake:
		if m.Gen == d.gen && d.idle {
			d.idle = false
			d.read(c, false)
		}
	case drainSuspend:
		if m.Gen == d.gen && d.idle && d.rd != nil {
			d.suspend = 0
			if err := d.rd.Suspend(); err != nil {
				d.logger.Warn().Err(err).Msg("drain: closing the idle reader's file failed")
			}
			c.Send(c.Parent(), drainIdle{Gen: d.gen})
		}
	}
}

// armSuspend (re)arms the idle timer that closes the reader's file.
func (d *drain) armSuspend(c actor.Context) {
	d.timers.Cancel(d.suspend)
	d.suspend = d.timers.After(c.ActorSystem().Root, c.Self(), d.idleClose, drainSuspend{Gen: d.gen})
}

// troubled tells the parent, once per failure, that the drain cannot read its local log.
func (d *drain) troubled(c actor.Context, err error) {
	d.trouble = true
	d.metrics.countLocalError(err)
	c.Send(c.Parent(), drainTrouble{Gen: d.gen, Err: err})
}

// recovered tells the parent that the drain reads again after a reported failure.
func (d *drain) recovered(c actor.Context) {
	if d.trouble {
		d.trouble = false
		d.logger.Info().Msg("drain: the local log reads again")
		c.Send(c.Parent(), drainTrouble{Gen: d.gen})
	}
}

func (d *drain) openFailed(c actor.Context, from uint64, err error) {
	if errors.Is(err, segments.ErrBelowFirst) || errors.Is(err, segments.ErrSegmentGone) {
		c.Send(c.Parent(), &chunksDrained{Gen: d.gen, Gone: true, LocalFirst: d.log.FirstOffset()})
		d.awaiting = true
		return
	}
	switch {
	case errors.Is(err, segments.ErrAboveNext):
		// The log ends below the drain's position (an empty or short log behind the remote
		// tier): nothing is wrong with it, it has yet to grow. The reader compares it again
		// as it grows (behind, diverged); the drain looks again at its retry delay.
		if !d.behind {
			d.behind = true
			d.logger.Info().Err(err).Uint64("from", from).Msg("drain: the local log ends below the drain position; waiting for it to grow")
		}
	case !d.trouble: // logged and counted once per failure, retried quietly until it clears
		d.logger.Error().Err(err).Uint64("from", from).Str("exhausted", ExhaustedResource(err)).Dur("retry_in", drainRetryDelay).
			Msg("drain: cannot open the local log reader; retrying")
		d.troubled(c, err)
	}
	d.timers.After(c.ActorSystem().Root, c.Self(), drainRetryDelay, drainStart{From: from, Gen: d.gen, Budget: d.budget})
}

// read sends the next batch of committed chunk headers, unless one is with the parent.
// Right after a listener registration an empty end of stream is not reported again: the
// listener is in place and will wake the drain (reporting it would re-register forever).
func (d *drain) read(c actor.Context, afterListen bool) {
	if d.awaiting || d.idle || d.rd == nil {
		return
	}
	d.metrics.DrainWakeups.Add(1)
	batch := &chunksDrained{Gen: d.gen, Chunks: make([]readercore.ChunkDrained, 0, 16)}
loop:
	for len(batch.Chunks) < drainBatch && (d.budget > 0 || len(batch.Chunks) == 0) {
		h, loc, err := d.rd.Next()
		if err == nil {
			batch.Chunks = append(batch.Chunks, readercore.ChunkDrained{Header: h, Location: loc})
			d.budget -= min(d.budget, uint64(loc.Size))
			continue
		}
		switch {
		case errors.Is(err, segments.ErrEndOfStream):
			batch.End = true
			d.idle = true
			d.recovered(c)
			d.armSuspend(c)
		case errors.Is(err, segments.ErrSegmentGone):
			batch.Gone = true
			batch.LocalFirst = d.log.FirstOffset()
			d.closeReader()
		case errors.Is(err, segments.ErrClosed):
			// The broker closed the log (removing the stream): nothing more to read.
			d.logger.Info().Msg("drain: local log closed")
			d.idle = true
			d.closeReader()
		default:
			if !d.trouble { // logged and counted once per failure, retried quietly until it clears
				d.logger.Error().Err(err).Uint64("offset", d.rd.NextOffset()).Str("exhausted", ExhaustedResource(err)).
					Dur("retry_in", drainRetryDelay).Msg("drain: local read failed; retrying")
				d.troubled(c, err)
			}
			d.idle = true
			d.timers.After(c.ActorSystem().Root, c.Self(), drainRetryDelay, drainWake{Gen: d.gen})
		}
		break loop
	}
	if len(batch.Chunks) > 0 {
		d.recovered(c)
	}
	if len(batch.Chunks) == 0 && !batch.Gone && (!batch.End || afterListen) {
		return
	}
	if d.rd != nil {
		batch.Next = d.rd.NextOffset()
	}
	// Wait for the parent's ack only when more may follow at once; after the end of the
	// stream the listener wakes the drain, after a vanished segment a new drainStart does.
	d.awaiting = !batch.End && !batch.Gone
	d.faults.atBatch(batch)
	c.Send(c.Parent(), batch)
}

func (d *drain) closeReader() {
	if d.rd != nil {
		d.rd.Close()
		d.rd = nil
	}
}
