package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/streamtier/streamtier/actors/internal/shell"
)

// waker wakes dormant streams (stream_dormant.go): for their commit listeners, which run
// under their log's lock where spawning a stream's actors has no place, so they post here;
// and every Config.RetentionInterval, the dormant streams whose remote retention by age is
// due. One per node.
type waker struct {
	n      *Node
	timers shell.Timers
}

// retentionDue is the waker's tick: wake the dormant streams whose retention is due.
type retentionDue struct{}

func (w *waker) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		w.timers.After(c.ActorSystem().Root, c.Self(), w.n.cfg.RetentionInterval, retentionDue{})
	case *actor.Stopping, *actor.Restarting:
		w.timers.StopAll()
	case wakeStream:
		w.n.wake(m.h, m.gen)
	case retentionDue:
		w.n.wakeForRetention()
		w.timers.After(c.ActorSystem().Root, c.Self(), w.n.cfg.RetentionInterval, retentionDue{})
	}
}
