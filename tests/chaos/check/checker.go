package check

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/segments/loadgen"
	"github.com/streamtier/streamtier/tests/chaos/history"
)

// Policy is a remote retention policy (0: no limit).
type Policy struct {
	MaxBytes uint64
	MaxAge   time.Duration
}

// String formats the policy as `node retention` takes it.
func (p Policy) String() string {
	return fmt.Sprintf("max-bytes %d, max-age %v", p.MaxBytes, p.MaxAge)
}

// StreamConfig is one stream the checker watches.
type StreamConfig struct {
	ID     string
	Load   loadgen.Config // the deterministic load its local log is written with
	Policy Policy         // the retention policy of the node's configuration
}

// Config says what the checker looks at.
type Config struct {
	Bucket     *Bucket
	Etcd       *clientv3.Client
	EtcdPrefix string
	KeyPrefix  string
	Streams    []StreamConfig
	// RetentionSlack bounds how far a fragment reaches past the chunk retention judged by:
	// the fragment target size plus the largest chunk. Max-bytes retention removes a whole
	// fragment while the total exceeds the limit, so a chunk may go when the bytes from it
	// to the highest next offset seen, plus this slack, exceed the limit.
	RetentionSlack uint64
	History        *history.History
}

// Violation is a broken promise, with the history that led to it.
type Violation struct {
	Cycle  int             `json:"cycle"`
	Stream string          `json:"stream"`
	Rule   string          `json:"rule"`
	Detail string          `json:"detail"`
	Seq    int             `json:"seq"` // history event of the violation
	Slice  []history.Event `json:"history"`
}

// Stats are the checker's figures.
type Stats struct {
	Checks          int    `json:"checks"`
	Acks            int    `json:"acks"`             // manifest records observed in etcd
	OffsetsChecked  uint64 `json:"offsets_checked"`  // acknowledged offsets found in S3 and compared, summed over checks
	ChunksCompared  uint64 `json:"chunks_compared"`  // chunks compared byte for byte with the load
	BytesCompared   uint64 `json:"bytes_compared"`   // their bytes
	FragmentsRead   int    `json:"fragments_read"`   // fragment objects downloaded and decoded
	GroupsRead      int    `json:"groups_read"`      // group objects downloaded and decoded
	RootsRead       int    `json:"roots_read"`       // root objects
	GapOffsets      uint64 `json:"gap_offsets"`      // offsets in declared gaps at the last check
	Truncations     int    `json:"truncations"`      // next-offset regressions explained by a harness truncation
	Forks           int    `json:"forks"`            // divergent refills the harness wrote (another timeline from the cut on)
	ForksFollowed   int    `json:"forks_followed"`   // forks the remote tier was seen to follow (cut back to the fork, then the new timeline)
	RetainedOffsets uint64 `json:"retained_offsets"` // offsets removed by remote retention, each judged
	AwaitPersisted  int    `json:"await_persisted"`  // await_offset answers "persisted", each an acknowledgement
	AwaitInGap      int    `json:"await_in_gap"`     // await_offset answers "in a declared gap", each judged
	RootLineages    int    `json:"root_lineages"`    // version 3 roots whose identity and lineage were judged
	ParentsJudged   int    `json:"parents_judged"`   // records whose root's parent was compared with the record before it
	EtcdRewinds     int    `json:"etcd_rewinds"`     // etcd wipes and restores the harness declared
	Recoveries      int    `json:"recoveries"`       // records judged after the recovery that followed one
	RewoundRecords  int    `json:"rewound_records"`  // records seen between a rewind and its recovery (not judged)
}

// truncation is a lost local tail the harness caused: the log ends at cut, or (fork) the
// log holds another timeline's chunks from cut on.
type truncation struct {
	cut  uint64
	used bool
	fork bool
}

// pendingFork is a fork the remote tier may not have followed yet: it may still hold the
// old timeline's chunks from at on (acknowledged before the fork), which the local log no
// longer has. Only those may leave it, and only down to at.
type pendingFork struct {
	at  uint64
	old mapping // the lineage's content before the fork
}

