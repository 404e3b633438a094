package admin

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// A scrape sends about 34 series per stream. Built with prometheus.MustNewConstMetric, each
// series validated and allocated its own label pairs (five allocations and about 200
// bytes before the registry's own work): at 10,200 idle streams one scrape allocated
// 123 MB for them alone. streamScrape builds them from slabs instead: a stream's label
// pair is made once per scrape and shared by its series, and the pair of a second label
// (offset="drained", kind="local", ...) once per scrape and shared by every stream. The
// node's own /metrics does without the registry for them altogether (metrics_text.go).

// seriesPerSlab is how many series one slab of a scrape holds.
const seriesPerSlab = 512

// streamScrape is the sink (streamSeriesSink) that sends the per-stream series of one
// scrape to a registry's collect channel: the label pairs of the second labels by name and
// value, shared among the streams (the registry and the encoder only read them), the
// stream label pairs by the scrape's row index, and the series from slabs.
type streamScrape struct {
	ch      chan<- prometheus.Metric
	pairs   map[[2]string]*dto.LabelPair
	streams []*dto.LabelPair // by the scrape's row index, made at first use
	other   *dto.LabelPair   // the last stream only the S3 request counters know
	slab    []streamSample
}

func newStreamScrape(ch chan<- prometheus.Metric, streams int) *streamScrape {
	return &streamScrape{ch: ch, pairs: map[[2]string]*dto.LabelPair{}, streams: make([]*dto.LabelPair, streams)}
}

func (sc *streamScrape) pair(name, value string) *dto.LabelPair {
	if lp, ok := sc.pairs[[2]string{name, value}]; ok {
		return lp
	}
	k := &[2]string{name, value}
	lp := &dto.LabelPair{Name: &k[0], Value: &k[1]}
	sc.pairs[*k] = lp
	return lp
}

// streamLabel is a stream's label pair with the value it points to (one allocation).
type streamLabel struct {
	pair dto.LabelPair
	id   string
}

// streamLabelName is the name of the stream label, shared by every stream's label pair.
var streamLabelName = "stream"

func newStreamLabel(id string) *dto.LabelPair {
	l := &streamLabel{id: id}
	l.pair.Name, l.pair.Value = &streamLabelName, &l.id
	return &l.pair
}

// label is the stream label pair of the scrape's row i (or, for -1, of id).
func (sc *streamScrape) label(i int, id string) *dto.LabelPair {
	if i < 0 {
		if sc.other == nil || *sc.other.Value != id {
			sc.other = newStreamLabel(id)
		}
		return sc.other
	}
	if sc.streams[i] == nil {
		sc.streams[i] = newStreamLabel(id)
	}
	return sc.streams[i]
}

// streamSample is one series: a gauge or a counter with its labels (Write allocates only
// a counter's value holder).
type streamSample struct {
	desc    *prometheus.Desc
	labels  [2]*dto.LabelPair
	n       int
	value   float64
	isCount bool
	gauge   dto.Gauge
}

func (s *streamSample) Desc() *prometheus.Desc { return s.desc }

func (s *streamSample) Write(m *dto.Metric) error {
	m.Label = s.labels[:s.n]
	if s.isCount {
		m.Counter = &dto.Counter{Value: &s.value}
		return nil
	}
	s.gauge.Value = &s.value
	m.Gauge = &s.gauge
	return nil
}

func (sc *streamScrape) begin(*streamFamily) {}

func (sc *streamScrape) series(f *streamFamily, i int, id, second string, v float64) {
	if len(sc.slab) == 0 {
		sc.slab = make([]streamSample, seriesPerSlab)
	}
	s := &sc.slab[0]
	sc.slab = sc.slab[1:]
	s.desc, s.value, s.isCount = f.desc, v, f.counter
	s.labels[0], s.n = sc.label(i, id), 1
	if f.second != "" {
		// Label pairs sorted by name, as the registry expects (and would otherwise copy
		// and sort for every series).
		s.labels[0], s.labels[1], s.n = sc.pair(f.second, second), s.labels[0], 2
		if f.second > streamLabelName {
			s.labels[0], s.labels[1] = s.labels[1], s.labels[0]
		}
	}
	sc.ch <- s
}
