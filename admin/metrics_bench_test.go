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
)

// discard is a ResponseWriter that keeps nothing of the body (a scraper reading it).
type discard struct {
	h http.Header
	n int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { d.n += len(p); return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkScrape scrapes a node of STREAMTIER_BENCH_STREAMS (default 10,200) idle streams
// the way /metrics does now (the node's series through a registry, the per-stream families
// written as text from the report) and, interleaved, the way it did (every series through
// the registry and promhttp), gzip offered as Prometheus offers it. Per round: the time and
// the bytes allocated by one scrape of each; it prints the ratios text/registry (min,
// median, max over STREAMTIER_BENCH_ROUNDS, default 5). The node's statuses are given (the
// same input for both), so the figures are the exposition's own.
func BenchmarkScrape(b *testing.B) {
	n, rounds := 10200, 5
	if v, err := strconv.Atoi(os.Getenv("STREAMTIER_BENCH_STREAMS")); err == nil && v > 0 {
		n = v
	}
	if v, err := strconv.Atoi(os.Getenv("STREAMTIER_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	in := idleInput(n)
	reg := prometheus.NewRegistry() // the Go and process collectors' place: empty here
	old := prometheus.NewRegistry()
	old.MustRegister(collector{input: func(context.Context) NodeInput { return in }})
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
			serveMetrics(w, req, reg, in, zerolog.Nop())
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
