package admin

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/s3io"
)

// canonical parses a text exposition into one line per series, "name{labels} type value"
// (labels sorted, HELP folded into the family's first line), sorted: two expositions with
// the same families, series and values give the same lines whatever their order.
func canonical(t *testing.T, text []byte) []string {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%s", err, text)
	}
	var out []string
	for name, f := range fams {
		out = append(out, fmt.Sprintf("%s HELP %q TYPE %s", name, f.GetHelp(), f.GetType()))
		for _, m := range f.Metric {
			var labels []string
			for _, l := range m.Label {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			slices.Sort(labels)
			v := m.GetGauge().GetValue()
			if f.GetType() == dto.MetricType_COUNTER {
				v = m.GetCounter().GetValue()
			}
			out = append(out, fmt.Sprintf("%s{%s} %s %v", name, strings.Join(labels, ","), f.GetType(), v))
		}
	}
	slices.Sort(out)
	return out
}

// awkwardInput is idleInput with what the per-stream families must get right: a stream
// whose status failed, one whose id needs escaping, a stream only the S3 request counters
// know, the requests of no one stream, values that are not integers or not finite, and
// every condition gauge set somewhere.
func awkwardInput() NodeInput {
	in := idleInput(4)
	in.Streams[1].Err = fmt.Errorf("status: %w", actors.ErrNodeStopped)
	in.Streams[2].Status.Stream = "quote\"back\\slash\nline"
	in.StreamRequests[in.Streams[2].Status.Stream] = s3io.StreamRequests{1, 2, 3, 4, 5}
	in.Streams[3].Status.Core.InFlight, in.Streams[3].Status.Core.Paused = 7, true
	in.StreamRequests["gone-stream"] = s3io.StreamRequests{9, 0, 0, 0, 1}
	in.StreamRequests[""] = s3io.StreamRequests{0, 0, 0, 4, 0}
	return in
}

// TestMetricsTextMatchesTheRegistry: the per-stream families the /metrics handler writes
// as text are, series for series, label for label and value for value, what the registry
// makes of the same report through the collector (which embedders register), HELP and TYPE
// included; and they parse.
func TestMetricsTextMatchesTheRegistry(t *testing.T) {
	in := awkwardInput()
	sc := scrapeOf(in, time.Now())
	sc.rows[0].lagSeconds = 1.25
	sc.rows[3].lagSeconds = math.Inf(+1)
	sc.rows[0].lastPersistAge = -1

	var ours bytes.Buffer
	if err := writeMetrics(&ours, nil, sc); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(streamOnly{sc: sc})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var theirs bytes.Buffer
	enc := expfmt.NewEncoder(&theirs, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	got, want := canonical(t, ours.Bytes()), canonical(t, theirs.Bytes())
	if !slices.Equal(got, want) {
		t.Fatalf("the text differs from the registry's:\n%s", lineDiff(got, want))
	}
	if len(want) < 100 || !slices.ContainsFunc(got, func(l string) bool { return strings.Contains(l, `stream="quote\"back\\slash\nline"`) }) {
		t.Fatalf("%d lines, the escaped stream id missing:\n%s", len(got), strings.Join(got, "\n"))
	}
}

// streamOnly collects the per-stream families of a fixed scrape through the slabs.
type streamOnly struct{ sc *scrape }

func (streamOnly) Describe(chan<- *prometheus.Desc) {}
func (c streamOnly) Collect(ch chan<- prometheus.Metric) {
	streamSeries(c.sc, newStreamScrape(ch, len(c.sc.rows)))
}

// lineDiff lists the lines only one side has.
func lineDiff(got, want []string) string {
	var b strings.Builder
	for _, l := range got {
		if !slices.Contains(want, l) {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	for _, l := range want {
		if !slices.Contains(got, l) {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	return b.String()
}

// TestMetricsHandlerWritesEveryFamily: GET /metrics answers the text format (gzipped when
// offered), with the node's own families and the Go runtime's next to the per-stream ones,
// each family once.
func TestMetricsHandlerWritesEveryFamily(t *testing.T) {
	in := awkwardInput()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	for _, gz := range []bool{false, true} {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if gz {
			req.Header.Set("Accept-Encoding", "deflate, gzip;q=0.9")
		}
		rec := httptest.NewRecorder()
		serveMetrics(rec, req, reg, scrapeOf(in, time.Now()), zerolog.Nop())
		if rec.Code != 200 || rec.Header().Get("Content-Type") != metricsContentType {
			t.Fatalf("gzip %v: HTTP %d %q: %s", gz, rec.Code, rec.Header().Get("Content-Type"), rec.Body)
		}
		body := rec.Body.Bytes()
		if gz {
			if rec.Header().Get("Content-Encoding") != "gzip" {
				t.Fatalf("gzip offered, Content-Encoding %q", rec.Header().Get("Content-Encoding"))
			}
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if body, err = io.ReadAll(zr); err != nil {
				t.Fatal(err)
			}
		}
		types := map[string]int{}
		for _, l := range strings.Split(string(body), "\n") {
			if name, ok := strings.CutPrefix(l, "# TYPE "); ok {
				types[strings.Fields(name)[0]]++
			}
		}
		for _, name := range []string{"streamtier_fragments_uploaded_total", "streamtier_stream_offset", "streamtier_stream_s3_requests_total", "go_goroutines", "streamtier_latency_seconds"} {
			if types[name] != 1 {
				t.Errorf("gzip %v: family %s written %d times, want once", gz, name, types[name])
			}
		}
		canonical(t, body) // parses
	}
}

func TestAcceptsGzip(t *testing.T) {
	for h, want := range map[string]bool{
		"": false, "gzip": true, "identity": false, "deflate, gzip": true, "gzip;q=0": false, "gzip; q=0.5": true,
		"br;q=1.0, gzip;q=0.8, *;q=0.1": true, "gzipx": false,
	} {
		if got := acceptsGzip(h); got != want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", h, got, want)
		}
	}
}