// rng is a half-open offset range.
type rng struct{ from, to uint64 }

type streamState struct {
	cfg       StreamConfig
	lin       *Lineage     // the expected chunks, timeline by timeline
	fork      *pendingFork // nil: the remote tier holds (or will hold) only the lineage's chunks
	ackedNext uint64       // highest persisted next acknowledged, lowered only by a harness truncation
	// keepNext: acknowledged data below it must stay data (no gap may ever cover it); it
	// falls only to the cut of a truncation the harness caused, never below.
	keepNext    uint64
	maxNext     uint64 // highest next offset ever seen
	first       uint64 // persisted first offset last seen
	seenFirst   bool
	epoch       uint64
	truncations []truncation
	losses      []rng             // local ranges the harness deleted before they were persisted
	policies    map[int][]Policy  // by cycle: policies set with `node retention`
	etags       map[string]string // key -> etag + size: objects are never overwritten
	verified    map[string]bool   // fragment key+etag whose bytes were compared
	verifiedOld map[string]bool   // those of them that matched only the timeline before a pending fork
	referenced  map[string]bool   // keys the persisted manifest referenced at the last check
	listed      []Object          // the last listing
	lastValue   []byte            // the last record value observed
	lastRev     int64             // the etcd revision of lastValue
	seqs        seqState          // format version 3: seqs, roots and their parents (seq.go)
	fragStarts  []uint64          // live fragments' first offsets at the last check
	gapOffsets  uint64            // offsets in the live gaps at the last check
	// awaitAcked are the offsets await_offset answered persisted since the last check;
	// awaitDeferred those of them still to be judged against the records (see await.go).
	awaitAcked    []uint64
	awaitDeferred []uint64
}

// Checker judges the remote tier against what was acknowledged. Observe, the harness's
// notes (Truncated, Lost, PolicySet) and Check may be called from different goroutines.
type Checker struct {
	mu         sync.Mutex
	cfg        Config
	streams    map[string]*streamState
	order      []string
	cycle      int
	violations []Violation
	seen       map[string]bool // violations reported, by stream, rule and detail
	windows    []revWindow     // etcd wipes and restores the harness declared (seq.go)
	outside    int             // objects under the key prefix outside the stream prefixes at the last check
	stats      Stats
}

// New returns a checker for cfg.
func New(cfg Config) (*Checker, error) {
	c := &Checker{cfg: cfg, streams: map[string]*streamState{}, seen: map[string]bool{}}
	for _, sc := range cfg.Streams {
		lin, err := NewLineage(sc.Load)
		if err != nil {
			return nil, fmt.Errorf("check: stream %s: %w", sc.ID, err)
		}
		c.streams[sc.ID] = &streamState{cfg: sc, lin: lin, policies: map[int][]Policy{}, etags: map[string]string{},
			verified: map[string]bool{}, verifiedOld: map[string]bool{}, referenced: map[string]bool{}, seqs: newSeqState()}
		c.order = append(c.order, sc.ID)
	}
	return c, nil
}

// SetCycle tells the checker which cycle the soak is in (for policies and violations).
func (c *Checker) SetCycle(cycle int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cycle = cycle
}

// violate records a violation (c.mu held).
func (c *Checker) violate(stream, rule, format string, args ...any) {
	detail := fmt.Sprintf(format, args...)
	key := stream + "\x00" + rule + "\x00" + detail
	if c.seen[key] {
		return // the same finding at a later check: reported once
	}
	c.seen[key] = true
	v := Violation{Cycle: c.cycle, Stream: stream, Rule: rule, Detail: detail, Seq: -1}
	if h := c.cfg.History; h != nil {
		e := h.Add(c.cycle, "VIOLATION", stream, false, "%s: %s", rule, detail)
		v.Seq = e.Seq
		v.Slice = h.Slice(e.Seq, stream, 40)
	}
	c.violations = append(c.violations, v)
}

// Violations is every violation found so far.
func (c *Checker) Violations() []Violation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Violation(nil), c.violations...)
}

// Stats are the figures so far.
func (c *Checker) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// AckedNext is the highest persisted next offset acknowledged for stream.
func (c *Checker) AckedNext(stream string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[stream].ackedNext
}

