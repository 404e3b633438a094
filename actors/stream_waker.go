package actors

import "github.com/asynkron/protoactor-go/actor"

// waker wakes dormant streams for their commit listeners (stream_dormant.go): a listener
// runs under its log's lock, where spawning a stream's actors has no place, so it posts
// here. One per node; it holds no state.
type waker struct{ n *Node }

func (w *waker) Receive(c actor.Context) {
	if m, ok := c.Message().(wakeStream); ok {
		w.n.wake(m.h, m.gen)
	}
}
