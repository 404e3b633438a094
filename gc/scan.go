package gc

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io"
)

// Options say where and what to collect.
type Options struct {
	Store     *s3io.Store
	Meta      *metadata.Store
	KeyPrefix string // default manifest.DefaultKeyPrefix
	Stream    string // only this stream's prefix; empty for every stream under KeyPrefix
	Grace     time.Duration
	// Now, when set, replaces the object store's clock (tests age objects with it); by
	// default ages are measured on the store's clock (s3io.Store.ServerTime).
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.KeyPrefix == "" {
		o.KeyPrefix = manifest.DefaultKeyPrefix
	}
	return o
}

// now is the time ages are measured at: the store's clock unless Now replaces it.
func (o Options) now(ctx context.Context) (time.Time, error) {
	if o.Now != nil {
		return o.Now(), nil
	}
	t, err := o.Store.ServerTime(ctx, o.KeyPrefix+"/")
	if err != nil {
		return time.Time{}, fmt.Errorf("gc: the object store's clock: %w", err)
	}
	return t, nil
}

// Scan checks the key prefix's claim, lists the objects under the key prefix (or one
// stream's prefix), reads every stream's anchor, tombstone, persisted manifest and the
// roots above it, and decides which objects are garbage. It deletes nothing. An error means
// gc could not run at all (a claim that does not match: ErrClaimMismatch; S3 listing or
// etcd failing; unknown stream); a stream whose manifest cannot be read is reported in the
// plan as Undecided, with all its objects kept.
func Scan(ctx context.Context, o Options) (Plan, error) {
	o = o.withDefaults()
	if o.Store == nil || o.Meta == nil {
		return Plan{}, errors.New("gc: an object store and a metadata store are required")
	}
	if err := checkClaim(ctx, o); err != nil {
		return Plan{}, err
	}
	prefix := o.KeyPrefix + "/"
	if o.Stream != "" {
		if err := manifest.ValidateStreamID(o.Stream); err != nil {
			return Plan{}, fmt.Errorf("gc: %w", err)
		}
		prefix = manifest.StreamPrefix(o.KeyPrefix, o.Stream)
	}
	var objects []s3io.ObjectInfo
	if err := o.Store.List(ctx, prefix, func(oi s3io.ObjectInfo) error {
		objects = append(objects, oi)
		return nil
	}); err != nil {
		return Plan{}, fmt.Errorf("gc: %w", err)
	}
	streams := map[string]bool{}
	index := manifest.NewKeyIndex(o.KeyPrefix)
	roots := map[string][]rootInfo{}
	for _, oi := range objects {
		if k, err := index.Add(oi.Key); err == nil {
			streams[k.Stream] = true
			if k.Kind == manifest.ObjectRoot {
				roots[k.Stream] = append(roots[k.Stream], rootInfo{key: oi.Key, k: k, modified: oi.LastModified})
			}
		}
	}
	if o.Stream != "" && !streams[o.Stream] {
		st, err := examine(ctx, o, o.Stream, index, nil)
		if err != nil {
			return Plan{}, err
		}
		if !st.Anchored && !st.Recorded && !st.Tombstone {
			return Plan{}, fmt.Errorf("gc: stream %q: %w (no objects under %s and no records in etcd)", o.Stream, ErrUnknownStream, prefix)
		}
	}
	states := make(map[string]StreamState, len(streams))
	for _, id := range sortedKeys(streams) {
		st, err := examine(ctx, o, id, index, roots[id])
		if err != nil {
			return Plan{}, err
		}
		states[id] = st
	}
	now, err := o.now(ctx)
	if err != nil {
		return Plan{}, err
	}
	return Decide(objects, o.KeyPrefix, states, now, o.Grace), nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// examine reads one stream's record, stored epoch and anchor from etcd (an etcd failure is
// returned: gc cannot decide anything without it) and the references of its persisted
// manifest from S3, finding each entry's key in index, the listing (a failure there, or a
// corrupt record or epoch, is the stream's Err).
//
// The record is read before the epoch: a persist in between makes the epoch newer than the
// record, never older, and a newer stored epoch only fences writers that are fenced indeed.
func examine(ctx context.Context, o Options, stream string, index *manifest.KeyIndex, roots []rootInfo) (StreamState, error) {
	// A live writer persists on: the root the record named may be gone (the reaper deletes
	// a replaced root) by the time it is read. Then the record has moved on; read it again.
	for attempt := 1; ; attempt++ {
		st, err := examineOnce(ctx, o, stream, index, roots)
		if err != nil || st.Err == nil || !s3io.IsNotFound(st.Err) || attempt == 5 {
			return st, err
		}
		_, rev, _, rerr := o.Meta.ReadManifest(ctx, stream)
		if rerr != nil || rev == st.Revision {
			return st, nil // not a newer persist: the referenced object is missing indeed
		}
	}
}

func examineOnce(ctx context.Context, o Options, stream string, index *manifest.KeyIndex, roots []rootInfo) (StreamState, error) {
	st := StreamState{Stream: stream}
	rec, rev, found, recErr := o.Meta.ReadManifest(ctx, stream)
	if recErr != nil && !errors.Is(recErr, metadata.ErrCorruptRecord) {
		return st, fmt.Errorf("gc: %w", recErr)
	}
	var err error
	if st.Anchored, err = o.Meta.HasAnchor(ctx, stream, true); err != nil {
		return st, fmt.Errorf("gc: %w", err)
	}
	_, st.Tombstone, err = o.Meta.ReadTombstone(ctx, stream)
	switch {
	case errors.Is(err, metadata.ErrCorruptRecord):
		st.Tombstone = true // an unreadable tombstone still says deleted
	case err != nil:
		return st, fmt.Errorf("gc: %w", err)
	}
	if recErr != nil {
		st.Err = recErr
		return st, nil
	}
	epoch, _, err := o.Meta.ReadEpoch(ctx, stream)
	switch {
	case errors.Is(err, metadata.ErrCorruptRecord):
		st.Err = err
		return st, nil
	case err != nil:
		return st, fmt.Errorf("gc: %w", err)
	}
	st.Recorded, st.Record, st.Revision, st.Epoch = found, rec, rev, epoch
	if st.Tombstone || !st.Anchored {
		return st, nil // deleted, or unclaimed: nothing to read
	}
	if found {
		refs, err := references(ctx, o.Store, o.KeyPrefix, stream, rec, index)
		if err != nil {
			st.Err = err
			return st, nil
		}
		st.Referenced = refs
	}
	if err := examineLineage(ctx, o, &st, index, roots); err != nil {
		st.Err = err
	}
	return st, nil
}

// References reads the root object the record names and every group holding live
// offsets, checking each (codec CRCs, the root against the record, each group against its
// entry), and returns the keys the persisted manifest references: the root, those groups
// and the live fragments. It lists the stream's prefix once to find the entries' keys (of
// either layout). Any inconsistency, or a referenced object that is missing, is an error
// naming the object.
func References(ctx context.Context, store *s3io.Store, keyPrefix, stream string, rec metadata.ManifestRecord) (map[string]bool, error) {
	index := manifest.NewKeyIndex(keyPrefix)
	prefix := manifest.StreamPrefix(keyPrefix, stream)
	if err := store.List(ctx, prefix, func(oi s3io.ObjectInfo) error {
		index.Add(oi.Key) // a foreign key is simply not indexed
		return nil
	}); err != nil {
		return nil, err
	}
	return references(ctx, store, keyPrefix, stream, rec, index)
}

func references(ctx context.Context, store *s3io.Store, keyPrefix, stream string, rec metadata.ManifestRecord, index *manifest.KeyIndex) (map[string]bool, error) {
	rootKey := rec.RootKey(keyPrefix, stream)
	body, err := store.GetObject(ctx, rootKey)
	if err != nil {
		return nil, fmt.Errorf("root %s named by the manifest record: %w", rootKey, err)
	}
	root, err := manifest.DecodeRootObject(body)
	if err != nil {
		return nil, fmt.Errorf("root %s: %w", rootKey, err)
	}
	if rec.Seq > 0 && (root.Version < 3 || root.Lineage.Seq != rec.Seq || root.Lineage.UID != rec.RootUID) {
		return nil, fmt.Errorf("root %s is %v (version %d), the manifest record names seq %d uid %016x", rootKey, root.Lineage, root.Version, rec.Seq, rec.RootUID)
	}
	m := root.Manifest
	if m.FirstOffset != rec.FirstOffset || m.NextOffset != rec.NextOffset || m.TotalSize != rec.TotalSize || m.FirstTimestamp != rec.FirstTimestamp {
		return nil, fmt.Errorf("root %s disagrees with its etcd record: root [%d,%d) size %d, record [%d,%d) size %d",
			rootKey, m.FirstOffset, m.NextOffset, m.TotalSize, rec.FirstOffset, rec.NextOffset, rec.TotalSize)
	}
	refs := map[string]bool{rootKey: true}
	if err := walkReferences(ctx, store, keyPrefix, stream, m, index, refs); err != nil {
		return nil, err
	}
	return refs, nil
}

// walkReferences adds to refs the key of every group holding live offsets of m and every
// live fragment, checking each group (codec CRC, against its entry).
func walkReferences(ctx context.Context, store *s3io.Store, keyPrefix, stream string, m manifest.Manifest, index *manifest.KeyIndex, refs map[string]bool) error {
	var walk func(entries []manifest.Entry, end uint64, depth int) error
	walk = func(entries []manifest.Entry, end uint64, depth int) error {
		for i, e := range entries {
			eEnd := end
			if i+1 < len(entries) {
				eEnd = entries[i+1].FirstOffset
			}
			if eEnd <= m.FirstOffset {
				continue // wholly below the first offset: dropped by retention
			}
			if e.IsGap() {
				continue // names no object
			}
			key, ok := index.Lookup(stream, e)
			if !ok {
				// Not in the listing: uploaded after it (a writer persisted meanwhile) or
				// missing. Look again, for this entry alone.
				var err error
				if key, err = store.LocateEntry(ctx, keyPrefix, stream, e); err != nil {
					return fmt.Errorf("%s referenced by the manifest: %w", e.Kind, err)
				}
			}
			refs[key] = true
			if e.Kind == manifest.KindFragment {
				continue
			}
			if depth > 4 {
				return fmt.Errorf("%s: tree deeper than 4 levels", key)
			}
			b, err := store.GetObject(ctx, key)
			if err != nil {
				return fmt.Errorf("%s referenced by the manifest: %w", key, err)
			}
			_, children, err := manifest.DecodeGroup(b)
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			if err := manifest.CheckGroup(e, children); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			if err := walk(children, eEnd, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(m.Entries, m.NextOffset, 1)
}

// DeleteResult is what Delete did.
type DeleteResult struct {
	Deleted []string          `json:"deleted"`
	Failed  map[string]string `json:"failed,omitempty"` // key -> why the server refused it
	// Skipped are orphans of streams whose manifest changed since the plan was made: run
	// gc again to decide them afresh.
	Skipped []Orphan `json:"skipped,omitempty"`
}

// Delete deletes the plan's orphans. It refuses a grace period below MinDeleteGrace and a
// key prefix whose claim does not match (checked again). Just before deleting, it reads
// each affected stream's record again and skips the orphans of any stream whose manifest
// revision changed since Scan (a writer persisted meanwhile: the plan may be stale for it).
func Delete(ctx context.Context, o Options, p Plan) (DeleteResult, error) {
	o = o.withDefaults()
	if o.Grace < MinDeleteGrace || p.Grace < MinDeleteGrace {
		return DeleteResult{}, fmt.Errorf("gc delete: grace period %v (the plan's %v) is below %v: a root could be collected between its PUT and the etcd write that names it; refused", o.Grace, p.Grace, MinDeleteGrace)
	}
	if err := checkClaim(ctx, o); err != nil {
		return DeleteResult{}, err
	}
	var res DeleteResult
	byStream := map[string][]Orphan{}
	for _, or := range p.Orphans {
		byStream[or.Stream] = append(byStream[or.Stream], or)
	}
	var keys []string
	for _, stream := range sortedStreams(byStream) {
		orphans := byStream[stream]
		_, rev, found, err := o.Meta.ReadManifest(ctx, stream)
		if err != nil {
			return res, fmt.Errorf("gc delete: %w", err)
		}
		if !found {
			rev = 0
		}
		if rev != p.Revisions[stream] {
			res.Skipped = append(res.Skipped, orphans...)
			continue
		}
		for _, or := range orphans {
			keys = append(keys, or.Key)
		}
	}
	if len(keys) == 0 {
		return res, nil
	}
	failed, err := o.Store.DeleteObjects(ctx, keys)
	if err != nil {
		return res, fmt.Errorf("gc delete: %w", err)
	}
	for _, k := range keys {
		if ferr, bad := failed[k]; bad {
			if res.Failed == nil {
				res.Failed = map[string]string{}
			}
			res.Failed[k] = ferr.Error()
			continue
		}
		res.Deleted = append(res.Deleted, k)
	}
	return res, nil
}

func sortedStreams(m map[string][]Orphan) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
