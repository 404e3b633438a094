package cluster

import (
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors/cluster/replicacore"
	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/messages"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/segments"
)

// Messages a replica cache receives: converted cluster messages, placement and membership
// changes, and its own tick.
type (
	replicaEditsMsg struct {
		from         string
		root, parent replicacore.Root
		epoch        uint64
		edits        []manifest.Edit
	}
	replicaSyncMsg struct {
		from     string
		root     replicacore.Root
		epoch    uint64
		manifest manifest.Manifest
	}
	writerChangedMsg struct {
		writer string
		epoch  uint64
	}
	writerRejoinedMsg struct{ node string }
	replicaTickMsg    struct{}
)

// ReplicaHeld is one manifest a replica cache held: its root's seq and uid, the epoch of the
// writer that sent it, its digest (manifest.Digest) and when the cache took it (ms since
// the epoch).
type ReplicaHeld struct {
	Seq    uint64
	UID    uint64
	Epoch  uint64
	Digest uint64
	At     int64
}

// ReplicaStatus is what an operator sees of one replica cache: the core's state and
// counters, the digest of the manifest held, the recent history of manifests held, and the
// replica's local log.
type ReplicaStatus struct {
	replicacore.Status
	Digest  uint64        // manifest.Digest of the manifest held
	History []ReplicaHeld // the last replicaHistory manifests held, oldest first

	LocalFirst           uint64
	LocalNext            uint64
	LocalSegments        int
	LocalSegmentsDeleted int64
	LocalRetentionErrors int64

	manifest manifest.Manifest
}

// replicaHistory bounds ReplicaStatus.History.
const replicaHistory = 512

// replicaSnapshot publishes a replica cache's status to readers outside the actor.
type replicaSnapshot struct{ p atomic.Pointer[ReplicaStatus] }

func (s *replicaSnapshot) load() *ReplicaStatus { return s.p.Load() }

// replicaActor is the shell around replicacore for one stream this node replicates: it
// feeds the core the writer's broadcasts and syncs, placement and membership changes and a
// periodic tick, sends its registrations through the transport, runs local retention on the
// replica's own log, and publishes its status.
type replicaActor struct {
	cl        *Cluster
	stream    string
	log       *segments.Log // nil when the node has no local log for the stream
	placement metadata.Placement
	snap      *replicaSnapshot
	logger    zerolog.Logger

	core    *replicacore.Core
	timers  shell.Timers
	status  ReplicaStatus
	deleted int64
	retErrs int64
}

func (a *replicaActor) Receive(c actor.Context) {
	now := a.cl.cfg.clock.Now().UnixMilli()
	switch m := c.Message().(type) {
	case *actor.Started:
		core, err := replicacore.New(replicacore.Config{Stream: a.stream, Node: a.cl.self, ResyncRetry: a.cl.cfg.ResyncRetry})
		if err != nil {
			a.logger.Error().Err(err).Msg("replica cache cannot start")
			c.Stop(c.Self())
			return
		}
		a.core = core
		a.status.manifest = manifest.Empty()
		a.step(c, replicacore.WriterChanged{Writer: a.placement.Writer, Epoch: a.placement.Epoch, Now: now})
		a.timers.After(c.ActorSystem().Root, c.Self(), a.cl.cfg.TickInterval, replicaTickMsg{})
	case *actor.Stopping:
		a.timers.StopAll()
	case replicaEditsMsg:
		a.step(c, replicacore.Edits{From: m.from, Root: m.root, Parent: m.parent, Epoch: m.epoch, Edits: m.edits, Now: now})
	case replicaSyncMsg:
		a.step(c, replicacore.Sync{From: m.from, Root: m.root, Epoch: m.epoch, Manifest: m.manifest, Now: now})
	case writerChangedMsg:
		a.step(c, replicacore.WriterChanged{Writer: m.writer, Epoch: m.epoch, Now: now})
	case writerRejoinedMsg:
		a.step(c, replicacore.WriterRejoined{Node: m.node, Now: now})
	case replicaTickMsg:
		a.step(c, replicacore.Tick{Now: now})
		a.timers.After(c.ActorSystem().Root, c.Self(), a.cl.cfg.TickInterval, replicaTickMsg{})
	}
}

func (a *replicaActor) step(c actor.Context, ev replicacore.Event) {
	if a.core == nil {
		return
	}
	effects, err := a.core.Step(ev)
	if err != nil {
		a.logger.Error().Err(err).Msg("replica core refused an event")
		return
	}
	for _, e := range effects {
		switch e := e.(type) {
		case replicacore.Register:
			a.logger.Debug().Str("to", e.To).Bool("resync", e.Resync).Str("reason", e.Reason).Msg("asking the writer for a sync")
			a.cl.tr.send(e.To, &messages.RegisterReplica{Stream: a.stream, Replica: a.cl.self, Resync: e.Resync, Reason: e.Reason})
		case replicacore.Publish:
			d := manifest.Digest(e.Manifest)
			a.status.manifest, a.status.Digest = e.Manifest, d
			h := a.status.History
			if n := len(h); n == 0 || h[n-1].Seq != e.Root.Seq || h[n-1].UID != e.Root.UID || h[n-1].Epoch != e.Epoch || h[n-1].Digest != d {
				if len(h) >= replicaHistory {
					h = append(h[:0:0], h[1:]...)
				}
				a.status.History = append(h, ReplicaHeld{Seq: e.Root.Seq, UID: e.Root.UID, Epoch: e.Epoch, Digest: d, At: a.cl.cfg.clock.Now().UnixMilli()})
			}
		case replicacore.EvaluateLocalRetention:
			a.localRetention(e.PersistedNext)
		case replicacore.Refused:
			a.logger.Warn().Err(e.Err).Str("what", e.What).Msg("replica refused a message")
		}
	}
	a.publish()
}

// localRetention deletes the replica's local segments wholly below the writer's persisted
// next offset, keeping the node's hot window, exactly as the writer's own local retention.
func (a *replicaActor) localRetention(persistedNext uint64) {
	if a.log == nil {
		return
	}
	cfg := a.cl.node.Config()
	deletable := segments.DurableDeletable(a.log.Segments(), persistedNext, cfg.LocalHotWindowBytes, cfg.LocalHotWindowAge, a.cl.cfg.clock.Now())
	if len(deletable) == 0 {
		return
	}
	deleted, err := a.log.ApplyRetention(segments.RetentionPolicy{
		MayDelete: func(s segments.SegmentInfo) bool { return deletable[s.Name] },
	}, a.cl.cfg.clock.Now())
	a.deleted += int64(len(deleted))
	a.cl.node.Metrics().LocalSegmentsDeleted.Add(int64(len(deleted)))
	if err != nil {
		a.retErrs++
		a.logger.Error().Err(err).Msg("replica local retention failed")
	}
}

// publish stores a copy of the status for Cluster.Status and ReplicaManifest.
func (a *replicaActor) publish() {
	st := a.status
	st.Status = a.core.Status()
	st.History = append([]ReplicaHeld(nil), a.status.History...)
	st.LocalSegmentsDeleted, st.LocalRetentionErrors = a.deleted, a.retErrs
	if a.log != nil {
		st.LocalFirst, st.LocalNext = a.log.FirstOffset(), a.log.NextOffset()
		st.LocalSegments = len(a.log.Segments())
	}
	a.snap.p.Store(&st)
}
