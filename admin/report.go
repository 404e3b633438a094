// Package admin is a node's admin HTTP server: /status (the node and every stream as JSON),
// /metrics (Prometheus), /healthz, /readyz, and the operator actions (cut a fragment,
// evaluate retention). It also holds the Prometheus exporter of the node's counters and
// gauges, an etcd request counter, and the client the `node` commands use to talk to a
// running node. Building the report from the node's status is pure (BuildReport).
package admin

import (
	"context"
	"time"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/gc"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io"
)

// Node is what the admin server needs of a running node; *actors.Node implements it.
type Node interface {
	Streams() []string
	Status(ctx context.Context, id string) (actors.StreamStatus, error)
	Cached(id string) (actors.Persisted, bool)
	GovernorStatus(ctx context.Context) (actors.GovernorStatus, error)
	Metrics() *actors.Metrics
	ForceCut(id string) error
	EvaluateRetention(id string) error
	SetRetention(id string, p manifest.Policy) error
	TruncateRemote(ctx context.Context, id string) error
	AwaitOffset(ctx context.Context, id string, offset uint64) error
	Flush(ctx context.Context, id string, offset uint64) error
	CommittedNext(id string) (uint64, error)
}

// Report is the body of /status: the node, then each stream in id order.
type Report struct {
	Node    NodeReport     `json:"node"`
	Streams []StreamReport `json:"streams"`
	// Cluster is set when the node runs as a cluster member.
	Cluster *ClusterReport `json:"cluster,omitempty"`
}

// NodeReport is the per-node part of the status.
type NodeReport struct {
	ID             string  `json:"id"`
	UptimeSeconds  float64 `json:"uptime_seconds"`
	StreamsRunning int64   `json:"streams_running"`
	StreamsParked  int     `json:"streams_parked"`
	// StreamsDormant are the running streams that hold no actor now (stream_dormant_after).
	StreamsDormant int64 `json:"streams_dormant"`
	// StreamsStalled are the streams whose drain cannot read the local log now (not in
	// streams_running), StalledBy the same by cause, LocalErrors the failures reported since
	// the start by cause: EMFILE, ENFILE, ENOSPC, EDQUOT, ENOMEM or other.
	StreamsStalled   int64            `json:"streams_stalled"`
	StalledBy        map[string]int64 `json:"stalled_by,omitempty"`
	LocalErrors      map[string]int64 `json:"local_errors,omitempty"`
	TransfersRunning int64            `json:"transfers_running"`
	Governor         GovernorReport   `json:"governor"`
	Reaper           ReaperReport     `json:"reaper"`
	Uploads          UploadReport     `json:"uploads"`
	Persists         PersistReport    `json:"persists"`
	Reads            ReadReport       `json:"reads"`
	Stages           StageReport      `json:"stages"`
	S3               RequestReport    `json:"s3"`
	// Bucket is the last outcome of the periodic bucket probe (absent when it is off).
	Bucket *BucketReport `json:"s3_bucket,omitempty"`
	// GC is the automatic garbage collection (absent when gc_interval is 0).
	GC *GCReport `json:"gc,omitempty"`
	// Cost is every S3 request of this node (the streams' and those of no stream: the
	// probe, gc) and the bytes its streams store, projected to a month.
	Cost  *CostReport   `json:"cost,omitempty"`
	Etcd  RequestReport `json:"etcd"`
	Error string        `json:"error,omitempty"` // a part of the status that could not be read
	// Faults are fatal failures of the node outside its streams, such as an embedded server
	// that stopped on its own; the node is not ready while there is one.
	Faults []Fault `json:"faults,omitempty"`
}

// Fault is one fatal failure: which server, the resource that ran out if that was the cause
// (EMFILE, ENFILE, ENOSPC, ...), and the error.
type Fault struct {
	Server    string `json:"server"`
	Exhausted string `json:"exhausted,omitempty"`
	Error     string `json:"error"`
}

