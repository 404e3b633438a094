package actors

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"github.com/streamtier/streamtier/actors/internal/shell"
)

// restartBackoff spaces out the restarts of an actor that keeps failing: the first failure
// within a minute restarts at once, the next ones after a delay doubling from 100 ms to 10 s.
// (protoactor's own "exponential" strategy is linear and its default one gives up after ten
// failures in ten seconds, leaving a node without its governor or reaper.)
type restartBackoff struct {
	failures []time.Time // failures within the last minute
}

// restartCeiling is the longest restartBackoff delay: a stream supervisor whose reader
// fails often enough to reach it parks the stream instead (see streamSupervisor).
const restartCeiling = 10 * time.Second

// restartWindow is how long a failure counts towards the backoff.
const restartWindow = time.Minute

// next records a failure at now and returns the delay before the restart.
func (b *restartBackoff) next(now time.Time) time.Duration {
	recent := b.failures[:0]
	for _, t := range b.failures {
		if now.Sub(t) < restartWindow {
			recent = append(recent, t)
		}
	}
	b.failures = append(recent, now)
	if n := len(b.failures); n > 1 {
		return min(100*time.Millisecond<<min(n-2, 10), restartCeiling)
	}
	return 0
}

// guardian is the supervision strategy of the node's top-level actors (the governor, the
// reaper and the stream supervisors): a failed one is always restarted, with a fresh actor
// value, after its restartBackoff delay. Each restart is logged and counted. Stop makes
// later failures stop the actor instead and cancels the delayed restarts.
type guardian struct {
	log     zerolog.Logger
	clock   shell.Clock
	metrics *Metrics

	mu      sync.Mutex
	stopped bool
	backoff map[string]*restartBackoff // by actor id
	pending map[uint64]func() bool     // delayed restarts
	next    uint64
}

func newGuardian(log zerolog.Logger, c shell.Clock, m *Metrics) *guardian {
	return &guardian{log: log, clock: shell.OrWall(c), metrics: m, backoff: map[string]*restartBackoff{}, pending: map[uint64]func() bool{}}
}

// HandleFailure restarts child, at once or after its backoff delay. protoactor calls it
// from the failing actor's goroutine, so concurrently for different actors.
func (g *guardian) HandleFailure(_ *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason any, message any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		sup.StopChildren(child)
		return
	}
	b := g.backoff[child.Id]
	if b == nil {
		b = &restartBackoff{}
		g.backoff[child.Id] = b
	}
	delay := b.next(g.clock.Now())
	g.metrics.ActorRestarts.Add(1)
	g.log.Error().Str("actor", child.Id).Str("reason", fmt.Sprint(reason)).Str("message", fmt.Sprintf("%T", message)).
		Dur("restart_in", delay).Msg("actor failed; restarting it (the message it failed on is lost)")
	if delay == 0 {
		sup.RestartChildren(child)
		return
	}
	g.next++
	id := g.next
	g.pending[id] = g.clock.AfterFunc(delay, func() {
		g.mu.Lock()
		_, ok := g.pending[id]
		delete(g.pending, id)
		g.mu.Unlock()
		if ok {
			sup.RestartChildren(child)
		}
	})
}

// stop cancels the delayed restarts; a failure from now on stops the actor.
func (g *guardian) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	for id, cancel := range g.pending {
		cancel()
		delete(g.pending, id)
	}
}

// incarnations counts the incarnations of one actor across its restarts.
type incarnations struct{ n atomic.Uint64 }

// props returns props whose producer builds a fresh actor for every incarnation (passing
// its number, from 1), supervised by g, with opts besides.
func (i *incarnations) props(g *guardian, produce func(incarnation uint64) actor.Actor, opts ...actor.PropsOption) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return produce(i.n.Add(1)) }, append([]actor.PropsOption{actor.WithGuardian(g)}, opts...)...)
}

// streamMailbox is the mailbox of the actors every stream has (its supervisor and its
// reader): protoactor's lock-free queue holds nothing but a stub node while empty, where its
// default ring buffer holds ten slots from the start (about 200 bytes an actor, which ten
// thousand idle streams pay for nothing).
var streamMailbox = actor.WithMailbox(actor.UnboundedLockfree())
