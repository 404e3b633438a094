// Package divergence finds where a stream's remote tier and its local log stop holding the
// same chunks: the comparison a replica reader makes at resolution (manifest.md,
// "Resolution", step 4). Chunks are the same when their id, epoch, record count, size and
// data CRC agree; as in osiris (and Raft), a chunk that is the same in both logs implies
// the same history below it, so the search is a binary search over the remote chunks the
// local log could hold. It is pure: the remote tier and the local log are read through the
// Remote and Local interfaces the shell implements (ranged GETs, the local index), so the
// same inputs always give the same answer and the tests drive it with in-memory logs.
//
// The answer is a value: what matches, where the remote tier must be truncated and what
// that truncation keeps and deletes, or that the two share nothing (an operator decides).
package divergence

import (
	"errors"
	"fmt"
	"sort"

	"github.com/streamtier/streamtier/manifest"
)

// Chunk is what identifies one chunk across the two tiers: read from its header.
type Chunk struct {
	ID    uint64 // first offset
	Next  uint64 // one past its last offset (ID + records)
	Epoch uint64
	CRC   uint32 // CRC-32 of the data section
	Size  int64  // bytes: header, bloom, data and trailer
}

// Same reports whether a and b are the same chunk.
func (a Chunk) Same(b Chunk) bool { return a == b }

// IndexEntry locates one chunk inside a fragment object (its index record).
type IndexEntry struct {
	ID        uint64
	Timestamp int64
	Position  uint32 // of the chunk header, from the start of the object (the first is at 8)
}

// Remote reads what the comparison needs from the remote tier.
type Remote interface {
	// Children returns the entries of a group object.
	Children(group manifest.Entry) ([]manifest.Entry, error)
	// Index returns a fragment object's chunk index.
	Index(frag manifest.Entry) ([]IndexEntry, error)
	// Chunk reads the header of the chunk at pos in a fragment object.
	Chunk(frag manifest.Entry, pos uint32) (Chunk, error)
}

// Local reads chunk headers from the local log.
type Local interface {
	// Chunk returns the local chunk that starts at id; false when no chunk starts there.
	Chunk(id uint64) (Chunk, bool, error)
}

// Kind is the comparison's verdict.
type Kind uint8

// Verdicts. NotCompared: nothing to compare (empty local log, or the local log starts at or
// above the remote next offset: the core's offset rules decide). Match: the remote tier's
// last chunk is the same locally; resume at its next offset. Diverged: the two share a
// prefix and part ways at At, where the local log holds a chunk of its own (a fork: an
// unclean failover, or a lost tail written over). Behind: the local log is a prefix of the
// remote tier and simply ends (a lost unsynced tail not yet written over, a wiped log
// filling again, a replica catching up): nothing proves the remote chunks above it belong
// to another timeline, so nothing is truncated until the log either reaches them or forks.
// NoCommon: no chunk is the same in both.
const (
	NotCompared Kind = iota
	Match
	Diverged
	NoCommon
	Behind
)

// String names the verdict for logs, status and scenarios.
func (k Kind) String() string {
	switch k {
	case NotCompared:
		return "not-compared"
	case Match:
		return "match"
	case Diverged:
		return "diverged"
	case NoCommon:
		return "no-common-chunk"
	case Behind:
		return "behind"
	}
	return "kind(?)"
}

// Truncation is a remote tier cut back to a point: the manifest that remains, the objects
// it no longer references and, when the point falls inside a fragment, that fragment's
// prefix, which must be put back (from the local log or copied from the remote object).
type Truncation struct {
	At       uint64            // the remote tier keeps [first, At)
	Manifest manifest.Manifest // what remains; its next offset is At, or Straddle's first offset
	Dropped  []manifest.Entry  // objects wholly at or above At: deleted with everything below them
	Alone    []manifest.Entry  // groups expanded into the remaining root: their object alone goes
	// Straddle is the fragment that holds At strictly inside it (nil when At is a boundary).
	Straddle *manifest.Entry
	// Prefix lists Straddle's chunks below At; PrefixBytes is their size (the new object's
	// chunk region, which starts at the same position 8 as in Straddle's object).
	Prefix              []IndexEntry
	PrefixBytes         uint64
	PrefixLastTimestamp int64
	// Replacement is the fragment the shell uploaded holding Straddle's prefix when the
	// local log no longer holds it (NeedsCopy); nil otherwise.
	Replacement *manifest.Entry
}

