package manifest

import (
	"errors"
	"fmt"
	"math"
)

// Policy is a stream's remote retention: a prefix of whole fragments goes while the total
// size exceeds MaxBytes, or while the head fragment's last timestamp is older than now -
// MaxAgeMillis. Zero (or a negative age) means no limit of that kind. Gaps hold no bytes
// and no timestamps: they never stop the prefix, they go with the fragments before them.
type Policy struct {
	MaxBytes     uint64
	MaxAgeMillis int64
}

// IsZero reports a policy that never removes anything.
func (p Policy) IsZero() bool { return p.MaxBytes == 0 && p.MaxAgeMillis <= 0 }

// Retention is the outcome of evaluating a policy: either a decision (Fetch nil) or a
// request for one group object's entries (Fetch set) before anything is decided.
type Retention struct {
	// Changed tells that Edit is meaningful: apply it to the manifest evaluated, or use
	// Rebase for a manifest that has grown at its tail since.
	Changed bool
	// Edit is the truncate edit: it removes a prefix of root entries and moves the header
	// to the oldest surviving fragment (only the header when retention stops inside the
	// head group). Next offset never moves; the size delta is minus what was dropped.
	Edit Edit
	// Delete lists the objects to delete AFTER the persist that records Edit: fragment
	// entries, and group entries that stand for the group object and every object under it
	// that is still live, i.e. that ends above DeleteFrom (expand them with ExpandForDelete
	// or CollectForDelete). Fragments below DeleteFrom went in earlier runs.
	Delete []Entry
	// DeleteFrom is the root's first offset before Edit: the bound for expanding groups in
	// Delete.
	DeleteFrom uint64
	// Fetch, when set, names the group object whose entries are needed to decide; nothing
	// is decided yet (Changed is false). Download it and call Resume with its entries.
	Fetch *Entry
	// Err is set when the manifest contradicts itself (it fails Check): nothing is decided.
	Err error

	walk *retentionWalk // what Resume needs; set with Fetch
	eval Manifest       // the manifest evaluated; what Rebase compares with
}

// retentionWalk is the input of a walk: it is recomputed from scratch on every Resume with
// one more known group, so that each step is a pure function of its arguments.
type retentionWalk struct {
	m     Manifest
	p     Policy
	now   int64
	known map[Entry][]Entry
}

// ErrNoFetch is returned by Resume on a Retention that asked for nothing.
var ErrNoFetch = errors.New("retention: nothing to resume (Fetch is not set)")

// EvaluateRetention decides remote retention from the root alone. It drops head fragments
// that the policy rejects; a head group goes whole without a download when max-bytes
// alone consumes it (its live size is known from the root), and is left alone when the
// oldest live fragment (the header) is kept. Otherwise the result names the group to fetch
// (Fetch) and decides nothing yet: continue with Resume, or use EvaluateRetentionWith when
// a blocking fetch is fine. A manifest that fails Check decides nothing and sets Err.
func EvaluateRetention(m Manifest, p Policy, nowMillis int64) Retention {
	r, err := walkRetention(retentionWalk{m: m, p: p, now: nowMillis})
	if err != nil {
		return Retention{Err: err}
	}
	return r
}

// EvaluateRetentionInGroup continues EvaluateRetention(m, p, nowMillis) with the entries of
// the group it asked for (normally m.Entries[0]). group must be that group; when the root
// alone now decides (no fetch needed) the children are ignored. A kilo- or mega-group whose
// child group must be opened returns Fetch again: continue with Resume on the result.
func EvaluateRetentionInGroup(m Manifest, group Entry, children []Entry, p Policy, nowMillis int64) (Retention, error) {
	r := EvaluateRetention(m, p, nowMillis)
	if r.Err != nil {
		return Retention{}, r.Err
	}
	if r.Fetch == nil {
		return r, nil
	}
	if *r.Fetch != group {
		return Retention{}, fmt.Errorf("retention: %s at offset %d (uid %016x) is not the group to open first (the %s at %d is); continue a walk with Retention.Resume",
			group.Kind, group.FirstOffset, group.UID, r.Fetch.Kind, r.Fetch.FirstOffset)
	}
	return r.Resume(children)
}

