package admin

import (
	"fmt"
	"sort"

	"github.com/streamtier/streamtier/actors/cluster"
	"github.com/streamtier/streamtier/metadata"
)

// ClusterSource is what /status reads of a node running as a cluster member;
// *cluster.Cluster implements it.
type ClusterSource interface {
	Status() cluster.Status
	Stats() *cluster.TransportStats
}

// ClusterReport is the cluster part of /status: membership, the roles this node runs, the
// replica manifests it holds and the transport's counters.
type ClusterReport struct {
	Node       string                   `json:"node"`
	Address    string                   `json:"address"`
	Members    map[string]string        `json:"members"`    // node -> address
	Writers    map[string]uint64        `json:"writers"`    // stream -> epoch of the writer this node runs
	Fenced     map[string]uint64        `json:"fenced"`     // stream -> epoch that fenced this node's writer
	Placements []metadata.Placement     `json:"placements"` // every placement record, by stream
	Replicas   map[string]ReplicaReport `json:"replicas"`   // streams this node replicates
	Roles      cluster.Stats            `json:"roles"`
	Transport  TransportReport          `json:"transport"`
}

// ReplicaReport is one replica manifest cache: which writer it follows and the persisted
// manifest it holds (its root's seq and uid, epoch, offsets and digest, comparable with the
// writer's record and cache).
type ReplicaReport struct {
	Writer      string `json:"writer"`
	WriterEpoch uint64 `json:"writer_epoch"`
	Synced      bool   `json:"synced"`
	Seq         uint64 `json:"seq"`
	UID         string `json:"uid"` // 16 hex digits, as the manifest record writes a root uid
	Epoch       uint64 `json:"epoch"`
	FirstOffset uint64 `json:"first_offset"`
	NextOffset  uint64 `json:"next_offset"`
	TotalSize   uint64 `json:"total_size"`
	Entries     int    `json:"entries"`
	Pending     bool   `json:"pending"`
	Digest      uint64 `json:"digest"`
	// Counters are the replica core's (applied, gaps, syncs, ...).
	Counters      map[string]uint64 `json:"counters"`
	LocalFirst    uint64            `json:"local_first"`
	LocalNext     uint64            `json:"local_next"`
	LocalSegments int               `json:"local_segments"`
}

// TransportReport are the cluster transport's counters (they only rise).
type TransportReport struct {
	Sent           int64 `json:"sent"`
	QueueFull      int64 `json:"queue_full"`
	NoRoute        int64 `json:"no_route"`
	FaultDropped   int64 `json:"fault_dropped"`
	Reordered      int64 `json:"reordered"`
	PausedDropped  int64 `json:"paused_dropped"`
	Received       int64 `json:"received"`
	Rejected       int64 `json:"rejected"`
	Recovered      int64 `json:"recovered"`
	BadMessages    int64 `json:"bad_messages"`
	Unroutable     int64 `json:"unroutable"`
	Registrations  int64 `json:"registrations"`
	NotWriter      int64 `json:"not_writer"`
	UnknownMessage int64 `json:"unknown_message"`
}

// BuildClusterReport turns the cluster's status and transport counters into the report
// (pure; the replica history is left out, it is long and only tests need it).
func BuildClusterReport(st cluster.Status, t *cluster.TransportStats) ClusterReport {
	r := ClusterReport{
		Node: st.Node, Address: st.Address, Members: st.Members, Writers: st.Writers, Fenced: st.Fenced,
		Placements: []metadata.Placement{}, Replicas: map[string]ReplicaReport{}, Roles: st.Roles,
	}
	for _, p := range st.Placements {
		r.Placements = append(r.Placements, p)
	}
	sort.Slice(r.Placements, func(i, j int) bool { return r.Placements[i].Stream < r.Placements[j].Stream })
	for id, rs := range st.Replicas {
		c := rs.Counters
		r.Replicas[id] = ReplicaReport{
			Writer: rs.Writer, WriterEpoch: rs.WriterEpoch, Synced: rs.Synced, Seq: rs.Seq, UID: fmt.Sprintf("%016x", rs.UID), Epoch: rs.Epoch,
			FirstOffset: rs.FirstOffset, NextOffset: rs.NextOffset, TotalSize: rs.TotalSize, Entries: rs.Entries,
			Pending: rs.Pending, Digest: rs.Digest,
			Counters: map[string]uint64{
				"applied": c.Applied, "gaps": c.Gaps, "forks": c.Forks, "epoch_changes": c.EpochChanges, "stale_epoch": c.StaleEpoch,
				"duplicates": c.Duplicates, "bad_edits": c.BadEdits, "before_sync": c.BeforeSync,
				"syncs_applied": c.SyncsApplied, "syncs_ignored": c.SyncsIgnored, "bad_syncs": c.BadSyncs,
				"registrations": c.Registrations, "resync_requests": c.ResyncRequests, "retries": c.Retries,
				"suppressed": c.Suppressed,
			},
			LocalFirst: rs.LocalFirst, LocalNext: rs.LocalNext, LocalSegments: rs.LocalSegments,
		}
	}
	if t != nil {
		r.Transport = TransportReport{
			Sent: t.Sent.Load(), QueueFull: t.QueueFull.Load(), NoRoute: t.NoRoute.Load(), FaultDropped: t.FaultDropped.Load(),
			Reordered: t.Reordered.Load(), PausedDropped: t.PausedDropped.Load(), Received: t.Received.Load(),
			Rejected: t.Rejected.Load(), Recovered: t.Recovered.Load(), BadMessages: t.BadMessages.Load(),
			Unroutable: t.Unroutable.Load(), Registrations: t.Registrations.Load(), NotWriter: t.NotWriter.Load(),
			UnknownMessage: t.UnknownMessage.Load(),
		}
	}
	return r
}
