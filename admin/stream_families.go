package admin

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/streamtier/streamtier/s3io"
)

// A scrape sends about 34 series per stream, most of its series at many streams. They are
// described once, here, family by family, and produced family by family (every stream's
// series of one family, then the next family): the registry's collector (collector.Collect,
// through the slabs of collector_stream.go) and the node's /metrics handler, which writes
// them as text straight to the response (metrics_text.go), both read this table.

// streamFamily is one per-stream metric family: its desc, its second label's name ("" for
// none) and the series of one stream, as (second label value, value) pairs given to emit.
type streamFamily struct {
	name    string // without the namespace
	help    string
	second  string // the label besides "stream"
	counter bool
	// always says the family has a series also for a stream whose status could not be read
	// (its row failed); the others skip such a stream.
	always bool
	series func(r *streamRow, e *seriesEmit)
	desc   *prometheus.Desc
	fqName string // the metric's name with the namespace
}

// flag is 1 for true, 0 for false: a gauge of a condition.
func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// one emits a family's only series of a stream (a family without a second label).
func one(v func(r *streamRow) float64) func(*streamRow, *seriesEmit) {
	return func(r *streamRow, e *seriesEmit) { e.emit("", v(r)) }
}

// seriesEmit hands the series of one stream of one family to a sink; one value serves a
// whole scrape (no allocation per series).
type seriesEmit struct {
	sink streamSeriesSink
	f    *streamFamily
	i    int
	id   string
}

func (e *seriesEmit) emit(second string, v float64) { e.sink.series(e.f, e.i, e.id, second, v) }

// The families in the order a scrape produces them.
var (
	famStreamUp = &streamFamily{name: "stream_running", always: true,
		help:   "1 when the stream's replica reader is running (resolved), 0 while starting or resolving, while stalled (its local log cannot be read), while parked and once stopped for good.",
		series: one(func(r *streamRow) float64 { return flag(r.running) })}
	famStreamParked = &streamFamily{name: "stream_parked", always: true,
		help:   "1 while a stream is parked: its reader kept failing and is retried every stream_park_retry_interval.",
		series: one(func(r *streamRow) float64 { return flag(r.parked) })}
	famStreamOffset = &streamFamily{name: "stream_offset", second: "offset",
		help: "A stream's offsets: local_first, local_committed, local_next, drained, uploaded (in-memory next), persisted_first, persisted_next.",
		series: func(r *streamRow, e *seriesEmit) {
			e.emit("local_first", r.localFirst)
			e.emit("local_committed", r.localCommitted)
			e.emit("local_next", r.localNext)
			e.emit("drained", r.drained)
			e.emit("uploaded", r.uploaded)
			e.emit("persisted_first", r.persistedFirst)
			e.emit("persisted_next", r.persisted)
		}}
	famStreamBytes = &streamFamily{name: "stream_bytes", second: "kind",
		help: "A stream's bytes: local (segment files), remote (live fragments), and per pipeline stage.",
		series: func(r *streamRow, e *seriesEmit) {
			e.emit("local", r.localBytes)
			e.emit("remote", r.remoteBytes)
			e.emit("assembly", r.assemblyBytes)
			e.emit("transfer", r.transferBytes)
			e.emit("persist", r.persistBytes)
			e.emit("held", r.heldBytes)
		}}
	famStreamFrags = &streamFamily{name: "stream_remote_fragments", help: "Live fragments of a stream's persisted manifest.",
		series: one(func(r *streamRow) float64 { return r.fragments })}
	famStreamXfers = &streamFamily{name: "stream_transfers", second: "state",
		help: "A stream's transfers by state (in_flight, waiting_retry, buffered).",
		series: func(r *streamRow, e *seriesEmit) {
			e.emit("in_flight", r.inFlight)
			e.emit("waiting_retry", r.waitingRetry)
			e.emit("buffered", r.buffered)
		}}
	famStreamLagB = &streamFamily{name: "stream_lag_bytes", help: "Committed bytes of a stream not yet persisted remotely.",
		series: one(func(r *streamRow) float64 { return r.lagBytes })}
	famStreamLagS = &streamFamily{name: "stream_lag_seconds", help: "Age of the oldest committed byte of a stream not yet persisted.",
		series: one(func(r *streamRow) float64 { return r.lagSeconds })}
	famStreamPersist = &streamFamily{name: "stream_last_persist_age_seconds", help: "Time since a stream's last successful persist (-1 before the first).",
		series: one(func(r *streamRow) float64 { return r.lastPersistAge })}
	famStreamStalled = &streamFamily{name: "stream_stalled", help: "1 while a stream's upload pipeline is stalled at an offset.",
		series: one(func(r *streamRow) float64 { return flag(r.stalled) })}
	famStreamPaused = &streamFamily{name: "stream_drain_paused", help: "1 while a stream's drain is paused at max_unpersisted_bytes (waiting for a persist).",
		series: one(func(r *streamRow) float64 { return flag(r.paused) })}
	famStreamGaps = &streamFamily{name: "stream_gap_offsets", help: "Offsets of a stream's persisted root declared as gaps: lost from the local log before upload.",
		series: one(func(r *streamRow) float64 { return r.gapOffsets })}
	famStreamDiverge = &streamFamily{name: "stream_diverged", help: "1 while a stream's local log shares no chunk with its remote tier (waits for `node truncate`).",
		series: one(func(r *streamRow) float64 { return flag(r.diverged) })}
	famStreamBehind = &streamFamily{name: "stream_behind", help: "1 while a stream's local log is a prefix of its remote tier (waits for the log to catch up or fork).",
		series: one(func(r *streamRow) float64 { return flag(r.behind) })}
	famStreamCost = &streamFamily{name: "stream_cost_usd_per_month", second: "part",
		help: "A stream's projected monthly S3 cost in dollars at the configured prices: its request rate so far for 30 days (part requests), its stored bytes for a month (part storage).",
		series: func(r *streamRow, e *seriesEmit) {
			if r.hasCost {
				e.emit("requests", r.costRequests)
				e.emit("storage", r.costStored)
			}
		}}
	// famStreamReqs is not over the scrape's rows: its series come from the S3 request
	// counters by stream (NodeInput.StreamRequests), stream "" included.
	famStreamReqs = &streamFamily{name: "stream_s3_requests_total", second: "kind", counter: true,
		help: "A stream's S3 requests by kind as S3 bills them (put, get, head, list, delete); stream \"\" is requests of no one stream (the bucket probe, gc listings)."}

	streamFamilies = []*streamFamily{famStreamUp, famStreamParked, famStreamOffset, famStreamBytes, famStreamFrags,
		famStreamXfers, famStreamLagB, famStreamLagS, famStreamPersist, famStreamStalled, famStreamPaused, famStreamGaps,
		famStreamDiverge, famStreamBehind, famStreamCost, famStreamReqs}
)

