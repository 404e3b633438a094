package admin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/admin"
	"github.com/streamtier/streamtier/metadata/etcdtest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// An embedder registers the node's collector in its own registry, next to its own metrics
// and the Go collector, with no admin server: the streamtier series are read through
// testutil, latencies are summaries (count, sum and quantiles, no gauge with a quantile
// label), the garbage collection series are there at 0 without automatic GC, and promlint
// (what `promtool check metrics` runs) finds nothing.
func TestCollectorInCallersRegistry(t *testing.T) {
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
	node, err := actors.Start(ctx, actors.Config{Logger: zerolog.Nop(),
		Stream: actors.StreamOptions{FragmentTargetSize: 32 << 10, PersistInterval: 50 * time.Millisecond}}, store, meta)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Stop(context.Background())
	if _, err := admin.NewCollector(admin.CollectorOptions{}); err == nil {
		t.Fatal("a collector without a node")
	}
	c, err := admin.NewCollector(admin.CollectorOptions{Node: node, S3: store.Metrics(), Etcd: etcdMetrics})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	brokerMessages := prometheus.NewCounter(prometheus.CounterOpts{Name: "broker_messages_total", Help: "The broker's own."})
	reg.MustRegister(c, brokerMessages, collectors.NewGoCollector())
	brokerMessages.Add(3)

	lg, err := segments.Open(t.TempDir(), segments.Options{MaxSegmentBytes: 100 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	g, err := loadgen.New(loadgen.Config{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadgen.Write(ctx, lg, g, loadgen.Limit{Chunks: 100}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	if err := node.AddStream(actors.StreamSpec{ID: "orders", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	last := lg.NextOffset() - 1
	for {
		node.ForceCut("orders")
		actx, acancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := node.AwaitOffset(actx, "orders", last)
		acancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("await offset %d: %v", last, err)
		}
	}

	if n := testutil.ToFloat64(brokerMessages); n != 3 {
		t.Fatalf("the caller's own counter reads %v", n)
	}
	if n, err := testutil.GatherAndCount(reg, "streamtier_fragments_uploaded_total", "streamtier_stream_offset"); err != nil || n != 1+7 {
		t.Fatalf("gathered %d series of fragments_uploaded_total and stream_offset (want 1 and 7): %v", n, err)
	}
	want := `
# HELP streamtier_gc_last_sweep_objects Findings of this node's last sweep: scanned, referenced, orphans, young, pending, undecided, deleted, failed (0 before the first sweep, and on a node without automatic garbage collection).
# TYPE streamtier_gc_last_sweep_objects gauge
streamtier_gc_last_sweep_objects{kind="deleted"} 0
streamtier_gc_last_sweep_objects{kind="failed"} 0
streamtier_gc_last_sweep_objects{kind="orphans"} 0
streamtier_gc_last_sweep_objects{kind="pending"} 0
streamtier_gc_last_sweep_objects{kind="referenced"} 0
streamtier_gc_last_sweep_objects{kind="scanned"} 0
streamtier_gc_last_sweep_objects{kind="undecided"} 0
streamtier_gc_last_sweep_objects{kind="young"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "streamtier_gc_last_sweep_objects"); err != nil {
		t.Fatalf("gc series without automatic GC: %v", err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == "quantile" {
					t.Errorf("%s: a %s with a quantile label (reserved for summaries)", f.GetName(), f.GetType())
				}
			}
		}
	}
	for _, name := range []string{"streamtier_latency_seconds", "streamtier_read_first_chunk_seconds"} {
		if f := byName[name]; f == nil || f.GetType() != dto.MetricType_SUMMARY {
			t.Fatalf("%s: %v, want a summary", name, f)
		}
	}
	persists := 0.0
	for _, m := range byName["streamtier_latency_seconds"].Metric {
		s := m.GetSummary()
		if len(m.Label) != 1 || len(s.Quantile) != 2 || s.Quantile[0].GetQuantile() != 0.5 || s.Quantile[1].GetQuantile() != 0.99 {
			t.Fatalf("latency summary %v", m)
		}
		if m.Label[0].GetValue() == "persist" {
			persists = float64(s.GetSampleCount())
			if s.GetSampleSum() <= 0 || s.Quantile[1].GetValue() <= 0 {
				t.Fatalf("persist latency summary: %v", s)
			}
		}
	}
	if ok := node.Metrics().Persists.Load(); persists != float64(ok) || ok == 0 {
		t.Fatalf("persist latency count %v, %d persists", persists, ok)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}

	// The same node through NewMetricsHandler, next to the embedder's own registry (without
	// the collector): the embedder's series and every streamtier family the collector gave.
	own := prometheus.NewRegistry()
	own.MustRegister(brokerMessages)
	if _, err := admin.NewMetricsHandler(admin.CollectorOptions{}, own); err == nil {
		t.Fatal("a metrics handler without a node")
	}
	h, err := admin.NewMetricsHandler(admin.CollectorOptions{Node: node, S3: store.Metrics(), Etcd: etcdMetrics}, own)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	p := expfmt.NewTextParser(model.UTF8Validation)
	served, err := p.TextToMetricFamilies(rec.Body)
	if rec.Code != http.StatusOK || err != nil {
		t.Fatalf("handler: HTTP %d, %v", rec.Code, err)
	}
	if f := served["broker_messages_total"]; f == nil || f.Metric[0].GetCounter().GetValue() != 3 {
		t.Fatalf("the embedder's counter through the handler: %v", f)
	}
	for name, f := range byName {
		if !strings.HasPrefix(name, "streamtier_") {
			continue
		}
		if g := served[name]; g == nil || g.GetType() != f.GetType() || len(g.Metric) != len(f.Metric) {
			t.Errorf("%s: the handler serves %v, the collector gave %d series of type %s", name, g, len(f.Metric), f.GetType())
		}
	}
}
