package admin

import (
	"fmt"
	"sort"
	"time"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/s3io"
)

// BuildReport assembles the status report at now. It is pure.
func BuildReport(in NodeInput, now time.Time) Report {
	r := Report{Node: nodeReport(in, now), Streams: make([]StreamReport, 0, len(in.Streams))}
	for _, s := range in.Streams {
		sr := streamReport(s, in.RebalanceThreshold, now)
		r.Node.count(&sr)
		r.Streams = append(r.Streams, sr)
	}
	sort.Slice(r.Streams, func(i, j int) bool { return r.Streams[i].Stream < r.Streams[j].Stream })
	if in.StreamRequests != nil {
		var stored uint64
		for i := range r.Streams {
			s := &r.Streams[i]
			s.Cost = cost(in.StreamRequests[s.Stream], s.Remote.TotalSize, now.Sub(in.Started), in.Prices)
			stored += s.Remote.TotalSize
		}
		r.Node.Cost = nodeCost(&in, stored, now)
	}
	return r
}

// nodeReport is the node's part of the report at now, before its streams are counted in
// (NodeReport.count) and its cost is added (nodeCost).
func nodeReport(in NodeInput, now time.Time) NodeReport {
	m := in.Metrics
	p50, p99, u50, u99 := m.LatencyQuantiles()
	n := NodeReport{
		ID:               in.NodeID,
		UptimeSeconds:    now.Sub(in.Started).Seconds(),
		StreamsRunning:   m.StreamsRunning.Load(),
		StreamsDormant:   m.StreamsDormant.Load(),
		TransfersRunning: m.TransfersRunning.Load(),
		Governor: GovernorReport{
			RateBytesPerSec: in.Governor.RateBytesPerSec, BurstBytes: in.Governor.BurstBytes, Tokens: in.Governor.Tokens,
			Queued: in.Governor.Queued, QueuedBytes: in.Governor.QueuedBytes, Running: in.Governor.Running,
			InFlight: in.Governor.InFlight, MaxConcurrent: in.Governor.MaxConcurrent, PerStream: in.Governor.PerStream,
			StreamsAtShare: in.Governor.StreamsAtShare, Abandoned: in.Governor.Abandoned, AbandonedRunning: in.Governor.AbandonedRunning,
		},
		StreamsStalled: m.StreamsStalled.Load(),
		Reaper: ReaperReport{
			Queued: m.Reaper.Queued.Load(), Deleted: m.Reaper.Deleted.Load(), Failed: m.Reaper.Failed.Load(),
			Retries: m.Reaper.Retries.Load(), GroupGets: m.Reaper.GroupGets.Load(),
		},
		Uploads: UploadReport{
			Fragments: m.FragmentsUploaded.Load(), Bytes: m.BytesUploaded.Load(), ErrorsByClass: map[string]int64{},
			LatencyP50Secs: u50.Seconds(), LatencyP99Secs: u99.Seconds(),
		},
		Persists: PersistReport{
			OK: m.Persists.Load(), Conflicts: m.PersistConflicts.Load(), NotFound: m.PersistNotFound.Load(), Failures: m.PersistFailures.Load(),
			LatencyP50Secs: p50.Seconds(), LatencyP99Secs: p99.Seconds(),
		},
		Reads: readReport(&m.Read),
		S3:    RequestReport{Requests: map[string]uint64{}, ErrorsByClass: map[string]uint64{}},
		Etcd:  RequestReport{Requests: map[string]uint64{}, ErrorsByClass: map[string]uint64{}},
	}
	if in.GovernorErr != nil {
		n.Error = in.GovernorErr.Error()
	}
	if in.Bucket != nil {
		n.Bucket = bucketReport(*in.Bucket)
	}
	if in.GC != nil {
		n.GC = gcReport(*in.GC)
	}
	n.Faults = in.Faults
	for i, cause := range actors.LocalErrorCauses() {
		if v := m.StalledBy[i].Load(); v != 0 {
			if n.StalledBy == nil {
				n.StalledBy = map[string]int64{}
			}
			n.StalledBy[cause] = v
		}
		if v := m.LocalErrors[i].Load(); v != 0 {
			if n.LocalErrors == nil {
				n.LocalErrors = map[string]int64{}
			}
			n.LocalErrors[cause] = v
		}
	}
	for c := range m.TransferErrors {
		if c == int(s3io.ClassNone) {
			continue
		}
		n.Uploads.ErrorsByClass[s3io.Class(c).String()] = m.TransferErrors[c].Load()
	}
	for _, op := range in.S3 {
		n.S3.Requests[op.Op.String()] = op.Requests
		n.S3.NotFound += op.NotFound
		n.S3.PreconditionFailed += op.Refused
		for c, v := range op.ByClass {
			if c != int(s3io.ClassNone) {
				n.S3.ErrorsByClass[s3io.Class(c).String()] += v
			}
		}
	}
	for _, op := range in.Etcd.Ops {
		n.Etcd.Requests[op.Op] = op.Requests
		n.Etcd.ErrorsByClass["retriable"] += op.Retriable
		n.Etcd.ErrorsByClass["other"] += op.Other
	}
	return n
}

