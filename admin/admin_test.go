package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/admin"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata/etcdtest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
	"github.com/streamtier/streamtier/tiertest"
)

// scrape reads /metrics and returns every sample as "name{labels}" -> value.
func scrape(t *testing.T, base string) (map[string]float64, map[string]dto.MetricType) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("/metrics: HTTP %d: %s", resp.StatusCode, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	out, types := map[string]float64{}, map[string]dto.MetricType{}
	for name, f := range fams {
		types[name] = f.GetType()
		for _, m := range f.Metric {
			var labels []string
			for _, l := range m.Label {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := name + "{" + strings.Join(labels, ",") + "}"
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.Counter.GetValue()
			case dto.MetricType_GAUGE:
				out[key] = m.Gauge.GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key] = float64(m.Histogram.GetSampleCount())
			case dto.MetricType_SUMMARY:
				out[key] = float64(m.Summary.GetSampleCount())
			}
		}
	}
	return out, types
}

// TestAdminServer runs a real node on etcd and S3, tiers a generated log, and checks the
// admin API: the status report, the Prometheus metrics (present, moving, counters never
// going down), the operator actions with their errors, and the health and readiness checks.
func TestAdminServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	etcd := etcdtest.Start(t)
	etcdMetrics := admin.InstrumentEtcd(etcd.Client())
	meta := etcdtest.Store(t, etcd)
	srv := s3test.Start(t, s3test.Options{})
	store, err := s3io.NewStore(ctx, srv.NewBucket(t))
	if err != nil {
		t.Fatal(err)
	}
	node, err := actors.Start(ctx, actors.Config{
		Stream: actors.StreamOptions{FragmentTargetSize: 32 << 10, PersistInterval: 50 * time.Millisecond},
		Logger: zerolog.Nop(),
	}, store, meta)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Stop(context.Background())
	lg, err := segments.Open(t.TempDir(), segments.Options{MaxSegmentBytes: 100 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	g, err := loadgen.New(loadgen.Config{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	write := func(chunks int64) {
		t.Helper()
		if _, err := loadgen.Write(ctx, lg, g, loadgen.Limit{Chunks: chunks}, loadgen.WriteOptions{Commit: true}); err != nil {
			t.Fatal(err)
		}
		// Cut until the tail is durable: a cut made before the last chunks were drained
		// leaves them assembling, so each attempt waits briefly and cuts again.
		deadline := time.Now().Add(20 * time.Second)
		for {
			node.ForceCut("s")
			actx, acancel := context.WithTimeout(ctx, 200*time.Millisecond)
			err := node.AwaitOffset(actx, "s", lg.NextOffset()-1)
			acancel()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("await offset %d: %v", lg.NextOffset()-1, err)
			}
		}
	}
	if err := node.AddStream(actors.StreamSpec{ID: "s", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}

	readyErr := errors.New("s3 is down")
	var failing atomic.Bool
	a, err := admin.Start("127.0.0.1:0", admin.Options{
		Node: node, NodeID: "node-1", S3: store.Metrics(), Etcd: etcdMetrics, RebalanceThreshold: 1024, Log: zerolog.Nop(),
		Ready: []admin.Check{
			{Name: "etcd", Check: func(ctx context.Context) error { _, _, _, err := meta.ReadManifest(ctx, "s"); return err }},
			{Name: "s3", Check: func(context.Context) error {
				if failing.Load() {
					return readyErr
				}
				return nil
			}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	cl := admin.Client{Base: a.URL()}

	awaitCtx, awaitCancel := context.WithTimeout(ctx, 20*time.Second)
	defer awaitCancel()
	for node.ForceCut("s") != nil { // wait for the reader to resolve before writing
		select {
		case <-awaitCtx.Done():
			t.Fatal("reader never started")
		case <-time.After(10 * time.Millisecond):
		}
	}
	write(200)
	first, types := scrape(t, a.URL())

	rep, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Streams) != 1 {
		t.Fatalf("status streams: %+v", rep.Streams)
	}
	s := rep.Streams[0]
	if s.Stream != "s" || s.Phase != "running" || s.Remote.PersistedNext != lg.NextOffset() || s.Local.Committed != lg.NextOffset() ||
		s.Remote.Fragments == 0 || s.Remote.TotalSize == 0 || s.Pipeline.LastPersistAgeSeconds < 0 || s.Counters["persists"] == 0 {
		t.Fatalf("stream status: %+v", s)
	}
	if rep.Node.ID != "node-1" || rep.Node.Uploads.Fragments == 0 || rep.Node.Persists.OK == 0 || rep.Node.StreamsRunning != 1 ||
		rep.Node.S3.Requests["put_fragment"] == 0 || rep.Node.Etcd.Requests["txn"] == 0 || rep.Node.Governor.RateBytesPerSec != 0 {
		t.Fatalf("node status: %+v", rep.Node)
	}
	if one, err := cl.Stream(ctx, "s"); err != nil || one.Remote.PersistedNext != s.Remote.PersistedNext {
		t.Fatalf("one stream: %+v, %v", one, err)
	}

	for _, name := range []string{
		`streamtier_fragments_uploaded_total{}`, `streamtier_uploaded_bytes_total{}`, `streamtier_persists_total{outcome="ok"}`,
		`streamtier_transfer_errors_total{class="retriable"}`, `streamtier_reaper_total{kind="deleted"}`,
		`streamtier_streams_running{}`, `streamtier_transfers_running{}`, `streamtier_governor_queued{}`, `streamtier_governor_tokens{}`,
		`streamtier_reaper_queued{}`, `streamtier_pipeline_bytes{stage="assembly"}`, `streamtier_pipeline_bytes{stage="transfer"}`,
		`streamtier_pipeline_bytes{stage="persist"}`, `streamtier_stream_offset{offset="persisted_next",stream="s"}`,
		`streamtier_stream_lag_seconds{stream="s"}`, `streamtier_latency_seconds{operation="persist"}`,
		`streamtier_s3_requests_total{class="none",op="put_fragment"}`, `streamtier_s3_request_duration_seconds{op="put_fragment"}`,
		`streamtier_etcd_requests_total{class="none",op="txn"}`, `streamtier_etcd_request_duration_seconds{op="txn"}`,
		`streamtier_events_total{event="transfer_abandoned"}`, `streamtier_governor_abandoned_running{}`,
	} {
		if _, ok := first[name]; !ok {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if first[`streamtier_stream_offset{offset="persisted_next",stream="s"}`] != float64(lg.NextOffset()) || first[`streamtier_fragments_uploaded_total{}`] == 0 {
		t.Fatalf("metric values: persisted_next %v, fragments %v", first[`streamtier_stream_offset{offset="persisted_next",stream="s"}`], first[`streamtier_fragments_uploaded_total{}`])
	}

	write(200)
	second, _ := scrape(t, a.URL())
	for _, name := range []string{`streamtier_fragments_uploaded_total{}`, `streamtier_uploaded_bytes_total{}`, `streamtier_persists_total{outcome="ok"}`,
		`streamtier_s3_requests_total{class="none",op="put_fragment"}`, `streamtier_etcd_requests_total{class="none",op="txn"}`,
		`streamtier_stream_offset{offset="persisted_next",stream="s"}`} {
		if second[name] <= first[name] {
			t.Errorf("%s did not move: %v then %v", name, first[name], second[name])
		}
	}
	for name, v := range first {
		fam := name[:strings.IndexByte(name, '{')]
		if types[fam] == dto.MetricType_COUNTER && second[name] < v {
			t.Errorf("counter %s went down: %v then %v", name, v, second[name])
		}
	}

	// Operator actions.
	if r, err := cl.Cut(ctx, "s"); err != nil || r.Action != "cut" {
		t.Fatalf("cut: %+v %v", r, err)
	}
	if _, err := cl.Cut(ctx, "nope"); !errors.Is(err, admin.ErrNotFound) || !strings.Contains(err.Error(), "unknown stream") {
		t.Fatalf("cut of an unknown stream: %v", err)
	}
	if _, err := cl.Retention(ctx, "s", nil); err != nil {
		t.Fatalf("evaluate retention: %v", err)
	}
	if r, err := cl.Retention(ctx, "s", &manifest.Policy{MaxBytes: 1 << 40}); err != nil || !strings.Contains(r.Action, "set-retention") {
		t.Fatalf("set retention: %+v %v", r, err)
	}
	if _, err := cl.Stream(ctx, "no.such"); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("status of an unknown stream: %v", err)
	}
	resp, err := http.Post(a.URL()+"/streams/s/retention?max_age=yesterday", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad max_age: HTTP %d", resp.StatusCode)
	}

	// Health and readiness.
	if err := cl.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	readyz := func() (int, admin.ReadyReport) {
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
	if code, r := readyz(); code != 200 || !r.Ready || r.Checks["etcd"] != "ok" {
		t.Fatalf("readyz: %d %+v", code, r)
	}
	failing.Store(true)
	if code, r := readyz(); code != 503 || r.Ready || r.Checks["s3"] != readyErr.Error() {
		t.Fatalf("readyz with S3 down: %d %+v", code, r)
	}
}

// TestFreshNodeNotFoundIsNoError: a fresh node with an idle new stream asks S3 for things
// that do not exist yet (the bucket check, the stream's root). Those 404 answers are counted
// as not_found, never as errors: the status of an idle healthy node shows no S3 error.
func TestFreshNodeNotFoundIsNoError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	be := tiertest.StartBackends(ctx, t, false)
	meta, store := be.Meta, be.Store
	// A 404 of its own: the object the new stream's resolution will not find either.
	if _, err := store.Head(ctx, "streams/nothing-here"); !s3io.IsNotFound(err) {
		t.Fatalf("head of a missing key: %v, want not found", err)
	}
	node := startNode(ctx, t, store, meta)
	addEmptyStream(t, node, "fresh")
	a, err := admin.Start("127.0.0.1:0", admin.Options{Node: node, NodeID: "node-1", S3: store.Metrics(), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := node.Status(ctx, "fresh")
		if err == nil && st.Phase == "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream not running: %+v %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rep := a.Report(ctx)
	var reqs, errs uint64
	for _, v := range rep.Node.S3.Requests {
		reqs += v
	}
	for _, v := range rep.Node.S3.ErrorsByClass {
		errs += v
	}
	if reqs == 0 || errs != 0 || rep.Node.S3.NotFound == 0 {
		t.Fatalf("idle fresh node: %d S3 requests, %d errors (%v), %d not found; want no error and the 404s counted apart", reqs, errs, rep.Node.S3.ErrorsByClass, rep.Node.S3.NotFound)
	}
	samples, _ := scrape(t, a.URL())
	if samples[`streamtier_s3_requests_total{class="not_found",op="head"}`] == 0 ||
		samples[`streamtier_s3_requests_total{class="non_transient",op="head"}`] != 0 {
		t.Fatalf("metrics: not_found %v, non_transient %v for head", samples[`streamtier_s3_requests_total{class="not_found",op="head"}`],
			samples[`streamtier_s3_requests_total{class="non_transient",op="head"}`])
	}
}
