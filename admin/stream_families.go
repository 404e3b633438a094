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
	// (StreamReport.Error set); the others skip such a stream.
	always bool
	series func(s *StreamReport, e *seriesEmit)
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
func one(v func(s *StreamReport) float64) func(*StreamReport, *seriesEmit) {
	return func(s *StreamReport, e *seriesEmit) { e.emit("", v(s)) }
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
		help: "1 when the stream's replica reader is running (resolved), 0 while starting or resolving, while stalled (its local log cannot be read), while parked and once stopped for good.",
		series: one(func(s *StreamReport) float64 {
			return flag(s.Error == "" && s.Phase != "starting" && s.Phase != "resolving" && s.Phase != "stopped" && s.Phase != "stalled" && s.Phase != "parked")
		})}
	famStreamParked = &streamFamily{name: "stream_parked", always: true,
		help:   "1 while a stream is parked: its reader kept failing and is retried every stream_park_retry_interval.",
		series: one(func(s *StreamReport) float64 { return flag(s.Parked != nil) })}
	famStreamOffset = &streamFamily{name: "stream_offset", second: "offset",
		help: "A stream's offsets: local_first, local_committed, local_next, drained, uploaded (in-memory next), persisted_first, persisted_next.",
		series: func(s *StreamReport, e *seriesEmit) {
			e.emit("local_first", float64(s.Local.First))
			e.emit("local_committed", float64(s.Local.Committed))
			e.emit("local_next", float64(s.Local.Next))
			e.emit("drained", float64(s.Pipeline.DrainNext))
			e.emit("uploaded", float64(s.Remote.Next))
			e.emit("persisted_first", float64(s.Remote.PersistedFirst))
			e.emit("persisted_next", float64(s.Remote.PersistedNext))
		}}
	famStreamBytes = &streamFamily{name: "stream_bytes", second: "kind",
		help: "A stream's bytes: local (segment files), remote (live fragments), and per pipeline stage.",
		series: func(s *StreamReport, e *seriesEmit) {
			e.emit("local", float64(s.Local.Bytes))
			e.emit("remote", float64(s.Remote.TotalSize))
			e.emit("assembly", float64(s.Fragment.Bytes))
			e.emit("transfer", float64(s.Pipeline.InFlightBytes))
			e.emit("persist", float64(s.Pipeline.UnpersistedBytes))
			e.emit("held", float64(s.Pipeline.HeldBytes))
		}}
	famStreamFrags = &streamFamily{name: "stream_remote_fragments", help: "Live fragments of a stream's persisted manifest.",
		series: one(func(s *StreamReport) float64 { return float64(s.Remote.Fragments) })}
	famStreamXfers = &streamFamily{name: "stream_transfers", second: "state",
		help: "A stream's transfers by state (in_flight, waiting_retry, buffered).",
		series: func(s *StreamReport, e *seriesEmit) {
			e.emit("in_flight", float64(s.Pipeline.InFlight))
			e.emit("waiting_retry", float64(s.Pipeline.WaitingRetry))
			e.emit("buffered", float64(s.Pipeline.Buffered))
		}}
	famStreamLagB = &streamFamily{name: "stream_lag_bytes", help: "Committed bytes of a stream not yet persisted remotely.",
		series: one(func(s *StreamReport) float64 { return float64(s.Lag.Bytes) })}
	famStreamLagS = &streamFamily{name: "stream_lag_seconds", help: "Age of the oldest committed byte of a stream not yet persisted.",
		series: one(func(s *StreamReport) float64 { return s.Lag.Seconds })}
	famStreamPersist = &streamFamily{name: "stream_last_persist_age_seconds", help: "Time since a stream's last successful persist (-1 before the first).",
		series: one(func(s *StreamReport) float64 { return s.Pipeline.LastPersistAgeSeconds })}
	famStreamStalled = &streamFamily{name: "stream_stalled", help: "1 while a stream's upload pipeline is stalled at an offset.",
		series: one(func(s *StreamReport) float64 { return flag(s.Pipeline.Stalled) })}
	famStreamPaused = &streamFamily{name: "stream_drain_paused", help: "1 while a stream's drain is paused at max_unpersisted_bytes (waiting for a persist).",
		series: one(func(s *StreamReport) float64 { return flag(s.Pipeline.Paused) })}
	famStreamGaps = &streamFamily{name: "stream_gap_offsets", help: "Offsets of a stream's persisted root declared as gaps: lost from the local log before upload.",
		series: one(func(s *StreamReport) float64 { return float64(s.Remote.GapOffsets) })}
	famStreamDiverge = &streamFamily{name: "stream_diverged", help: "1 while a stream's local log shares no chunk with its remote tier (waits for `node truncate`).",
		series: one(func(s *StreamReport) float64 { return flag(s.Remote.Diverged != nil && !s.Remote.Diverged.Behind) })}
	famStreamBehind = &streamFamily{name: "stream_behind", help: "1 while a stream's local log is a prefix of its remote tier (waits for the log to catch up or fork).",
		series: one(func(s *StreamReport) float64 { return flag(s.Remote.Diverged != nil && s.Remote.Diverged.Behind) })}
	famStreamCost = &streamFamily{name: "stream_cost_usd_per_month", second: "part",
		help: "A stream's projected monthly S3 cost in dollars at the configured prices: its request rate so far for 30 days (part requests), its stored bytes for a month (part storage).",
		series: func(s *StreamReport, e *seriesEmit) {
			if s.Cost != nil {
				e.emit("requests", s.Cost.RequestsPerMonthUSD)
				e.emit("storage", s.Cost.StoragePerMonthUSD)
			}
		}}
	// famStreamReqs is not over the report's streams: its series come from the S3 request
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
	// series is one series of f: of the report's stream i (-1 for a stream only the S3
	// request counters know), named id, with second as the second label's value.
	series(f *streamFamily, i int, id, second string, v float64)
}

// streamSeries gives sink every per-stream series of one scrape: the families of the
// report's streams in their order, then the S3 requests by stream (sorted by stream).
func streamSeries(rep *Report, in *NodeInput, sink streamSeriesSink) {
	e := &seriesEmit{sink: sink}
	for _, f := range streamFamilies {
		sink.begin(f)
		if f == famStreamReqs {
			index := make(map[string]int, len(rep.Streams))
			for i := range rep.Streams {
				index[rep.Streams[i].Stream] = i
			}
			ids := make([]string, 0, len(in.StreamRequests))
			for id := range in.StreamRequests {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			for _, id := range ids {
				i, ok := index[id]
				if !ok {
					i = -1
				}
				req := in.StreamRequests[id]
				for k := s3io.Kind(0); k < s3io.NumKinds; k++ {
					sink.series(f, i, id, k.String(), float64(req[k]))
				}
			}
			continue
		}
		for i := range rep.Streams {
			s := &rep.Streams[i]
			if s.Error != "" && !f.always {
				continue
			}
			e.f, e.i, e.id = f, i, s.Stream
			f.series(s, e)
		}
	}
}