// NeedsCopy reports whether Straddle's prefix must be copied from its remote object: the
// local log, starting at localFirst, no longer holds the straddling fragment's first chunk.
func (t *Truncation) NeedsCopy(localFirst uint64) bool {
	return t != nil && t.Straddle != nil && localFirst > t.Straddle.FirstOffset
}

// Result is the comparison's answer, with both ranges for status and logs.
type Result struct {
	Kind                    Kind
	RemoteFirst, RemoteNext uint64
	LocalFirst, LocalNext   uint64
	// Truncation: for Diverged, the cut at the divergence point; for NoCommon, the cut an
	// operator's truncate command makes (at the later of the two first offsets, rounded
	// down to a fragment boundary, so nothing needs copying). Nil otherwise (Behind: the
	// log catches up or forks; nothing is cut).
	Truncation *Truncation
	Probes     int // chunk comparisons made
	// GapFork is set with NoCommon when the two do share a prefix but part at the start of
	// (or inside) a declared gap with durable data above it: cutting back to the fork would
	// delete durable chunks the local log never held (a log restored up to a mid-stream gap
	// and continued there by a broker). Truncation is then the cut at the fork, made only
	// if an operator asks for it.
	GapFork *GapFork
	// EpochAhead is set with NoCommon when the local log starts above the remote next
	// offset (offsets were lost between) with a chunk of a higher epoch than the remote
	// tier's last: the broker may have rewritten the log below the remote next offset and
	// its retention trimmed the rewrite before the node looked (or a failover came with the
	// loss; the two cannot be told apart). Truncation then keeps the whole remote tier: the
	// operator's truncate accepts the loss as a gap.
	EpochAhead *EpochAhead
	// Rewritten is set with NoCommon when the local log starts above the remote next offset
	// and the follower of the log saw it rewritten below what it had seen (a file shrank or
	// a seen chunk changed) before the stream was opened on it again: the rewrite's chunks
	// cannot be compared with the remote tier, which may hold the old timeline above the
	// rewrite point. Set by the reader core (HoldRewritten), not by Find.
	Rewritten *Rewritten
}

// Rewritten is what the follower of a local log saw of a rewrite before the stream was
// opened on the rewritten log: where its view ended and what changed.
type Rewritten struct {
	SeenNext uint64 // one past the last chunk the follower had seen
	Detail   string // what changed, in the follower's words
}

// HoldRewritten is the hold for a local log [localFirst, localNext) that starts above the
// remote tier m's next offset after its follower saw it rewritten (rw): the two cannot be
// compared, so nothing is declared or uploaded. The operator's truncate keeps the whole
// remote tier (the loss becomes a gap), as for EpochAhead.
func HoldRewritten(m manifest.Manifest, localFirst, localNext uint64, rw *Rewritten) Result {
	return Result{Kind: NoCommon, RemoteFirst: m.FirstOffset, RemoteNext: m.NextOffset, LocalFirst: localFirst, LocalNext: localNext,
		Rewritten: rw, Truncation: &Truncation{At: m.NextOffset, Manifest: m.Clone()}}
}

// EpochAhead names the local first chunk's epoch and the remote tier's last chunk's.
type EpochAhead struct {
	LocalFirst              uint64
	LocalEpoch, RemoteEpoch uint64
}

// GapFork is where a local log forks from the remote tier inside a declared gap [From, To)
// that durable data follows (up to the remote next offset).
type GapFork struct {
	At       uint64
	From, To uint64
}

// leaf is one fragment of the remote tier with its end offset.
type leaf struct {
	e   manifest.Entry
	end uint64
}

// searcher carries one comparison.
type searcher struct {
	m      manifest.Manifest
	lf, ln uint64
	remote Remote
	local  Local
	probes int
	index  map[uint64][]IndexEntry // by uid
}

