package admin

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// A scrape sends about 34 series per stream. Built with prometheus.MustNewConstMetric, each
// series validated and allocated its own label pairs (five allocations and about 200
// bytes before the registry's own work): at 10,200 idle streams one scrape allocated
// 123 MB for them alone. streamScrape builds them from slabs instead: a stream's label
// pair is made once per scrape and shared by its series, and the pair of a second label
// (offset="drained", kind="local", ...) once per scrape and shared by every stream.

// secondLabel names the label besides "stream" of each per-stream metric that has one.
// It is also the check that a desc is used with the labels it was declared with.
var secondLabel = map[*prometheus.Desc]string{
	descStreamOffset: "offset",
	descStreamBytes:  "kind",
	descStreamXfers:  "state",
	descStreamReqs:   "kind",
	descStreamCost:   "part",
}

// seriesPerSlab is how many series one slab of a scrape holds.
const seriesPerSlab = 512

// streamScrape builds the per-stream series of one scrape: the label pairs of the second
// labels by name and value, shared among the streams (the registry and the encoder only
// read them), and the series themselves from slabs of seriesPerSlab.
type streamScrape struct {
	ch    chan<- prometheus.Metric
	pairs map[[2]string]*dto.LabelPair
	slab  []streamSample
}

func newStreamScrape(ch chan<- prometheus.Metric) *streamScrape {
	return &streamScrape{ch: ch, pairs: map[[2]string]*dto.LabelPair{}}
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

// stream returns the series sender of one stream, whose label pair it makes.
func (sc *streamScrape) stream(id string) streamSeries {
	l := &streamLabel{id: id}
	l.pair.Name, l.pair.Value = &streamLabelName, &l.id
	return streamSeries{sc: sc, stream: id, label: &l.pair}
}

// streamLabelName is the name of the stream label, shared by every stream's label pair.
var streamLabelName = "stream"

// streamSeries sends the series of one stream during one scrape.
type streamSeries struct {
	sc     *streamScrape
	stream string
	label  *dto.LabelPair // stream="<id>"
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

// gauge sends a gauge of the stream (its stream label comes from ss); second is the value
// of the metric's second label, for a metric that has one.
func (ss streamSeries) gauge(d *prometheus.Desc, v float64, second ...string) {
	ss.send(d, v, false, second)
}

// counter sends a counter of the stream, with second as gauge takes it.
func (ss streamSeries) counter(d *prometheus.Desc, v float64, second ...string) {
	ss.send(d, v, true, second)
}

func (ss streamSeries) send(d *prometheus.Desc, v float64, isCount bool, second []string) {
	name, two := secondLabel[d]
	if two != (len(second) == 1) || len(second) > 1 {
		// second is not in the message: it would escape, and cost an allocation a series.
		panic(fmt.Sprintf("admin collector: series %s of stream %q sent with %d second labels", d, ss.stream, len(second)))
	}
	sc := ss.sc
	if len(sc.slab) == 0 {
		sc.slab = make([]streamSample, seriesPerSlab)
	}
	s := &sc.slab[0]
	sc.slab = sc.slab[1:]
	s.desc, s.value, s.isCount = d, v, isCount
	s.labels[0], s.n = ss.label, 1
	if two {
		// Label pairs sorted by name, as the registry expects (and would otherwise copy
		// and sort for every series).
		s.labels[0], s.labels[1], s.n = sc.pair(name, second[0]), ss.label, 2
		if name > streamLabelName {
			s.labels[0], s.labels[1] = s.labels[1], s.labels[0]
		}
	}
	sc.ch <- s
}
