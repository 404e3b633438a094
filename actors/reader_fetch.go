package actors

import (
	"context"
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/manifest"
)

// The reader's group downloads: for remote retention, and to look up the leaves of offsets
// inside group objects (a gap the core never saw may be sealed there).

// groupChildren downloads the group object e of stream names and returns its entries. It
// runs in a task: it reads only the node's immutable parts.
func groupChildren(ctx context.Context, n *Node, stream string, e manifest.Entry) ([]manifest.Entry, error) {
	return n.store.Tier(n.cfg.KeyPrefix, stream).Children(ctx, e)
}

func (r *reader) fetchGroup(c actor.Context, e readercore.FetchGroupForRetention) {
	n, stream, clk := r.n, r.h.spec.ID, r.n.cfg.clock
	r.spawnTask(c, shell.TaskSpec{Name: "retention fetch", Timeout: e.Timeout, Run: func(ctx context.Context) any {
		children, err := groupChildren(ctx, n, stream, e.Group)
		if err == nil {
			return readercore.RetentionGroupFetched{Ref: e.Ref, Children: children, Now: clk.Now().UnixMilli()}
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return readercore.RetentionTimeout{Ref: e.Ref}
		}
		return readercore.RetentionGroupFailed{Ref: e.Ref, Reason: fmt.Sprintf("fetch %s group at %d: %v", stream, e.Group.FirstOffset, err)}
	}, Failed: func(reason string) any {
		return readercore.RetentionGroupFailed{Ref: e.Ref, Reason: fmt.Sprintf("fetch %s group at %d: %s", stream, e.Group.FirstOffset, reason)}
	}})
}

// lookUpLeaves finds the leaf of the persisted tree holding each offset the core asked
// about (a fragment, or a gap sealed in a group object), one group download per level.
func (r *reader) lookUpLeaves(c actor.Context, e readercore.LookUpLeaves) {
	n, stream := r.n, r.h.spec.ID
	r.spawnTask(c, shell.TaskSpec{Name: "leaf lookup", Timeout: e.Timeout, Run: func(ctx context.Context) any {
		fetch := func(g manifest.Entry) ([]manifest.Entry, error) { return groupChildren(ctx, n, stream, g) }
		res := readercore.LeavesLookedUp{Ref: e.Ref}
		for _, o := range e.Offsets {
			ref, err := manifest.LookupOffset(e.Manifest, o, fetch)
			if err != nil {
				return readercore.LeavesLookedUp{Ref: e.Ref, Reason: fmt.Sprintf("look up offset %d of %s: %v", o, stream, err)}
			}
			res.Leaves = append(res.Leaves, readercore.Leaf{From: ref.Entry.FirstOffset, To: ref.End, Gap: ref.Gap})
		}
		return res
	}, Failed: func(reason string) any {
		return readercore.LeavesLookedUp{Ref: e.Ref, Reason: fmt.Sprintf("look up offsets of %s: %s", stream, reason)}
	}})
}