// ReadReport is what the node's cross-tier readers did.
type ReadReport struct {
	Open             int64            `json:"open"`
	Opened           int64            `json:"opened"`
	BytesLocal       int64            `json:"bytes_local"`
	BytesRemote      int64            `json:"bytes_remote"`
	Gaps             int64            `json:"gaps"`
	Skipped          int64            `json:"skipped"`
	Handoffs         int64            `json:"handoffs"`
	ErrorsByClass    map[string]int64 `json:"errors_by_class"`
	FirstChunkP50Sec float64          `json:"first_chunk_p50_secs"`
	FirstChunkP99Sec float64          `json:"first_chunk_p99_secs"`
}

// GovernorReport is the governor's token bucket and queue.
type GovernorReport struct {
	RateBytesPerSec int64 `json:"rate_bytes_per_sec"` // 0: unlimited
	BurstBytes      int64 `json:"burst_bytes"`
	Tokens          int64 `json:"tokens"`
	Queued          int   `json:"queued"`
	QueuedBytes     int64 `json:"queued_bytes"`
	Running         int   `json:"running"`
	// InFlight are the admitted uploads not yet done, bounded by MaxConcurrent node-wide
	// and by PerStream per stream when a cap is set (0: none, the share is work-conserving);
	// StreamsAtShare the streams at that cap now.
	InFlight       int `json:"in_flight"`
	MaxConcurrent  int `json:"max_concurrent"`
	PerStream      int `json:"per_stream"`
	StreamsAtShare int `json:"streams_at_share"`
	// Abandoned counts running uploads freed because their reader resubmitted them after the
	// transfer deadline; AbandonedRunning those whose task has not ended yet (hung).
	Abandoned        uint64 `json:"abandoned"`
	AbandonedRunning int    `json:"abandoned_running"`
}

// ReaperReport is the reaper's queue and what it did.
type ReaperReport struct {
	Queued    int64 `json:"queued"`
	Deleted   int64 `json:"deleted"`
	Failed    int64 `json:"failed"`
	Retries   int64 `json:"retries"`
	GroupGets int64 `json:"group_gets"`
}

// UploadReport counts fragment uploads since the node started.
type UploadReport struct {
	Fragments      int64            `json:"fragments"`
	Bytes          int64            `json:"bytes"`
	ErrorsByClass  map[string]int64 `json:"errors_by_class"`
	LatencyP50Secs float64          `json:"latency_p50_seconds"`
	LatencyP99Secs float64          `json:"latency_p99_seconds"`
}

// PersistReport counts persists since the node started.
type PersistReport struct {
	OK             int64   `json:"ok"`
	Conflicts      int64   `json:"conflicts"`
	NotFound       int64   `json:"not_found"`
	Failures       int64   `json:"failures"`
	LatencyP50Secs float64 `json:"latency_p50_seconds"`
	LatencyP99Secs float64 `json:"latency_p99_seconds"`
}

// BucketReport is what the bucket probe last saw: whether the bucket answers, and if not
// how (access_denied, no_bucket, unreachable, error) with the server's error, since when.
type BucketReport struct {
	Bucket          string            `json:"bucket"`
	Reachable       bool              `json:"reachable"`
	Outcome         string            `json:"outcome"` // "" before the first probe
	Error           string            `json:"error,omitempty"`
	CheckedAtMillis int64             `json:"checked_at_ms"`
	SinceMillis     int64             `json:"since_ms"` // when the current outcome began
	IntervalSeconds float64           `json:"interval_seconds"`
	Probes          uint64            `json:"probes"`
	ByOutcome       map[string]uint64 `json:"by_outcome"`
}

func bucketReport(h s3io.BucketHealth) *BucketReport {
	r := &BucketReport{
		Bucket: h.Bucket, Reachable: h.Reachable(), Outcome: string(h.Outcome), Error: h.Error,
		IntervalSeconds: h.Interval.Seconds(), Probes: h.Probes, ByOutcome: map[string]uint64{},
	}
	if !h.CheckedAt.IsZero() {
		r.CheckedAtMillis, r.SinceMillis = h.CheckedAt.UnixMilli(), h.Since.UnixMilli()
	}
	for k, v := range h.Counts {
		r.ByOutcome[string(k)] = v
	}
	return r
}

