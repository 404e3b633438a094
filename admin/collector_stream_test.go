package admin

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/s3io"
)

// idleInput is a node with n idle streams as the collector reads it: every stream running,
// nothing in flight, a few S3 requests each (so each has its cost series too).
func idleInput(n int) NodeInput {
	in := NodeInput{NodeID: "n", Started: time.Now().Add(-time.Hour), Metrics: &actors.Metrics{}, Prices: DefaultPrices,
		StreamRequests: map[string]s3io.StreamRequests{}}
	for op := range in.S3 {
		in.S3[op].Op = s3io.Op(op)
	}
	for i := range n {
		id := fmt.Sprintf("idle-%05d", i)
		in.Streams = append(in.Streams, StreamInput{Status: actors.StreamStatus{Stream: id, Phase: "running", Epoch: 1,
			LocalFirst: 10, LocalCommitted: 20, LocalNext: 20, LocalBytes: 4096,
			Core: readercore.Status{Phase: "running", Next: 20, PersistedNext: 20, DrainNext: 20, TotalSize: 1 << 20}}})
		in.StreamRequests[id] = s3io.StreamRequests{3, 1, 0, 0, 0}
	}
	return in
}

// fixed gathers the scrape of a fixed input.
func fixed(in NodeInput) func(context.Context) *scrape {
	return func(context.Context) *scrape { return scrapeOf(in, time.Now()) }
}

