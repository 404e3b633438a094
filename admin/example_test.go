package admin_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/admin"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/embeds3"
	"github.com/streamtier/streamtier/segments"
)

// A broker registers the node's collector in its own registry, next to its own metrics:
// each gather reads the node's streamtier_* series, among them the per-stream families
// labelled with the stream's id.
func ExampleNewCollector() {
	node, store, stop := exampleNode()
	defer stop()

	c, err := admin.NewCollector(admin.CollectorOptions{Node: node, S3: store.Metrics()})
	check(err)
	reg := prometheus.NewRegistry() // the broker's registry
	reg.MustRegister(c)

	families, err := reg.Gather()
	check(err)
	for _, f := range families {
		if f.GetName() != "streamtier_stream_parked" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				fmt.Printf("%s{%s=%q} %v\n", f.GetName(), l.GetName(), l.GetValue(), m.GetGauge().GetValue())
			}
		}
	}
	// Output:
	// streamtier_stream_parked{stream="orders"} 0
}

// A broker serves the node's metrics from its own HTTP server: the handler answers a
// scrape with the broker's registry (nil here) and every streamtier_* series, written as
// Prometheus text.
func ExampleNewMetricsHandler() {
	node, store, stop := exampleNode()
	defer stop()

	h, err := admin.NewMetricsHandler(admin.CollectorOptions{Node: node, S3: store.Metrics()}, nil)
	check(err)
	mux := http.NewServeMux() // the broker's own HTTP server
	mux.Handle("/metrics", h)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, err := srv.Client().Get(srv.URL + "/metrics")
	check(err)
	defer resp.Body.Close()
	fmt.Println("status:", resp.StatusCode)
	fmt.Println("text format:", strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain"))
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		if strings.HasPrefix(lines.Text(), "streamtier_stream_parked{") {
			fmt.Println(lines.Text())
		}
	}
	check(lines.Err())
	// Output:
	// status: 200
	// text format: true
	// streamtier_stream_parked{stream="orders"} 0
}

// exampleNode starts the embedded etcd and S3 endpoint (on loopback, in this process) and a
// node tiering one stream, "orders", as actors' Example does. stop stops the node and
// the backends and removes their files.
func exampleNode() (*actors.Node, *s3io.Store, func()) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "streamtier-admin-example")
	check(err)
	etcd, err := metadata.StartEmbedded(ctx, filepath.Join(dir, "etcd"))
	check(err)
	s3srv, err := embeds3.Start(ctx, filepath.Join(dir, "s3")) // one per process at a time
	check(err)
	store, err := s3io.NewStore(ctx, s3srv.Config("tier"))
	check(err)
	check(store.EnsureBucket(ctx))
	node, err := actors.Start(ctx, actors.Config{Logger: zerolog.Nop()}, store, metadata.NewStore(etcd.Client(), ""))
	check(err)
	lg, err := segments.Open(filepath.Join(dir, "orders"), segments.Options{})
	check(err)
	check(node.AddStream(actors.StreamSpec{ID: "orders", Log: lg, Epoch: 1}))

	stop := func() {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		check(node.Stop(sctx))
		check(lg.Close())
		check(s3srv.Close())
		check(etcd.Close())
		check(os.RemoveAll(dir))
	}
	return node, store, stop
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