// Resume continues an evaluation that asked for r.Fetch, with that group's entries, on the
// same manifest, policy and time. The result is again a decision or another Fetch (a group
// inside a kilo- or mega-group, or the next root group when the head was consumed). Its
// Edit applies to the manifest evaluated, and still does after appends at the tail.
func (r Retention) Resume(children []Entry) (Retention, error) {
	if r.Fetch == nil || r.walk == nil {
		return Retention{}, ErrNoFetch
	}
	g := *r.Fetch
	known := make(map[Entry][]Entry, len(r.walk.known)+1)
	for k, v := range r.walk.known {
		known[k] = v
	}
	known[g] = children
	w := *r.walk
	w.known = known
	out, err := walkRetention(w)
	if err != nil {
		return Retention{}, err
	}
	return out, nil
}

// EvaluateRetentionWith evaluates retention to a decision, fetching the groups it needs
// through fetch (each at most once). It is pure apart from what fetch does.
func EvaluateRetentionWith(m Manifest, p Policy, nowMillis int64, fetch GroupFetcher) (Retention, error) {
	r := EvaluateRetention(m, p, nowMillis)
	if r.Err != nil {
		return Retention{}, r.Err
	}
	for r.Fetch != nil {
		if fetch == nil {
			return Retention{}, fmt.Errorf("retention: needs %s at offset %d and no group fetcher was given", r.Fetch.Kind, r.Fetch.FirstOffset)
		}
		children, err := fetch(*r.Fetch)
		if err != nil {
			return Retention{}, fmt.Errorf("retention: fetch %s at offset %d (uid %016x): %w", r.Fetch.Kind, r.Fetch.FirstOffset, r.Fetch.UID, err)
		}
		if r, err = r.Resume(children); err != nil {
			return Retention{}, err
		}
	}
	return r, nil
}

// ExpandForDelete lists the children of a group deleted whole that are still to be deleted
// with it: those holding offsets at or after from (the root's first offset before the
// edit). Children below from went in earlier runs; gaps name no object and are never
// listed. A child group in the result is partly or wholly live: expand it in turn with the
// same from.
func ExpandForDelete(group Entry, children []Entry, from uint64) []Entry {
	var out []Entry
	for i, c := range children {
		if !c.IsGap() && (i+1 == len(children) || children[i+1].FirstOffset > from) {
			out = append(out, c)
		}
	}
	return out
}

// CollectForDelete lists every object to delete for one entry of Retention.Delete: a
// fragment alone, or a group's live descendants (fetched through fetch) followed by the
// group object itself. A gap names no object: it yields nothing.
func CollectForDelete(e Entry, from uint64, fetch GroupFetcher) ([]Entry, error) {
	var out []Entry
	var collect func(e Entry, depth int) error
	collect = func(e Entry, depth int) error {
		if e.IsGap() {
			return nil
		}
		if e.Kind != KindFragment {
			if depth >= maxDepth {
				return fmt.Errorf("%s at offset %d: tree deeper than %d levels", e.Kind, e.FirstOffset, maxDepth)
			}
			if fetch == nil {
				return fmt.Errorf("%s at offset %d (uid %016x): no group fetcher given", e.Kind, e.FirstOffset, e.UID)
			}
			children, err := fetch(e)
			if err != nil {
				return fmt.Errorf("fetch %s at offset %d (uid %016x): %w", e.Kind, e.FirstOffset, e.UID, err)
			}
			if err := CheckGroup(e, children); err != nil {
				return err
			}
			for _, c := range ExpandForDelete(e, children, from) {
				if err := collect(c, depth+1); err != nil {
					return err
				}
			}
		}
		out = append(out, e)
		return nil
	}
	if err := collect(e, 0); err != nil {
		return nil, err
	}
	return out, nil
}

// walker carries one evaluation: the running total, what was dropped, and where it stopped.
type walker struct {
	p       Policy
	hasAge  bool
	cutoff  int64 // fragments whose last timestamp is below it are expired
	from    uint64
	hdrLast int64 // the root's first-last timestamp: the oldest live fragment's
	total   uint64
	known   map[Entry][]Entry
	dels    []Entry
	moved   bool // something was dropped already: the header fragment is gone
	land    Entry
	need    *Entry
}

type walkOutcome int

const (
	consumedAll walkOutcome = iota // every live entry of the level goes
	stopped                        // w.land is the oldest surviving fragment
	needFetch                      // w.need must be fetched first
)

func (w *walker) drops(lastTimestamp int64) bool {
	return (w.p.MaxBytes > 0 && w.total > w.p.MaxBytes) || (w.hasAge && lastTimestamp < w.cutoff)
}

