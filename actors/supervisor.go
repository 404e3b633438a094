package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
)

// streamGone tells a stream's supervisor that its reader stopped for good (stream deleted).
type streamGone struct{}

// restartChild is the supervisor's own delayed restart of its reader.
type restartChild struct{ pid *actor.PID }

// streamSupervisor owns one stream's reader. A reader that fails (a conflict's reinitialize,
// or a bug) is restarted with fresh state; quick repeated failures are spaced out by a
// doubling delay (100 ms up to 10 s) instead of protoactor's linear, never-ending backoff.
type streamSupervisor struct {
	n      *Node
	h      *streamHandle
	log    zerolog.Logger
	self   *actor.PID
	reader *actor.PID
	timers timers

	failures []time.Time // recent failures, for the restart delay
}

func (s *streamSupervisor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		s.self = c.Self()
		s.reader = c.Spawn(actor.PropsFromProducer(func() actor.Actor {
			return &reader{n: s.n, h: s.h, log: s.log}
		}))
	case *actor.Stopping:
		s.timers.stopAll()
	case *actor.Stopped:
		close(s.h.done)
	case streamGone:
		c.Send(s.n.governor, cancelStream{Stream: s.h.spec.ID})
		c.Stop(c.Self())
	case restartChild:
		if sup, ok := c.(actor.Supervisor); ok {
			sup.RestartChildren(m.pid)
		}
	}
}

// HandleFailure makes the supervisor its reader's supervision strategy.
func (s *streamSupervisor) HandleFailure(system *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason any, _ any) {
	s.h.restarts.Add(1)
	now := time.Now()
	recent := s.failures[:0]
	for _, t := range s.failures {
		if now.Sub(t) < time.Minute {
			recent = append(recent, t)
		}
	}
	s.failures = append(recent, now)
	delay := time.Duration(0)
	if n := len(s.failures); n > 1 {
		delay = min(100*time.Millisecond<<min(n-2, 10), 10*time.Second)
	}
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
