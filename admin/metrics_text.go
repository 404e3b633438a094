package admin

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/rs/zerolog"
)

// /metrics of a node with many streams is mostly per-stream series: 34 per stream, 347,000
// at 10,200 streams. Through a registry each becomes a dto.Metric held until the whole
// scrape is gathered and sorted, about 100 MB at that size, and that peak, not the idle
// streams, set the node's heap goal and so its resident memory. The handler below gathers
// only the node's own series (and the Go and process collectors') through the registry,
// then writes the per-stream families in the Prometheus text format straight to the
// response, family by family, from the scrape's report: what it holds beyond the report
// is a write buffer. The text is the registry's text, series for series (labels sorted by
// name, values formatted alike); only the order of the series within a family differs
// (the report's stream order), which the format leaves free.

// metricsContentType is the Prometheus text format the handler writes whatever the scraper
// offers: every Prometheus server and agent accepts it.
const metricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// metricsHandler serves GET /metrics of the node o reads, beside the families of g (nil:
// none): the admin server's and NewMetricsHandler's.
func metricsHandler(o Options, g prometheus.Gatherer, log zerolog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		sc := gatherScrape(ctx, o)
		cancel()
		serveMetrics(w, r, g, sc, log)
	})
}

// serveMetrics answers a scrape: the families of g (nil: none) and the node's own series
// gathered together, then the per-stream families of sc written as text.
func serveMetrics(w http.ResponseWriter, r *http.Request, g prometheus.Gatherer, sc *scrape, log zerolog.Logger) {
	gatherers := prometheus.Gatherers{prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		reg := prometheus.NewRegistry()
		if err := reg.Register(nodeCollector{sc: sc}); err != nil {
			return nil, err
		}
		return reg.Gather()
	})}
	if g != nil {
		gatherers = append(gatherers, g)
	}
	mfs, err := gatherers.Gather()
	if err != nil {
		http.Error(w, "gather metrics: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", metricsContentType)
	var out io.Writer = w
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		w.Header().Set("Content-Encoding", "gzip")
		zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed) // a valid level: no error
		defer zw.Close()
		out = zw
	}
	if err := writeMetrics(out, mfs, sc); err != nil {
		log.Debug().Err(err).Msg("/metrics: the response was not written whole (the scraper went away?)")
	}
}

// acceptsGzip reports whether an Accept-Encoding header offers gzip (with a non-zero q).
func acceptsGzip(header string) bool {
	for part := range strings.SplitSeq(header, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(name) != "gzip" {
			continue
		}
		q, ok := strings.CutPrefix(strings.ReplaceAll(params, " ", ""), "q=")
		return !ok || (q != "0" && q != "0.0" && q != "0.00" && q != "0.000")
	}
	return false
}

// writeMetrics writes the gathered families, then the per-stream families, as text.
func writeMetrics(w io.Writer, mfs []*dto.MetricFamily, sc *scrape) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := expfmt.NewEncoder(bw, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return fmt.Errorf("encode %s: %w", mf.GetName(), err)
		}
	}
	tw := &textSeries{w: bw}
	streamSeries(sc, tw)
	if tw.err != nil {
		return tw.err
	}
	return bw.Flush()
}

// nodeCollector is the collector of one scrape's node series (collectNode), from the
// scrape the handler gathered once for the per-stream families too.
type nodeCollector struct{ sc *scrape }

func (nodeCollector) Describe(chan<- *prometheus.Desc) {}

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) { collectNode(&c.sc.in, &c.sc.node, ch) }

// textSeries is the sink (streamSeriesSink) that writes per-stream series in the text
// format; a family's HELP and TYPE lines come before its first series (a family without
// any series is not written, as the registry omits it). The first write error sticks.
type textSeries struct {
	w       *bufio.Writer
	pending *streamFamily // begun, header not written yet
	num     []byte
	err     error
}

func (t *textSeries) begin(f *streamFamily) { t.pending = f }

func (t *textSeries) series(f *streamFamily, _ int, id, second string, v float64) {
	if t.err != nil {
		return
	}
	w := t.w
	if t.pending == f {
		t.pending = nil
		typ := "gauge"
		if f.counter {
			typ = "counter"
		}
		w.WriteString("# HELP " + f.fqName + " ")
		writeEscaped(w, f.help, false)
		w.WriteString("\n# TYPE " + f.fqName + " " + typ + "\n")
	}
	w.WriteString(f.fqName)
	w.WriteByte('{')
	// Labels sorted by name, as the registry writes them.
	if f.second != "" && f.second < streamLabelName {
		writeLabel(w, f.second, second)
		w.WriteByte(',')
	}
	writeLabel(w, streamLabelName, id)
	if f.second != "" && f.second > streamLabelName {
		w.WriteByte(',')
		writeLabel(w, f.second, second)
	}
	w.WriteString("} ")
	t.num = appendValue(t.num[:0], v)
	w.Write(t.num)
	if err := w.WriteByte('\n'); err != nil {
		t.err = err
	}
}

// writeLabel writes name="value" with the value escaped.
func writeLabel(w *bufio.Writer, name, value string) {
	w.WriteString(name)
	w.WriteString(`="`)
	writeEscaped(w, value, true)
	w.WriteByte('"')
}

// writeEscaped writes s escaped as the text format wants: backslash and newline always,
// the double quote in label values.
func writeEscaped(w *bufio.Writer, s string, quote bool) {
	if !strings.ContainsAny(s, "\\\n\"") {
		w.WriteString(s)
		return
	}
	for _, r := range s {
		switch {
		case r == '\\':
			w.WriteString(`\\`)
		case r == '\n':
			w.WriteString(`\n`)
		case r == '"' && quote:
			w.WriteString(`\"`)
		default:
			w.WriteRune(r)
		}
	}
}

// appendValue formats a sample value as the text format does.
func appendValue(b []byte, v float64) []byte {
	switch {
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case math.IsInf(v, +1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}
