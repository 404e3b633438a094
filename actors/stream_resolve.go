package actors

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/manifest/resolve"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io"
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
			res, deleted, stall, err := resolveManifest(ctx, n, h, stream)
			if stall != nil {
				return &resolvedMsg{Stall: stall}
			}
			lg := h.spec.Log
			opened := readercore.LogOpened{First: lg.FirstOffset(), Next: lg.NextOffset(), Epoch: h.spec.Epoch, Rewritten: h.spec.Rewritten}
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

// metadataStall is a stream stalled because etcd lost its metadata or is behind the bucket
// (resolve.ActionMetadataMissing, resolve.ActionMetadataBehind), or because the node's
// claim changed: nothing is written, drained, retained or collected for it until a
// resolution finds the metadata repaired.
type metadataStall struct {
	Phase  string // "metadata_missing", "metadata_behind" or "claim_changed"
	Reason string // what was found, and the command that repairs it
}

// resolveManifest resolves the stream's persisted manifest in the order of
// remote-format.md ("Resolution, adoption and rollback"): list the roots, read the deletion
// marker, then read etcd linearizably, and let resolve.Decide say what that means. A
// deleted stream is reported in deleted, a stall in stall; nothing is written for either.
func resolveManifest(ctx context.Context, n *Node, h *streamHandle, stream string) (res readercore.Resolved, deleted string, stall *metadataStall, err error) {
	if reason := n.claim.lostReason(); reason != "" {
		return res, "", &metadataStall{Phase: "claim_changed", Reason: reason}, nil
	}
	if p := h.doubt.Load(); p != nil {
		// A persist in doubt is decided before the record is read (manifest.md, "Persist").
		if _, err := settle(ctx, persistDeps{store: n.store, meta: n.meta, stream: stream}, p); err != nil {
			return res, "", nil, fmt.Errorf("resolve %s: settle the persist in doubt (%s): %w", stream, p.key, err)
		}
		h.doubt.CompareAndSwap(p, nil)
	}
	from := h.seenSeq.Load()
	roots, err := listRoots(ctx, n, stream, from)
	if err != nil {
		return res, "", nil, err
	}
	marker, err := n.store.HasMarker(ctx, n.cfg.KeyPrefix, stream)
	if err != nil {
		return res, "", nil, fmt.Errorf("resolve %s: read the deletion marker: %w", stream, err)
	}
	rec, stored, anchor, tomb, read, err := n.meta.ReadForRecovery(ctx, stream)
	if err != nil {
		return res, "", nil, fmt.Errorf("resolve %s: read etcd: %w", stream, err)
	}
	if rec != nil && rec.Seq < from {
		// etcd names a lower seq than this node saw: list the roots between as well (they
		// were made before the etcd read, so they count).
		if roots, err = listRoots(ctx, n, stream, rec.Seq); err != nil {
			return res, "", nil, err
		}
	}
	in := resolve.Input{Marker: marker, Tombstone: tomb, Anchor: anchor, StoredEpoch: stored,
		PersistedBefore: h.seenRevision.Load() > 0, Roots: roots}
	if rec != nil {
		in.Record = &resolve.Record{Seq: rec.Seq, Epoch: rec.Epoch, UID: rec.RootUID}
		if rec.Seq == 0 && read.ManifestVersion < h.seenRevision.Load() {
			return res, fmt.Sprintf("stream %s's manifest record is at revision %d, below revision %d seen before: it was deleted and written again; %s",
				stream, read.ManifestVersion, h.seenRevision.Load(), deletedHint), nil, nil
		}
	}
	objects := map[string]manifest.Manifest{}
	d := resolve.Decide(in)
	for d.Action == resolve.ActionFetch {
		for _, key := range d.Need {
			if err := fetchLineage(ctx, n, key, in.Roots, objects); err != nil {
				return res, "", nil, fmt.Errorf("resolve %s: %w", stream, err)
			}
		}
		d = resolve.Decide(in)
	}
	switch d.Action {
	case resolve.ActionDeleted:
		if d.RestoreTombstone {
			// A marker without an etcd tombstone (a deletion etcd rolled back): complete the
			// deletion in etcd (the tombstone back, the records gone) before stopping.
			if err := n.meta.DeleteStream(ctx, stream); err != nil {
				return res, "", nil, fmt.Errorf("resolve %s: write the tombstone back for the deletion marker: %w", stream, err)
			}
		}
		if tomb {
			if ts, found, err := n.meta.ReadTombstone(ctx, stream); err == nil && found {
				return res, fmt.Sprintf("%v; %s", &metadata.DeletedError{Tombstone: ts}, deletedHint), nil, nil
			}
		}
		return res, fmt.Sprintf("stream %s: %s; %s", stream, d.Reason, deletedHint), nil, nil
	case resolve.ActionMetadataMissing:
		return res, "", &metadataStall{Phase: d.Action.String(), Reason: fmt.Sprintf("stream %s: %s (`node recover %s`)", stream, d.Reason, stream)}, nil
	case resolve.ActionMetadataBehind:
		// Other nodes may hold revisions of the record's newer timeline: the claim's
		// generation must go up before they reconnect, which --after-restore does.
		return res, "", &metadataStall{Phase: d.Action.String(), Reason: fmt.Sprintf("stream %s: %s (stop every node of the cluster, then `node recover --after-restore`, a dry run, and `node recover --yes --after-restore`; docs/operations.md, \"etcd restored from a snapshot\")", stream, d.Reason)}, nil
	case resolve.ActionNew:
		var de *metadata.DeletedError
		if err := n.meta.Anchor(ctx, stream); errors.As(err, &de) {
			return res, fmt.Sprintf("%v; %s", de, deletedHint), nil, nil
		} else if err != nil {
			return res, "", nil, fmt.Errorf("resolve %s: anchor: %w", stream, err)
		}
		// The marker is checked again after the anchor: a deletion between the two is seen.
		if m, err := n.store.HasMarker(ctx, n.cfg.KeyPrefix, stream); err != nil {
			return res, "", nil, fmt.Errorf("resolve %s: read the deletion marker after the anchor: %w", stream, err)
		} else if m {
			return res, fmt.Sprintf("stream %s has a deletion marker; %s", stream, deletedHint), nil, nil
		}
		return readercore.Resolved{Manifest: manifest.Empty(), NextSeq: d.NextSeq}, "", nil, nil
	case resolve.ActionAdopt:
		res, err = adopt(ctx, n, h, stream, d, rec, read.ManifestVersion, objects)
		return res, "", nil, err
	}
	h.noteRevision(read.ManifestVersion)
	res, err = fetchRoot(ctx, n, h, stream, *rec, read.ManifestVersion)
	if err != nil {
		return res, "", nil, err
	}
	res.NextSeq = d.NextSeq
	if d.Upgrade {
		res, err = upgrade(ctx, n, h, stream, res, d.NextSeq)
	}
	return res, "", nil, err
}

