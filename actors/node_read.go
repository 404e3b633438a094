package actors

import (
	"context"

	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/segments"
)

// OpenReader opens a reader of a stream this node writes, from its manifest cache and
// local log. Before the stream resolved its manifest it fails with read.ErrUnavailable.
func (n *Node) OpenReader(ctx context.Context, stream string, from read.From) (*read.Reader, error) {
	h, err := n.handle(stream)
	if err != nil {
		return nil, err
	}
	known := func() (manifest.Manifest, bool) {
		if p := h.cache.Load(); p != nil {
			return p.Manifest, true
		}
		return manifest.Manifest{}, false
	}
	return read.Open(ctx, n.ReadSide(stream, h.spec.Log, known), from)
}

// ReadSide is the side of a reader of stream on this node: log and known are the local log
// and the manifest at hand (the writer's cache; a cluster's replica cache on a replica).
func (n *Node) ReadSide(stream string, log *segments.Log, known func() (manifest.Manifest, bool)) read.Side {
	return read.Side{
		Stream: stream, Log: log, Known: known, Metrics: &n.metrics.Read,
		Env: n.remoteEnvFor(read.Env{
			Tier: n.store.Tier(n.cfg.KeyPrefix, stream),
			Log:  n.log.With().Str("stream", stream).Str("component", "read").Logger(),
			Latest: func(context.Context) (manifest.Manifest, int64, error) {
				m, ok := known()
				if !ok {
					return manifest.Manifest{}, 0, read.ErrUnavailable
				}
				return m, 0, nil
			},
		}),
	}
}