// level walks entries[head:] of one tree level whose last entry ends at end; entries[head]
// has headLive live bytes (less than its size when the root's first offset is inside it).
// It returns the outcome and, when stopped, the index of the entry holding w.land.
func (w *walker) level(entries []Entry, head int, headLive uint64, end uint64, depth int) (walkOutcome, int, error) {
	for i := head; i < len(entries); i++ {
		e := entries[i]
		eEnd := endOf(entries, i, end)
		live := e.Size
		if i == head {
			live = headLive
		}
		if e.IsGap() {
			// no bytes, no timestamps: a gap never stops the walk, so that it never becomes
			// the head; it goes with what went before it (and names no object to delete)
			continue
		}
		if e.Kind == KindFragment {
			if !w.drops(e.LastTimestamp) {
				w.land = e
				return stopped, i, nil
			}
			if e.Size > w.total {
				return 0, 0, fmt.Errorf("%w: fragment at %d holds %d bytes, more than the %d left", ErrCorrupt, e.FirstOffset, e.Size, w.total)
			}
			w.total -= e.Size
			w.dels = append(w.dels, e)
			w.moved = true
			continue
		}
		if live > w.total {
			return 0, 0, fmt.Errorf("%w: %s at %d holds %d live bytes, more than the %d left", ErrCorrupt, e.Kind, e.FirstOffset, live, w.total)
		}
		if w.p.MaxBytes > 0 && w.total-live > w.p.MaxBytes {
			// max-bytes alone consumes it whole: no download needed
			w.total -= live
			w.dels = append(w.dels, e)
			w.moved = true
			continue
		}
		holdsFrom := e.FirstOffset <= w.from && w.from < eEnd
		if !w.moved && holdsFrom && !w.drops(w.hdrLast) {
			// the oldest live fragment (the header's) stays: nothing changes
			w.land = Entry{FirstOffset: w.from}
			return stopped, i, nil
		}
		children, ok := w.known[e]
		if !ok {
			need := e
			w.need = &need
			return needFetch, i, nil
		}
		if depth >= maxDepth {
			return 0, 0, fmt.Errorf("%s at offset %d: tree deeper than %d levels", e.Kind, e.FirstOffset, maxDepth)
		}
		if err := checkChildren(e, eEnd, children); err != nil {
			return 0, 0, err
		}
		j, childLive := 0, children[0].Size
		if holdsFrom {
			j = containing(children, w.from)
			rest, ok := sumSizes(children[j+1:])
			if !ok || rest > live {
				return 0, 0, fmt.Errorf("%w: %s at %d: entries after the first offset hold more than its %d live bytes", ErrCorrupt, e.Kind, e.FirstOffset, live)
			}
			childLive = live - rest
			if c := children[j]; c.Kind == KindFragment && c.FirstOffset != w.from {
				return 0, 0, fmt.Errorf("%w: first offset %d falls inside the fragment at %d of %s at %d", ErrCorrupt, w.from, c.FirstOffset, e.Kind, e.FirstOffset)
			}
			if c := children[j]; c.IsGap() {
				return 0, 0, fmt.Errorf("%w: first offset %d falls on the gap at %d of %s at %d (a leading gap goes with the prefix)", ErrCorrupt, w.from, c.FirstOffset, e.Kind, e.FirstOffset)
			}
		}
		mark := len(w.dels)
		out, _, err := w.level(children, j, childLive, eEnd, depth+1)
		if err != nil || out != consumedAll {
			return out, i, err
		}
		// the whole group went: one entry stands for it and everything live under it
		w.dels = append(w.dels[:mark], e)
	}
	return consumedAll, len(entries), nil
}

