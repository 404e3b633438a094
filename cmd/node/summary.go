package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/streamtier/streamtier/backends"
	"github.com/streamtier/streamtier/nodeconfig"
	"github.com/streamtier/streamtier/s3io"
)

// summary is what the process prints when it stops.
type summary struct {
	uptime     time.Duration
	streams    []streamSummary
	fragments  int64 // uploaded by this run
	bytes      int64
	objects    int
	objBytes   int64
	listErr    error
	persistP50 time.Duration
	persistP99 time.Duration
	uploadP50  time.Duration
	uploadP99  time.Duration
	bucket     string
	keyPrefix  string
	s3Dir      string
}

type streamSummary struct {
	id        string
	first     uint64
	next      uint64
	size      uint64
	fragments uint64
	committed uint64
	written   int64 // demo bytes written by this run
}

func (p *process) summary(ctx context.Context) summary {
	m := p.node.Metrics()
	sum := summary{uptime: time.Since(p.started), fragments: m.FragmentsUploaded.Load(), bytes: m.BytesUploaded.Load(),
		bucket: p.b.Store.Bucket(), keyPrefix: p.b.KeyPrefix}
	sum.persistP50, sum.persistP99, sum.uploadP50, sum.uploadP99 = m.LatencyQuantiles()
	if p.b.S3 != nil {
		sum.s3Dir = p.b.S3.Dir
	}
	for _, st := range p.openStreams() {
		ss := streamSummary{id: st.id, committed: st.log.CommittedNext()}
		if c, ok := p.node.Cached(st.id); ok {
			ss.first, ss.next, ss.size = c.Manifest.FirstOffset, c.Manifest.NextOffset, c.Manifest.TotalSize
			ss.fragments = c.Manifest.Summary(p.s.RebalanceThreshold).Fragments
		}
		if st.demo != nil {
			ss.written = st.demo.written.Load()
		}
		sum.streams = append(sum.streams, ss)
	}
	sort.Slice(sum.streams, func(i, j int) bool { return sum.streams[i].id < sum.streams[j].id })
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sum.listErr = p.b.Store.List(lctx, p.b.KeyPrefix+"/", func(o s3io.ObjectInfo) error {
		sum.objects++
		sum.objBytes += o.Size
		return nil
	})
	return sum
}

func (s summary) print(out io.Writer, set nodeconfig.Settings) {
	fmt.Fprintf(out, "\nstreamtier stopped after %s.\n", dur(s.uptime))
	for _, st := range s.streams {
		fmt.Fprintf(out, "  stream %s: persisted offsets [%d, %d), %s in %d fragments; committed up to %d",
			st.id, st.first, st.next, human(st.size), st.fragments, st.committed)
		if st.written > 0 {
			fmt.Fprintf(out, "; the demo load wrote %s this run", human(st.written))
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintf(out, "  this run tiered %s in %d fragments\n", human(s.bytes), s.fragments)
	if s.listErr != nil {
		fmt.Fprintf(out, "  bucket %s: could not list: %v\n", s.bucket, s.listErr)
	} else {
		fmt.Fprintf(out, "  bucket %s: %d objects, %s under %s/\n", s.bucket, s.objects, human(s.objBytes), s.keyPrefix)
	}
	fmt.Fprintf(out, "  persist latency p50 %s, p99 %s; upload latency p50 %s, p99 %s\n", dur(s.persistP50), dur(s.persistP99), dur(s.uploadP50), dur(s.uploadP99))
	cmd := commandName()
	flags := ""
	if set.Origins["data_dir"] != "default" {
		flags = " --data-dir " + set.DataDir
	}
	if set.ConfigFile != "" {
		flags = " --config " + set.ConfigFile
	}
	fmt.Fprintf(out, "\nInspect the result:\n")
	fmt.Fprintf(out, "  %s status%s\n", cmd, flags)
	for _, st := range s.streams {
		fmt.Fprintf(out, "  %s verify %s%s\n", cmd, st.id, flags)
	}
	fmt.Fprintf(out, "  %s gc%s\n", cmd, flags)
	if s.s3Dir != "" {
		fmt.Fprintf(out, "  ls -R %s/data/%s/%s\n", s.s3Dir, s.bucket, s.keyPrefix)
	}
	if !set.EmbeddedEtcd() || !set.EmbeddedS3() {
		fmt.Fprintf(out, "These use %s as %s records it; give them the same credentials as this run (flags or STREAMTIER_* variables).\n",
			backends.LocationOf(set).Where(), backends.LocationFile(set.DataDir))
	}
	fmt.Fprintf(out, "Run it again to resume where it stopped.\n")
}
