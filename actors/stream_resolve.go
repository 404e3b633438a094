package actors

import (
	"context"
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
)

// The reader's resolution of the persisted manifest (docs/actors.md, "Resolution"): run as
// a task, its result comes back as resolvedMsg (reader.onResolved).

// resolve reads the manifest record and the tombstone from etcd and the root the record
// names from S3 (or the cache when its revision matches); see resolveManifest.
func (r *reader) resolve(c actor.Context) {
	stream := r.h.spec.ID
	n, h := r.n, r.h
	r.spawnTask(c, shell.TaskSpec{Name: "resolution", Timeout: n.cfg.ResolveTimeout,
		Run: func(ctx context.Context) any {
			res, deleted, err := resolveManifest(ctx, n, h, stream)
			lg := h.spec.Log
			opened := readercore.LogOpened{First: lg.FirstOffset(), Next: lg.NextOffset(), Epoch: h.spec.Epoch}
			if err == nil && deleted == "" {
				res.Comparison, err = compareWithLocal(ctx, n, stream, h.spec.Epoch, lg, res.Manifest, opened.First, opened.Next)
				if err != nil {
					err = fmt.Errorf("resolve %s: %w", stream, err)
				}
			}
			return &resolvedMsg{Resolved: res, Log: opened, Deleted: deleted, Err: err}
		},
		Failed: func(reason string) any { return &resolvedMsg{Err: fmt.Errorf("resolve %s: %s", stream, reason)} },
	})
}

// deletedHint ends the reason a deleted stream's reader gives: what its operator can do.
const deletedHint = "remove it from the configuration or use a new stream id"

// resolveManifest resolves the stream's persisted manifest. A stream that was deleted is
// reported in deleted (the reason) and nothing is written: its tombstone says so, or it has
// no record (or a lower revision) though this node saw it persisted. Only a stream with no
// record, no tombstone and no memory of a persist is new: it is anchored, so that the
// anchor precedes every object (Anchor refuses a stream deleted meanwhile).
func resolveManifest(ctx context.Context, n *Node, h *streamHandle, stream string) (res readercore.Resolved, deleted string, err error) {
	var de *metadata.DeletedError
	rec, rev, found, err := n.meta.ReadForResolution(ctx, stream)
	if errors.As(err, &de) {
		return readercore.Resolved{}, fmt.Sprintf("%v; %s", de, deletedHint), nil
	}
	if err != nil {
		return readercore.Resolved{}, "", fmt.Errorf("resolve %s: read manifest record: %w", stream, err)
	}
	seen := h.seenRevision.Load()
	switch {
	case !found && seen > 0:
		return readercore.Resolved{}, fmt.Sprintf("stream %s has no manifest record though it persisted revision %d: it was deleted; %s", stream, seen, deletedHint), nil
	case found && rev < seen:
		return readercore.Resolved{}, fmt.Sprintf("stream %s's manifest record is at revision %d, below revision %d seen before: it was deleted and written again; %s", stream, rev, seen, deletedHint), nil
	case !found:
		if err := n.meta.Anchor(ctx, stream); errors.As(err, &de) {
			return readercore.Resolved{}, fmt.Sprintf("%v; %s", de, deletedHint), nil
		} else if err != nil {
			return readercore.Resolved{}, "", fmt.Errorf("resolve %s: anchor: %w", stream, err)
		}
		return readercore.Resolved{Manifest: manifest.Empty()}, "", nil
	}
	h.noteRevision(rev)
	m, err := fetchRoot(ctx, n, h, stream, rec, rev)
	return m, "", err
}

// fetchRoot reads the root object a manifest record names (or takes the cache when its
// revision matches) and checks it against the record.
func fetchRoot(ctx context.Context, n *Node, h *streamHandle, stream string, rec metadata.ManifestRecord, rev int64) (readercore.Resolved, error) {
	root := readercore.RootRef{Epoch: rec.Epoch, UID: rec.RootUID}
	if p := h.cache.Load(); p != nil && p.Revision == rev {
		return readercore.Resolved{Manifest: p.Manifest.Clone(), Revision: rev, Root: root}, nil
	}
	key := manifest.RootKey(n.cfg.KeyPrefix, stream, rec.Epoch, rec.RootUID)
	body, err := n.store.GetObject(ctx, key)
	if err != nil {
		return readercore.Resolved{}, fmt.Errorf("resolve %s: get root %s: %w", stream, key, err)
	}
	m, err := manifest.DecodeRoot(body)
	if err != nil {
		return readercore.Resolved{}, fmt.Errorf("resolve %s: root %s: %w", stream, key, err)
	}
	if m.NextOffset != rec.NextOffset || m.FirstOffset != rec.FirstOffset || m.TotalSize != rec.TotalSize {
		return readercore.Resolved{}, fmt.Errorf("resolve %s: root %s disagrees with its etcd record (next %d vs %d, first %d vs %d, size %d vs %d)",
			stream, key, m.NextOffset, rec.NextOffset, m.FirstOffset, rec.FirstOffset, m.TotalSize, rec.TotalSize)
	}
	return readercore.Resolved{Manifest: m, Revision: rev, Root: root}, nil
}
