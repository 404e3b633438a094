package admin

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/s3io"
)

// Metric names all start with this namespace.
const namespace = "streamtier"

// collector exports the node's metrics at each scrape: the node-wide counters and gauges
// of actors.Metrics, the governor, the pipeline stage gauges, each stream's offsets, lag
// and stage bytes, and the S3 and etcd request counters and latency histograms. Counters
// come from monotonic atomics only, so they never go down.
type collector struct {
	gather func(ctx context.Context) *scrape
}

// Describe sends nothing: the collector is unchecked (its per-stream series come and go).
func (c collector) Describe(chan<- *prometheus.Desc) {}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(namespace+"_"+name, help, labels, nil)
}

var (
	descFragments      = desc("fragments_uploaded_total", "Fragment objects uploaded.")
	descUploadedBytes  = desc("uploaded_bytes_total", "Chunk bytes uploaded in fragment objects.")
	descTransferErrors = desc("transfer_errors_total", "Failed fragment uploads by error class.", "class")
	descPersists       = desc("persists_total", "Persist attempts by outcome (ok, conflict, not_found, failure).", "outcome")
	descEvents         = desc("events_total", "Noteworthy pipeline events by kind (resolve_failure, reset, reinitialization, reader_crash, core_error, stall, remote_retention_run, local_segment_deleted, actor_restart, task_panic, task_overdue, transfer_abandoned, broadcast_dropped, stray_message, stream_parked, park_retry).", "event")
	descGapOffsets     = desc("gap_offsets_total", "Offsets given up because the local log dropped them before upload.")
	descReaper         = desc("reaper_total", "Reaper work by kind (deleted, failed, retries, group_gets).", "kind")
	descStreams        = desc("streams_running", "Streams whose replica reader runs (stalled ones not counted; dormant ones counted).")
	descDormant        = desc("streams_dormant", "Running streams that hold no actor now: everything persisted, waiting for data, an await or a command.")
	descMetaStalls     = desc("streams_metadata_stalled", "Streams stalled because etcd lost their metadata or is behind the bucket, by phase (metadata_missing, metadata_behind): repair with `node recover`.", "phase")
	descClaimLost      = desc("claim_lost", "1 once the node found its cluster claim changed: it stopped persisting and deleting.")
	descStalled        = desc("streams_stalled", "Streams whose drain cannot read the local log now, by cause (EMFILE, ENFILE, ENOSPC, EDQUOT, ENOMEM, other).", "cause")
	descLocalErrors    = desc("local_errors_total", "Local log read failures reported by drains, by cause (EMFILE, ENFILE, ENOSPC, EDQUOT, ENOMEM, other).", "cause")
	descFaults         = desc("node_faults", "Fatal failures outside the streams (an embedded server that stopped), by server and exhausted resource (empty when another cause).", "server", "exhausted")
	descGovInFlight    = desc("governor_in_flight", "Uploads admitted by the governor and not yet done.")
	descGovMax         = desc("governor_max_concurrent", "The governor's node-wide bound on uploads at once.")
	descGovHung        = desc("governor_abandoned_running", "Uploads the governor abandoned (resubmitted after their transfer deadline) whose task has not ended: hung outside its context.")
	descReadersOpen    = desc("read_readers_open", "Cross-tier readers open now (consumers, node read).")
	descReadersOpened  = desc("read_readers_opened_total", "Cross-tier readers opened.")
	descReadBytes      = desc("read_bytes_total", "Chunk bytes delivered to readers by tier (local, remote).", "tier")
	descReadChunks     = desc("read_chunks_total", "Chunks delivered to readers by tier (local, remote).", "tier")
	descReadEvents     = desc("read_events_total", "Reader events by kind (gap, skipped, handoff).", "event")
	descReadErrors     = desc("read_errors_total", "Reader failures by class (unavailable, corrupt, missing, remote, local, canceled, other).", "class")
	descReadFirstChunk = desc("read_first_chunk_seconds", "Time from a reader's open to its first chunk: quantiles over the last 1024 readers, count and sum over all.")
	descRemoteOpen     = desc("remote_read_sources_open", "Remote sources open now: readers reading the remote tier through range GETs.")
	descRemoteGets     = desc("remote_read_gets_total", "Range GETs the remote sources issued.")
	descRemoteBytes    = desc("remote_read_get_bytes_total", "Bytes of range GET bodies the remote sources received.")
	descRemoteErrors   = desc("remote_read_get_errors_total", "Failed range GETs by class (retriable: retried; not_found: retention or a lagging manifest; fatal: the read fails).", "class")
	descRemoteAllowed  = desc("remote_read_gets_allowed", "Range GETs the open remote sources allow in flight: their concurrency searches' levels, summed.")
	descRemoteHeld     = desc("remote_read_held_bytes", "Bytes the open remote sources hold against the read budget, summed.")
	descRemoteLearned  = desc("remote_read_learned_concurrency", "Range GETs in flight the node's reads last settled at, where the next read's search starts (0: none settled yet, the search starts at 4).")
	descTransfers      = desc("transfers_running", "Fragment uploads running now.")
	descGovQueued      = desc("governor_queued", "Transfers waiting for the governor.")
	descGovQueuedBytes = desc("governor_queued_bytes", "Chunk bytes of the transfers waiting for the governor.")
	descGovTokens      = desc("governor_tokens", "Governor tokens in bytes (negative while in debt).")
	descGovRate        = desc("governor_rate_bytes_per_second", "Governor rate; 0 is unlimited.")
	descGovBurst       = desc("governor_burst_bytes", "Governor bucket size.")
	descReaperQueued   = desc("reaper_queued", "Keys waiting for the reaper (a batch or a retry).")
	descStage          = desc("pipeline_bytes", "Bytes in each pipeline stage over all streams: assembly (drained, not cut), transfer (cut, not applied), persist (applied, not persisted).", "stage")
	descLatency        = desc("latency_seconds", "Latency of successful persists and uploads: quantiles over the last 1024 operations, count and sum over all.", "operation")

	descStreamsParked = desc("streams_parked", "Streams parked now (their reader keeps failing).")

	descS3Requests   = desc("s3_requests_total", "S3 requests by operation and outcome class (none is success; not_found is a 404 answer, precondition_failed a conditional put refused because the key exists; neither is an error).", "op", "class")
	descS3Bytes      = desc("s3_bytes_total", "Payload bytes sent or received by S3 operation.", "op")
	descS3Latency    = desc("s3_request_duration_seconds", "S3 request latency by operation.", "op")
	descBucketUp     = desc("s3_bucket_reachable", "1 when the last bucket probe (a one-key listing every s3_probe_interval) succeeded, 0 when it failed or none finished yet.")
	descBucketState  = desc("s3_bucket_probe_state", "1 for the outcome of the last bucket probe (ok, access_denied, no_bucket, unreachable, error), 0 for the others.", "outcome")
	descBucketProbes = desc("s3_bucket_probes_total", "Bucket probes by outcome (ok, access_denied, no_bucket, unreachable, error).", "outcome")
	descBucketSince  = desc("s3_bucket_state_seconds", "How long the bucket probe's current outcome has lasted: while probes fail, how long the bucket has been failing.")
	descGCSweeps     = desc("gc_sweeps_total", "Automatic garbage collection rounds on this node by outcome (ok, failed, skipped_locked: another node held the sweep lock).", "outcome")
	descGCObjects    = desc("gc_objects_total", "Objects automatic garbage collection found or handled, summed over sweeps: orphans (garbage past the grace period), deleted, delete_failed.", "kind")
	descGCLast       = desc("gc_last_sweep_objects", "Findings of this node's last sweep: scanned, referenced, orphans, young, pending, undecided, deleted, failed (0 before the first sweep, and on a node without automatic garbage collection).", "kind")
	descGCLastTime   = desc("gc_last_sweep_timestamp_seconds", "Unix time this node's last sweep started (0 before the first).")
	descGCLastDur    = desc("gc_last_sweep_duration_seconds", "How long this node's last sweep took.")
	descGCLastErr    = desc("gc_last_sweep_failed", "1 when this node's last sweep failed (the error is in /status), else 0.")
	descNodeCost     = desc("cost_usd_per_month", "The node's projected monthly S3 cost in dollars (every request, its streams' stored bytes) by part (requests, storage).", "part")
	descEtcdReqs     = desc("etcd_requests_total", "etcd key-value requests by operation and outcome class (none, retriable, other).", "op", "class")
	descEtcdLat      = desc("etcd_request_duration_seconds", "etcd key-value request latency by operation.", "op")
)

