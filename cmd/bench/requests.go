package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/streamtier/streamtier/s3io"
)

// runRequests runs the upload rounds and reports the S3 requests the node made per GiB of
// fragment objects, by kind, from its store's own metrics (s3io.Metrics), against the
// baseline's one PutObject per object.
func runRequests(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("requests", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fl := uploadFlags{bytes: 1 << 30, fragment: 64 << 20}
	fl.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return uploadRounds(ctx, "requests", fl, stdout, stderr, printRequests)
}

// printRequests prints requests per GiB by operation for the node (every kind it used in
// any round) and the baseline, and their ratio round by round.
func printRequests(w io.Writer, fl uploadFlags, streams []uploadStream, rounds []pair) {
	printThroughput(w, fl, streams, rounds)
	fmt.Fprintln(w, "S3 requests per GiB of fragment objects (errors included; the deletes after each round are not counted):")
	perGiB := func(s side, op s3io.Op) float64 {
		return float64(s.requests[op].Requests) / (float64(s.bytes) / (1 << 30))
	}
	total := func(s side) float64 {
		var t float64
		for op := range s3io.NumOps {
			t += perGiB(s, op)
		}
		return t
	}
	r := report{w}
	r.columns("")
	var nodeTotal, rawTotal, nodeErrors []float64
	for op := range s3io.NumOps {
		var xs []float64
		used := false
		for _, p := range rounds {
			xs = append(xs, perGiB(p.node, op))
			used = used || p.node.requests[op].Requests > 0
		}
		if used {
			r.row("A node "+op.String()+" /GiB", xs, 2)
		}
	}
	for _, p := range rounds {
		nodeTotal = append(nodeTotal, total(p.node))
		rawTotal = append(rawTotal, total(p.raw))
		var errs uint64
		for _, o := range p.node.requests {
			errs += o.Errors()
		}
		nodeErrors = append(nodeErrors, float64(errs))
	}
	r.row("A node all requests /GiB", nodeTotal, 2)
	r.row("A node failed requests", nodeErrors, 0)
	r.row("B raw put_object /GiB", rawTotal, 2)
	r.row("ratio A/B requests (node/raw)", ratios(nodeTotal, rawTotal), 3)
}