// Truncated notes that the harness cut stream's local log back to end at cut (a lost
// unsynced tail): the remote tier may give up the chunks from cut on, once.
func (c *Checker) Truncated(stream string, cut uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.streams[stream]
	// A cut at or above what was acknowledged explains nothing: the remote tier is not ahead.
	st.truncations = append(st.truncations, truncation{cut: cut, used: cut >= st.ackedNext})
}

// Forked notes that the harness cut stream's local log back to cut and wrote another
// timeline from there, the load cfg describes (what a new leader writes after an unclean
// failover: other chunks at the same offsets, a higher epoch). From cut on the expected
// chunks are the new timeline's. While the remote tier may still hold the old timeline's
// chunks above cut (they were acknowledged), those alone may leave it, and the persisted
// next offset may fall once, to cut exactly: the chunks below are the same in both, the
// chunk at cut differs.
func (c *Checker) Forked(stream string, cut uint64, cfg loadgen.Config) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.streams[stream]
	if st.fork != nil {
		return fmt.Errorf("check: stream %s forked at %d while the fork at %d is pending", stream, cut, st.fork.at)
	}
	old := st.lin.Mapping()
	if err := st.lin.Fork(cut, cfg); err != nil {
		return fmt.Errorf("check: stream %s: %w", stream, err)
	}
	c.stats.Forks++
	if cut < st.ackedNext {
		st.fork = &pendingFork{at: cut, old: old}
		st.truncations = append(st.truncations, truncation{cut: cut, fork: true})
		// Fragments compared before the fork matched the old timeline: compare them again,
		// so that one still live above the fork counts as old (and is judged once followed).
		st.verified = map[string]bool{}
	}
	return nil
}

// ForkPending reports whether stream's remote tier may still hold chunks of the timeline
// before its last fork.
func (c *Checker) ForkPending(stream string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[stream].fork != nil
}

// followFork records that the remote tier followed the pending fork (cut back to it, or
// holding the new timeline's chunks above it): from now on only the new timeline's chunks
// are expected there, and fragments that matched only the old one are compared again.
func (c *Checker) followFork(st *streamState, how string) {
	f := st.fork
	st.fork = nil
	st.keepNext = min(st.keepNext, f.at)
	for i := range st.truncations {
		if st.truncations[i].fork {
			st.truncations[i].used = true
		}
	}
	for k := range st.verifiedOld {
		delete(st.verified, k)
	}
	st.verifiedOld = map[string]bool{}
	c.stats.ForksFollowed++
	if h := c.cfg.History; h != nil {
		h.Add(c.cycle, "fork-followed", st.cfg.ID, false, "the remote tier follows the fork at %d: %s", f.at, how)
	}
}

// expireTruncations forgets lost tails the node did not act on while it ran: once the
// broker has appended again (every cycle does), the log is no longer behind. A fork stays
// until the remote tier follows it.
func (st *streamState) expireTruncations() {
	kept := st.truncations[:0]
	for _, t := range st.truncations {
		if t.fork && !t.used {
			kept = append(kept, t)
		}
	}
	st.truncations = kept
}

// lowestTruncation is the unused truncation with the lowest cut below the acknowledged next
// offset: the node's divergence point is the first offset where the log changed (nil: none).
func (st *streamState) lowestTruncation() *truncation {
	var best *truncation
	for i := range st.truncations {
		t := &st.truncations[i]
		if !t.used && t.cut < st.ackedNext && (best == nil || t.cut < best.cut) {
			best = t
		}
	}
	return best
}

// Lost notes that the harness deleted stream's local offsets [from, to) before the node
// persisted them (the broker's retention outran the upload): a declared gap may cover them.
// from must be the persisted next offset acknowledged when they were deleted (or above).
func (c *Checker) Lost(stream string, from, to uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.streams[stream]
	if from < st.keepNext {
		from = st.keepNext // acknowledged data may never become a gap
	}
	if from < to {
		st.losses = append(st.losses, rng{from, to})
	}
}