func (c collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sc := c.gather(ctx)
	collectNode(&sc.in, &sc.node, ch)
	streamSeries(sc, newStreamScrape(ch, len(sc.rows)))
}

// collectNode sends the node's own series (everything but the per-stream families of
// stream_families.go) of one scrape's input and report.
func collectNode(in *NodeInput, node *NodeReport, ch chan<- prometheus.Metric) {
	m := in.Metrics
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}

	counter(descFragments, float64(m.FragmentsUploaded.Load()))
	rm := &m.Read
	gauge(descReadersOpen, float64(rm.ReadersOpen.Load()))
	counter(descReadersOpened, float64(rm.ReadersOpened.Load()))
	counter(descReadBytes, float64(rm.BytesLocal.Load()), "local")
	counter(descReadBytes, float64(rm.BytesRemote.Load()), "remote")
	counter(descReadChunks, float64(rm.ChunksLocal.Load()), "local")
	counter(descReadChunks, float64(rm.ChunksRemote.Load()), "remote")
	counter(descReadEvents, float64(rm.Gaps.Load()), "gap")
	counter(descReadEvents, float64(rm.Skipped.Load()), "skipped")
	counter(descReadEvents, float64(rm.Handoffs.Load()), "handoff")
	for _, cl := range read.ErrorClasses() {
		counter(descReadErrors, float64(rm.Errors[cl].Load()), cl.String())
	}
	p50, p99 := rm.FirstChunkQuantiles()
	n, sum := rm.FirstChunkTotals()
	ch <- summary(descReadFirstChunk, n, sum, p50, p99)
	rr := &m.RemoteRead
	gauge(descRemoteOpen, float64(rr.Open.Load()))
	counter(descRemoteGets, float64(rr.GETs.Load()))
	counter(descRemoteBytes, float64(rr.Bytes.Load()))
	for cl, name := range read.RemoteErrorClasses() {
		counter(descRemoteErrors, float64(rr.Errors[cl].Load()), name)
	}
	gauge(descRemoteAllowed, float64(rr.Concurrency.Load()))
	gauge(descRemoteHeld, float64(rr.Buffered.Load()))
	gauge(descRemoteLearned, float64(rr.LearnedConcurrency.Load()))
	counter(descUploadedBytes, float64(m.BytesUploaded.Load()))
	for cl := range m.TransferErrors {
		if cl != int(s3io.ClassNone) {
			counter(descTransferErrors, float64(m.TransferErrors[cl].Load()), s3io.Class(cl).String())
		}
	}
	counter(descPersists, float64(m.Persists.Load()), "ok")
	counter(descPersists, float64(m.PersistConflicts.Load()), "conflict")
	counter(descPersists, float64(m.PersistNotFound.Load()), "not_found")
	counter(descPersists, float64(m.PersistFailures.Load()), "failure")
	for _, e := range []struct {
		name string
		v    int64
	}{
		{"resolve_failure", m.ResolveFailures.Load()}, {"gap", m.Gaps.Load()}, {"truncation", m.Truncations.Load()}, {"diverged_stall", m.DivergedStalls.Load()},
		{"reinitialization", m.Reinitializations.Load()}, {"reader_crash", m.ReaderCrashes.Load()},
		{"core_error", m.CoreErrors.Load()}, {"stall", m.Stalls.Load()},
		{"remote_retention_run", m.RemoteRetentionRuns.Load()}, {"local_segment_deleted", m.LocalSegmentsDeleted.Load()},
		{"actor_restart", m.ActorRestarts.Load()}, {"task_panic", m.TaskPanics.Load()}, {"task_overdue", m.TasksOverdue.Load()},
		{"transfer_abandoned", m.TransfersAbandoned.Load()},
		{"broadcast_dropped", m.BroadcastsDropped.Load()}, {"stray_message", m.StrayMessages.Load()},
		{"drain_wakeup", m.DrainWakeups.Load()}, {"drain_reposition", m.DrainRepositions.Load()},
		{"drain_stall", m.DrainStalls.Load()}, {"drain_pause", m.DrainPauses.Load()},
		{"drain_passivation", m.DrainPassivations.Load()}, {"drain_activation", m.DrainActivations.Load()},
		{"stream_parked", m.Parks.Load()}, {"park_retry", m.ParkRetries.Load()},
		{"stream_dormant", m.Dormancies.Load()}, {"stream_woken", m.Wakes.Load()},
	} {
		counter(descEvents, float64(e.v), e.name)
	}
	counter(descGapOffsets, float64(m.GapOffsets.Load()))
	counter(descReaper, float64(m.Reaper.Deleted.Load()), "deleted")
	counter(descReaper, float64(m.Reaper.Failed.Load()), "failed")
	counter(descReaper, float64(m.Reaper.Retries.Load()), "retries")
	counter(descReaper, float64(m.Reaper.GroupGets.Load()), "group_gets")

	gauge(descStreams, float64(m.StreamsRunning.Load()))
	gauge(descDormant, float64(m.StreamsDormant.Load()))
	gauge(descMetaStalls, float64(m.StreamsMetadataMissing.Load()), "metadata_missing")
	gauge(descMetaStalls, float64(m.StreamsMetadataBehind.Load()), "metadata_behind")
	gauge(descClaimLost, float64(m.ClaimLost.Load()))
	for _, f := range in.Faults {
		gauge(descFaults, 1, f.Server, f.Exhausted)
	}
	for i, cause := range actors.LocalErrorCauses() {
		gauge(descStalled, float64(m.StalledBy[i].Load()), cause)
		counter(descLocalErrors, float64(m.LocalErrors[i].Load()), cause)
	}
	gauge(descTransfers, float64(m.TransfersRunning.Load()))
	gauge(descGovQueued, float64(m.GovernorQueued.Load()))
	gauge(descGovTokens, float64(m.GovernorTokens.Load()))
	if in.GovernorErr == nil {
		gauge(descGovQueuedBytes, float64(in.Governor.QueuedBytes))
		gauge(descGovRate, float64(in.Governor.RateBytesPerSec))
		gauge(descGovBurst, float64(in.Governor.BurstBytes))
		gauge(descGovInFlight, float64(in.Governor.InFlight))
		gauge(descGovMax, float64(in.Governor.MaxConcurrent))
		gauge(descGovHung, float64(in.Governor.AbandonedRunning))
	}
	gauge(descReaperQueued, float64(m.Reaper.Queued.Load()))
	p50, p99, u50, u99 := m.LatencyQuantiles()
	pn, psum, un, usum := m.LatencyTotals()
	ch <- summary(descLatency, pn, psum, p50, p99, "persist")
	ch <- summary(descLatency, un, usum, u50, u99, "upload")

	gauge(descStreamsParked, float64(node.StreamsParked))
	gauge(descStage, float64(node.Stages.AssemblyBytes), "assembly")
	gauge(descStage, float64(node.Stages.TransferBytes), "transfer")
	gauge(descStage, float64(node.Stages.PersistBytes), "persist")
	for _, op := range in.S3 {
		name := op.Op.String()
		for cl, v := range op.ByClass {
			counter(descS3Requests, float64(v), name, s3io.Class(cl).String())
		}
		counter(descS3Requests, float64(op.NotFound), name, "not_found")
		counter(descS3Requests, float64(op.Refused), name, "precondition_failed")
		counter(descS3Bytes, float64(op.Bytes), name)
		ch <- histogram(descS3Latency, op.Buckets[:], op.Sum, name)
	}
	if b := in.Bucket; b != nil {
		up := 0.0
		if b.Reachable() {
			up = 1
		}
		gauge(descBucketUp, up)
		for _, o := range s3io.ProbeOutcomes {
			v := 0.0
			if b.Outcome == o {
				v = 1
			}
			gauge(descBucketState, v, string(o))
			counter(descBucketProbes, float64(b.Counts[o]), string(o))
		}
		if !b.Since.IsZero() {
			gauge(descBucketSince, time.Since(b.Since).Seconds())
		}
	}
	if c := node.Cost; c != nil {
		gauge(descNodeCost, c.RequestsPerMonthUSD, "requests")
		gauge(descNodeCost, c.StoragePerMonthUSD, "storage")
	}
	if in.GC == nil {
		// Automatic garbage collection is off: its counters and last findings are 0 rather
		// than absent, so that dashboards and rules over them see a value on every node.
		gcZero(counter, gauge)
	}
	if g := in.GC; g != nil {
		counter(descGCSweeps, float64(g.Sweeps-g.SweepErrors), "ok")
		counter(descGCSweeps, float64(g.SweepErrors), "failed")
		counter(descGCSweeps, float64(g.SkippedLocked), "skipped_locked")
		counter(descGCObjects, float64(g.OrphansFound), "orphans")
		counter(descGCObjects, float64(g.ObjectsDeleted), "deleted")
		counter(descGCObjects, float64(g.DeleteFailures), "delete_failed")
		if g.Last == nil {
			for _, k := range gcLastKinds {
				gauge(descGCLast, 0, k)
			}
		}
		if l := g.Last; l != nil {
			for i, v := range []int{l.Scanned, l.Referenced, l.Orphans, l.Young, l.Pending, l.Undecided, l.Deleted, l.Failed} {
				gauge(descGCLast, float64(v), gcLastKinds[i])
			}
			if !l.Started.IsZero() {
				gauge(descGCLastTime, float64(l.Started.UnixMilli())/1000)
				gauge(descGCLastDur, l.Finished.Sub(l.Started).Seconds())
			}
			failed := 0.0
			if l.Err != nil {
				failed = 1
			}
			gauge(descGCLastErr, failed)
		}
	}
	for _, op := range in.Etcd.Ops {
		counter(descEtcdReqs, float64(op.Requests-op.Retriable-op.Other), op.Op, "none")
		counter(descEtcdReqs, float64(op.Retriable), op.Op, "retriable")
		counter(descEtcdReqs, float64(op.Other), op.Op, "other")
		ch <- histogram(descEtcdLat, op.Buckets[:], op.Sum, op.Op)
	}
}