// TestStreamSeriesExposition: the per-stream series built from the shared label pairs are
// exposed with their labels in order and their values, as the const metrics were.
func TestStreamSeriesExposition(t *testing.T) {
	in := idleInput(2)
	in.Streams[1].Status.Core.InFlight = 3
	in.Streams[1].Status.LocalCommitted = 25
	c := collector{gather: fixed(in)}
	want := `
# HELP streamtier_stream_offset A stream's offsets: local_first, local_committed, local_next, drained, uploaded (in-memory next), persisted_first, persisted_next.
# TYPE streamtier_stream_offset gauge
streamtier_stream_offset{offset="drained",stream="idle-00000"} 20
streamtier_stream_offset{offset="drained",stream="idle-00001"} 20
streamtier_stream_offset{offset="local_committed",stream="idle-00000"} 20
streamtier_stream_offset{offset="local_committed",stream="idle-00001"} 25
streamtier_stream_offset{offset="local_first",stream="idle-00000"} 10
streamtier_stream_offset{offset="local_first",stream="idle-00001"} 10
streamtier_stream_offset{offset="local_next",stream="idle-00000"} 20
streamtier_stream_offset{offset="local_next",stream="idle-00001"} 20
streamtier_stream_offset{offset="persisted_first",stream="idle-00000"} 0
streamtier_stream_offset{offset="persisted_first",stream="idle-00001"} 0
streamtier_stream_offset{offset="persisted_next",stream="idle-00000"} 20
streamtier_stream_offset{offset="persisted_next",stream="idle-00001"} 20
streamtier_stream_offset{offset="uploaded",stream="idle-00000"} 20
streamtier_stream_offset{offset="uploaded",stream="idle-00001"} 20
# HELP streamtier_stream_running 1 when the stream's replica reader is running (resolved), 0 while starting or resolving, while stalled (its local log cannot be read), while parked and once stopped for good.
# TYPE streamtier_stream_running gauge
streamtier_stream_running{stream="idle-00000"} 1
streamtier_stream_running{stream="idle-00001"} 1
# HELP streamtier_stream_s3_requests_total A stream's S3 requests by kind as S3 bills them (put, get, head, list, delete); stream "" is requests of no one stream (the bucket probe, gc listings).
# TYPE streamtier_stream_s3_requests_total counter
streamtier_stream_s3_requests_total{kind="delete",stream="idle-00000"} 0
streamtier_stream_s3_requests_total{kind="delete",stream="idle-00001"} 0
streamtier_stream_s3_requests_total{kind="get",stream="idle-00000"} 1
streamtier_stream_s3_requests_total{kind="get",stream="idle-00001"} 1
streamtier_stream_s3_requests_total{kind="head",stream="idle-00000"} 0
streamtier_stream_s3_requests_total{kind="head",stream="idle-00001"} 0
streamtier_stream_s3_requests_total{kind="list",stream="idle-00000"} 0
streamtier_stream_s3_requests_total{kind="list",stream="idle-00001"} 0
streamtier_stream_s3_requests_total{kind="put",stream="idle-00000"} 3
streamtier_stream_s3_requests_total{kind="put",stream="idle-00001"} 3
# HELP streamtier_stream_transfers A stream's transfers by state (in_flight, waiting_retry, buffered).
# TYPE streamtier_stream_transfers gauge
streamtier_stream_transfers{state="buffered",stream="idle-00000"} 0
streamtier_stream_transfers{state="buffered",stream="idle-00001"} 0
streamtier_stream_transfers{state="in_flight",stream="idle-00000"} 0
streamtier_stream_transfers{state="in_flight",stream="idle-00001"} 3
streamtier_stream_transfers{state="waiting_retry",stream="idle-00000"} 0
streamtier_stream_transfers{state="waiting_retry",stream="idle-00001"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "streamtier_stream_offset", "streamtier_stream_running",
		"streamtier_stream_s3_requests_total", "streamtier_stream_transfers"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "streamtier_stream_cost_usd_per_month"); n != 4 {
		t.Fatalf("%d cost series, want 2 per stream", n)
	}
	// Every per-stream series of the scrape, through a registry (which checks label order,
	// duplicates and types): 34 per stream.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "stream" {
					per[lp.GetValue()]++
				}
			}
		}
	}
	if per["idle-00000"] != 34 || per["idle-00001"] != 34 {
		t.Fatalf("series per stream: %v, want 34 each", per)
	}
}

// TestScrapeAllocationsPerIdleStream bounds what a scrape allocates per idle stream in the
// collector (the node's statuses are given): a scrape of 10,000 idle streams is part of an
// idle node's life. Const metrics took 391 allocations per stream here (34 series with
// label pairs of their own); the shared label pairs and the slabs take 19, most of them in
// the report every scrape builds anyway.
func TestScrapeAllocationsPerIdleStream(t *testing.T) {
	const n = 200
	in := idleInput(n)
	c := collector{gather: fixed(in)}
	ch := make(chan prometheus.Metric, 64*n)
	allocs := testing.AllocsPerRun(5, func() {
		c.Collect(ch)
		for len(ch) > 0 {
			<-ch
		}
	})
	perStream := allocs / n
	t.Logf("%.0f allocations a scrape, %.1f per idle stream", allocs, perStream)
	if perStream > 40 {
		t.Fatalf("a scrape allocates %.1f times per idle stream, want at most 40", perStream)
	}
}

// nodeSeries collects the node's own series of one input (collectNode), for testutil.
type nodeSeries struct{ in NodeInput }

func (nodeSeries) Describe(chan<- *prometheus.Desc) {}

func (c nodeSeries) Collect(ch chan<- prometheus.Metric) {
	node := nodeReport(c.in, time.Now())
	collectNode(&c.in, &node, ch)
}

// TestRemoteReadSeries: the remote sources' figures are node series, each the value of the
// node's counter or gauge it names.
func TestRemoteReadSeries(t *testing.T) {
	in := idleInput(0)
	rr := &in.Metrics.RemoteRead
	rr.Open.Store(2)
	rr.GETs.Store(40)
	rr.Bytes.Store(160 << 20)
	rr.Errors[read.RemoteErrRetriable].Store(3)
	rr.Errors[read.RemoteErrNotFound].Store(1)
	rr.Concurrency.Store(24)
	rr.Buffered.Store(96 << 20)
	rr.LearnedConcurrency.Store(16)
	want := `
# HELP streamtier_remote_read_sources_open Remote sources open now: readers reading the remote tier through range GETs.
# TYPE streamtier_remote_read_sources_open gauge
streamtier_remote_read_sources_open 2
# HELP streamtier_remote_read_gets_total Range GETs the remote sources issued.
# TYPE streamtier_remote_read_gets_total counter
streamtier_remote_read_gets_total 40
# HELP streamtier_remote_read_get_bytes_total Bytes of range GET bodies the remote sources received.
# TYPE streamtier_remote_read_get_bytes_total counter
streamtier_remote_read_get_bytes_total 1.6777216e+08
# HELP streamtier_remote_read_get_errors_total Failed range GETs by class (retriable: retried; not_found: retention or a lagging manifest; fatal: the read fails).
# TYPE streamtier_remote_read_get_errors_total counter
streamtier_remote_read_get_errors_total{class="fatal"} 0
streamtier_remote_read_get_errors_total{class="not_found"} 1
streamtier_remote_read_get_errors_total{class="retriable"} 3
# HELP streamtier_remote_read_gets_allowed Range GETs the open remote sources allow in flight: their concurrency searches' levels, summed.
# TYPE streamtier_remote_read_gets_allowed gauge
streamtier_remote_read_gets_allowed 24
# HELP streamtier_remote_read_held_bytes Bytes the open remote sources hold against the read budget, summed.
# TYPE streamtier_remote_read_held_bytes gauge
streamtier_remote_read_held_bytes 1.00663296e+08
# HELP streamtier_remote_read_learned_concurrency Range GETs in flight the node's reads last settled at, where the next read's search starts (0: none settled yet, the search starts at 4).
# TYPE streamtier_remote_read_learned_concurrency gauge
streamtier_remote_read_learned_concurrency 16
`
	names := []string{"streamtier_remote_read_sources_open", "streamtier_remote_read_gets_total",
		"streamtier_remote_read_get_bytes_total", "streamtier_remote_read_get_errors_total",
		"streamtier_remote_read_gets_allowed", "streamtier_remote_read_held_bytes",
		"streamtier_remote_read_learned_concurrency"}
	if err := testutil.CollectAndCompare(nodeSeries{in}, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
}