// Find compares the remote tier m with the local log [localFirst, localNext).
func Find(m manifest.Manifest, localFirst, localNext uint64, remote Remote, local Local) (Result, error) {
	res := Result{RemoteFirst: m.FirstOffset, RemoteNext: m.NextOffset, LocalFirst: localFirst, LocalNext: localNext}
	if localFirst < localNext && localFirst > m.NextOffset && len(m.Entries) > 0 {
		s := &searcher{m: m, lf: localFirst, ln: localNext, remote: remote, local: local, index: map[uint64][]IndexEntry{}}
		e, err := s.epochAhead()
		if err != nil || e == nil {
			res.Kind = NotCompared
			return res, err
		}
		res.Kind, res.EpochAhead = NoCommon, e
		res.Truncation = &Truncation{At: m.NextOffset, Manifest: m.Clone()}
		return res, nil
	}
	if localFirst >= localNext || localFirst >= m.NextOffset || len(m.Entries) == 0 {
		if len(m.Entries) == 0 && localFirst < localNext && localNext < m.NextOffset {
			// Nothing remote to compare, and the local log ends below where uploading
			// would resume: it cannot be shown to continue the remote timeline.
			res.Kind = NoCommon
			res.Truncation = &Truncation{At: m.NextOffset, Manifest: manifest.EmptyAt(localFirst)}
			return res, nil
		}
		res.Kind = NotCompared
		return res, nil
	}
	s := &searcher{m: m, lf: localFirst, ln: localNext, remote: remote, local: local, index: map[uint64][]IndexEntry{}}
	lo := max(m.FirstOffset, localFirst)
	leaves, err := s.leaves(lo, localNext)
	if err != nil {
		return res, err
	}
	defer func() { res.Probes = s.probes }()

	// The common case first: the remote tier's last chunk is the same locally.
	last, ok, err := s.lastLeaf()
	if err != nil {
		return res, err
	}
	if ok && last.e.FirstOffset < localNext {
		idx, err := s.indexOf(last.e)
		if err != nil {
			return res, err
		}
		if same, err := s.same(last.e, idx, len(idx)-1, last.end); err != nil {
			return res, err
		} else if same {
			return s.matched(res, last)
		}
	}

	// Binary search over the candidate fragments by their first comparable chunk, then
	// over the chunks of the last fragment that starts the same.
	type cand struct {
		l     leaf
		first int // index of the first chunk the local log could hold
	}
	var cands []cand
	for _, l := range leaves {
		first := 0
		if l.e.FirstOffset < localFirst {
			idx, err := s.indexOf(l.e)
			if err != nil {
				return res, err
			}
			first = sort.Search(len(idx), func(i int) bool { return idx[i].ID >= localFirst })
			if first == len(idx) {
				continue
			}
		}
		cands = append(cands, cand{l, first})
	}
	var probeErr error
	n := sort.Search(len(cands), func(i int) bool {
		if probeErr != nil {
			return true
		}
		c := cands[i]
		idx, err := s.indexOf(c.l.e)
		if err != nil {
			probeErr = err
			return true
		}
		same, err := s.same(c.l.e, idx, c.first, c.l.end)
		if err != nil {
			probeErr = err
			return true
		}
		return !same
	})
	if probeErr != nil {
		return res, probeErr
	}
	if n == 0 {
		res.Kind = NoCommon
		t, err := s.operatorCut(lo)
		if err != nil {
			return res, err
		}
		res.Truncation = t
		return res, nil
	}
	c := cands[n-1]
	idx, err := s.indexOf(c.l.e)
	if err != nil {
		return res, err
	}
	// idx[c.first] is the same; find the last chunk k >= c.first that is.
	k := c.first + sort.Search(len(idx)-c.first-1, func(j int) bool {
		if probeErr != nil {
			return true
		}
		same, err := s.same(c.l.e, idx, c.first+j+1, c.l.end)
		if err != nil {
			probeErr = err
			return true
		}
		return !same
	})
	if probeErr != nil {
		return res, probeErr
	}
	at := c.l.end
	if k+1 < len(idx) {
		at = idx[k+1].ID
	}
	if ok && c.l.e == last.e && k == len(idx)-1 {
		return s.matched(res, last) // reached only when the quick check could not run
	}
	if at >= localNext {
		// The log holds nothing at or above the point where the two part: it is behind,
		// not forked. Truncating would delete chunks of the same history.
		res.Kind = Behind
		return res, nil
	}
	t, err := s.truncate(at)
	if err != nil {
		return res, err
	}
	if g, ok, err := s.gapAt(at); err != nil {
		return res, err
	} else if ok && g.To < s.m.NextOffset {
		// Two gaps never stand side by side: what follows the gap is durable data.
		g.At = at
		res.Kind, res.Truncation, res.GapFork = NoCommon, t, &g
		return res, nil
	}
	if t.Straddle != nil {
		t.Prefix = append([]IndexEntry(nil), idx[:k+1]...)
		t.PrefixBytes = uint64(idx[k+1].Position) - fragmentHeaderSize
		t.PrefixLastTimestamp = idx[k].Timestamp
	}
	res.Kind = Diverged
	res.Truncation = t
	return res, nil
}

