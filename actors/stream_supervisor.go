package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"github.com/streamtier/streamtier/actors/internal/shell"
)

// streamGone tells a stream's supervisor that its reader stopped for good (stream deleted).
type streamGone struct{}

// restartChild is the supervisor's own delayed restart of its reader.
type restartChild struct{ pid *actor.PID }

// retryParked is the supervisor's periodic retry of the reader of a parked stream.
type retryParked struct{ pid *actor.PID }

// streamSupervisor owns one stream's reader. A reader that fails (a conflict's reinitialize,
// or a bug) is restarted with fresh state; quick repeated failures are spaced out by a
// doubling delay (restartBackoff) instead of protoactor's linear, never-ending backoff.
// The supervisor itself is supervised by the node's guardian: each incarnation is a fresh
// value that starts a fresh reader (the stream's handle outlives both).
//
// A reader that keeps failing, so that the delay reaches its ceiling (restartCeiling), is
// parked: the stream says so in status and metrics, with the last failure, and instead of
// a restart every 10 s the supervisor retries it every Config.ParkRetryInterval, for as
// long as it takes: once the cause is gone the stream resumes without an operator. A
// retried reader that fails again before it ran is parked again at once.
type streamSupervisor struct {
	n           *Node
	h           *streamHandle
	log         zerolog.Logger
	incarnation uint64
	self        *actor.PID
	reader      *actor.PID
	timers      shell.Timers
	backoff     restartBackoff
	retriedAt   time.Time // when a parked reader was last retried
}

func newStreamSupervisor(n *Node, h *streamHandle, log zerolog.Logger, incarnation uint64) *streamSupervisor {
	return &streamSupervisor{n: n, h: h, log: log, incarnation: incarnation, timers: shell.Timers{Clock: n.cfg.clock}}
}

func (s *streamSupervisor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		s.self = c.Self()
		if s.incarnation > 1 {
			s.log.Warn().Uint64("incarnation", s.incarnation).Msg("stream supervisor restarted: starting a fresh reader")
		}
		s.reader = c.Spawn(actor.PropsFromProducer(func() actor.Actor {
			return &reader{n: s.n, h: s.h, log: s.log}
		}, streamMailbox))
	case *actor.Stopping, *actor.Restarting:
		s.timers.StopAll()
		s.h.unpark() // a fresh incarnation starts a fresh reader
	case *actor.Stopped:
		if s.n.dormancyStopped(s.h) {
			return // dormant, not gone
		}
		s.n.streamStopped(s.h) // the stream's last event: its reader stopped before
		close(s.h.done)
	case goDormant:
		c.Stop(c.Self()) // the reader with it; the handle keeps the stream
	case actor.SystemMessage, actor.AutoReceiveMessage:
	case streamGone:
		c.Send(s.n.governor, cancelStream{Stream: s.h.spec.ID})
		c.Stop(c.Self())
	case restartChild:
		if sup, ok := c.(actor.Supervisor); ok {
			sup.RestartChildren(m.pid)
		}
	case retryParked:
		s.retriedAt = s.n.cfg.clock.Now()
		s.h.unpark()
		s.n.metrics.ParkRetries.Add(1)
		s.log.Info().Msg("retrying the parked stream's reader")
		if sup, ok := c.(actor.Supervisor); ok {
			sup.RestartChildren(m.pid)
		}
	default:
		s.n.cfg.faults.atStream(m)
	}
}

// HandleFailure makes the supervisor its reader's supervision strategy.
func (s *streamSupervisor) HandleFailure(system *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason any, _ any) {
	s.h.restarts.Add(1)
	now := s.n.cfg.clock.Now()
	delay := s.backoff.next(now)
	if _, ok := reason.(errReinitialize); !ok {
		s.n.metrics.ReaderCrashes.Add(1)
	}
	if delay >= restartCeiling || (s.h.retrying() && now.Sub(s.retriedAt) < restartWindow) {
		s.park(system, child, now, reason)
		return
	}
	if _, ok := reason.(errReinitialize); !ok {
		s.log.Error().Interface("reason", reason).Dur("restart_in", delay).Msg("reader failed; restarting")
	}
	if delay == 0 {
		sup.RestartChildren(child)
		return
	}
	s.timers.After(system.Root, s.self, delay, restartChild{pid: child})
}

// park stops restarting the failing reader on the backoff, records the stream as parked
// (with the failure and when the next retry is), and arms the retry.
func (s *streamSupervisor) park(system *actor.ActorSystem, child *actor.PID, now time.Time, reason any) {
	interval := s.n.cfg.ParkRetryInterval
	failures := len(s.backoff.failures)
	first := s.h.park(parkState{since: now, reason: fmt.Sprint(reason), failures: failures, retryAt: now.Add(interval)})
	if first {
		s.n.metrics.Parks.Add(1)
		emit(s.n, "parked", s.h.spec.ID, s.n.cfg.Events.OnParked, ParkedInfo{Stream: s.h.spec.ID, Reason: fmt.Sprint(reason), Failures: failures, RetryAt: now.Add(interval)})
	}
	s.log.Error().Str("reason", fmt.Sprint(reason)).Int("failures_last_minute", failures).Dur("retry_in", interval).
		Msg("stream parked: its reader keeps failing; retrying it periodically")
	s.timers.After(system.Root, s.self, interval, retryParked{pid: child})
}
