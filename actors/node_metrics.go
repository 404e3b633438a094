package actors

import (
	"sync/atomic"
	"time"

	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/s3io"
)

// Metrics are the node's counters and gauges (plain atomics; the binary exports them to
// Prometheus). Counters only rise; gauges say where the pipeline is now.
type Metrics struct {
	StreamsRunning atomic.Int64
	// StreamsMetadataMissing and StreamsMetadataBehind are how many streams are stalled now
	// because etcd lost their metadata or is behind the bucket (gauges, one per phase).
	StreamsMetadataMissing atomic.Int64
	StreamsMetadataBehind  atomic.Int64
	// Resolutions counts resolutions that completed (the reader runs on what it resolved).
	Resolutions atomic.Int64
	// StalledResolutions counts resolutions that found a stream stalled on its metadata
	// (each retry counts).
	StalledResolutions atomic.Int64
	// ClaimLost is 1 once the node found its cluster claim changed (it stopped persisting
	// and deleting), 0 before.
	ClaimLost atomic.Int64
	// Adoptions counts roots adopted at resolution; Upgrades version 3 roots persisted at
	// resolution for a record naming a version 1 or 2 root.
	Adoptions atomic.Int64
	Upgrades  atomic.Int64
	// TransfersRunning is how many transfer tasks run now (each decrements it as it ends), the
	// hung ones the governor abandoned included.
	TransfersRunning atomic.Int64
	// TransfersAbandoned counts running transfers the governor abandoned: their reader
	// resubmitted them after the transfer deadline, so their slot was freed without a Done.
	TransfersAbandoned   atomic.Int64
	GovernorQueued       atomic.Int64
	GovernorTokens       atomic.Int64
	FragmentsUploaded    atomic.Int64
	BytesUploaded        atomic.Int64
	TransferErrors       [s3io.ClassCanceled + 1]atomic.Int64 // by s3io.Class
	Persists             atomic.Int64
	PersistConflicts     atomic.Int64
	PersistNotFound      atomic.Int64
	PersistFailures      atomic.Int64
	ResolveFailures      atomic.Int64
	Gaps                 atomic.Int64 // gaps declared: the local log lost offsets before upload
	GapOffsets           atomic.Int64
	Truncations          atomic.Int64 // divergence truncations of the remote tier
	TruncatedOffsets     atomic.Int64
	DivergedStalls       atomic.Int64 // stalls because the local log shares no chunk with the remote tier
	Reinitializations    atomic.Int64
	ReaderCrashes        atomic.Int64
	CoreErrors           atomic.Int64
	Stalls               atomic.Int64
	RemoteRetentionRuns  atomic.Int64
	LocalSegmentsDeleted atomic.Int64
	// ActorRestarts counts restarts of failed governors, reapers, stream supervisors and
	// drains (readers have ReaderCrashes).
	ActorRestarts atomic.Int64
	// TaskPanics counts tasks and transfer tasks that panicked (each reported as a failure).
	TaskPanics atomic.Int64
	// DrainWakeups counts the times a drain read its local log (a batch, an end of data, a
	// re-check after a listener registration): bounded by the data and the core's retries,
	// it shows a drain that spins.
	DrainWakeups atomic.Int64
	// DrainRepositions counts drains reopened at the core's position because their position
	// disagreed with it (or to retry after such a stall); DrainStalls the stalls, when the
	// disagreement came back right after a reposition; DrainPauses the pauses at the bound
	// on bytes not yet durable.
	DrainRepositions atomic.Int64
	DrainStalls      atomic.Int64
	DrainPauses      atomic.Int64
	// StreamsDormant is how many of the running streams are dormant now (no actor:
	// stream_dormant.go). Dormancies counts streams that went dormant, Wakes those woken
	// again (by data, an await, a command or a replica registration).
	StreamsDormant atomic.Int64
	Dormancies     atomic.Int64
	Wakes          atomic.Int64
	// DrainPassivations counts idle drains the reader stopped, to wait on the log itself
	// until data comes (an idle stream keeps no drain actor); DrainActivations the drains it
	// started again for that data.
	DrainPassivations atomic.Int64
	DrainActivations  atomic.Int64
	// TasksOverdue counts tasks whose result did not come by their deadline and a grace
	// period: their owner went on with a failure instead.
	TasksOverdue atomic.Int64
	// BroadcastsDropped counts broadcasts and syncs a broadcast actor dropped: its queue was
	// full behind a replica sink that did not keep up, or the sink panicked.
	BroadcastsDropped atomic.Int64
	// StrayMessages counts messages a reader had no case for (dropped, never fed to the core).
	StrayMessages atomic.Int64
	Reaper        ReaperStats
	// StreamsStalled is how many streams cannot read their local log now (a drain failing to
	// open or read it, retrying on its timer): they are not in StreamsRunning.
	StreamsStalled atomic.Int64
	// LocalErrors counts local read failures reported by drains, by cause: the names of
	// ExhaustedResource (EMFILE, ENFILE, ENOSPC, EDQUOT, ENOMEM) in that order, then other.
	LocalErrors [6]atomic.Int64
	// StalledBy is how many streams are stalled now, by the same causes.
	StalledBy [6]atomic.Int64
	// Parks counts streams parked because their reader kept failing (once per episode, not
	// per failed retry); ParkRetries the periodic retries of parked readers.
	Parks       atomic.Int64
	ParkRetries atomic.Int64
	// RemoteRead are the remote readers' counters and gauges (remotereadmetrics.go).
	RemoteRead read.RemoteStats
	// Read counts the cross-tier readers' work (Node.OpenReader).
	Read read.Metrics

	persistLatency shell.Latencies // recent successful persists
	uploadLatency  shell.Latencies // recent successful uploads
}