func init() {
	for _, f := range streamFamilies {
		labels := []string{"stream"}
		if f.second != "" {
			labels = append(labels, f.second)
		}
		f.desc, f.fqName = desc(f.name, f.help, labels...), namespace+"_"+f.name
	}
}

// streamSeriesSink receives the per-stream series of one scrape, family by family: all of
// one family's series before the next family's first (begin announces each family).
type streamSeriesSink interface {
	begin(f *streamFamily)
	// series is one series of f: of the scrape's row i (-1 for a stream only the S3
	// request counters know), named id, with second as the second label's value.
	series(f *streamFamily, i int, id, second string, v float64)
}

// streamSeries gives sink every per-stream series of one scrape: the families of the
// scrape's rows in their order, then the S3 requests by stream (sorted by stream).
func streamSeries(sc *scrape, sink streamSeriesSink) {
	e := &seriesEmit{sink: sink}
	for _, f := range streamFamilies {
		sink.begin(f)
		if f == famStreamReqs {
			ids := make([]string, 0, len(sc.in.StreamRequests))
			for id := range sc.in.StreamRequests {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			for _, id := range ids {
				i := sc.row(id)
				req := sc.in.StreamRequests[id]
				for k := s3io.Kind(0); k < s3io.NumKinds; k++ {
					sink.series(f, i, id, k.String(), float64(req[k]))
				}
			}
			continue
		}
		for i := range sc.rows {
			r := &sc.rows[i]
			if r.failed && !f.always {
				continue
			}
			e.f, e.i, e.id = f, i, r.id
			f.series(r, e)
		}
	}
}