// PolicySet notes that the harness set stream's retention policy to p in the current cycle.
func (c *Checker) PolicySet(stream string, p Policy) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.streams[stream]
	st.policies[c.cycle] = append(st.policies[c.cycle], p)
}

// candidates are the policies that may have been in force lately: the configuration's and
// those set in this cycle and the one before (a `node retention` policy lasts until the
// node restarts; every cycle restarts it).
func (c *Checker) candidates(st *streamState) []Policy {
	out := []Policy{st.cfg.Policy}
	out = append(out, st.policies[c.cycle]...)
	out = append(out, st.policies[c.cycle-1]...)
	return out
}

// Record is the manifest record in etcd (remote-format.md, "Metadata records"), decoded
// strictly. Version 1 names a version 1 or 2 root by the writer's epoch and the root's uid;
// version 2 names a version 3 root by its seq and uid.
type Record struct {
	Version        int    `json:"version"`
	Seq            uint64 `json:"seq"` // record version 2 only (0: a version 1 record)
	Epoch          uint64 `json:"epoch"`
	RootUID        string `json:"rootUid"`
	FirstOffset    uint64 `json:"firstOffset"`
	NextOffset     uint64 `json:"nextOffset"`
	TotalSize      uint64 `json:"totalSize"`
	FirstTimestamp int64  `json:"firstTimestamp"`
}

// DecodeRecord decodes a manifest record: every field of its version present, nothing
// else. Version 1 has no seq; version 2 must carry one of at least 1. It returns the
// record and its root uid.
func DecodeRecord(b []byte) (Record, uint64, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return Record{}, 0, fmt.Errorf("manifest record: %w", err)
	}
	for _, f := range []string{"version", "epoch", "rootUid", "firstOffset", "nextOffset", "totalSize", "firstTimestamp"} {
		if _, ok := fields[f]; !ok {
			return Record{}, 0, fmt.Errorf("manifest record: field %s missing", f)
		}
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var r Record
	if err := d.Decode(&r); err != nil {
		return Record{}, 0, fmt.Errorf("manifest record: %w", err)
	}
	_, hasSeq := fields["seq"]
	switch {
	case r.Version == 1 && hasSeq:
		return Record{}, 0, fmt.Errorf("manifest record: version 1 with a seq field (seq came with version 2)")
	case r.Version == 2 && !hasSeq:
		return Record{}, 0, fmt.Errorf("manifest record: version 2 without a seq field")
	case r.Version == 2 && r.Seq == 0:
		return Record{}, 0, fmt.Errorf("manifest record: version 2 with seq 0 (seqs start at 1)")
	case r.Version != 1 && r.Version != 2:
		return Record{}, 0, fmt.Errorf("manifest record: version %d", r.Version)
	}
	uid, err := strconv.ParseUint(r.RootUID, 16, 64)
	if len(r.RootUID) != 16 || strings.ToLower(r.RootUID) != r.RootUID || err != nil {
		return Record{}, 0, fmt.Errorf("manifest record: root uid %q is not 16 lowercase hex digits", r.RootUID)
	}
	if r.FirstOffset > r.NextOffset || r.FirstTimestamp < -1 {
		return Record{}, 0, fmt.Errorf("manifest record: version %d, offsets [%d,%d), first timestamp %d", r.Version, r.FirstOffset, r.NextOffset, r.FirstTimestamp)
	}
	return r, uid, nil
}

// Observe judges one persisted manifest record of stream, as etcd holds it (kv, seen by a
// watch or a read): next offset never regresses except by a harness truncation, first
// offset never falls and rises only as far as a retention policy in force allows, the
// epoch never falls, the seq never falls and names one root uid. Records come in etcd's
// order, not in the order they reach the checker: a watch resuming after an outage replays
// records older than one a read already showed, and those are not news. Records etcd held
// between a wipe or a restore the harness declared (EtcdRewound) and the recovery after it
// (EtcdRecovered) are not judged: the record the recovery left is, against everything
// acknowledged before.
func (c *Checker) Observe(stream string, kv *mvccpb.KeyValue) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.observe(stream, kv)
}

