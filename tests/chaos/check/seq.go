package check

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Format version 3 from outside (remote-format.md, "Root object", "Resolution, adoption and
// rollback", "Recovering the metadata from the bucket"; invariants.md 18-20): every new root
// is root-<seq20>.manifest, created once, naming its own seq, epoch and uid and the seq and
// uid of the persisted manifest it was built on; the manifest record (version 2) names the
// root by seq and uid. What the checker can judge of it, each only where it is certain:
//
//   - one root per seq: two records never name one seq with two uids, the root of a seq
//     never changes (object-overwritten), its key's seq is its own seq;
//   - a root's parent seq is below its seq (the decoder refuses the root otherwise);
//   - the record's seq never falls, nor its version (outside a declared etcd wipe or
//     restore, after which the recovered record is judged against everything before);
//   - the record names a root whose parent is the record it replaced: the persist is a
//     compare-and-swap on the record, and adoption adopts a child of the record. The checker
//     judges this only where it knows which record came right before: the previous version of
//     the same etcd key (a watch or a read may miss records; a missed one proves nothing);
//     a record the node created (version 1 of the key, outside a declared rewind) names a
//     root without a parent;
//   - a parent seq names the root of that seq: when the checker knows the uid of that seq
//     (from a record or from the root itself), the parent uid is it;
//   - a root in the bucket proves its parent was persisted, so the record etcd holds at a
//     check is never below any parent seq the bucket ever showed.

// recordLink is what the checker knows of the last record it judged, to tell whether the
// next one it sees is the very next version of the same etcd key.
type recordLink struct {
	valid     bool // the record decoded: seq and uid are known
	createRev int64
	version   int64
	rev       int64
	seq       uint64 // 0: a version 1 record (it names a version 1 or 2 root by uid)
	uid       uint64
}

// follows reports whether the record at (createRev, version) is the one right after l in
// etcd's history of the key: the same incarnation of the key, the next version.
func (l recordLink) follows(createRev, version int64) bool {
	return l.valid && l.createRev == createRev && l.version+1 == version
}

// pendingRecord is a record whose root's parent is judged at the next check, once the root
// is read: pred is the record right before it (nil: unknown), created says it created the
// key (no record before it).
type pendingRecord struct {
	seq, uid uint64
	rev      int64
	pred     *recordLink
	created  bool
}

// seqState is a stream's format version 3 state.
type seqState struct {
	seq        uint64            // highest seq a judged record named
	recVersion int               // highest record version judged
	seqUID     map[uint64]uint64 // seq -> uid, from every record seen (one root per seq, ever)
	roots      map[uint64]RootLineage
	rootKeys   map[string]bool // root keys (with their etag) read and judged
	maxParent  uint64          // highest parent seq of any root read: a seq the bucket proves persisted
	maxParentK string          // the root that proved it
	link       recordLink
	pending    []pendingRecord
}

func newSeqState() seqState {
	return seqState{seqUID: map[uint64]uint64{}, roots: map[uint64]RootLineage{}, rootKeys: map[string]bool{}}
}

// revWindow is a stretch of etcd revisions in which etcd's records were the harness's doing
// (a wipe or a restore) or recovery's, not the node's: (from, to]; to 0 while open.
type revWindow struct {
	from, to int64
	what     string
}

// window is the declared rewind that revision rev falls in, or nil (c.mu held).
func (c *Checker) window(rev int64) *revWindow {
	for i := range c.windows {
		w := &c.windows[i]
		if rev > w.from && (w.to == 0 || rev <= w.to) {
			return w
		}
	}
	return nil
}

// EtcdRewound notes that the harness is about to wipe etcd or put it back to a snapshot
// (what says which), the node stopped: records at revisions above from (the revision of the
// harness's last read of every record, made after the node stopped) are not the node's
// until EtcdRecovered. Records may fall back in time meanwhile.
func (c *Checker) EtcdRewound(what string, from int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.windows); n > 0 && c.windows[n-1].to == 0 {
		return fmt.Errorf("check: %s declared while the %s from revision %d is not recovered", what, c.windows[n-1].what, c.windows[n-1].from)
	}
	c.windows = append(c.windows, revWindow{from: from, what: what})
	c.stats.EtcdRewinds++
	if h := c.cfg.History; h != nil {
		h.Add(c.cycle, "etcd-rewound", "", false, "%s after revision %d: records are not judged until the recovery", what, from)
	}
	return nil
}

