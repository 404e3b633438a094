package gc

import (
	"context"
	"fmt"
	"time"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/manifest/resolve"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io"
)

// rootInfo is a root key of the listing.
type rootInfo struct {
	key      string
	k        manifest.ObjectKey
	modified time.Time
}

// checkClaim refuses (ErrClaimMismatch) a key prefix whose claim does not match the
// metadata store's cluster record. A bucket and an etcd that hold neither (no version 3
// node opened the prefix yet) are collected by the rules alone.
func checkClaim(ctx context.Context, o Options) error {
	cluster, _, cfound, err := o.Meta.ReadCluster(ctx)
	if err != nil {
		return fmt.Errorf("gc: %w", err)
	}
	claim, bfound, err := o.Store.ReadClaim(ctx, o.KeyPrefix)
	if err != nil {
		return fmt.Errorf("gc: %w", err)
	}
	if !cfound && !bfound {
		return nil
	}
	f := metadata.ClaimFacts{KeyPrefix: o.KeyPrefix, EtcdPrefix: o.Meta.Prefix()}
	if cfound {
		f.Cluster = &cluster
	}
	if bfound {
		f.Claim = &metadata.BucketClaim{ClusterID: claim.ClusterID, Generation: claim.Generation, EtcdPrefix: claim.EtcdPrefix, Created: claim.Created}
	}
	if d := metadata.CheckClaim(f); d.Action != metadata.ClaimOpen {
		return fmt.Errorf("gc: %w: nothing is collected: %s", ErrClaimMismatch, d.Reason)
	}
	return nil
}

// examineLineage places the stream's roots with the resolution rules (resolve.Decide): the
// version 3 roots above the record's seq are read; a fenced writer's stray is garbage, a
// child of the record (a persist in flight, or one etcd lost) is kept with everything it
// references, and a lineage etcd is behind of, or lost, stalls the stream (nothing of it
// is collected until `node recover`).
func examineLineage(ctx context.Context, o Options, st *StreamState, index *manifest.KeyIndex, roots []rootInfo) error {
	if len(roots) == 0 {
		return nil
	}
	var n uint64
	in := resolve.Input{Anchor: st.Anchored, Tombstone: st.Tombstone, StoredEpoch: st.Epoch}
	if st.Recorded {
		n = st.Record.Seq
		in.Record = &resolve.Record{Seq: st.Record.Seq, Epoch: st.Record.Epoch, UID: st.Record.RootUID}
	}
	manifests := map[string]manifest.Manifest{}
	for _, ri := range roots {
		r := resolve.FromKey(ri.key, ri.k, ri.modified)
		if r.Version >= 3 && r.Seq > n {
			body, err := o.Store.GetObject(ctx, ri.key)
			if s3io.IsNotFound(err) {
				continue // gone since the listing (collected, or a test's doing): not a root any more
			}
			if err != nil {
				return fmt.Errorf("root %s above the record: %w", ri.key, err)
			}
			obj, err := manifest.DecodeRootObject(body)
			if err != nil {
				return fmt.Errorf("root %s above the record: %w", ri.key, err)
			}
			if err := resolve.CheckRootObject(r, obj); err != nil {
				return err
			}
			r = r.WithLineage(obj.Lineage)
			manifests[ri.key] = obj.Manifest
		}
		in.Roots = append(in.Roots, r)
	}
	d := resolve.Decide(in)
	for _, s := range d.Strays {
		if st.Strays == nil {
			st.Strays = map[string]string{}
		}
		st.Strays[s.Root.Key] = fmt.Sprintf("a fenced writer's stray root (seq %d, epoch %d: %s)", s.Root.Seq, s.Root.Epoch, s.Why)
	}
	switch {
	case d.Action.Stalled():
		st.Stall = "stalled: " + d.Reason
	case d.Action == resolve.ActionAdopt:
		why := fmt.Sprintf("version 3 root of seq %d above the record (a persist in flight, or a child etcd lost)", d.Root.Seq)
		st.Kept = map[string]string{d.Root.Key: why}
		refs := map[string]bool{}
		if err := walkReferences(ctx, o.Store, o.KeyPrefix, st.Stream, manifests[d.Root.Key], index, refs); err != nil {
			return fmt.Errorf("root %s above the record: %w", d.Root.Key, err)
		}
		for k := range refs {
			if !st.Referenced[k] {
				st.Kept[k] = "referenced by the root of seq " + fmt.Sprint(d.Root.Seq) + " above the record"
			}
		}
	case d.Action == resolve.ActionFetch:
		return fmt.Errorf("roots above the record not read: %v", d.Need)
	}
	return nil
}
