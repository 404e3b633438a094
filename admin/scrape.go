package admin

import (
	"context"
	"slices"
	"strings"
	"time"
)

// A scrape of /metrics used to gather every stream's whole status, build the whole /status
// report from them, and hold both until the last series was written: at 10,200 idle
// streams about 25 MB alive at once, for the figures of a few dozen numbers per stream.
// Held across a collection, that raised the heap's goal and so the RSS of an idle node
// after each scrape. A scrape now reads one stream at a time and keeps only its row.

// scrape is what one scrape of the metrics reads: the node's input without its streams'
// statuses, the node's report with its streams counted in, and one row per stream, in
// stream order.
type scrape struct {
	in   NodeInput // in.Streams is nil: each stream's status became its row
	node NodeReport
	rows []streamRow
	now  time.Time
	// stored sums the streams' remote bytes, for the node's cost.
	stored uint64
}

// streamRow is what the per-stream families read of one stream (stream_families.go).
type streamRow struct {
	id string
	// failed says the stream's status could not be read (StreamReport.Error): only the
	// families marked always have a series for it.
	failed                                       bool
	running, parked, stalled, paused             bool
	diverged, behind                             bool
	localFirst, localCommitted, localNext        float64
	drained, uploaded, persistedFirst, persisted float64
	localBytes, remoteBytes, assemblyBytes       float64
	transferBytes, persistBytes, heldBytes       float64
	fragments, gapOffsets                        float64
	inFlight, waitingRetry, buffered             float64
	lagBytes, lagSeconds, lastPersistAge         float64
	// hasCost says the request counters by stream were read; then the cost's two parts.
	hasCost                  bool
	costRequests, costStored float64
}

// rowOf is the row of a stream's report.
func rowOf(s *StreamReport) streamRow {
	return streamRow{
		id: s.Stream, failed: s.Error != "",
		running: s.Error == "" && s.Phase != "starting" && s.Phase != "resolving" && s.Phase != "stopped" && s.Phase != "stalled" && s.Phase != "parked",
		parked:  s.Parked != nil, stalled: s.Pipeline.Stalled, paused: s.Pipeline.Paused,
		diverged: s.Remote.Diverged != nil && !s.Remote.Diverged.Behind, behind: s.Remote.Diverged != nil && s.Remote.Diverged.Behind,
		localFirst: float64(s.Local.First), localCommitted: float64(s.Local.Committed), localNext: float64(s.Local.Next),
		drained: float64(s.Pipeline.DrainNext), uploaded: float64(s.Remote.Next),
		persistedFirst: float64(s.Remote.PersistedFirst), persisted: float64(s.Remote.PersistedNext),
		localBytes: float64(s.Local.Bytes), remoteBytes: float64(s.Remote.TotalSize), assemblyBytes: float64(s.Fragment.Bytes),
		transferBytes: float64(s.Pipeline.InFlightBytes), persistBytes: float64(s.Pipeline.UnpersistedBytes), heldBytes: float64(s.Pipeline.HeldBytes),
		fragments: float64(s.Remote.Fragments), gapOffsets: float64(s.Remote.GapOffsets),
		inFlight: float64(s.Pipeline.InFlight), waitingRetry: float64(s.Pipeline.WaitingRetry), buffered: float64(s.Pipeline.Buffered),
		lagBytes: float64(s.Lag.Bytes), lagSeconds: s.Lag.Seconds, lastPersistAge: s.Pipeline.LastPersistAgeSeconds,
	}
}

// newScrape starts a scrape of in's node at now, with room for n streams; in's streams
// are not read (add them).
func newScrape(in NodeInput, now time.Time, n int) *scrape {
	in.Streams = nil
	return &scrape{in: in, node: nodeReport(in, now), rows: make([]streamRow, 0, n), now: now}
}

// add counts a stream in and keeps its row: the report it builds from the status is not
// kept.
func (sc *scrape) add(si StreamInput) {
	sr := streamFigures(si, sc.in.RebalanceThreshold, sc.now)
	sc.node.count(&sr)
	sc.stored += sr.Remote.TotalSize
	row := rowOf(&sr)
	if sc.in.StreamRequests != nil {
		row.hasCost = true
		row.costRequests, row.costStored = monthly(sc.in.StreamRequests[row.id], sr.Remote.TotalSize, sc.now.Sub(sc.in.Started), sc.in.Prices)
	}
	sc.rows = append(sc.rows, row)
}

// finish orders the rows by stream and adds the node's cost.
func (sc *scrape) finish() {
	slices.SortFunc(sc.rows, func(a, b streamRow) int { return strings.Compare(a.id, b.id) })
	if sc.in.StreamRequests != nil {
		sc.node.Cost = nodeCost(&sc.in, sc.stored, sc.now)
	}
}

// row is the index of stream id's row, or -1.
func (sc *scrape) row(id string) int {
	i, ok := slices.BinarySearchFunc(sc.rows, id, func(r streamRow, id string) int { return strings.Compare(r.id, id) })
	if !ok {
		return -1
	}
	return i
}

// scrapeOf is the scrape of an input whose streams were all read (as BuildReport's).
func scrapeOf(in NodeInput, now time.Time) *scrape {
	sc := newScrape(in, now, len(in.Streams))
	for _, si := range in.Streams {
		sc.add(si)
	}
	sc.finish()
	return sc
}

// gatherScrape reads the node and the other sources o names, one stream's status at a
// time.
func gatherScrape(ctx context.Context, o Options) *scrape {
	in := gatherNode(ctx, o)
	ids := o.Node.Streams()
	sc := newScrape(in, time.Now(), len(ids))
	for _, id := range ids {
		if si, ok := streamInput(ctx, o.Node, id); ok {
			sc.add(si)
		}
	}
	sc.finish()
	return sc
}