// count adds a stream's report to the node's sums: its bytes in each pipeline stage, and
// whether it is parked.
func (n *NodeReport) count(sr *StreamReport) {
	n.Stages.AssemblyBytes += sr.Fragment.Bytes
	n.Stages.TransferBytes += sr.Pipeline.InFlightBytes
	n.Stages.PersistBytes += sr.Pipeline.UnpersistedBytes
	if sr.Parked != nil {
		n.StreamsParked++
	}
}

// nodeCost is the node's cost at now: every S3 request counted by stream (those of no
// stream included) and the bytes its streams store.
func nodeCost(in *NodeInput, stored uint64, now time.Time) *CostReport {
	var all s3io.StreamRequests
	for _, req := range in.StreamRequests {
		for k := range all {
			all[k] += req[k]
		}
	}
	return cost(all, stored, now.Sub(in.Started), in.Prices)
}

// streamReport is a stream's part of /status.
func streamReport(in StreamInput, threshold int, now time.Time) StreamReport {
	r := streamFigures(in, threshold, now)
	c := &in.Status.Core
	r.Counters = map[string]int64{
		"cuts": int64(c.Counters.Cuts), "completions": int64(c.Counters.Completions),
		"transient_retries": int64(c.Counters.TransientRetries), "non_transient_retries": int64(c.Counters.NonTransientRetries),
		"deadline_resubmits": int64(c.Counters.DeadlineResubmits), "ignored_results": int64(c.Counters.IgnoredResults),
		"persists": int64(c.Counters.Persists), "persist_failures": int64(c.Counters.PersistFailures),
		"gaps": int64(c.Counters.Gaps), "gap_offsets": int64(c.Counters.GapOffsets),
		"truncations": int64(c.Counters.Truncations), "truncated_offsets": int64(c.Counters.TruncatedOffsets),
		"reinitializations": int64(c.Counters.Reinitializations), "rebalances": int64(c.Counters.Rebalances),
		"retention_runs": int64(c.Counters.RetentionRuns), "retention_failures": int64(c.Counters.RetentionFailures),
		"retry_timers": int64(c.Counters.RetryTimers), "drain_repositions": int64(c.Counters.DrainRepositions),
		"drain_stalls": int64(c.Counters.DrainStalls), "drain_pauses": int64(c.Counters.DrainPauses),
		"deferred_chunks": int64(c.Counters.DeferredChunks),
	}
	return r
}

