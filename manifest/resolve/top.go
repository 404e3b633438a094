package resolve

import (
	"fmt"
	"strings"
)

// TopOutcome is what a prefix's roots say its newest persisted manifest is.
type TopOutcome int

// Outcomes of ChooseTop.
const (
	// TopNeedRoots: read the version 3 roots in Need first, then choose again.
	TopNeedRoots TopOutcome = iota + 1
	// TopMarked: the prefix holds a deletion marker: the stream was deleted.
	TopMarked
	// TopV3: Root is the top of the version 3 lineage.
	TopV3
	// TopSingleV2: only version 1 or 2 roots, and one of them: Root.
	TopSingleV2
	// TopAmbiguousV2: several version 1 or 2 roots and no version 3 one: Candidates lists
	// them; nothing may be chosen without an operator.
	TopAmbiguousV2
	// TopUndecided: every version 3 root is a stray and none names a listed parent: the
	// roots name no top; Candidates lists them.
	TopUndecided
	// TopOrphansOnly: objects but no root: a stream that never persisted.
	TopOrphansOnly
	// TopEmpty: nothing under the prefix.
	TopEmpty
)

// String names the outcome for reports.
func (o TopOutcome) String() string {
	switch o {
	case TopNeedRoots:
		return "need-roots"
	case TopMarked:
		return "deleted"
	case TopV3:
		return "top"
	case TopSingleV2:
		return "single-v2-root"
	case TopAmbiguousV2:
		return "ambiguous-v2-roots"
	case TopUndecided:
		return "undecided"
	case TopOrphansOnly:
		return "orphans-only"
	case TopEmpty:
		return "empty"
	}
	return fmt.Sprintf("TopOutcome(%d)", int(o))
}

// Prefix is what one listing of a stream's prefix holds, as ChooseTop needs it.
type Prefix struct {
	Marker bool   // <stream prefix>deleted is there
	Roots  []Root // every root key of the listing (version 3 ones read, see Need)
	// Objects counts the other objects (fragments, groups) of the listing.
	Objects int
	// ProvenEpoch is an epoch known to have persisted from elsewhere (etcd's stored epoch
	// when there is one; 0 from the bucket alone).
	ProvenEpoch uint64
}

// TopChoice is the newest persisted manifest of a prefix, or why there is none.
type TopChoice struct {
	Outcome TopOutcome
	Root    Root     // TopV3, TopSingleV2
	Need    []string // TopNeedRoots: keys of version 3 roots to read
	// Strays are version 3 roots above Root skipped as fenced writers' strays, each with why.
	Strays []Stray
	// Candidates are the roots an operator must choose among (TopAmbiguousV2, TopUndecided).
	Candidates []Root
	// MaxEpoch is the highest epoch among the prefix's roots: the stored epoch recovery
	// writes (or etcd's, if higher).
	MaxEpoch uint64
	Reason   string
}

// Stray is a root skipped as a fenced writer's stray.
type Stray struct {
	Root Root
	Why  string
}

// ChooseTop finds the newest persisted manifest of a prefix from the bucket alone: the
// highest-seq version 3 root that is not a fenced stray (its epoch below its parent's, or
// below an epoch another root proves persisted; a root another root names is never a
// stray); with only version 1 or 2 roots, the single one. It never falls back to an older
// root, and refuses (TopFork, TopAmbiguousV2) rather than guess.
func ChooseTop(p Prefix) TopChoice {
	if p.Marker {
		return TopChoice{Outcome: TopMarked, Reason: "the prefix holds a deletion marker: the stream was deleted"}
	}
	if need := unknown(p.Roots, func(Root) bool { return true }); len(need) > 0 {
		return TopChoice{Outcome: TopNeedRoots, Need: need}
	}
	var c TopChoice
	for _, r := range p.Roots {
		c.MaxEpoch = max(c.MaxEpoch, r.Epoch)
	}
	v := newLineageView(p.Roots)
	proven := v.provenEpoch(p.ProvenEpoch)
	top := -1
	for _, i := range bySeqDesc(p.Roots) {
		if s, why := v.stray(i, proven); s {
			c.Strays = append(c.Strays, Stray{Root: p.Roots[i], Why: why})
			continue
		}
		top = i
		break
	}
	if top >= 0 {
		c.Outcome, c.Root = TopV3, p.Roots[top]
		c.Reason = "top of the root lineage: " + p.Roots[top].String()
		return c
	}
	var v2 []Root
	for _, r := range p.Roots {
		if r.Version < 3 {
			v2 = append(v2, r)
		}
	}
	// Every version 3 root is a stray: the persisted manifest they prove is a version 2
	// root another one names (a stray's parent was persisted).
	for j := range v.named {
		if p.Roots[j].Version < 3 {
			v2 = []Root{p.Roots[j]}
			break
		}
	}
	switch {
	case len(v2) == 1:
		c.Outcome, c.Root = TopSingleV2, v2[0]
		c.Reason = "the only version 1 or 2 root: " + v2[0].String()
	case len(v2) > 1:
		c.Outcome, c.Candidates = TopAmbiguousV2, v2
		c.Reason = fmt.Sprintf("%d version 1 or 2 roots and no version 3 root: choose one: %s", len(v2), rootList(v2))
	case len(c.Strays) > 0:
		c.Outcome = TopUndecided
		for _, s := range c.Strays {
			c.Candidates = append(c.Candidates, s.Root)
		}
		c.Reason = "every root is a fenced writer's stray and none names a listed parent: " + rootList(c.Candidates)
	case p.Objects > 0:
		c.Outcome = TopOrphansOnly
		c.Reason = fmt.Sprintf("%d objects but no root: a stream that never persisted", p.Objects)
	default:
		c.Outcome = TopEmpty
		c.Reason = "nothing under the prefix"
	}
	return c
}

func rootList(rs []Root) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.String()
	}
	return strings.Join(parts, "; ")
}
