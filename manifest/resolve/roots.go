// Package resolve holds the two decisions format version 3 makes from a stream's roots:
// which root is the newest persisted manifest of a prefix (ChooseTop, what recovery and
// the bucket-only readers use), and what a writer's resolution does with what the listing,
// the deletion marker and etcd said (Decide), with the recovery plan of one stream
// (PlanRecovery). It is pure: no I/O, no clock, no goroutines; the shell lists, reads
// and writes, and calls it with what it found (remote-format.md, "Resolution, adoption and
// rollback" and "Recovering the metadata from the bucket").
package resolve

import (
	"fmt"
	"sort"
	"time"

	"github.com/streamtier/streamtier/manifest"
)

// Root is one root object of a stream's prefix as a listing shows it and, for version 3,
// as reading it showed its lineage.
type Root struct {
	Key string
	// Version is 3 for a root-<seq20> key, 2 for a root-<epoch20>-<uid16> key (a root of
	// format version 1 or 2: its epoch and uid come from the key, it has no seq or parent).
	Version int
	// Lineage: Seq from the key (version 3), Epoch and UID from the key (version 2) or the
	// object (version 3, once Known), the parent from the object.
	manifest.Lineage
	// Known says a version 3 root was read, so Epoch, UID and the parent are filled. A
	// version 2 root is always known (its key says all there is).
	Known        bool
	LastModified time.Time // the store's clock
}

// FromKey makes the Root of a parsed root key (k.Kind must be manifest.ObjectRoot); a
// version 3 root still needs reading (Known false) before the decisions can place it.
func FromKey(key string, k manifest.ObjectKey, modified time.Time) Root {
	r := Root{Key: key, LastModified: modified}
	if k.KeyVersion >= 3 {
		r.Version, r.Seq = 3, k.Seq
		return r
	}
	r.Version, r.Epoch, r.UID, r.Known = 2, k.Epoch, k.UID, true
	return r
}

// WithLineage is r once its object was read: the object's lineage (its seq must be the
// key's; the caller checks that, see CheckRootObject).
func (r Root) WithLineage(l manifest.Lineage) Root {
	r.Lineage, r.Known = l, true
	return r
}

// CheckRootObject checks that a decoded root object is the one its key names: a version 3
// key holds a version 3 root of that seq, a version 1 or 2 key a root of version 1 or 2.
func CheckRootObject(r Root, obj manifest.Root) error {
	switch {
	case r.Version >= 3 && obj.Version < 3:
		return fmt.Errorf("root %s: key of seq %d holds a version %d root (no lineage)", r.Key, r.Seq, obj.Version)
	case r.Version >= 3 && obj.Lineage.Seq != r.Seq:
		return fmt.Errorf("root %s: key of seq %d holds the root of seq %d", r.Key, r.Seq, obj.Lineage.Seq)
	case r.Version < 3 && obj.Version >= 3:
		return fmt.Errorf("root %s: a version 2 key holds a version %d root", r.Key, obj.Version)
	}
	return nil
}

// String names the root for logs and reports.
func (r Root) String() string {
	if r.Version < 3 {
		return fmt.Sprintf("%s (version 2 root, epoch %d, uid %016x)", r.Key, r.Epoch, r.UID)
	}
	if !r.Known {
		return fmt.Sprintf("%s (seq %d, not read)", r.Key, r.Seq)
	}
	return fmt.Sprintf("%s (%v)", r.Key, r.Lineage)
}

// lineageView indexes a prefix's roots: which ones another root names as its parent (so
// were persisted) and each one's parent when it is listed.
type lineageView struct {
	roots  []Root
	named  map[int]bool // index -> another root names it as parent
	parent map[int]int  // index -> index of its parent, when listed
	// later maps an index to a root of a higher seq and a higher epoch built on the same
	// parent: its writer listed this one (a writer's seq is above every root it listed)
	// and, building beside it rather than adopting it, judged it a fenced writer's stray
	// (an epoch below the stored one, so below its own).
	later map[int]int
}

func newLineageView(roots []Root) lineageView {
	v := lineageView{roots: roots, named: map[int]bool{}, parent: map[int]int{}, later: map[int]int{}}
	for i, c := range roots {
		if c.Version < 3 || !c.Known {
			continue
		}
		for j, p := range roots {
			if i == j || !p.Known {
				continue
			}
			if names(c, p) {
				v.named[j], v.parent[i] = true, j
			}
			if p.Version >= 3 && p.Seq > c.Seq && p.Epoch > c.Epoch && p.ParentSeq == c.ParentSeq && p.ParentUID == c.ParentUID {
				v.later[i] = j
			}
		}
	}
	return v
}

// names reports whether c was built on p: p's seq and uid, or p's uid with seq 0 for a
// version 2 p.
func names(c, p Root) bool {
	if p.Version < 3 {
		return c.ParentSeq == 0 && c.ParentUID == p.UID
	}
	return c.ParentSeq == p.Seq && c.ParentUID == p.UID
}

// provenEpoch is the highest epoch of a root another root names (a persisted manifest's
// writer), or floor if higher.
func (v lineageView) provenEpoch(floor uint64) uint64 {
	e := floor
	for j := range v.named {
		e = max(e, v.roots[j].Epoch)
	}
	return e
}

// stray reports whether the version 3 root i is a fenced writer's stray: no root names it,
// and its epoch is below its listed parent's or below proven (an epoch that persisted), or
// a root of a higher seq and epoch was built on the same parent.
func (v lineageView) stray(i int, proven uint64) (bool, string) {
	r := v.roots[i]
	if v.named[i] {
		return false, ""
	}
	if j, ok := v.later[i]; ok {
		return true, fmt.Sprintf("the root of seq %d was built on the same parent after it", v.roots[j].Seq)
	}
	if p, ok := v.parent[i]; ok && r.Epoch < v.roots[p].Epoch {
		return true, fmt.Sprintf("epoch %d below its parent's %d", r.Epoch, v.roots[p].Epoch)
	}
	if r.Epoch < proven {
		return true, fmt.Sprintf("epoch %d below the epoch %d that persisted", r.Epoch, proven)
	}
	return false, ""
}

// unknown lists the keys of version 3 roots not yet read among roots, in key order.
func unknown(roots []Root, keep func(Root) bool) []string {
	var out []string
	for _, r := range roots {
		if r.Version >= 3 && !r.Known && keep(r) {
			out = append(out, r.Key)
		}
	}
	sort.Strings(out)
	return out
}

// bySeqDesc returns the indexes of the version 3 roots, highest seq first.
func bySeqDesc(roots []Root) []int {
	var idx []int
	for i, r := range roots {
		if r.Version >= 3 {
			idx = append(idx, i)
		}
	}
	sort.Slice(idx, func(a, b int) bool { return roots[idx[a]].Seq > roots[idx[b]].Seq })
	return idx
}
