package resolve

import "fmt"

// Record is the root a manifest record names: (Seq, UID) for record version 2, (Epoch,
// UID) with Seq 0 for record version 1.
type Record struct {
	Seq, Epoch, UID uint64
}

// Input is what one resolution found, in the spec's order: the listing of the stream's
// roots (from the record's seq on), the deletion marker, then a linearizable read of etcd.
type Input struct {
	Marker    bool // the stream's deletion marker is in the bucket
	Tombstone bool // etcd holds the stream's tombstone
	Anchor    bool
	Record    *Record // nil: no manifest record
	// StoredEpoch is etcd's stored epoch (0 when none).
	StoredEpoch uint64
	// PersistedBefore says this writer saw the stream's record before (it resolved or
	// persisted it): a missing record is then lost metadata, never a new stream.
	PersistedBefore bool
	// Roots were listed before the etcd read (a root PUT after it may be a live writer's
	// next persist and does not count). Version 3 roots above the record's seq must be
	// read (Known) before Decide can place them: it asks for them (ActionFetch).
	Roots []Root
}

// Action is what a resolution does.
type Action int

// Actions of Decide.
const (
	// ActionFetch: read the version 3 roots in Decision.Need, then decide again.
	ActionFetch Action = iota + 1
	// ActionDeleted: stop for good and write nothing (but the etcd tombstone, when the
	// marker is there and it is not: Decision.RestoreTombstone).
	ActionDeleted
	// ActionNew: a stream that never persisted: write the anchor (if absent), start empty.
	ActionNew
	// ActionResolve: GET the record's root and compare it with the local log. When the
	// record names a version 1 or 2 root, Decision.Upgrade asks for a version 3 root at once.
	ActionResolve
	// ActionAdopt: one persist transaction naming Decision.Root as it is (stored epoch =
	// the higher of the writer's and the root's; a writer below it stops as deposed), then
	// resolve it like any record; before anything is drained, answered, gapped or deleted.
	ActionAdopt
	// ActionMetadataMissing: etcd lost the stream (no record or no anchor, but roots; or a
	// record missing after an earlier success): stall, write nothing, name `node recover`.
	ActionMetadataMissing
	// ActionMetadataBehind: the bucket holds a lineage above the record that adoption does
	// not explain (etcd went back in time, or roots the rules cannot order): stall, write
	// nothing, name both roots and `node recover`.
	ActionMetadataBehind
)

