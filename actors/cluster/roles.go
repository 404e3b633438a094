package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/metadata"
)

// This file is how a node takes and leaves its roles: the writer of a stream, a replica
// of it, neither, as placements, membership and fences change.

// runRoles is the one goroutine that changes roles: it applies placements, membership
// changes and fences in the order they come, so that starting and stopping writers and
// replica caches never race.
func (c *Cluster) runRoles(placements <-chan metadata.PlacementEvent, members <-chan metadata.MemberEvent) {
	for placements != nil || members != nil {
		select {
		case <-c.ctx.Done():
			return
		case ev, ok := <-placements:
			if !ok {
				placements = nil
				continue
			}
			if ev.Err != nil {
				c.log.Error().Err(ev.Err).Str("stream", ev.Placement.Stream).Msg("placement watch")
				continue
			}
			c.applyPlacement(ev)
		case ev, ok := <-members:
			if !ok {
				members = nil
				continue
			}
			if ev.Err != nil {
				c.log.Error().Err(ev.Err).Str("member", ev.Member.Node).Msg("member watch")
				continue
			}
			c.applyMember(ev)
		case f := <-c.fences:
			c.applyFence(f)
		}
	}
	<-c.ctx.Done()
}

func (c *Cluster) applyMember(ev metadata.MemberEvent) {
	c.mu.Lock()
	if ev.Kind == metadata.MemberLeft {
		delete(c.members, ev.Member.Node)
		c.mu.Unlock()
		c.log.Info().Str("member", ev.Member.Node).Msg("member left")
		return
	}
	c.members[ev.Member.Node] = ev.Member.Address
	var notify []*actor.PID
	for _, r := range c.replicas {
		notify = append(notify, r.pid)
	}
	c.mu.Unlock()
	c.log.Info().Str("member", ev.Member.Node).Str("address", ev.Member.Address).Msg("member joined")
	for _, pid := range notify {
		c.root.Send(pid, writerRejoinedMsg{node: ev.Member.Node})
	}
}

func (c *Cluster) applyPlacement(ev metadata.PlacementEvent) {
	p := ev.Placement
	c.mu.Lock()
	if ev.Kind == metadata.PlacementDeleted {
		delete(c.placements, p.Stream)
	} else {
		c.placements[p.Stream] = p
	}
	c.mu.Unlock()
	switch {
	case ev.Kind == metadata.PlacementDeleted:
		c.stopWriter(p.Stream, "placement deleted")
		c.stopReplica(p.Stream)
	case p.Writer == c.self:
		c.stopReplica(p.Stream)
		c.ensureWriter(p)
	case slices.Contains(p.Replicas, c.self):
		c.stopWriter(p.Stream, fmt.Sprintf("deposed: %s writes at epoch %d", p.Writer, p.Epoch))
		c.ensureReplica(p)
	default:
		c.stopWriter(p.Stream, "no longer placed here")
		c.stopReplica(p.Stream)
	}
}

func (c *Cluster) roleError(stream string, err error) {
	c.mu.Lock()
	c.cstats.RoleErrors++
	c.mu.Unlock()
	c.log.Error().Err(err).Str("stream", stream).Msg("role change failed")
}

// ensureWriter runs the stream's writer at the placement's epoch: started if absent,
// restarted if it runs at a lower epoch.
func (c *Cluster) ensureWriter(p metadata.Placement) {
	c.mu.Lock()
	w, running := c.writers[p.Stream]
	fencedAt := c.fenced[p.Stream]
	c.mu.Unlock()
	if running {
		if w.epoch >= p.Epoch {
			return
		}
		c.stopWriter(p.Stream, fmt.Sprintf("epoch raised from %d to %d", w.epoch, p.Epoch))
	}
	if fencedAt > p.Epoch {
		c.log.Warn().Str("stream", p.Stream).Uint64("epoch", p.Epoch).Uint64("stored_epoch", fencedAt).Msg("placement names this node at an epoch already fenced; not starting the writer")
		return
	}
	spec, err := c.cfg.OpenStream(p.Stream)
	if err != nil {
		c.roleError(p.Stream, fmt.Errorf("open stream %s for writing: %w", p.Stream, err))
		return
	}
	spec.ID, spec.Epoch, spec.Replicas = p.Stream, p.Epoch, append([]string(nil), p.Replicas...)
	if err := c.node.AddStream(spec); err != nil {
		c.roleError(p.Stream, err)
		return
	}
	fctx, cancel := context.WithCancel(c.ctx)
	c.mu.Lock()
	c.writers[p.Stream] = &writerRole{epoch: p.Epoch, cancel: cancel}
	delete(c.fenced, p.Stream)
	c.cstats.WritersStarted++
	c.mu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.watchFence(fctx, p.Stream, p.Epoch)
	}()
	c.log.Info().Str("stream", p.Stream).Uint64("epoch", p.Epoch).Strs("replicas", p.Replicas).Msg("writer started")
}