// GCReport is automatic garbage collection on this node: its settings, its counters since
// the start and the last sweep it ran (rounds another node swept are counted as skipped).
type GCReport struct {
	Mode            string         `json:"mode"`
	IntervalSeconds float64        `json:"interval_seconds"`
	GraceSeconds    float64        `json:"grace_seconds"`
	Sweeps          uint64         `json:"sweeps"`
	SkippedLocked   uint64         `json:"skipped_locked"` // another node held the lock
	SweepErrors     uint64         `json:"sweep_errors"`
	OrphansFound    uint64         `json:"orphans_found"` // summed over sweeps
	ObjectsDeleted  uint64         `json:"objects_deleted"`
	DeleteFailures  uint64         `json:"delete_failures"`
	LastAttemptMs   int64          `json:"last_attempt_ms,omitempty"`
	Last            *GCSweepReport `json:"last_sweep,omitempty"`
}

// GCSweepReport is one sweep's findings.
type GCSweepReport struct {
	StartedMs    int64   `json:"started_ms"`
	DurationSecs float64 `json:"duration_seconds"`
	Scanned      int     `json:"scanned"`
	Referenced   int     `json:"referenced"`
	Orphans      int     `json:"orphans"`
	OrphanBytes  int64   `json:"orphan_bytes"`
	Young        int     `json:"young"`
	Pending      int     `json:"pending"`
	Undecided    int     `json:"undecided"`
	Deleted      int     `json:"deleted"`
	Failed       int     `json:"failed"`
	StaleSkipped int     `json:"stale_skipped"`
	Error        string  `json:"error,omitempty"`
	Undecidable  string  `json:"undecided_reason,omitempty"`
}

func gcReport(st gc.SweeperStatus) *GCReport {
	r := &GCReport{
		Mode: string(st.Mode), IntervalSeconds: st.Interval.Seconds(), GraceSeconds: st.Grace.Seconds(),
		Sweeps: st.Sweeps, SkippedLocked: st.SkippedLocked, SweepErrors: st.SweepErrors, OrphansFound: st.OrphansFound,
		ObjectsDeleted: st.ObjectsDeleted, DeleteFailures: st.DeleteFailures,
	}
	if !st.LastAttempt.IsZero() {
		r.LastAttemptMs = st.LastAttempt.UnixMilli()
	}
	if l := st.Last; l != nil {
		r.Last = &GCSweepReport{
			StartedMs: l.Started.UnixMilli(), DurationSecs: l.Finished.Sub(l.Started).Seconds(), Scanned: l.Scanned, Referenced: l.Referenced,
			Orphans: l.Orphans, OrphanBytes: l.OrphanBytes, Young: l.Young, Pending: l.Pending, Undecided: l.Undecided,
			Deleted: l.Deleted, Failed: l.Failed, StaleSkipped: l.StaleSkipped, Undecidable: l.UndecidedReason,
		}
		if l.Err != nil {
			r.Last.Error = l.Err.Error()
		}
		if l.Started.IsZero() { // failed before it could take the lock
			r.Last.StartedMs, r.Last.DurationSecs = 0, 0
		}
	}
	return r
}

// StageReport sums the bytes in each pipeline stage over the streams.
type StageReport struct {
	AssemblyBytes uint64 `json:"assembly_bytes"` // drained, in the fragment being assembled
	TransferBytes uint64 `json:"transfer_bytes"` // cut, not yet applied (queued, uploading, retrying, buffered)
	PersistBytes  uint64 `json:"persist_bytes"`  // applied in memory, not yet persisted
}

// RequestReport counts requests to a backend by operation and errors by class. NotFound
// counts S3's 404 answers (an object or bucket that does not exist yet), which are not
// errors and are in no class; PreconditionFailed counts conditional puts refused because
// the key exists (a root seq another writer took, the claim, the probe), not errors either.
type RequestReport struct {
	Requests           map[string]uint64 `json:"requests"`
	ErrorsByClass      map[string]uint64 `json:"errors_by_class"`
	NotFound           uint64            `json:"not_found,omitempty"`
	PreconditionFailed uint64            `json:"precondition_failed,omitempty"`
}