func (c *Checker) observe(stream string, kv *mvccpb.KeyValue) {
	st, ok := c.streams[stream]
	if !ok || kv.ModRevision <= st.lastRev {
		return
	}
	if w := c.window(kv.ModRevision); w != nil {
		c.stats.RewoundRecords++
		return
	}
	c.judgeRecord(st, kv, "")
}

// judgeRecord judges the record kv (c.mu held); recovered names the declared fault the
// record was recovered after ("": a record the node wrote).
func (c *Checker) judgeRecord(st *streamState, kv *mvccpb.KeyValue, recovered string) {
	stream, value := st.cfg.ID, kv.Value
	cur := recordLink{createRev: kv.CreateRevision, version: kv.Version, rev: kv.ModRevision}
	prev := st.seqs.link
	st.seqs.link = recordLink{}
	st.lastRev = kv.ModRevision
	if bytes.Equal(value, st.lastValue) {
		// The same record put again (or read again): the key's next version follows this one,
		// whose content is known.
		st.seqs.link = prev
		st.seqs.link.createRev, st.seqs.link.version, st.seqs.link.rev = cur.createRev, cur.version, cur.rev
		return
	}
	st.lastValue = append([]byte(nil), value...)
	r, uid, err := DecodeRecord(value)
	if err != nil {
		c.violate(stream, "corrupt-record", "%v: %q", err, value)
		return
	}
	cur.valid, cur.seq, cur.uid = true, r.Seq, uid
	st.seqs.link = cur
	c.judgeSeq(st, r, uid, prev, cur, recovered)
	c.stats.Acks++
	if r.Epoch < st.epoch {
		c.violate(stream, "epoch-regressed", "record at epoch %d after epoch %d", r.Epoch, st.epoch)
	}
	st.epoch = max(st.epoch, r.Epoch)
	if r.NextOffset < st.ackedNext {
		t := st.lowestTruncation()
		var tr truncation
		if t != nil {
			tr = *t
			for i := range st.truncations { // the lowest cut settles every loss above it
				if u := &st.truncations[i]; !u.used && u.cut >= t.cut {
					u.used = true
				}
			}
		}
		switch {
		case t == nil:
			c.violate(stream, "next-regressed", "persisted next offset %d after %d was acknowledged, and no truncation the harness caused explains it", r.NextOffset, st.ackedNext)
		case tr.cut > r.NextOffset:
			c.violate(stream, "truncated-below-divergence", "persisted next offset %d after %d was acknowledged: the harness cut the local log at %d, the chunks both hold end there, so only offsets from %d on may leave the remote tier, yet [%d,%d) left it too",
				r.NextOffset, st.ackedNext, tr.cut, tr.cut, r.NextOffset, tr.cut)
			st.keepNext = min(st.keepNext, tr.cut)
		case tr.fork && r.NextOffset > tr.cut && st.fork != nil && st.fork.at == tr.cut:
			// The cut and the new timeline's first fragments in one persist (the cut's own
			// persist failed, and its retry carried what was uploaded since): the record
			// alone cannot tell the new timeline's [cut, next) from the old one's kept. The
			// fork is taken as followed, so the next check compares every live fragment
			// above the cut with the new timeline only: old chunks kept there are
			// bytes-differ, old and new at once mixed-timelines.
			st.keepNext = min(st.keepNext, tr.cut)
			c.stats.Truncations++
			if h := c.cfg.History; h != nil {
				h.Add(c.cycle, "truncation-seen", stream, false, "persisted next %d -> %d (the fork the harness wrote at %d, with the new timeline's [%d,%d) in the same persist: judged by the next check's fragments)",
					st.ackedNext, r.NextOffset, tr.cut, tr.cut, r.NextOffset)
			}
		case tr.fork && r.NextOffset > tr.cut:
			c.violate(stream, "truncated-above-divergence", "persisted next offset %d after %d was acknowledged: the local log holds another timeline's chunks from %d on (a fork), so the remote tier must be cut back to %d exactly, yet it kept the old timeline's [%d,%d)",
				r.NextOffset, st.ackedNext, tr.cut, tr.cut, tr.cut, r.NextOffset)
		default:
			st.keepNext = min(st.keepNext, tr.cut)
			c.stats.Truncations++
			what := "a lost tail the harness caused"
			if tr.fork {
				what = "the fork the harness wrote"
			}
			if h := c.cfg.History; h != nil {
				h.Add(c.cycle, "truncation-seen", stream, false, "persisted next %d -> %d (%s at %d)", st.ackedNext, r.NextOffset, what, tr.cut)
			}
		}
		if tr.fork && st.fork != nil && st.fork.at == tr.cut {
			c.followFork(st, fmt.Sprintf("persisted next %d -> %d", st.ackedNext, r.NextOffset))
		}
		st.ackedNext = r.NextOffset
	}
	st.ackedNext = max(st.ackedNext, r.NextOffset)
	if r.NextOffset > st.keepNext && !st.inLoss(st.keepNext, r.NextOffset) {
		st.keepNext = r.NextOffset
	}
	st.maxNext = max(st.maxNext, r.NextOffset)
	if st.seenFirst && r.FirstOffset < st.first {
		c.violate(stream, "first-regressed", "persisted first offset %d after %d", r.FirstOffset, st.first)
	}
	if st.seenFirst && r.FirstOffset > st.first {
		c.judgeRetention(st, st.first, r.FirstOffset)
	}
	if !st.seenFirst || r.FirstOffset > st.first {
		st.first = r.FirstOffset
	}
	st.seenFirst = true
}