// gcLastKinds are the label values of gc_last_sweep_objects, in SweepReport's order.
var gcLastKinds = [...]string{"scanned", "referenced", "orphans", "young", "pending", "undecided", "deleted", "failed"}

// gcZero exports the garbage collection series at 0, for a node without automatic GC.
func gcZero(counter, gauge func(d *prometheus.Desc, v float64, labels ...string)) {
	for _, o := range []string{"ok", "failed", "skipped_locked"} {
		counter(descGCSweeps, 0, o)
	}
	for _, k := range []string{"orphans", "deleted", "delete_failed"} {
		counter(descGCObjects, 0, k)
	}
	for _, k := range gcLastKinds {
		gauge(descGCLast, 0, k)
	}
}

// summary is a Prometheus summary of a latency: its p50 and p99 over a recent window, its
// count and sum over all time.
func summary(d *prometheus.Desc, count uint64, sum, p50, p99 time.Duration, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstSummary(d, count, sum.Seconds(), map[float64]float64{0.5: p50.Seconds(), 0.99: p99.Seconds()}, labels...)
}

// histogram turns non-cumulative bucket counts over s3io.LatencyBuckets (the last one
// +Inf) into a Prometheus histogram.
func histogram(d *prometheus.Desc, buckets []uint64, sum time.Duration, labels ...string) prometheus.Metric {
	cum := make(map[float64]uint64, len(s3io.LatencyBuckets))
	var n uint64
	for i, b := range s3io.LatencyBuckets {
		n += buckets[i]
		cum[b.Seconds()] = n
	}
	n += buckets[len(buckets)-1]
	return prometheus.MustNewConstHistogram(d, n, sum.Seconds(), cum, labels...)
}