func (m *Metrics) observeTransfer(class s3io.Class, bytes int64, d time.Duration) {
	if class == s3io.ClassNone {
		m.FragmentsUploaded.Add(1)
		m.BytesUploaded.Add(bytes)
		m.uploadLatency.Add(d)
		return
	}
	if int(class) < len(m.TransferErrors) {
		m.TransferErrors[class].Add(1)
	}
}

func (m *Metrics) observePersist(o readercore.PersistOutcome, d time.Duration) {
	switch o {
	case readercore.PersistOK:
		m.Persists.Add(1)
		m.persistLatency.Add(d)
	case readercore.PersistConflict, readercore.PersistFenced: // the condition failed: another writer
		m.PersistConflicts.Add(1)
	case readercore.PersistNotFound:
		m.PersistNotFound.Add(1)
	default:
		m.PersistFailures.Add(1)
	}
}

// LatencyQuantiles returns the p50 and p99 of recent successful persists and uploads.
func (m *Metrics) LatencyQuantiles() (persistP50, persistP99, uploadP50, uploadP99 time.Duration) {
	persistP50, persistP99 = m.persistLatency.Quantiles()
	uploadP50, uploadP99 = m.uploadLatency.Quantiles()
	return
}

// LatencyTotals returns how many persists and uploads succeeded and their summed latency
// since the node started: with LatencyQuantiles, a Prometheus summary of each.
func (m *Metrics) LatencyTotals() (persists uint64, persistSum time.Duration, uploads uint64, uploadSum time.Duration) {
	persists, persistSum = m.persistLatency.Totals()
	uploads, uploadSum = m.uploadLatency.Totals()
	return
}

// countLocalError counts one local read failure under its cause.
func (m *Metrics) countLocalError(err error) {
	m.LocalErrors[causeIndex(ExhaustedResource(err))].Add(1)
}

// LocalErrorCauses names the slots of LocalErrors and StalledBy, in order.
func LocalErrorCauses() []string { return append(append([]string(nil), exhaustionCauses...), "other") }