// judgeRetention checks that offsets [from, to) leaving the remote tier at its head were
// allowed to go: each chunk either lies in a range the local log lost (a gap) or a policy
// that may have been in force allows its removal.
func (c *Checker) judgeRetention(st *streamState, from, to uint64) {
	pols := c.candidates(st)
	m := st.remote()
	now := time.Now().UnixMilli()
	off := from
	for off < to {
		if l, ok := st.lossCovering(off); ok {
			off = min(l.to, to)
			continue
		}
		ch := m.chunkCovering(off)
		allowed := false
		for _, p := range pols {
			if p.MaxBytes > 0 && m.bytesBetween(ch.Offset, st.maxNext)+c.cfg.RetentionSlack > p.MaxBytes {
				allowed = true
			}
			if p.MaxAge > 0 && ch.TS < now-p.MaxAge.Milliseconds() {
				allowed = true
			}
		}
		if !allowed {
			c.violate(st.cfg.ID, "retention-not-allowed", "offsets [%d,%d) left the remote tier (first offset %d -> %d), but no policy in force (%v) allows chunk %d (timestamp %d, %d bytes up to next %d)",
				from, to, from, to, pols, ch.Offset, ch.TS, m.bytesBetween(ch.Offset, st.maxNext), st.maxNext)
			return
		}
		c.stats.RetainedOffsets += min(ch.End(), to) - off
		off = ch.End()
	}
}

// remote is the mapping the remote tier's head is judged by: the timelines before a pending
// fork (the old chunks may still be there), else every timeline.
func (st *streamState) remote() mapping {
	if st.fork != nil {
		return st.fork.old
	}
	return st.lin.tls
}

// lossCovering is the loss range that holds off.
func (st *streamState) lossCovering(off uint64) (rng, bool) {
	for _, l := range st.losses {
		if off >= l.from && off < l.to {
			return l, true
		}
	}
	return rng{}, false
}

// inLoss reports whether [from, to) lies wholly in one loss range (a gap being declared).
func (st *streamState) inLoss(from, to uint64) bool {
	for _, l := range st.losses {
		if from >= l.from && to <= l.to {
			return true
		}
	}
	return false
}

// gapAllowed reports whether [from, to) lies within ranges the harness deleted locally.
func (st *streamState) gapAllowed(from, to uint64) bool {
	ls := append([]rng(nil), st.losses...)
	sort.Slice(ls, func(i, j int) bool { return ls[i].from < ls[j].from })
	off := from
	for _, l := range ls {
		if l.from <= off && l.to > off {
			off = l.to
		}
		if off >= to {
			return true
		}
	}
	return off >= to
}