// walkRetention runs one evaluation over the root and the groups known so far.
func walkRetention(in retentionWalk) (Retention, error) {
	m, p := in.m, in.p
	if p.IsZero() || len(m.Entries) == 0 {
		return Retention{}, nil
	}
	if err := m.Check(); err != nil {
		return Retention{}, fmt.Errorf("retention: %w", err)
	}
	w := walker{p: p, from: m.FirstOffset, hdrLast: m.FirstLastTimestamp, total: m.TotalSize, known: in.known}
	if p.MaxAgeMillis > 0 {
		w.hasAge = true
		if in.now < math.MinInt64+p.MaxAgeMillis {
			w.cutoff = math.MinInt64
		} else {
			w.cutoff = in.now - p.MaxAgeMillis
		}
	}
	rest, _ := sumSizes(m.Entries[1:]) // Check bounds it by TotalSize
	out, idx, err := w.level(m.Entries, 0, m.TotalSize-rest, m.NextOffset, 1)
	if err != nil {
		return Retention{}, fmt.Errorf("retention: %w", err)
	}
	if out == needFetch {
		st := in
		return Retention{Fetch: w.need, walk: &st}, nil
	}
	dropped := m.TotalSize - w.total
	if dropped > math.MaxInt64 {
		return Retention{}, fmt.Errorf("retention: %d bytes dropped do not fit a size delta", dropped)
	}
	ed := Edit{At: 0, Remove: idx, SizeDelta: -int64(dropped)}
	if out == consumedAll {
		if w.total != 0 {
			return Retention{}, fmt.Errorf("retention: %w: every entry dropped but %d bytes remain of the total", ErrCorrupt, w.total)
		}
		ed.FirstOffset, ed.FirstTimestamp, ed.FirstLastTimestamp = m.NextOffset, -1, -1
	} else {
		if !w.moved {
			return Retention{}, nil
		}
		ed.FirstOffset, ed.FirstTimestamp, ed.FirstLastTimestamp = w.land.FirstOffset, w.land.FirstTimestamp, w.land.LastTimestamp
	}
	return Retention{Changed: true, Edit: ed, Delete: w.dels, DeleteFrom: m.FirstOffset, eval: m}, nil
}

// ErrStaleRetention marks a retention decision that no longer fits the manifest it is to
// be applied to: its head changed since the evaluation. Evaluate again.
var ErrStaleRetention = errors.New("retention decision is stale")

// Rebase returns the decision's edit for cur, a manifest that may have grown at its tail
// since the one evaluated (the writer evaluates the persisted manifest and applies the
// edit to its in-memory one, which may hold newer fragments and gaps, its trailing gap
// possibly extended). The same prefix goes with the same size delta; when the decision
// empties the evaluated manifest and cur holds newer entries, the header moves to cur's
// next fragment instead, a gap before it going too (cur empties when only a gap follows).
// It fails with ErrStaleRetention when cur's head is not the evaluated one, or when the
// entry after the removed prefix is a group (its first fragment is not known): evaluate
// again then.
func (r Retention) Rebase(cur Manifest) (Edit, error) {
	if !r.Changed {
		return Edit{}, fmt.Errorf("%w: nothing was decided", ErrStaleRetention)
	}
	ev, ed := r.eval, r.Edit
	if cur.FirstOffset != ev.FirstOffset || len(cur.Entries) < ed.Remove || cur.NextOffset < ev.NextOffset {
		return Edit{}, fmt.Errorf("%w: evaluated first offset %d with %d entries, now %d with %d", ErrStaleRetention, ev.FirstOffset, len(ev.Entries), cur.FirstOffset, len(cur.Entries))
	}
	for i := 0; i < ed.Remove; i++ {
		if cur.Entries[i] != ev.Entries[i] {
			return Edit{}, fmt.Errorf("%w: root entry %d changed since the evaluation", ErrStaleRetention, i)
		}
	}
	if ed.Remove < len(ev.Entries) {
		// the decision stops on a fragment inside an entry that must still be there
		if ed.Remove >= len(cur.Entries) || cur.Entries[ed.Remove] != ev.Entries[ed.Remove] {
			return Edit{}, fmt.Errorf("%w: root entry %d changed since the evaluation", ErrStaleRetention, ed.Remove)
		}
		return ed, nil
	}
	if ed.Remove < len(cur.Entries) && cur.Entries[ed.Remove].FirstOffset < ev.NextOffset {
		return Edit{}, fmt.Errorf("%w: root entry %d starts at %d, below the evaluated next offset %d", ErrStaleRetention, ed.Remove, cur.Entries[ed.Remove].FirstOffset, ev.NextOffset)
	}
	if ed.Remove < len(cur.Entries) && cur.Entries[ed.Remove].IsGap() {
		ed.Remove++ // a gap never becomes the head
	}
	if len(cur.Entries) == ed.Remove {
		ed.FirstOffset, ed.FirstTimestamp, ed.FirstLastTimestamp = cur.NextOffset, -1, -1
		return ed, nil
	}
	next := cur.Entries[ed.Remove]
	if next.Kind != KindFragment {
		return Edit{}, fmt.Errorf("%w: the entry after the removed prefix is a %s at %d", ErrStaleRetention, next.Kind, next.FirstOffset)
	}
	ed.FirstOffset, ed.FirstTimestamp, ed.FirstLastTimestamp = next.FirstOffset, next.FirstTimestamp, next.LastTimestamp
	return ed, nil
}
