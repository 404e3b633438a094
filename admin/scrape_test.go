package admin

import (
	"reflect"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors"
)

// TestScrapeMatchesTheReport: a scrape's rows and node report are what /status's report
// says of the same input: the node's sums (stages, parked streams, cost) equal, and each
// row is its stream's report's row with that stream's cost, in the same (stream) order.
func TestScrapeMatchesTheReport(t *testing.T) {
	in := awkwardInput()
	in.Streams[0].Status.Core.AssemblyBytes, in.Streams[0].Status.Core.InFlightBytes = 1000, 2000
	in.Streams[3].Status.Core.UnpersistedBytes, in.Streams[3].Status.Core.TotalSize = 3000, 1<<40
	in.Streams[2].Status.Phase = "parked"
	in.Streams[2].Status.Parked = &actors.ParkedStatus{Since: time.Now(), Reason: "boom", Failures: 3}
	in.Streams[3].Status.Core.Diverged, in.Streams[3].Status.Core.Behind = true, true
	now := time.Now()

	rep := BuildReport(in, now)
	sc := scrapeOf(in, now)
	if !reflect.DeepEqual(sc.node, rep.Node) {
		t.Fatalf("node report:\nscrape %+v\nreport %+v", sc.node, rep.Node)
	}
	if rep.Node.StreamsParked != 1 || rep.Node.Stages.PersistBytes != 3000 || rep.Node.Cost == nil {
		t.Fatalf("the input was meant to set the sums: %+v", rep.Node)
	}
	if len(sc.rows) != len(rep.Streams) {
		t.Fatalf("%d rows for %d streams", len(sc.rows), len(rep.Streams))
	}
	for i := range rep.Streams {
		s := &rep.Streams[i]
		want := rowOf(s)
		want.hasCost, want.costRequests, want.costStored = true, s.Cost.RequestsPerMonthUSD, s.Cost.StoragePerMonthUSD
		if sc.rows[i] != want {
			t.Errorf("row %d:\nscrape %+v\nreport %+v", i, sc.rows[i], want)
		}
		if sc.row(s.Stream) != i {
			t.Errorf("row(%q) = %d, want %d", s.Stream, sc.row(s.Stream), i)
		}
	}
	if sc.row("gone-stream") != -1 || !sc.rows[3].parked || !sc.rows[1].failed || !sc.rows[2].behind || sc.rows[2].diverged {
		t.Fatalf("rows: %+v", sc.rows)
	}
	if sc.in.Streams != nil {
		t.Fatal("the scrape keeps the streams' statuses")
	}
}