// StreamReport is one stream's status: local log, remote tier, pipeline, lag.
type StreamReport struct {
	Stream   string           `json:"stream"`
	Phase    string           `json:"phase"`
	Epoch    uint64           `json:"epoch"`
	Restarts uint64           `json:"restarts"`
	Local    LocalReport      `json:"local"`
	Remote   RemoteReport     `json:"remote"`
	Pipeline PipelineReport   `json:"pipeline"`
	Fragment AssemblyReport   `json:"current_fragment"`
	Lag      LagReport        `json:"lag"`
	Counters map[string]int64 `json:"counters"`
	Error    string           `json:"error,omitempty"`
	// Waiting says in one sentence why the stream does not move now (an upload or persist
	// failing with its error, the pause at the memory bound, nothing committed); "" when
	// nothing holds it back.
	Waiting string `json:"waiting,omitempty"`
	// StopReason says why a stream in phase "stopped" stopped for good (deleted, deposed).
	StopReason string `json:"stop_reason,omitempty"`
	// LocalError is why the stream cannot read its local log now (phase "stalled"; retried
	// until it clears), Exhausted the resource that ran out (EMFILE, ENFILE, ENOSPC, ...),
	// LogWriteError the write failure that made the local log refuse appends.
	LocalError    string `json:"local_error,omitempty"`
	Exhausted     string `json:"exhausted,omitempty"`
	LogWriteError string `json:"log_write_error,omitempty"`
	// Parked is set, with phase "parked", while the stream's reader keeps failing and is
	// retried every stream_park_retry_interval.
	Parked *ParkedReport `json:"parked,omitempty"`
	// Dormant says the stream holds no actor now (everything persisted, nothing in flight):
	// data, an await or a command wakes it; the pipeline figures are from when it went dormant.
	Dormant bool `json:"dormant,omitempty"`
	// Follow is set when the local log is followed read-only: another process writes it.
	Follow *FollowReport `json:"follow,omitempty"`
	// Cost is the stream's S3 requests by kind and its stored bytes (the persisted
	// manifest's total size), projected to a month.
	Cost *CostReport `json:"cost,omitempty"`
}

// FollowReport is the state of a followed local log: the bytes of an incomplete chunk at
// its end (not tiered until complete) and the last failure to look at it.
type FollowReport struct {
	PendingBytes int64  `json:"pending_bytes"`
	Error        string `json:"error,omitempty"`
	// Restarting, with phase "restarting", says why a followed stream taken out of the node
	// by a restart (its log was rewritten) is not back yet (etcd or S3 away, ...).
	Restarting string `json:"restarting,omitempty"`
}

// ParkedReport says why and since when a stream is parked, and when it is retried next.
type ParkedReport struct {
	SinceMillis   int64  `json:"since_ms"`
	Reason        string `json:"reason"`
	Failures      int    `json:"failures_last_minute"`
	RetryAtMillis int64  `json:"retry_at_ms"`
}

// LocalReport is the stream's local log.
type LocalReport struct {
	First     uint64 `json:"first"`
	Committed uint64 `json:"committed"` // one past the last committed offset
	Next      uint64 `json:"next"`
	Segments  int    `json:"segments"`
	Bytes     int64  `json:"bytes"`
}

// RemoteReport is the stream's remote tier: the persisted manifest and the in-memory one.
type RemoteReport struct {
	First          uint64 `json:"first"` // in memory (persisted plus applied edits)
	Next           uint64 `json:"next"`
	PersistedFirst uint64 `json:"persisted_first"`
	PersistedNext  uint64 `json:"persisted_next"`
	TotalSize      uint64 `json:"total_size"`
	Fragments      uint64 `json:"fragments"` // live fragments of the persisted manifest
	RootEntries    int    `json:"root_entries"`
	Revision       int64  `json:"revision"`
	// GapEntries and GapOffsets count the declared gaps of the persisted root (ranges the
	// local log lost before upload; gaps folded into groups are counted by verify).
	GapEntries uint64 `json:"gap_entries"`
	GapOffsets uint64 `json:"gap_offsets"`
	// Diverged is set while the local log shares no chunk with the remote tier: nothing is
	// uploaded or deleted until an operator runs `node truncate` (or restores the log).
	Diverged *DivergedReport `json:"diverged,omitempty"`
}