// matched answers when the remote tier's last fragment, last, ends with a chunk the local
// log holds: a match, unless gaps follow that fragment and the first of them is sealed in
// a group object. The old writer lost those offsets; this log holds everything below them
// and may hold or append them, which keeping the gaps would hide: the last chunk both hold
// ends where the gaps start, the divergence point. A gap that is a root entry is left to
// the caller, which sees it (the replica reader cuts at its start); one inside a group
// only the comparison can see.
func (s *searcher) matched(res Result, last leaf) (Result, error) {
	res.Probes = s.probes
	n := len(s.m.Entries)
	if last.end == s.m.NextOffset || s.m.Entries[n-1].IsGap() && s.m.Entries[n-1].FirstOffset == last.end {
		res.Kind = Match
		return res, nil
	}
	t, err := s.truncate(last.end)
	if err != nil {
		return res, err
	}
	res.Kind = Diverged
	res.Truncation = t
	return res, nil
}

// fragmentHeaderSize is the "OSIF" + version header before a fragment's chunk region.
const fragmentHeaderSize = 8

// same probes whether chunk i of fragment f (its index idx, its end offset end) is the
// same in the local log.
func (s *searcher) same(f manifest.Entry, idx []IndexEntry, i int, end uint64) (bool, error) {
	if i < 0 || i >= len(idx) {
		return false, fmt.Errorf("fragment at %d: chunk %d of %d", f.FirstOffset, i, len(idx))
	}
	if idx[i].ID < s.lf || idx[i].ID >= s.ln {
		return false, nil
	}
	s.probes++
	rc, err := s.remote.Chunk(f, idx[i].Position)
	if err != nil {
		return false, fmt.Errorf("remote chunk %d (fragment at %d): %w", idx[i].ID, f.FirstOffset, err)
	}
	if rc.ID != idx[i].ID {
		return false, fmt.Errorf("remote chunk at position %d of the fragment at %d is chunk %d, its index says %d", idx[i].Position, f.FirstOffset, rc.ID, idx[i].ID)
	}
	want := end
	if i+1 < len(idx) {
		want = idx[i+1].ID
	}
	if rc.Next != want {
		return false, fmt.Errorf("remote chunk %d (fragment at %d) ends at %d, the next chunk starts at %d", rc.ID, f.FirstOffset, rc.Next, want)
	}
	lc, ok, err := s.local.Chunk(idx[i].ID)
	if err != nil {
		return false, fmt.Errorf("local chunk %d: %w", idx[i].ID, err)
	}
	return ok && lc.Same(rc), nil
}

func (s *searcher) indexOf(f manifest.Entry) ([]IndexEntry, error) {
	if idx, ok := s.index[f.UID]; ok {
		return idx, nil
	}
	idx, err := s.remote.Index(f)
	if err != nil {
		return nil, fmt.Errorf("index of the fragment at %d (uid %016x): %w", f.FirstOffset, f.UID, err)
	}
	if len(idx) == 0 || idx[0].ID != f.FirstOffset || idx[0].Position != fragmentHeaderSize {
		return nil, fmt.Errorf("index of the fragment at %d (uid %016x): %w", f.FirstOffset, f.UID, errBadIndex)
	}
	for i := 1; i < len(idx); i++ {
		if idx[i].ID <= idx[i-1].ID || idx[i].Position <= idx[i-1].Position {
			return nil, fmt.Errorf("index of the fragment at %d (uid %016x): record %d: %w", f.FirstOffset, f.UID, i, errBadIndex)
		}
	}
	s.index[f.UID] = idx
	return idx, nil
}

var errBadIndex = errors.New("chunk index out of order or not starting at the fragment")