// streamFigures is a stream's report without its counters (the map a scrape, which reads
// none of them, need not make for every stream).
func streamFigures(in StreamInput, threshold int, now time.Time) StreamReport {
	s := in.Status
	c := s.Core
	r := StreamReport{
		Stream: s.Stream, Phase: s.Phase, Epoch: s.Epoch, Restarts: s.Restarts, StopReason: s.StopReason, Waiting: s.Waiting,
		LocalError: s.LocalError, Exhausted: s.Exhausted, LogWriteError: s.LogWriteError,
		Local: LocalReport{First: s.LocalFirst, Committed: s.LocalCommitted, Next: s.LocalNext, Segments: s.LocalSegments, Bytes: s.LocalBytes},
		Remote: RemoteReport{
			First: c.First, Next: c.Next, PersistedFirst: c.PersistedFirst, PersistedNext: c.PersistedNext,
			TotalSize: c.TotalSize, RootEntries: c.Entries, Revision: c.Revision,
		},
		Pipeline: PipelineReport{
			DrainNext: c.DrainNext, InFlight: c.InFlight, WaitingRetry: c.WaitingRetry, Buffered: c.Buffered,
			InFlightBytes: c.InFlightBytes, PersistState: c.PersistState, UnpersistedEdits: c.UnpersistedEdits,
			UnpersistedBytes: c.UnpersistedBytes, LastPersistAtMillis: c.LastPersistAt, LastPersistAgeSeconds: -1,
			LastPersistError: c.LastPersistError, Stalled: c.Stalled, StalledOffset: c.StalledOffset, Waiters: c.Waiters,
			Rebalancing: c.Rebalancing, RetentionBusy: c.RetentionBusy,
			HeldBytes: c.HeldBytes, HeldBound: c.HeldBound, Paused: c.Paused, DrainStall: c.DrainStallReason, DrainStalledOffset: c.DrainStalledOffset,
			Timers: s.Timers,
		},
		Fragment: AssemblyReport{First: c.AssemblyFirst, Next: c.AssemblyNext, Bytes: c.AssemblyBytes, Chunks: c.AssemblyChunks},
		Lag:      LagReport{Bytes: s.LagBytes, Seconds: s.LagSeconds},
	}
	if c.LastPersistAt > 0 {
		r.Pipeline.LastPersistAgeSeconds = max(now.Sub(time.UnixMilli(c.LastPersistAt)).Seconds(), 0)
	}
	if in.Persisted != nil {
		sum := in.Persisted.Manifest.Summary(threshold)
		r.Remote.Fragments, r.Remote.GapEntries, r.Remote.GapOffsets = sum.Fragments, sum.GapEntries, sum.GapOffsets
	}
	if c.Diverged {
		r.Remote.Diverged = &DivergedReport{Behind: c.Behind, RemoteFirst: c.RemoteFirst, RemoteNext: c.RemoteNext, LocalFirst: c.LocalFirst, LocalNext: c.LocalNext}
		if a := c.EpochAhead; a != nil {
			r.Remote.Diverged.Reason = fmt.Sprintf("the local log starts at %d, above the remote next offset, with a chunk of epoch %d, above the remote tier's last chunk's %d: the broker may have rewritten the log below the remote next offset and trimmed the rewrite before the node looked (or failed over as it lost those offsets); `node truncate --yes` keeps the remote tier and declares the gap", a.LocalFirst, a.LocalEpoch, a.RemoteEpoch)
		}
		if rw := c.Rewritten; rw != nil {
			r.Remote.Diverged.Reason = fmt.Sprintf("the local log starts at %d, above the remote next offset, and its follower saw it rewritten below offset %d (%s) before the stream was opened on it again: the rewrite may start below the remote next offset, where the remote tier holds the old timeline, and cannot be compared; `node truncate --yes` keeps the remote tier and declares the gap", c.LocalFirst, rw.SeenNext, rw.Detail)
		}
		if g := c.GapFork; g != nil {
			r.Remote.Diverged.Reason = fmt.Sprintf("the local log forks at %d, in the declared gap [%d,%d), and durable data follows the gap: cutting back to the fork would delete it (restore the run after the last gap, docs/reading.md)", g.At, g.From, g.To)
		}
	}
	if f := s.Follow; f != nil {
		r.Follow = &FollowReport{PendingBytes: f.PendingBytes, Error: f.Error, Restarting: f.Restarting}
	}
	r.Dormant = s.Dormant
	if p := s.Parked; p != nil {
		r.Parked = &ParkedReport{SinceMillis: p.Since.UnixMilli(), Reason: p.Reason, Failures: p.Failures, RetryAtMillis: p.RetryAt.UnixMilli()}
	}
	if in.Err != nil {
		r.Error = in.Err.Error()
	}
	return r
}

func readReport(m *read.Metrics) ReadReport {
	p50, p99 := m.FirstChunkQuantiles()
	r := ReadReport{
		Open: m.ReadersOpen.Load(), Opened: m.ReadersOpened.Load(), BytesLocal: m.BytesLocal.Load(), BytesRemote: m.BytesRemote.Load(),
		Gaps: m.Gaps.Load(), Skipped: m.Skipped.Load(), Handoffs: m.Handoffs.Load(), ErrorsByClass: map[string]int64{},
		FirstChunkP50Sec: p50.Seconds(), FirstChunkP99Sec: p99.Seconds(),
	}
	for _, c := range read.ErrorClasses() {
		r.ErrorsByClass[c.String()] = m.Errors[c].Load()
	}
	return r
}
