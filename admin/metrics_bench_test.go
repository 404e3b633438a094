package admin

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/streamtier/streamtier/actors"
)

// discard is a ResponseWriter that keeps nothing of the body (a scraper reading it).
type discard struct {
	h http.Header
	n int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { d.n += len(p); return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// benchSize is the scrape benchmarks' node size and rounds: STREAMTIER_BENCH_STREAMS
// (default 10,200) and STREAMTIER_BENCH_ROUNDS (default 5).
func benchSize() (streams, rounds int) {
	streams, rounds = 10200, 5
	if v, err := strconv.Atoi(os.Getenv("STREAMTIER_BENCH_STREAMS")); err == nil && v > 0 {
		streams = v
	}
	if v, err := strconv.Atoi(os.Getenv("STREAMTIER_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	return streams, rounds
}

// BenchmarkScrape scrapes a node of STREAMTIER_BENCH_STREAMS (default 10,200) idle streams
// the way /metrics does now (the node's series through a registry, the per-stream families
// written as text from the report) and, interleaved, the way it did (every series through
// the registry and promhttp), gzip offered as Prometheus offers it. Per round: the time and
// the bytes allocated by one scrape of each; it prints the ratios text/registry (min,
// median, max over STREAMTIER_BENCH_ROUNDS, default 5). The node's statuses are given (the
// same input for both), so the figures are the exposition's own.
func BenchmarkScrape(b *testing.B) {
	n, rounds := benchSize()
	in := idleInput(n)
	reg := prometheus.NewRegistry() // the Go and process collectors' place: empty here
	old := prometheus.NewRegistry()
	old.MustRegister(collector{gather: fixed(in)})
	oldHandler := promhttp.HandlerFor(old, promhttp.HandlerOpts{})
	scrape := func(text bool) (time.Duration, uint64, int) {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Accept-Encoding", "gzip")
		w := &discard{h: http.Header{}}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		if text {
			serveMetrics(w, req, reg, scrapeOf(in, time.Now()), zerolog.Nop())
		} else {
			oldHandler.ServeHTTP(w, req)
		}
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		return took, after.TotalAlloc - before.TotalAlloc, w.n
	}
	var tr, ar []float64
	b.ResetTimer()
	for r := range rounds {
		order := []bool{true, false}
		if r%2 == 1 {
			order = []bool{false, true}
		}
		var t [2]time.Duration
		var a [2]uint64
		var size [2]int
		for _, text := range order {
			i := 0
			if text {
				i = 1
			}
			t[i], a[i], size[i] = scrape(text)
		}
		tr = append(tr, t[1].Seconds()/t[0].Seconds())
		ar = append(ar, float64(a[1])/float64(a[0]))
		b.Logf("round %d: registry %v %.1f MiB allocated (%d bytes gzipped); text %v %.1f MiB (%d bytes)", r, t[0].Round(time.Millisecond),
			float64(a[0])/(1<<20), size[0], t[1].Round(time.Millisecond), float64(a[1])/(1<<20), size[1])
	}
	b.StopTimer()
	fmt.Printf("scrape of %d idle streams, text/registry: time %s, bytes allocated %s\n", n, ratios(tr), ratios(ar))
}

// ratios formats min, median and max.
func ratios(v []float64) string {
	slices.Sort(v)
	return fmt.Sprintf("%.3f / %.3f / %.3f (min/median/max of %d)", v[0], v[len(v)/2], v[len(v)-1], len(v))
}

// fixtureNode is a node whose streams' statuses are a fixed input's, each read as a copy as
// the node's Status returns one. Only what a scrape reads is there.
type fixtureNode struct {
	Node // nil: the operator actions are not called
	in   NodeInput
	byID map[string]int
}

func newFixtureNode(in NodeInput) *fixtureNode {
	n := &fixtureNode{in: in, byID: make(map[string]int, len(in.Streams))}
	for i, s := range in.Streams {
		n.byID[s.Status.Stream] = i
	}
	return n
}

func (n *fixtureNode) Streams() []string {
	ids := make([]string, 0, len(n.in.Streams))
	for _, s := range n.in.Streams {
		ids = append(ids, s.Status.Stream)
	}
	return ids
}

func (n *fixtureNode) Status(_ context.Context, id string) (actors.StreamStatus, error) {
	return n.in.Streams[n.byID[id]].Status, nil
}
func (n *fixtureNode) Cached(string) (actors.Persisted, bool) { return actors.Persisted{}, false }
func (n *fixtureNode) GovernorStatus(context.Context) (actors.GovernorStatus, error) {
	return actors.GovernorStatus{}, nil
}
func (n *fixtureNode) Metrics() *actors.Metrics { return n.in.Metrics }

// BenchmarkScrapeHeld measures what one scrape holds at once of a node of
// STREAMTIER_BENCH_STREAMS (default 10,200) idle streams: the live heap (after a
// collection) while it holds what it gathered, gathered the way /metrics does now (one
// compact row per stream, gatherScrape) and, interleaved, the way it did and /status still
// does (every stream's status and report, gatherInput and BuildReport). It prints the
// ratios rows/statuses of the held bytes and of the bytes allocated (min, median, max over
// STREAMTIER_BENCH_ROUNDS, default 5). What a scrape holds across a collection raises the
// heap's next goal, and so an idle node's RSS after the scrape.
func BenchmarkScrapeHeld(b *testing.B) {
	n, rounds := benchSize()
	o := Options{Node: newFixtureNode(idleInput(n)), Started: time.Now().Add(-time.Hour)}
	gather := func(rows bool) (held, allocated uint64) {
		var before, mid, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		var sc *scrape
		var in NodeInput
		var rep Report
		if rows {
			sc = gatherScrape(context.Background(), o)
		} else {
			in = gatherInput(context.Background(), o)
			rep = BuildReport(in, time.Now())
		}
		runtime.ReadMemStats(&mid)
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(sc)
		runtime.KeepAlive(in.Streams)
		runtime.KeepAlive(rep.Streams)
		return after.HeapAlloc - before.HeapAlloc, mid.TotalAlloc - before.TotalAlloc
	}
	var hr, ar []float64
	b.ResetTimer()
	for r := range rounds {
		var held, alloc [2]uint64
		for _, rows := range []bool{r%2 == 0, r%2 == 1} {
			i := 0
			if rows {
				i = 1
			}
			held[i], alloc[i] = gather(rows)
		}
		hr = append(hr, float64(held[1])/float64(held[0]))
		ar = append(ar, float64(alloc[1])/float64(alloc[0]))
		b.Logf("round %d: statuses and report hold %.1f MiB (%.0f B a stream), %.1f MiB allocated; rows hold %.1f MiB (%.0f B a stream), %.1f MiB allocated",
			r, float64(held[0])/(1<<20), float64(held[0])/float64(n), float64(alloc[0])/(1<<20),
			float64(held[1])/(1<<20), float64(held[1])/float64(n), float64(alloc[1])/(1<<20))
	}
	b.StopTimer()
	fmt.Printf("scrape of %d idle streams, rows/statuses: held %s, allocated %s\n", n, ratios(hr), ratios(ar))
}