// listRoots lists the stream's roots from seq on (every root for 0), as resolve.Roots.
func listRoots(ctx context.Context, n *Node, stream string, seq uint64) ([]resolve.Root, error) {
	after := ""
	if seq > 0 {
		after = manifest.RootsStartAfter(n.cfg.KeyPrefix, stream, seq)
	}
	var roots []resolve.Root
	err := n.store.ListAfter(ctx, manifest.RootsPrefix(n.cfg.KeyPrefix, stream), after, func(o s3io.ObjectInfo) error {
		k, err := manifest.ParseKey(n.cfg.KeyPrefix, o.Key)
		if err != nil || k.Kind != manifest.ObjectRoot {
			return nil // not a root key: not the resolution's to judge
		}
		roots = append(roots, resolve.FromKey(o.Key, k, o.LastModified))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("resolve %s: list roots: %w", stream, err)
	}
	return roots, nil
}

// fetchLineage reads the version 3 root key, checks it against its key and fills its
// lineage into roots; its manifest goes into objects.
func fetchLineage(ctx context.Context, n *Node, key string, roots []resolve.Root, objects map[string]manifest.Manifest) error {
	body, err := n.store.GetObject(ctx, key)
	if err != nil {
		return fmt.Errorf("read root %s: %w", key, err)
	}
	obj, err := manifest.DecodeRootObject(body)
	if err != nil {
		return fmt.Errorf("root %s: %w", key, err)
	}
	for i := range roots {
		if roots[i].Key != key {
			continue
		}
		if err := resolve.CheckRootObject(roots[i], obj); err != nil {
			return err
		}
		roots[i] = roots[i].WithLineage(obj.Lineage)
	}
	objects[key] = obj.Manifest
	return nil
}

// adopt makes the record name d.Root as it is (metadata.PersistRoot with the root's own
// epoch; the stored epoch becomes the higher of the writer's and the root's) and resolves
// it like any record; the root the record named before (prev, nil for none) is replaced.
func adopt(ctx context.Context, n *Node, h *streamHandle, stream string, d resolve.Decision, prev *metadata.ManifestRecord, version int64, objects map[string]manifest.Manifest) (readercore.Resolved, error) {
	m, ok := objects[d.Root.Key]
	if !ok {
		return readercore.Resolved{}, fmt.Errorf("resolve %s: adopt %s: its manifest was not read", stream, d.Root)
	}
	rec := metadata.ManifestRecord{Seq: d.Root.Seq, Epoch: d.Root.Epoch, RootUID: d.Root.UID, FirstOffset: m.FirstOffset,
		NextOffset: m.NextOffset, TotalSize: m.TotalSize, FirstTimestamp: m.FirstTimestamp}
	rev, err := persistAtResolution(ctx, n, h, stream, "adopt "+d.Root.String(), version, rec)
	if err != nil {
		return readercore.Resolved{}, err
	}
	n.metrics.Adoptions.Add(1)
	n.log.Info().Str("stream", stream).Str("root", d.Root.String()).Str("reason", d.Reason).Msg("adopted the record's child root")
	res := readercore.Resolved{Manifest: m, Revision: rev, Root: readercore.RootRef{Seq: d.Root.Seq, Epoch: d.Root.Epoch, UID: d.Root.UID},
		NextSeq: max(d.NextSeq, d.Root.Seq+1)}
	if prev != nil {
		res.Replaced = []readercore.RootRef{{Seq: prev.Seq, Epoch: prev.Epoch, UID: prev.RootUID}}
	}
	return res, nil
}

// upgrade persists a version 3 root of the manifest a version 1 or 2 record names, at once
// (seq next, parent seq 0, parent uid the record's), and resolves it.
func upgrade(ctx context.Context, n *Node, h *streamHandle, stream string, res readercore.Resolved, next uint64) (readercore.Resolved, error) {
	epoch := max(h.spec.Epoch, res.Root.Epoch)
	lin := manifest.Lineage{Seq: next, Epoch: epoch, UID: rand.Uint64() | 1, ParentUID: res.Root.UID}
	key := manifest.SeqRootKey(n.cfg.KeyPrefix, stream, next)
	if err := n.store.PutObjectIfAbsent(ctx, key, manifest.EncodeRootV3(lin, res.Manifest)); err != nil {
		return readercore.Resolved{}, fmt.Errorf("resolve %s: upgrade to a version 3 root %s: %w", stream, key, err)
	}
	m := res.Manifest
	rec := metadata.ManifestRecord{Seq: next, Epoch: epoch, RootUID: lin.UID, FirstOffset: m.FirstOffset,
		NextOffset: m.NextOffset, TotalSize: m.TotalSize, FirstTimestamp: m.FirstTimestamp}
	rev, err := persistAtResolution(ctx, n, h, stream, "upgrade to "+key, res.Revision, rec)
	if err != nil {
		return readercore.Resolved{}, err
	}
	n.metrics.Upgrades.Add(1)
	n.log.Info().Str("stream", stream).Str("root", key).Msg("persisted a version 3 root for a record naming a version 1 or 2 root")
	res.Replaced = append(res.Replaced, res.Root)
	res.Revision, res.Root, res.NextSeq = rev, readercore.RootRef{Seq: next, Epoch: epoch, UID: lin.UID}, next+1
	return res, nil
}

// persistAtResolution writes rec as the stream's record, expecting version; anything but
// persisted is an error (the resolution is retried and decides afresh).
func persistAtResolution(ctx context.Context, n *Node, h *streamHandle, stream, what string, version int64, rec metadata.ManifestRecord) (int64, error) {
	if err := n.claim.err(); err != nil {
		return 0, fmt.Errorf("resolve %s: %s: %w", stream, what, err)
	}
	mr, err := n.meta.PersistRoot(ctx, stream, metadata.RootPersist{WriterEpoch: max(h.spec.Epoch, 1), Expected: version, Record: rec, Cluster: n.claim.opened})
	if err != nil {
		return 0, fmt.Errorf("resolve %s: %s: %w", stream, what, err)
	}
	if mr.Outcome == metadata.RootClusterChanged {
		n.loseClaim(fmt.Sprintf("a resolution of %s found the cluster record changed", stream))
	}
	if mr.Outcome != metadata.RootPersisted {
		return 0, fmt.Errorf("resolve %s: %s: etcd refused (%s, stored epoch %d, record version %d): resolving again", stream, what, mr.Outcome, mr.StoredEpoch, mr.Revision)
	}
	h.noteRevision(mr.Revision)
	h.noteSeq(rec.Seq)
	return mr.Revision, nil
}

// fetchRoot reads the root object a manifest record names (or takes the cache when it names
// the same root: seq and uid for a version 3 root, the revision for older ones) and checks
// it against the record.
func fetchRoot(ctx context.Context, n *Node, h *streamHandle, stream string, rec metadata.ManifestRecord, rev int64) (readercore.Resolved, error) {
	root := readercore.RootRef{Seq: rec.Seq, Epoch: rec.Epoch, UID: rec.RootUID}
	if p := h.cache.Load(); p != nil && ((rec.Seq > 0 && p.Seq == rec.Seq && p.UID == rec.RootUID) || (rec.Seq == 0 && p.Seq == 0 && p.Revision == rev)) {
		h.noteSeq(rec.Seq)
		return readercore.Resolved{Manifest: p.Manifest.Clone(), Revision: rev, Root: root}, nil
	}
	key := rec.RootKey(n.cfg.KeyPrefix, stream)
	body, err := n.store.GetObject(ctx, key)
	if err != nil {
		return readercore.Resolved{}, fmt.Errorf("resolve %s: get root %s: %w", stream, key, err)
	}
	obj, err := manifest.DecodeRootObject(body)
	if err != nil {
		return readercore.Resolved{}, fmt.Errorf("resolve %s: root %s: %w", stream, key, err)
	}
	if rec.Seq > 0 && (obj.Lineage.Seq != rec.Seq || obj.Lineage.UID != rec.RootUID) {
		return readercore.Resolved{}, fmt.Errorf("resolve %s: root %s is seq %d uid %016x, the record names seq %d uid %016x",
			stream, key, obj.Lineage.Seq, obj.Lineage.UID, rec.Seq, rec.RootUID)
	}
	m := obj.Manifest
	if m.NextOffset != rec.NextOffset || m.FirstOffset != rec.FirstOffset || m.TotalSize != rec.TotalSize {
		return readercore.Resolved{}, fmt.Errorf("resolve %s: root %s disagrees with its etcd record (next %d vs %d, first %d vs %d, size %d vs %d)",
			stream, key, m.NextOffset, rec.NextOffset, m.FirstOffset, rec.FirstOffset, m.TotalSize, rec.TotalSize)
	}
	h.noteSeq(rec.Seq)
	return readercore.Resolved{Manifest: m, Revision: rev, Root: root}, nil
}
