package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/streamtier/streamtier/actors/internal/shell"
)

// waker wakes dormant streams (stream_dormant.go): for their commit listeners, which run
// under their log's lock where spawning a stream's actors has no place, so they post here;
// and, every Config.RetentionInterval while some dormant stream has remote retention by age
// coming due, the streams whose time has come. One per node; its timer is armed only while
// such a stream is dormant (a node without one has none).
type waker struct {
	n      *Node
	timers shell.Timers
	armed  bool
}

// watchRetention tells the waker that a stream went dormant with retention coming due.
type watchRetention struct{}

// retentionDue is the waker's tick: wake the dormant streams whose retention is due.
type retentionDue struct{}

func (w *waker) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Stopping, *actor.Restarting:
		w.timers.StopAll()
	case wakeStream:
		w.n.wake(m.h, m.gen)
	case watchRetention:
		w.arm(c)
	case retentionDue:
		w.armed = false
		if w.n.wakeForRetention() {
			w.arm(c)
		}
	}
}

// arm arms the tick unless it is armed.
func (w *waker) arm(c actor.Context) {
	if !w.armed {
		w.armed = true
		w.timers.After(c.ActorSystem().Root, c.Self(), w.n.cfg.RetentionInterval, retentionDue{})
	}
}
