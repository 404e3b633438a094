package cluster

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/streamtier/streamtier/actors/cluster/replicacore"
	"github.com/streamtier/streamtier/messages"
	"github.com/streamtier/streamtier/metadata"
)

// endpointActor receives every cluster message addressed to this node and routes it:
// broadcasts and syncs to the stream's replica cache, registrations to the local writer.
type endpointActor struct{ cl *Cluster }

func (a *endpointActor) Receive(c actor.Context) {
	cl := a.cl
	msg := c.Message()
	switch msg.(type) {
	case *messages.ManifestEdits, *messages.ManifestSync, *messages.RegisterReplica:
		cl.stats.Received.Add(1)
		if cl.tr.currentFaults().Paused {
			cl.stats.PausedDropped.Add(1)
			return
		}
	}
	switch m := msg.(type) {
	case *messages.ManifestEdits:
		if err := metadata.ValidateNodeName(m.Writer); err != nil {
			cl.badMessage(m.Stream, m.Writer, err)
			return
		}
		edits, err := messages.ToEdits(m.Edits)
		if err != nil {
			cl.badMessage(m.Stream, m.Writer, err)
			return
		}
		cl.toReplica(m.Stream, replicaEditsMsg{from: m.Writer, root: replicacore.Root{Seq: m.RootSeq, UID: m.RootUid},
			parent: replicacore.Root{Seq: m.ParentSeq, UID: m.ParentUid}, epoch: m.Epoch, edits: edits})
	case *messages.ManifestSync:
		if err := metadata.ValidateNodeName(m.Writer); err != nil {
			cl.badMessage(m.Stream, m.Writer, err)
			return
		}
		man, err := messages.ToManifest(m.Manifest)
		if err != nil {
			cl.badMessage(m.Stream, m.Writer, err)
			return
		}
		cl.toReplica(m.Stream, replicaSyncMsg{from: m.Writer, root: replicacore.Root{Seq: m.RootSeq, UID: m.RootUid}, epoch: m.Epoch, manifest: man})
	case *messages.RegisterReplica:
		if err := metadata.ValidateNodeName(m.Replica); err != nil {
			cl.badMessage(m.Stream, m.Replica, err)
			return
		}
		if err := cl.node.ReplicaRegistered(m.Stream, m.Replica, m.Resync); err != nil {
			cl.stats.NotWriter.Add(1)
			cl.log.Debug().Err(err).Str("stream", m.Stream).Str("replica", m.Replica).Msg("registration for a stream not written here")
			return
		}
		cl.stats.Registrations.Add(1)
	case actor.SystemMessage, actor.AutoReceiveMessage:
	default:
		cl.stats.UnknownMessage.Add(1)
		cl.log.Warn().Str("type", fmt.Sprintf("%T", msg)).Msg("unexpected message at the cluster endpoint")
	}
}

func (c *Cluster) badMessage(stream, from string, err error) {
	c.stats.BadMessages.Add(1)
	c.log.Warn().Err(err).Str("stream", stream).Str("from", from).Msg("cluster message refused")
}

func (c *Cluster) toReplica(stream string, msg any) {
	pid := c.replicaPID(stream)
	if pid == nil {
		c.stats.Unroutable.Add(1)
		return
	}
	c.root.Send(pid, msg)
}