// EtcdRecovered ends the declared rewind: `node recover` has run and etcd held, at revision
// rev, the records kvs (by stream; nil: none). Each is judged now against everything
// acknowledged before the rewind: the recovered record must cover it all (nothing durable
// lost), its seq must not be below any seq persisted before. A stream that had persisted
// and has no record after the recovery lost its metadata.
func (c *Checker) EtcdRecovered(rev int64, kvs map[string]*mvccpb.KeyValue) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.windows)
	if n == 0 || c.windows[n-1].to != 0 {
		return errors.New("check: a recovery without a declared etcd wipe or restore")
	}
	w := &c.windows[n-1]
	w.to = rev
	for _, id := range c.order {
		st := c.streams[id]
		kv := kvs[id]
		if kv == nil {
			if st.ackedNext > 0 {
				c.violate(id, "record-not-recovered", "after the %s and node recover, etcd holds no manifest record, after persisted next %d was acknowledged", w.what, st.ackedNext)
			}
			continue
		}
		c.stats.Recoveries++
		if kv.ModRevision > st.lastRev {
			c.judgeRecord(st, kv, w.what)
		}
		st.lastRev = max(st.lastRev, rev)
	}
	return nil
}

// judgeSeq applies the seq rules to a record as it is observed (c.mu held): prev is the last
// record judged before it, cur this one; recovered names the declared fault it was
// recovered after ("": the node wrote it).
func (c *Checker) judgeSeq(st *streamState, r Record, uid uint64, prev, cur recordLink, recovered string) {
	id, l := st.cfg.ID, &st.seqs
	after := "no etcd wipe or restore the harness declared explains it"
	if recovered != "" {
		after = "recovered after the " + recovered + ": the recovered record must cover everything persisted before"
	}
	if r.Version < l.recVersion {
		c.violate(id, "record-version-regressed", "a version %d record after a version %d one (%s)", r.Version, l.recVersion, after)
	}
	l.recVersion = max(l.recVersion, r.Version)
	if r.Version < 2 {
		return
	}
	if old, ok := l.seqUID[r.Seq]; ok && old != uid {
		c.violate(id, "seq-two-roots", "records name seq %d with root uid %016x and %016x: one root per seq, ever", r.Seq, old, uid)
	}
	l.seqUID[r.Seq] = uid
	if r.Seq < l.seq {
		c.violate(id, "seq-regressed", "the record names seq %d after seq %d was persisted (%s)", r.Seq, l.seq, after)
	}
	l.seq = max(l.seq, r.Seq)
	p := pendingRecord{seq: r.Seq, uid: uid, rev: cur.rev}
	switch {
	case recovered != "":
		// Recovery writes the top of the bucket's lineage: its parent may be a record etcd lost.
	case prev.follows(cur.createRev, cur.version):
		pp := prev
		p.pred = &pp
	case cur.version == 1:
		p.created = true
	}
	l.pending = append(l.pending, p)
}

