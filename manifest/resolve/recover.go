package resolve

import "fmt"

// Etcd is what etcd holds of one stream when recovery looks at it.
type Etcd struct {
	Tombstone   bool
	Anchor      bool
	Record      *Record // nil: none
	StoredEpoch uint64  // 0: none
}

// RecoveryAction is what recovery does for one stream.
type RecoveryAction int

// Actions of PlanRecovery.
const (
	// RecoverTombstone: the prefix holds a deletion marker: write the etcd tombstone (if
	// absent) and nothing else.
	RecoverTombstone RecoveryAction = iota + 1
	// RecoverWrite: write the anchor, the manifest record naming Plan.Root and the stored
	// epoch Plan.StoredEpoch, in one transaction conditional on what was read.
	RecoverWrite
	// RecoverUpToDate: etcd already names this root (the anchor is written if missing).
	RecoverUpToDate
	// RecoverSkip: nothing to write: etcd is ahead of the bucket, the stream was deleted
	// in etcd, or the prefix holds nothing; Plan.Reason says which.
	RecoverSkip
	// RecoverRefuse: the bucket names no root recovery may choose (several version 2
	// roots, an undecided lineage, a top root that fails its check): report, write nothing.
	RecoverRefuse
	// RecoverOrphans: objects but no root: reported, nothing written.
	RecoverOrphans
)

// String names the action in the recovery table.
func (a RecoveryAction) String() string {
	switch a {
	case RecoverTombstone:
		return "tombstone"
	case RecoverWrite:
		return "write"
	case RecoverUpToDate:
		return "up-to-date"
	case RecoverSkip:
		return "skip"
	case RecoverRefuse:
		return "refuse"
	case RecoverOrphans:
		return "orphans"
	}
	return fmt.Sprintf("RecoveryAction(%d)", int(a))
}

// Plan is recovery's decision for one stream.
type Plan struct {
	Action RecoveryAction
	Root   Root // RecoverWrite, RecoverUpToDate: the root the record names
	// StoredEpoch is the epoch recovery stores: the highest among the prefix's roots, or
	// etcd's if higher (never lowered).
	StoredEpoch uint64
	Reason      string
}

// PlanRecovery decides what `node recover` does for one stream from the bucket's choice
// (ChooseTop, not TopNeedRoots), the check of the chosen root (its CRC and groups; nil when
// it passed or there is no root) and what etcd holds. It writes a record only where etcd
// has none or names an older root, never lowers one, and never falls back to an older root
// when the top fails its check.
func PlanRecovery(c TopChoice, check error, e Etcd) Plan {
	p := Plan{StoredEpoch: max(c.MaxEpoch, e.StoredEpoch)}
	switch c.Outcome {
	case TopMarked:
		p.Action, p.Reason = RecoverTombstone, "deletion marker: tombstone the stream"
		if e.Tombstone {
			p.Reason = "deletion marker, and etcd holds the tombstone already"
		}
		return p
	case TopNeedRoots:
		p.Action, p.Reason = RecoverRefuse, "the version 3 roots were not read (a bug in the caller)"
		return p
	case TopAmbiguousV2, TopUndecided:
		p.Action, p.Reason = RecoverRefuse, c.Reason
		return p
	case TopOrphansOnly:
		p.Action, p.Reason = RecoverOrphans, c.Reason
		return p
	case TopEmpty:
		p.Action, p.Reason = RecoverSkip, c.Reason
		return p
	}
	if e.Tombstone {
		p.Action = RecoverSkip
		p.Reason = fmt.Sprintf("etcd holds the stream's tombstone (deleted by a version 1 or 2 binary) though the bucket holds %s and no marker: left deleted", c.Root)
		return p
	}
	if check != nil {
		p.Action = RecoverRefuse
		p.Reason = fmt.Sprintf("the newest root %s fails its check (an older root may lack acknowledged offsets, so none is chosen): %v", c.Root, check)
		return p
	}
	p.Root = c.Root
	if e.Record == nil {
		p.Action, p.Reason = RecoverWrite, "etcd holds no record: write it from "+c.Root.String()
		return p
	}
	r := *e.Record
	switch {
	case c.Outcome == TopV3 && r.Seq == c.Root.Seq && r.UID == c.Root.UID,
		c.Outcome == TopSingleV2 && r.Seq == 0 && r.Epoch == c.Root.Epoch && r.UID == c.Root.UID:
		p.Action, p.Reason = RecoverUpToDate, "etcd names this root already"
		if !e.Anchor {
			p.Reason += " (the anchor is written back)"
		}
		return p
	case c.Outcome == TopV3 && r.Seq < c.Root.Seq:
		p.Action = RecoverWrite
		p.Reason = fmt.Sprintf("etcd names seq %d, the bucket's top is %s: raise the record", r.Seq, c.Root)
		return p
	case c.Outcome == TopV3 && r.Seq == c.Root.Seq:
		p.Action = RecoverRefuse
		p.Reason = fmt.Sprintf("etcd names seq %d uid %016x, the bucket's root of that seq has uid %016x: etcd and the bucket are of different histories", r.Seq, r.UID, c.Root.UID)
		return p
	case c.Outcome == TopV3:
		p.Action = RecoverSkip
		p.Reason = fmt.Sprintf("etcd names seq %d, above the bucket's top %s: never lowered", r.Seq, c.Root)
		return p
	case r.Seq > 0:
		p.Action = RecoverSkip
		p.Reason = fmt.Sprintf("etcd names version 3 root seq %d, the bucket holds only %s: never lowered", r.Seq, c.Root)
		return p
	}
	p.Action = RecoverRefuse
	p.Reason = fmt.Sprintf("etcd names the version 2 root of epoch %d uid %016x, the bucket's only root is %s: choose with an operator", r.Epoch, r.UID, c.Root)
	return p
}
