package actors

import (
	"context"

	"github.com/asynkron/protoactor-go/actor"
)

// task is a one-shot child actor: it runs one blocking operation (a persist, a group upload,
// a group fetch, a resolution) with its owner's context, sends the result to its parent and
// stops. Cancelling the context (the owner stops or restarts) ends it and drops the result.
type task struct {
	ctx context.Context
	run func(ctx context.Context) any
}

func (t *task) Receive(c actor.Context) {
	if _, ok := c.Message().(*actor.Started); !ok {
		return
	}
	res := t.run(t.ctx)
	if t.ctx.Err() == nil && res != nil {
		c.Send(c.Parent(), res)
	}
	c.Stop(c.Self())
}

// spawnTask starts run as a child of the actor behind c.
func spawnTask(c actor.Context, ctx context.Context, run func(ctx context.Context) any) {
	c.Spawn(actor.PropsFromProducer(func() actor.Actor { return &task{ctx: ctx, run: run} }))
}