// stopWriter stops the stream's writer if this cluster started it.
func (c *Cluster) stopWriter(stream, reason string) {
	c.mu.Lock()
	w, ok := c.writers[stream]
	delete(c.writers, stream)
	if ok {
		c.cstats.WritersStopped++
	}
	c.mu.Unlock()
	if !ok {
		return
	}
	w.cancel()
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	if err := c.node.RemoveStream(ctx, stream); err != nil && !errors.Is(err, actors.ErrUnknownStream) {
		c.roleError(stream, err)
	}
	c.log.Info().Str("stream", stream).Uint64("epoch", w.epoch).Str("reason", reason).Msg("writer stopped")
}

func (c *Cluster) applyFence(f fenceEvent) {
	c.mu.Lock()
	w, ok := c.writers[f.stream]
	current := ok && w.epoch == f.epoch
	if current {
		c.fenced[f.stream] = f.stored
		c.cstats.WritersFenced++
	}
	c.mu.Unlock()
	if current {
		c.stopWriter(f.stream, fmt.Sprintf("fenced: epoch %d persisted, this writer is at %d", f.stored, f.epoch))
	}
}

// watchFence follows the stream's stored epoch in etcd while the local writer runs at
// epoch. When a higher epoch has persisted, the writer is deposed: its next persist would be
// refused anyway, and stopping it now stops its uploads too.
func (c *Cluster) watchFence(ctx context.Context, stream string, epoch uint64) {
	stored, err := c.meta.WatchEpoch(ctx, stream, epoch, func(err error) {
		c.log.Error().Err(err).Str("stream", stream).Msg("stored epoch unreadable")
	})
	if err != nil {
		return // ctx ended: the writer stopped
	}
	select {
	case c.fences <- fenceEvent{stream: stream, epoch: epoch, stored: stored}:
	case <-ctx.Done():
	}
}

// ensureReplica runs the stream's replica cache and tells it who writes the stream.
func (c *Cluster) ensureReplica(p metadata.Placement) {
	c.mu.Lock()
	r, ok := c.replicas[p.Stream]
	c.mu.Unlock()
	if ok {
		c.root.Send(r.pid, writerChangedMsg{writer: p.Writer, epoch: p.Epoch})
		return
	}
	spec, err := c.cfg.OpenStream(p.Stream)
	if err != nil {
		// The cache still serves the manifest; only local retention needs the log.
		c.roleError(p.Stream, fmt.Errorf("open stream %s for its replica cache: %w", p.Stream, err))
	}
	snap := &replicaSnapshot{}
	ra := &replicaActor{cl: c, stream: p.Stream, log: spec.Log, placement: p, snap: snap,
		logger: c.log.With().Str("stream", p.Stream).Str("actor", "replica").Logger()}
	pid, err := c.root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return ra }), "replica/"+p.Stream)
	if err != nil {
		c.roleError(p.Stream, fmt.Errorf("start replica cache of %s: %w", p.Stream, err))
		return
	}
	c.mu.Lock()
	c.replicas[p.Stream] = &replicaRole{pid: pid, snap: snap, log: spec.Log}
	c.cstats.ReplicasStarted++
	c.mu.Unlock()
	c.log.Info().Str("stream", p.Stream).Str("writer", p.Writer).Uint64("epoch", p.Epoch).Msg("replica cache started")
}

func (c *Cluster) stopReplica(stream string) {
	c.mu.Lock()
	r, ok := c.replicas[stream]
	delete(c.replicas, stream)
	if ok {
		c.cstats.ReplicasStopped++
	}
	c.mu.Unlock()
	if !ok {
		return
	}
	if err := c.root.StopFuture(r.pid).Wait(); err != nil {
		c.roleError(stream, fmt.Errorf("stop replica cache: %w", err))
	}
	c.log.Info().Str("stream", stream).Msg("replica cache stopped")
}

func (c *Cluster) replicaPID(stream string) *actor.PID {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.replicas[stream]; ok {
		return r.pid
	}
	return nil
}
