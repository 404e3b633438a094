package main

import (
	"context"
	"fmt"
	"io"
	"path"

	"github.com/streamtier/streamtier/manifest/resolve"
	"github.com/streamtier/streamtier/nodeconfig"
	"github.com/streamtier/streamtier/recovery"
)

// bucketStream is a stream as `node status --from-bucket` shows it: what the bucket alone
// names (no etcd read).
type bucketStream struct {
	Stream      string `json:"stream"`
	Outcome     string `json:"outcome"`
	RootKey     string `json:"root_key,omitempty"`
	Seq         uint64 `json:"seq,omitempty"`
	Epoch       uint64 `json:"epoch,omitempty"`
	FirstOffset uint64 `json:"first_offset"`
	NextOffset  uint64 `json:"next_offset"`
	TotalSize   uint64 `json:"total_size"`
	Problem     string `json:"problem,omitempty"`
}

// bucketStatus lists the streams the bucket knows under the key prefix, or one, with the
// root each would be read from; it uses no etcd.
func bucketStatus(ctx context.Context, s nodeconfig.Settings, stream string, asJSON bool, stdout, stderr io.Writer) int {
	b, err := openFor(ctx, s, true)
	if err != nil {
		return fail(stderr, "status", err)
	}
	defer b.Close()
	ids := []string{stream}
	if stream == "" {
		if ids, err = recovery.ListStreams(ctx, b.Store, b.KeyPrefix); err != nil {
			return fail(stderr, "status", err)
		}
	}
	out := []bucketStream{}
	for _, id := range ids {
		in, err := recovery.Choose(ctx, b.Store, b.KeyPrefix, id)
		if err != nil {
			return fail(stderr, "status", err)
		}
		if stream != "" && in.Choice.Outcome == resolve.TopEmpty {
			return fail(stderr, "status", fmt.Errorf("stream %q: unknown stream (nothing under its prefix in bucket %s)", id, b.Store.Bucket()))
		}
		bs := bucketStream{Stream: id, Outcome: in.Choice.Outcome.String()}
		if in.Chosen() {
			m := in.Root.Manifest
			bs.RootKey, bs.Seq, bs.Epoch = in.Choice.Root.Key, in.Choice.Root.Seq, in.Choice.Root.Epoch
			bs.FirstOffset, bs.NextOffset, bs.TotalSize = m.FirstOffset, m.NextOffset, m.TotalSize
		} else if in.Check != nil {
			bs.Problem = in.Check.Error()
		} else {
			bs.Problem = in.Choice.Reason
		}
		out = append(out, bs)
	}
	if asJSON {
		writeJSON(stdout, struct {
			Running    bool           `json:"running"`
			FromBucket bool           `json:"from_bucket"`
			Streams    []bucketStream `json:"streams"`
		}{false, true, out})
		return exitOK
	}
	fmt.Fprintf(stdout, "the bucket alone (%s), key prefix %s/: the roots `node recover` would choose\n\n", b.Describe(), b.KeyPrefix)
	t := newTable(stdout)
	t.row("STREAM", "SEQ", "EPOCH", "FIRST", "NEXT", "REMOTE", "ROOT")
	for _, o := range out {
		if o.RootKey == "" {
			t.row(o.Stream, "-", "-", "-", "-", "-", "("+o.Outcome+") "+o.Problem)
			continue
		}
		t.row(o.Stream, fmt.Sprint(o.Seq), fmt.Sprint(o.Epoch), fmt.Sprint(o.FirstOffset), fmt.Sprint(o.NextOffset), human(o.TotalSize), path.Base(o.RootKey))
	}
	t.flush()
	if len(out) == 0 {
		fmt.Fprintln(stdout, "(no streams)")
	}
	return exitOK
}