// String names the action as status and metrics show the phase it leads to.
func (a Action) String() string {
	switch a {
	case ActionFetch:
		return "fetch"
	case ActionDeleted:
		return "deleted"
	case ActionNew:
		return "new"
	case ActionResolve:
		return "resolve"
	case ActionAdopt:
		return "adopt"
	case ActionMetadataMissing:
		return "metadata_missing"
	case ActionMetadataBehind:
		return "metadata_behind"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Stalled reports whether the action stalls the stream until an operator repairs etcd.
func (a Action) Stalled() bool { return a == ActionMetadataMissing || a == ActionMetadataBehind }

// Decision is what a resolution does, and why.
type Decision struct {
	Action Action
	// Root is the root to adopt (ActionAdopt), or the bucket's newest root that is not a
	// stray (the stalls, when there is one).
	Root Root
	Need []string // ActionFetch: keys of version 3 roots to read
	// Strays are the roots above the record skipped as fenced writers' strays (garbage).
	Strays []Stray
	// NextSeq is the seq the writer's next root takes: one above the record's and every
	// version 3 seq listed (a seq a stray took is skipped).
	NextSeq uint64
	// Upgrade: the record names a version 1 or 2 root: persist a version 3 root of the same
	// manifest at once (seq NextSeq, parent seq 0, parent uid the record's).
	Upgrade bool
	// RecordRootUnlisted: the listing does not hold the root the record names (its GET will
	// fail: retried and reported, never "empty").
	RecordRootUnlisted bool
	// RestoreTombstone: a marker without an etcd tombstone: write the tombstone back.
	RestoreTombstone bool
	// Reason is one line for the log and status, naming what was found and, for a stall,
	// the command that repairs it.
	Reason string
}

// Decide is the resolution decision of remote-format.md ("Resolution, adoption and
// rollback") and manifest.md ("Resolution"), from what the shell found (see Input).
func Decide(in Input) Decision {
	d := Decision{NextSeq: nextSeq(in)}
	if in.Marker || in.Tombstone {
		d.Action, d.RestoreTombstone = ActionDeleted, in.Marker && !in.Tombstone
		d.Reason = "the stream was deleted (" + deletedBy(in) + "): stop for good, write nothing"
		return d
	}
	var n, uid uint64 // the record's root: (0, 0) for none
	if in.Record != nil {
		n, uid = in.Record.Seq, in.Record.UID
	}
	if need := unknown(in.Roots, func(r Root) bool { return r.Seq > n }); len(need) > 0 {
		d.Action, d.Need = ActionFetch, need
		return d
	}
	newest, hasNewest := newestRoot(in.Roots)
	switch {
	case in.Record == nil && in.PersistedBefore:
		return missing(d, newest, hasNewest, "the manifest record is gone after this writer saw it, and no tombstone or marker says the stream was deleted")
	case in.Record == nil && !hasNewest:
		d.Action, d.Reason = ActionNew, "no record, no root: a new stream"
		return d
	case in.Record == nil && !in.Anchor:
		return missing(d, newest, hasNewest, "no anchor and no manifest record, but the bucket holds roots")
	case in.Record != nil && !in.Anchor:
		return missing(d, newest, hasNewest, "a manifest record without its anchor")
	case in.Record == nil && !hasV3(in.Roots):
		return missing(d, newest, hasNewest, "an anchor and version 1 or 2 roots but no manifest record (a lost record cannot be told from a root that never persisted)")
	}
	v := newLineageView(in.Roots)
	proven := v.provenEpoch(in.StoredEpoch)
	var children, others []Root
	for i, r := range in.Roots {
		if r.Version < 3 || r.Seq <= n {
			continue
		}
		if s, why := v.stray(i, proven); s {
			d.Strays = append(d.Strays, Stray{Root: r, Why: why})
			continue
		}
		if r.IsChildOf(n, uid) {
			children = append(children, r)
		} else {
			others = append(others, r)
		}
	}
	if in.Record != nil {
		d.RecordRootUnlisted = !listsRecordRoot(in.Roots, *in.Record)
	}
	rec := "no record"
	if in.Record != nil {
		rec = fmt.Sprintf("the record names seq %d uid %016x", n, uid)
	}
	switch {
	case len(children) == 1 && len(others) == 0:
		d.Action, d.Root = ActionAdopt, children[0]
		d.Reason = fmt.Sprintf("%s; the bucket holds its child %s: a persist that never reached etcd, or whose record etcd lost: adopt it", rec, children[0])
		return d
	case len(children)+len(others) > 0:
		d.Action, d.Root = ActionMetadataBehind, newest
		d.Reason = fmt.Sprintf("%s, but the bucket holds a newer lineage up to %s (etcd went back in time, e.g. restored from an older snapshot): nothing is written for this stream; repair with `node recover --after-restore`", rec, newest)
		if len(children) > 1 {
			d.Reason = fmt.Sprintf("%s, but the bucket holds %d children of it that are not fenced strays (%s): nothing is written for this stream; repair with `node recover`", rec, len(children), rootList(children))
		}
		return d
	case in.Record == nil:
		// An anchor and only strays: no root can be adopted, yet the bucket holds roots.
		return missing(d, newest, hasNewest, "an anchor and roots but no manifest record, and no root to adopt")
	}
	d.Action = ActionResolve
	d.Upgrade = in.Record.Seq == 0
	d.Reason = rec + ": resolve it"
	if d.Upgrade {
		d.Reason += "; it is a version 1 or 2 root: persist a version 3 root of it at once"
	}
	return d
}

func missing(d Decision, newest Root, hasNewest bool, what string) Decision {
	d.Action = ActionMetadataMissing
	d.Reason = "etcd lost the stream's metadata: " + what
	if hasNewest {
		d.Root = newest
		d.Reason += "; the bucket's newest root is " + newest.String()
	}
	d.Reason += "; nothing is written for this stream; repair with `node recover`"
	return d
}

func deletedBy(in Input) string {
	switch {
	case in.Marker && in.Tombstone:
		return "deletion marker and etcd tombstone"
	case in.Marker:
		return "deletion marker in the bucket, no etcd tombstone"
	}
	return "etcd tombstone"
}

// nextSeq is one above the record's seq and every version 3 seq listed.
func nextSeq(in Input) uint64 {
	var top uint64
	if in.Record != nil {
		top = in.Record.Seq
	}
	for _, r := range in.Roots {
		if r.Version >= 3 {
			top = max(top, r.Seq)
		}
	}
	return top + 1
}

// newestRoot is the version 3 root of the highest seq, or else a version 2 root of the
// highest epoch; false when there is no root.
func newestRoot(roots []Root) (Root, bool) {
	var best Root
	found := false
	for _, r := range roots {
		switch {
		case !found:
			best, found = r, true
		case r.Version >= 3 && (best.Version < 3 || r.Seq > best.Seq):
			best = r
		case r.Version < 3 && best.Version < 3 && r.Epoch > best.Epoch:
			best = r
		}
	}
	return best, found
}

func hasV3(roots []Root) bool {
	for _, r := range roots {
		if r.Version >= 3 {
			return true
		}
	}
	return false
}

// listsRecordRoot reports whether roots hold the root rec names.
func listsRecordRoot(roots []Root, rec Record) bool {
	for _, r := range roots {
		if rec.Seq > 0 && r.Version >= 3 && r.Seq == rec.Seq {
			return true
		}
		if rec.Seq == 0 && r.Version < 3 && r.Epoch == rec.Epoch && r.UID == rec.UID {
			return true
		}
	}
	return false
}