// input gathers everything the report reads from the node.
func (s *Server) input(ctx context.Context) NodeInput { return gatherInput(ctx, s.opts) }

// gatherInput reads the node, each of its streams, and the other sources o names.
func gatherInput(ctx context.Context, o Options) NodeInput {
	in := gatherNode(ctx, o)
	ids := o.Node.Streams()
	in.Streams = make([]StreamInput, 0, len(ids))
	for _, id := range ids {
		if si, ok := streamInput(ctx, o.Node, id); ok {
			in.Streams = append(in.Streams, si)
		}
	}
	return in
}

// gatherNode reads the node and the other sources o names, but not its streams' statuses.
func gatherNode(ctx context.Context, o Options) NodeInput {
	in := NodeInput{
		NodeID: o.NodeID, Started: o.Started, Metrics: o.Node.Metrics(), RebalanceThreshold: o.RebalanceThreshold,
		Etcd: o.Etcd.Snapshot(),
	}
	if o.S3 != nil {
		in.S3 = o.S3.Snapshot()
		in.StreamRequests = o.S3.Streams()
		in.Prices = DefaultPrices
		if o.Prices != nil {
			in.Prices = *o.Prices
		}
	} else {
		for op := range in.S3 { // zero counters, each under its own operation's name
			in.S3[op].Op = s3io.Op(op)
		}
	}
	if o.Bucket != nil {
		h := o.Bucket.Health()
		in.Bucket = &h
	}
	if o.GC != nil {
		g := o.GC.Status()
		in.GC = &g
	}
	if o.Faults != nil {
		in.Faults = o.Faults()
	}
	in.Governor, in.GovernorErr = o.Node.GovernorStatus(ctx)
	return in
}

// streamInput reads one stream's status and cached manifest; false for a stream removed
// meanwhile. A status that cannot be read is kept with its error (phase "unknown").
func streamInput(ctx context.Context, node Node, id string) (StreamInput, bool) {
	st, err := node.Status(ctx, id)
	if err != nil {
		st = actors.StreamStatus{Stream: id, Phase: "unknown"}
		if errors.Is(err, actors.ErrUnknownStream) || errors.Is(err, actors.ErrNodeStopped) {
			return StreamInput{}, false
		}
	}
	si := StreamInput{Status: st, Err: err}
	if p, ok := node.Cached(id); ok {
		si.Persisted = &p
	}
	return si, true
}