// leaves lists the fragments of the tree that hold offsets in [lo, hi), oldest first.
func (s *searcher) leaves(lo, hi uint64) ([]leaf, error) {
	var out []leaf
	var walk func(entries []manifest.Entry, end uint64, depth int) error
	walk = func(entries []manifest.Entry, end uint64, depth int) error {
		for i, e := range entries {
			eEnd := end
			if i+1 < len(entries) {
				eEnd = entries[i+1].FirstOffset
			}
			if eEnd <= lo || e.FirstOffset >= hi {
				continue
			}
			switch {
			case e.Kind == manifest.KindFragment:
				out = append(out, leaf{e, eEnd})
			case e.IsGap():
			default:
				if depth > 4 {
					return fmt.Errorf("%s at %d: tree deeper than four levels", e.Kind, e.FirstOffset)
				}
				children, err := s.remote.Children(e)
				if err != nil {
					return fmt.Errorf("%s at %d (uid %016x): %w", e.Kind, e.FirstOffset, e.UID, err)
				}
				if err := walk(children, eEnd, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return out, walk(s.m.Entries, s.m.NextOffset, 0)
}

// lastLeaf is the remote tier's newest fragment (a trailing gap is skipped). Nothing below
// the manifest's first offset is read: retention may have deleted it from a group that
// still lists it.
func (s *searcher) lastLeaf() (leaf, bool, error) {
	for i := len(s.m.Entries) - 1; i >= 0; i-- {
		if s.m.Entries[i].IsGap() {
			continue
		}
		ls, err := s.leaves(max(s.m.Entries[i].FirstOffset, s.m.FirstOffset), s.m.EntryEnd(i))
		if err != nil {
			return leaf{}, false, err
		}
		if len(ls) > 0 {
			return ls[len(ls)-1], true, nil
		}
	}
	return leaf{}, false, nil
}

// epochAhead compares the epoch of the local log's first chunk with the remote tier's last
// chunk's (one index GET and one 48-byte ranged GET); nil when it is not above.
func (s *searcher) epochAhead() (*EpochAhead, error) {
	last, ok, err := s.lastLeaf()
	if err != nil || !ok {
		return nil, err
	}
	idx, err := s.indexOf(last.e)
	if err != nil {
		return nil, err
	}
	rc, err := s.remote.Chunk(last.e, idx[len(idx)-1].Position)
	if err != nil {
		return nil, fmt.Errorf("remote chunk %d (fragment at %d): %w", idx[len(idx)-1].ID, last.e.FirstOffset, err)
	}
	lc, found, err := s.local.Chunk(s.lf)
	if err != nil {
		return nil, fmt.Errorf("local chunk %d: %w", s.lf, err)
	}
	s.probes++
	if !found || lc.Epoch <= rc.Epoch {
		return nil, nil
	}
	return &EpochAhead{LocalFirst: s.lf, LocalEpoch: lc.Epoch, RemoteEpoch: rc.Epoch}, nil
}

// gapAt finds the declared gap of the tree holding offset at (reading the group objects
// on the way down to it), if a gap holds it.
func (s *searcher) gapAt(at uint64) (GapFork, bool, error) {
	entries, end := s.m.Entries, s.m.NextOffset
	for depth := 0; depth <= 4; depth++ {
		i := sort.Search(len(entries), func(i int) bool { return entries[i].FirstOffset > at }) - 1
		if i < 0 {
			return GapFork{}, false, nil
		}
		e := entries[i]
		if i+1 < len(entries) {
			end = entries[i+1].FirstOffset
		}
		switch {
		case at >= end || e.Kind == manifest.KindFragment:
			return GapFork{}, false, nil
		case e.IsGap():
			return GapFork{From: e.FirstOffset, To: end}, true, nil
		}
		children, err := s.remote.Children(e)
		if err != nil {
			return GapFork{}, false, fmt.Errorf("%s at %d (uid %016x): %w", e.Kind, e.FirstOffset, e.UID, err)
		}
		entries = children
	}
	return GapFork{}, false, fmt.Errorf("the tree at offset %d is deeper than four levels", at)
}

// truncate cuts the remote tier back to at.
func (s *searcher) truncate(at uint64) (*Truncation, error) {
	r, err := manifest.TruncateTail(s.m, at, s.remote.Children)
	if err != nil {
		return nil, fmt.Errorf("truncate the remote tier at %d: %w", at, err)
	}
	t := &Truncation{At: at, Manifest: r.Manifest, Straddle: r.Straddle}
	for _, e := range r.Dropped {
		if e.Kind != manifest.KindFragment && e.FirstOffset < at {
			t.Alone = append(t.Alone, e) // expanded: its surviving children stay referenced
		} else {
			t.Dropped = append(t.Dropped, e)
		}
	}
	return t, nil
}

// operatorCut is the truncation an operator's command makes when nothing is shared: the
// remote tier keeps what lies below lo (the later first offset), cut at a fragment
// boundary so that nothing needs copying. With lo at the remote first offset, everything
// goes and the manifest starts again, empty, at the local first offset.
func (s *searcher) operatorCut(lo uint64) (*Truncation, error) {
	if lo <= s.m.FirstOffset {
		var dropped []manifest.Entry
		for _, e := range s.m.Entries {
			if !e.IsGap() {
				dropped = append(dropped, e)
			}
		}
		return &Truncation{At: s.m.FirstOffset, Manifest: manifest.EmptyAt(s.lf), Dropped: dropped}, nil
	}
	at := lo
	ls, err := s.leaves(lo, lo+1)
	if err != nil {
		return nil, err
	}
	if len(ls) == 1 && ls[0].e.FirstOffset < lo {
		at = ls[0].e.FirstOffset
	}
	if at <= s.m.FirstOffset {
		return s.operatorCut(s.m.FirstOffset)
	}
	return s.truncate(at)
}