// DivergedReport names the two ranges that share no chunk, or (Behind) the local log that is
// a prefix of the remote tier and waits to catch up or fork.
type DivergedReport struct {
	Behind      bool   `json:"behind"`
	RemoteFirst uint64 `json:"remote_first"`
	RemoteNext  uint64 `json:"remote_next"`
	LocalFirst  uint64 `json:"local_first"`
	LocalNext   uint64 `json:"local_next"`
	// Reason, when set, says why a log that does share a prefix with the remote tier is held
	// as diverged: it forks inside a declared gap with durable data above it, which the cut
	// at the fork would delete (a log restored up to a mid-stream gap and continued there).
	Reason string `json:"reason,omitempty"`
}

// PipelineReport is the upload pipeline between the local log and the persisted manifest.
type PipelineReport struct {
	DrainNext             uint64  `json:"drain_next"`
	InFlight              int     `json:"in_flight"`
	WaitingRetry          int     `json:"waiting_retry"`
	Buffered              int     `json:"buffered"` // uploaded, waiting for an earlier fragment
	InFlightBytes         uint64  `json:"in_flight_bytes"`
	PersistState          string  `json:"persist_state"`
	UnpersistedEdits      int     `json:"unpersisted_edits"`
	UnpersistedBytes      uint64  `json:"unpersisted_bytes"`
	LastPersistAtMillis   int64   `json:"last_persist_at_ms"`
	LastPersistAgeSeconds float64 `json:"last_persist_age_seconds"` // -1 before the first persist
	LastPersistError      string  `json:"last_persist_error,omitempty"`
	Stalled               bool    `json:"stalled"`
	StalledOffset         uint64  `json:"stalled_offset"`
	// HeldBytes are the bytes drained and not yet persisted (assembly, transfers,
	// uploaded-not-persisted), bounded by HeldBound (max_unpersisted_bytes); Paused says
	// the bound was reached and the drain waits for a persist.
	HeldBytes uint64 `json:"held_bytes"`
	HeldBound uint64 `json:"held_bound"`
	Paused    bool   `json:"paused"`
	// DrainStall, when set, says why the drain cannot get past DrainStalledOffset (its
	// position disagrees with the core's: a chunk the core keeps refusing); retried.
	DrainStall         string `json:"drain_stall,omitempty"`
	DrainStalledOffset uint64 `json:"drain_stalled_offset,omitempty"`
	Timers             int    `json:"timers"` // timers the reader has armed
	Waiters            int    `json:"waiters"`
	Rebalancing        bool   `json:"rebalancing"`
	RetentionBusy      bool   `json:"retention_busy"`
}

// AssemblyReport is the fragment being assembled.
type AssemblyReport struct {
	First  uint64 `json:"first"`
	Next   uint64 `json:"next"`
	Bytes  uint64 `json:"bytes"`
	Chunks int    `json:"chunks"`
}

// LagReport is how far the persisted remote tier is behind the committed local log.
type LagReport struct {
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
}

// StreamInput is one stream's raw status for BuildReport.
type StreamInput struct {
	Status    actors.StreamStatus
	Persisted *actors.Persisted // the manifest cache entry, when there is one
	Err       error
}

// NodeInput is everything BuildReport reads.
type NodeInput struct {
	NodeID      string
	Started     time.Time
	Metrics     *actors.Metrics
	Governor    actors.GovernorStatus
	GovernorErr error
	S3          s3io.MetricsSnapshot
	Bucket      *s3io.BucketHealth // nil without a bucket probe
	GC          *gc.SweeperStatus  // nil without automatic garbage collection
	// StreamRequests are the S3 requests by stream ("" for none), for the cost; nil
	// leaves the cost out.
	StreamRequests     map[string]s3io.StreamRequests
	Prices             Prices
	Etcd               EtcdSnapshot
	Streams            []StreamInput
	RebalanceThreshold int
	Faults             []Fault
}
