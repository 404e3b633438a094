package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
)

// streamGone tells a stream's supervisor that its reader stopped for good (stream deleted).
type streamGone struct{}

// restartChild is the supervisor's own delayed restart of its reader.
type restartChild struct{ pid *actor.PID }

// streamSupervisor owns one stream's reader. A reader that fails (a conflict's reinitialize,
// or a bug) is restarted with fresh state; quick repeated failures are spaced out by a
// doubling delay (restartBackoff) instead of protoactor's linear, never-ending backoff.
// The supervisor itself is supervised by the node's guardian: each incarnation is a fresh
// value that starts a fresh reader (the stream's handle outlives both).
type streamSupervisor struct {
	n           *Node
	h           *streamHandle
	log         zerolog.Logger
	incarnation uint64
	self        *actor.PID
	reader      *actor.PID
	timers      timers
	backoff     restartBackoff
}

func newStreamSupervisor(n *Node, h *streamHandle, log zerolog.Logger, incarnation uint64) *streamSupervisor {
	return &streamSupervisor{n: n, h: h, log: log, incarnation: incarnation, timers: timers{clock: n.cfg.clock}}
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
		}))
	case *actor.Stopping, *actor.Restarting:
		s.timers.stopAll()
	case *actor.Stopped:
		close(s.h.done)
	case actor.SystemMessage, actor.AutoReceiveMessage:
	case streamGone:
		c.Send(s.n.governor, cancelStream{Stream: s.h.spec.ID})
		c.Stop(c.Self())
	case restartChild:
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
	delay := s.backoff.next(s.n.cfg.clock.Now())
	if _, ok := reason.(errReinitialize); !ok {
		s.n.metrics.ReaderCrashes.Add(1)
		s.log.Error().Interface("reason", reason).Dur("restart_in", delay).Msg("reader failed; restarting")
	}
	if delay == 0 {
		sup.RestartChildren(child)
		return
	}
	s.timers.after(system.Root, s.self, delay, restartChild{pid: child})
}
