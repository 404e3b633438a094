package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/admin"
	"github.com/streamtier/streamtier/gc"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/tiertest"
)

// TestBucketProbeInStatus: with the S3 server answering the bucket listing with 403, the
// probe's outcome reaches /status (access_denied, the server's error), /readyz (503 naming
// it) and the metrics (s3_bucket_reachable 0); once the fault is gone, the next probe makes
// all three say the bucket answers again.
func TestBucketProbeInStatus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	be := tiertest.StartBackends(ctx, t, true)
	meta, inj, store := be.Meta, be.Faults, be.Store
	node := startNode(ctx, t, store, meta)
	probe, err := s3io.NewBucketProbe(store, "streams/", time.Hour, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	a, err := admin.Start("127.0.0.1:0", admin.Options{Node: node, NodeID: "n", S3: store.Metrics(), Bucket: probe, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	readyz := func() (int, admin.ReadyReport) {
		t.Helper()
		resp, err := http.Get(a.URL() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r admin.ReadyReport
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, r
	}
	status := func() admin.NodeReport {
		t.Helper()
		c := admin.Client{Base: a.URL()}
		rep, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep.Node
	}
	if code, r := readyz(); code != 503 || !strings.Contains(r.Checks["s3_bucket"], "not probed yet") {
		t.Fatalf("readyz before the first probe: %d %+v", code, r)
	}
	probe.ProbeOnce(ctx)
	if code, r := readyz(); code != 200 || r.Checks["s3_bucket"] != "ok" {
		t.Fatalf("readyz: %d %+v", code, r)
	}
	if b := status().Bucket; b == nil || !b.Reachable || b.Outcome != "ok" || b.Bucket != store.Bucket() {
		t.Fatalf("status: %+v", b)
	}

	inj.Add(s3test.Rule{Method: "GET", KeyRegexp: "^$", Fault: s3test.FaultForbidden})
	probe.ProbeOnce(ctx)
	code, r := readyz()
	if code != 503 || r.Ready || !strings.Contains(r.Checks["s3_bucket"], "access_denied") || !strings.Contains(r.Checks["s3_bucket"], "AccessDenied") {
		t.Fatalf("readyz while denied: %d %+v", code, r)
	}
	b := status().Bucket
	if b == nil || b.Reachable || b.Outcome != "access_denied" || !strings.Contains(b.Error, "s3test: injected access denied") || b.ByOutcome["access_denied"] != 1 {
		t.Fatalf("status while denied: %+v", b)
	}
	samples, _ := scrape(t, a.URL())
	if samples["streamtier_s3_bucket_reachable{}"] != 0 || samples[`streamtier_s3_bucket_probe_state{outcome="access_denied"}`] != 1 ||
		samples[`streamtier_s3_bucket_probes_total{outcome="access_denied"}`] != 1 {
		t.Fatalf("metrics while denied: reachable %v, state %v, probes %v", samples["streamtier_s3_bucket_reachable{}"],
			samples[`streamtier_s3_bucket_probe_state{outcome="access_denied"}`], samples[`streamtier_s3_bucket_probes_total{outcome="access_denied"}`])
	}

	inj.Clear()
	probe.ProbeOnce(ctx)
	if code, r := readyz(); code != 200 || r.Checks["s3_bucket"] != "ok" {
		t.Fatalf("readyz after recovery: %d %+v", code, r)
	}
	if b := status().Bucket; !b.Reachable || b.Error != "" || b.ByOutcome["ok"] != 2 {
		t.Fatalf("status after recovery: %+v", b)
	}
	samples, _ = scrape(t, a.URL())
	if samples["streamtier_s3_bucket_reachable{}"] != 1 || samples[`streamtier_s3_bucket_probe_state{outcome="ok"}`] != 1 {
		t.Fatalf("metrics after recovery: %v", samples["streamtier_s3_bucket_reachable{}"])
	}
}

// TestGCInStatus: automatic garbage collection's findings (a dry-run sweep that found one
// orphan) are in /status and the metrics.
func TestGCInStatus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	be := tiertest.StartBackends(ctx, t, false)
	meta, store := be.Meta, be.Store
	// The node starts first: format version 3 refuses to open a prefix holding streams
	// without a claim or anchors (another cluster's, or lost metadata).
	node := startNode(ctx, t, store, meta)
	// A deleted stream's leftover: garbage on a positive statement (the bucket's deletion
	// marker), the only kind format version 3 collects without a record naming a later root.
	if err := store.PutObject(ctx, manifest.FragmentKey(manifest.DefaultKeyPrefix, "gone", 0, 1, 7), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := store.CreateMarker(ctx, manifest.DefaultKeyPrefix, s3io.Marker{Stream: "gone", Time: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	// An hour on, by the sweep's clock: the leftover is past the default grace.
	later := func() time.Time { return time.Now().Add(time.Hour + 2*time.Minute) }
	sw, err := gc.NewSweeper(gc.SweeperConfig{Options: gc.Options{Store: store, Meta: meta, Now: later}, Interval: time.Hour, NodeID: "n", Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	a, err := admin.Start("127.0.0.1:0", admin.Options{Node: node, NodeID: "n", GC: sw, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	if r := sw.SweepOnce(ctx); r.Err != nil || r.Orphans != 1 {
		t.Fatalf("sweep: %+v", r)
	}
	rep, err := admin.Client{Base: a.URL()}.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g := rep.Node.GC
	if g == nil || g.Mode != "dry-run" || g.Sweeps != 1 || g.OrphansFound != 1 || g.Last == nil || g.Last.Orphans != 1 || g.Last.Deleted != 0 || g.Last.StartedMs == 0 {
		t.Fatalf("status gc: %+v", g)
	}
	samples, _ := scrape(t, a.URL())
	if samples[`streamtier_gc_last_sweep_objects{kind="orphans"}`] != 1 || samples[`streamtier_gc_sweeps_total{outcome="ok"}`] != 1 ||
		samples[`streamtier_gc_objects_total{kind="deleted"}`] != 0 || samples["streamtier_gc_last_sweep_failed{}"] != 0 {
		t.Fatalf("gc metrics: %v %v", samples[`streamtier_gc_last_sweep_objects{kind="orphans"}`], samples[`streamtier_gc_sweeps_total{outcome="ok"}`])
	}
}

// TestParkedInReport: a parked stream's status becomes the report's parked part (reason,
// since, next retry), and the node counts it.
func TestParkedInReport(t *testing.T) {
	since := time.UnixMilli(1_700_000_000_000)
	st := actors.StreamStatus{Stream: "pk", Phase: "parked", Parked: &actors.ParkedStatus{Since: since, Reason: "boom", Failures: 9, RetryAt: since.Add(time.Minute)}}
	rep := admin.BuildReport(admin.NodeInput{Metrics: &actors.Metrics{}, Streams: []admin.StreamInput{{Status: st}, {Status: actors.StreamStatus{Stream: "ok", Phase: "running"}}}}, since)
	if rep.Node.StreamsParked != 1 || rep.Streams[1].Parked == nil || rep.Streams[0].Parked != nil {
		t.Fatalf("report: %+v", rep)
	}
	p := rep.Streams[1].Parked
	if p.Reason != "boom" || p.Failures != 9 || p.SinceMillis != since.UnixMilli() || p.RetryAtMillis != since.Add(time.Minute).UnixMilli() {
		t.Fatalf("parked: %+v", p)
	}
}