// judgeRoots reads every version 3 root of the snapshot's listing not read before, checks
// that its key's seq is its own and that its parent is consistent with what the checker
// knows, then judges the records observed since the last check against their roots (c.mu
// held, the node stopped). rec is the record etcd holds now (nil: none).
func (c *Checker) judgeRoots(ctx context.Context, sn *snapshot, rootKeys map[string]uint64, rec *Record) error {
	id, l := sn.st.cfg.ID, &sn.st.seqs
	var fresh []RootLineage
	for key, seq := range rootKeys {
		o := sn.objects[key]
		sig := key + "@" + o.ETag + "/" + strconv.FormatInt(o.Size, 10)
		if l.rootKeys[sig] {
			continue
		}
		b, err := c.cfg.Bucket.Get(ctx, key)
		if errors.Is(err, ErrNoSuchKey) {
			continue // listed, then gone: nothing to judge
		}
		if err != nil {
			return err
		}
		l.rootKeys[sig] = true
		c.stats.RootsRead++
		root, err := DecodeRoot(b)
		if err != nil {
			c.violate(id, "corrupt-root", "%s: %v", key, err)
			continue
		}
		lin := root.Lineage
		if root.Version != 3 || lin.Seq != seq {
			c.violate(id, "root-key-seq", "%s is a version %d root of seq %d: a root-<seq20>.manifest key holds the version 3 root of that seq", key, root.Version, lin.Seq)
			continue
		}
		c.stats.RootLineages++
		if old, ok := l.roots[seq]; ok && old != lin {
			c.violate(id, "seq-two-roots", "the root of seq %d was %s, now %s: one root per seq, ever", seq, old, lin)
		}
		l.roots[seq] = lin
		if u, ok := l.seqUID[seq]; ok && u != lin.UID {
			c.violate(id, "seq-two-roots", "a record named seq %d with root uid %016x, the root of seq %d is %s", seq, u, seq, lin)
		}
		if lin.ParentSeq > l.maxParent {
			l.maxParent, l.maxParentK = lin.ParentSeq, key
		}
		fresh = append(fresh, lin)
	}
	// A parent names the root of its seq: where the checker knows that seq's uid, it is it.
	for _, lin := range fresh {
		if lin.ParentSeq == 0 {
			continue
		}
		if u, ok := l.seqUID[lin.ParentSeq]; ok && u != lin.ParentUID {
			c.violate(id, "parent-not-persisted", "the root %s names parent seq %d uid %016x, but the record of seq %d named root uid %016x: its parent was never persisted", lin, lin.ParentSeq, lin.ParentUID, lin.ParentSeq, u)
		} else if p, ok := l.roots[lin.ParentSeq]; ok && p.UID != lin.ParentUID {
			c.violate(id, "parent-not-persisted", "the root %s names parent seq %d uid %016x, but the root of seq %d is %s: its parent never existed", lin, lin.ParentSeq, lin.ParentUID, lin.ParentSeq, p)
		}
	}
	// The records observed since the last check: each names a root built on the record
	// before it (when the checker knows which that was).
	for _, p := range l.pending {
		lin, ok := l.roots[p.seq]
		if !ok || lin.UID != p.uid {
			continue // the root is gone (collected) or another violation says it
		}
		switch {
		case p.pred != nil && p.pred.seq == p.seq && p.pred.uid == p.uid:
			// the same root named again (an epoch or summary change cannot happen without a
			// new root, but naming it twice breaks no lineage rule)
		case p.pred != nil:
			c.stats.ParentsJudged++
			if lin.ParentSeq != p.pred.seq || lin.ParentUID != p.pred.uid {
				c.violate(id, "parent-not-previous-record", "the record at revision %d names the root %s, but the record right before it (the key's previous version, revision %d) named seq %d uid %016x: a persist or an adoption builds on the record it replaces",
					p.rev, lin, p.pred.rev, p.pred.seq, p.pred.uid)
			}
		case p.created:
			c.stats.ParentsJudged++
			if lin.ParentSeq != 0 {
				c.violate(id, "parent-not-persisted", "the record at revision %d created the stream's manifest record and names the root %s, whose parent seq %d was never in etcd",
					p.rev, lin, lin.ParentSeq)
			}
		}
	}
	l.pending = nil
	// The bucket proves every parent seq persisted: the record is never below it.
	if rec != nil && rec.Version >= 2 && rec.Seq < l.maxParent {
		c.violate(id, "record-behind-bucket", "etcd's record names seq %d, but the root %s names parent seq %d: the bucket proves seq %d was persisted, the record went back", rec.Seq, l.maxParentK, l.maxParent, l.maxParent)
	}
	return nil
}

// identityProblem says how root contradicts the record that names it (uid: the record's
// root uid), or "": a version 2 record names a version 3 root by its seq and uid, and repeats
// the epoch of the writer that made it; a version 1 record names a version 1 or 2 root.
func identityProblem(r Record, uid uint64, root Root) string {
	if r.Version < 2 {
		if root.Version > 2 {
			return fmt.Sprintf("a version %d record names a version %d root", r.Version, root.Version)
		}
		return ""
	}
	l := root.Lineage
	switch {
	case root.Version != 3:
		return fmt.Sprintf("a version %d record (seq %d) names a version %d root", r.Version, r.Seq, root.Version)
	case l.Seq != r.Seq || l.UID != uid:
		return fmt.Sprintf("the record names seq %d uid %016x, the root is %s", r.Seq, uid, l)
	case l.Epoch != r.Epoch:
		return fmt.Sprintf("the record says epoch %d, the root %s", r.Epoch, l)
	}
	return ""
}
