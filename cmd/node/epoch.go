package main

import (
	"context"
	"fmt"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/nodeconfig"
	"github.com/streamtier/streamtier/segments"
)

// epochReader reads the epoch etcd stores for a stream, the highest epoch that persisted
// (metadata.Store.ReadEpoch); found is false when none is stored.
type epochReader interface {
	ReadEpoch(ctx context.Context, stream string) (epoch uint64, found bool, err error)
}

// openingEpoch is the epoch a stream opens at and the three it was taken from.
type openingEpoch struct {
	Epoch      uint64 // the highest of the three, at least 1
	Configured uint64 // the stream's `epoch:` setting
	Log        uint64 // the epoch of the local log's last chunk (0 for an empty log)
	Stored     uint64 // the epoch etcd stores for the stream (0 when none)
}

// raisedByStored reports whether the stored epoch is above both the setting and the log's:
// the broker truncated the higher-epoch tail the node had persisted at.
func (o openingEpoch) raisedByStored() bool { return o.Stored > max(o.Configured, o.Log) }

// streamEpoch is the epoch a single-node process opens a stream at: the highest of the
// configured epoch, the epoch of the log's last chunk, the epoch etcd stores for the stream,
// and 1. The node is then the stream's only writer, so resuming at the stored epoch fences
// nobody; opening below it would have every persist refused and the stream stopped for good
// as deposed, with no other writer anywhere. That happened when the broker truncated a
// higher-epoch tail the node had persisted at (a replica cutting a deposed leader's suffix,
// as osiris and every Raft-style log do) and the node reopened on the shorter log. A stored
// epoch that cannot be read is an error: the stream is not opened (the caller retries)
// rather than opened at an epoch that may be fenced. Not for cluster mode, where the
// placement's epoch rules.
func streamEpoch(ctx context.Context, meta epochReader, stream string, configured, logEpoch uint64) (openingEpoch, error) {
	stored, _, err := meta.ReadEpoch(ctx, stream)
	if err != nil {
		return openingEpoch{}, fmt.Errorf("stream %s: read the epoch etcd stores (a stream never opens below it): %w", stream, err)
	}
	o := openingEpoch{Configured: configured, Log: logEpoch, Stored: stored}
	o.Epoch = max(configured, logEpoch, stored, 1)
	return o, nil
}

// openSpec is streamSpec at the epoch streamEpoch gives (single-node mode): what the node
// tiers of a declared stream whose log is lg, opened now. It logs when the stored epoch
// raised the epoch above the setting and the log's.
func (p *process) openSpec(ctx context.Context, st nodeconfig.StreamSettings, lg *segments.Log) (actors.StreamSpec, error) {
	spec := p.streamSpec(st, lg)
	o, err := streamEpoch(ctx, p.b.Meta, st.ID, st.Epoch, lg.Epoch())
	if err != nil {
		return actors.StreamSpec{}, err
	}
	if o.raisedByStored() {
		p.log.Info().Str("stream", st.ID).Uint64("epoch", o.Epoch).Uint64("configured_epoch", o.Configured).Uint64("log_epoch", o.Log).
			Msg("opening the stream at the epoch etcd stores for it: the log's last chunk is of a lower epoch (its higher-epoch tail was truncated)")
	}
	spec.Epoch = o.Epoch
	return spec, nil
}
