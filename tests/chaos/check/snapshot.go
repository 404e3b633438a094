package check

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// checkTimeout bounds one stream's snapshot check.
const checkTimeout = 2 * time.Minute

// leaf is a fragment or gap entry of the tree with the offset it ends at.
type leaf struct {
	Entry
	end uint64
}

// snapshot is what one check of one stream read.
type snapshot struct {
	st      *streamState
	objects map[string]Object
	refs    map[entryRef]string // entry -> key
	roots   map[string]bool
	ref     map[string]bool // keys the manifest references
	// While a fork is pending: live fragments holding chunks at or above it that matched
	// only the old timeline, and only the new one (both at once: the timelines are mixed).
	oldKeys, newKeys []string
}

// Check reads every stream's etcd records and remote tier now and checks them: the record
// names an existing root that decodes and agrees with it; every group and live fragment the
// tree names exists, decodes and agrees with its entry; the live leaves tile [first, next)
// exactly (a fragment object holds exactly the chunks of its range); every chunk is byte for
// byte the load's; sizes and header timestamps add up; gaps cover only what the local log
// lost; every acknowledged offset is still there; objects were never overwritten. With full
// it compares every fragment again, else only those not compared before. Call it while no
// node runs (a running node may reap what the check is reading).
func (c *Checker) Check(ctx context.Context, full bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.Checks++
	for _, id := range c.order {
		sctx, cancel := context.WithTimeout(ctx, checkTimeout)
		err := c.checkStream(sctx, c.streams[id], full)
		cancel()
		c.streams[id].expireTruncations()
		c.streams[id].awaitAcked = nil
		if err != nil {
			return fmt.Errorf("check stream %s: %w", id, err)
		}
	}
	if err := c.checkOutside(ctx); err != nil {
		return fmt.Errorf("check the key prefix: %w", err)
	}
	c.stats.GapOffsets = 0
	for _, st := range c.streams {
		c.stats.GapOffsets += st.gapOffsets
	}
	return nil
}

func (c *Checker) checkStream(ctx context.Context, st *streamState, full bool) error {
	id := st.cfg.ID
	base := c.cfg.EtcdPrefix + "/streams/" + id + "/"
	resp, err := c.cfg.Etcd.Get(ctx, base, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("etcd read %s: %w", base, err)
	}
	var recKV *mvccpb.KeyValue
	var storedEpoch uint64
	anchored := false
	for _, kv := range resp.Kvs {
		switch strings.TrimPrefix(string(kv.Key), base) {
		case "manifest":
			recKV = kv
		case "epoch":
			if storedEpoch, err = strconv.ParseUint(string(kv.Value), 10, 64); err != nil || len(kv.Value) != 20 {
				c.violate(id, "corrupt-record", "epoch record %q", kv.Value)
			}
		case "anchor":
			anchored = true
		}
	}
	objs, err := c.cfg.Bucket.List(ctx, StreamPrefix(c.cfg.KeyPrefix, id))
	if err != nil {
		return err
	}
	sn := &snapshot{st: st, objects: map[string]Object{}, refs: map[entryRef]string{}, roots: map[string]bool{}, ref: map[string]bool{}}
	prefix := StreamPrefix(c.cfg.KeyPrefix, id)
	rootKeys := map[string]uint64{} // version 3 roots: key -> seq
	for _, o := range objs {
		sn.objects[o.Key] = o
		sig := o.ETag + "/" + strconv.FormatInt(o.Size, 10)
		if old, ok := st.etags[o.Key]; ok && old != sig {
			c.violate(id, "object-overwritten", "%s was %s, now %s: objects are created or deleted, never overwritten", o.Key, old, sig)
			delete(st.verified, o.Key+"@"+old)
		}
		st.etags[o.Key] = sig
		k, err := parseKey(strings.TrimPrefix(o.Key, prefix))
		if err != nil {
			c.violate(id, "foreign-key", "%v", err)
			continue
		}
		switch {
		case k.marker:
			c.violate(id, "deletion-marker", "the bucket holds %s, the stream's deletion marker, yet the harness deleted no stream", o.Key)
		case k.isRoot:
			sn.roots[o.Key] = true
			if k.seq > 0 {
				rootKeys[o.Key] = k.seq
			}
		default:
			sn.refs[entryRef{kind: k.kind, first: k.first, uid: k.uid}] = o.Key
		}
	}
	st.listed = objs
	var rec *Record
	if recKV != nil {
		if r, _, err := DecodeRecord(recKV.Value); err == nil {
			rec = &r
		}
	}
	if recKV == nil {
		c.judgeDeferredAwaits(st)
		st.referenced = map[string]bool{}
		if st.ackedNext > 0 {
			c.violate(id, "record-vanished", "no manifest record in etcd, after persisted next %d was acknowledged", st.ackedNext)
		}
		return c.judgeRoots(ctx, sn, rootKeys, nil)
	}
	if !anchored {
		c.violate(id, "anchor-missing", "a manifest record without an anchor")
	}
	c.observe(id, recKV)
	c.judgeDeferredAwaits(st)
	if err := c.judgeRoots(ctx, sn, rootKeys, rec); err != nil {
		return err
	}
	if rec == nil {
		return nil // observe reported it
	}
	_, uid, _ := DecodeRecord(recKV.Value)
	if storedEpoch < rec.Epoch {
		c.violate(id, "epoch-record", "stored epoch %d below the record's epoch %d", storedEpoch, rec.Epoch)
	}
	rootKey := RecordRootKey(c.cfg.KeyPrefix, id, *rec, uid)
	if _, ok := sn.objects[rootKey]; !ok {
		c.violate(id, "missing-object", "the manifest record (next %d) names root %s, which is not in the bucket", rec.NextOffset, rootKey)
		return nil
	}
	sn.ref[rootKey] = true
	b, err := c.cfg.Bucket.Get(ctx, rootKey)
	if err != nil {
		return err
	}
	c.stats.RootsRead++
	root, err := DecodeRoot(b)
	if err != nil {
		c.violate(id, "corrupt-root", "%s: %v", rootKey, err)
		return nil
	}
	if p := identityProblem(*rec, uid, root); p != "" {
		c.violate(id, "record-root-mismatch", "the record names %s: %s", rootKey, p)
	}
	if root.First != rec.FirstOffset || root.Next != rec.NextOffset || root.Total != rec.TotalSize || root.FirstTS != rec.FirstTimestamp {
		c.violate(id, "record-root-mismatch", "record [%d,%d) size %d ts %d, root %s [%d,%d) size %d ts %d", rec.FirstOffset, rec.NextOffset, rec.TotalSize, rec.FirstTimestamp,
			rootKey, root.First, root.Next, root.Total, root.FirstTS)
	}
	leaves, err := c.walkTree(ctx, sn, root)
	if err != nil {
		return err
	}
	if leaves == nil {
		st.referenced = sn.ref
		return nil // a violation was reported
	}
	if err := c.checkLeaves(ctx, sn, root, leaves, full); err != nil {
		return err
	}
	st.referenced = sn.ref
	c.judgeFork(sn, *rec, full)
	return nil
}

// judgeFork decides what the snapshot says about a pending fork: a live fragment holding the
// new timeline's chunks above it shows the remote tier followed it (the truncation record
// itself may have gone by unseen); old and new chunks above it at once are two timelines
// mixed; at the final check (full) the remote tier must have followed it.
func (c *Checker) judgeFork(sn *snapshot, rec Record, full bool) {
	st := sn.st
	f := st.fork
	if f == nil {
		return
	}
	if len(sn.oldKeys) > 0 && len(sn.newKeys) > 0 {
		c.violate(st.cfg.ID, "mixed-timelines", "above the fork at %d the remote tier holds the old timeline's chunks (%s) and the new one's (%s) at once", f.at, sn.oldKeys[0], sn.newKeys[0])
	}
	switch {
	case len(sn.newKeys) > 0:
		c.followFork(st, "the bucket holds the new timeline's chunks above it ("+sn.newKeys[0]+")")
	case full && rec.NextOffset > f.at:
		c.violate(st.cfg.ID, "fork-not-followed", "at the final check the persisted next offset is %d and the local log has held another timeline from %d on since a fork, yet the remote tier was never cut back to it", rec.NextOffset, f.at)
	}
}

// walkTree flattens the tree into its leaves (entries of groups that end at or below the
// root's first offset are skipped: retention took them), checking every group it reads. A
// nil result with no error means a violation was reported.
func (c *Checker) walkTree(ctx context.Context, sn *snapshot, root Root) ([]leaf, error) {
	var out []leaf
	var walk func(es []Entry, end uint64, depth int) (bool, error)
	walk = func(es []Entry, end uint64, depth int) (bool, error) {
		for i, e := range es {
			eEnd := end
			if i+1 < len(es) {
				eEnd = es[i+1].First
			}
			if eEnd <= root.First {
				continue // wholly retained
			}
			if e.Kind == KindFragment || e.Kind == KindGap {
				out = append(out, leaf{Entry: e, end: eEnd})
				continue
			}
			if depth > 3 {
				c.violate(sn.st.cfg.ID, "corrupt-tree", "groups nested deeper than mega-groups")
				return false, nil
			}
			key, ok := sn.refs[entryRef{kind: e.Kind, first: e.First, uid: e.UID}]
			if !ok {
				c.violate(sn.st.cfg.ID, "missing-object", "the manifest references a group of kind %d at offset %d (uid %016x) that is not in the bucket", e.Kind, e.First, e.UID)
				return false, nil
			}
			sn.ref[key] = true
			b, err := c.cfg.Bucket.Get(ctx, key)
			if err != nil {
				return false, err
			}
			c.stats.GroupsRead++
			g, err := DecodeGroup(b, e.Kind)
			if err != nil {
				c.violate(sn.st.cfg.ID, "corrupt-group", "%s: %v", key, err)
				return false, nil
			}
			if p := groupProblem(e, g.Entries); p != "" {
				c.violate(sn.st.cfg.ID, "group-mismatch", "%s: %s", key, p)
				return false, nil
			}
			if ok, err := walk(g.Entries, eEnd, depth+1); !ok || err != nil {
				return ok, err
			}
		}
		return true, nil
	}
	ok, err := walk(root.Entries, root.Next, 1)
	if !ok || err != nil {
		return nil, err
	}
	if out == nil {
		out = []leaf{}
	}
	return out, nil
}

// groupProblem says how a group's children contradict its entry, or "".
func groupProblem(e Entry, children []Entry) string {
	if children[0].First != e.First {
		return fmt.Sprintf("first child at %d, the entry at %d", children[0].First, e.First)
	}
	if children[len(children)-1].First >= ^uint64(0) {
		return "bad offsets"
	}
	var sum uint64
	firstTS, lastTS, n := int64(0), int64(0), 0
	for _, ch := range children {
		if ch.Kind == KindGap {
			continue
		}
		if n == 0 {
			firstTS = ch.FirstTS
		}
		lastTS = ch.LastTS
		sum += ch.Size
		n++
	}
	switch {
	case n == 0:
		return "holds only gaps"
	case sum != e.Size:
		return fmt.Sprintf("children sizes add up to %d, the entry says %d", sum, e.Size)
	case firstTS != e.FirstTS || lastTS != e.LastTS:
		return fmt.Sprintf("children timestamps %d..%d, the entry says %d..%d", firstTS, lastTS, e.FirstTS, e.LastTS)
	}
	return ""
}

// checkLeaves checks the live leaves against the root, the objects and the load.
func (c *Checker) checkLeaves(ctx context.Context, sn *snapshot, root Root, leaves []leaf, full bool) error {
	st, id := sn.st, sn.st.cfg.ID
	var live []leaf
	for _, l := range leaves {
		if l.end > root.First {
			live = append(live, l)
		}
	}
	if len(live) == 0 {
		if root.First != root.Next || root.Total != 0 {
			c.violate(id, "hole", "root [%d,%d) size %d has no live entry: offsets [%d,%d) are in no fragment and no declared gap", root.First, root.Next, root.Total, root.First, root.Next)
		}
		return nil
	}
	if live[0].First != root.First {
		c.violate(id, "first-inside-entry", "the root's first offset %d is not where its first live entry starts (%d)", root.First, live[0].First)
	}
	if live[len(live)-1].end != root.Next {
		c.violate(id, "tiling", "the last live entry ends at %d, the root's next offset is %d", live[len(live)-1].end, root.Next)
	}
	var total uint64
	var gapOffsets uint64
	var starts []uint64
	defer func() { st.fragStarts = starts }()
	seenFrag := false
	for _, l := range live {
		if l.Kind == KindGap {
			gapOffsets += l.end - l.First
			c.awaitInGap(st, l.First, l.end)
			if !st.gapAllowed(l.First, l.end) {
				c.violate(id, "undeclared-loss", "a gap entry covers [%d,%d), which the local log never lost before it was persisted (losses %v)", l.First, l.end, st.losses)
			}
			continue
		}
		if !seenFrag {
			seenFrag = true
			if root.FirstTS != l.FirstTS || root.FirstLastTS != l.LastTS {
				c.violate(id, "header-timestamps", "root timestamps %d/%d, the first live fragment's %d/%d", root.FirstTS, root.FirstLastTS, l.FirstTS, l.LastTS)
			}
		}
		total += l.Size
		starts = append(starts, l.First)
		if err := c.checkFragment(ctx, sn, l, full); err != nil {
			return err
		}
	}
	if !seenFrag && (root.FirstTS != -1 || root.FirstLastTS != -1) {
		c.violate(id, "header-timestamps", "root timestamps %d/%d without a live fragment", root.FirstTS, root.FirstLastTS)
	}
	if total != root.Total {
		c.violate(id, "total-size", "live fragments add up to %d bytes, the root says %d", total, root.Total)
	}
	st.gapOffsets = gapOffsets
	return nil
}

// checkFragment finds a live fragment's object, decodes it, checks it holds exactly its
// entry's range and compares every chunk with the load.
func (c *Checker) checkFragment(ctx context.Context, sn *snapshot, l leaf, full bool) error {
	st, id := sn.st, sn.st.cfg.ID
	key, ok := sn.refs[entryRef{kind: KindFragment, first: l.First, uid: l.UID}]
	if !ok {
		c.violate(id, "missing-object", "the manifest references fragment [%d,%d) (uid %016x), which is not in the bucket", l.First, l.end, l.UID)
		return nil
	}
	sn.ref[key] = true
	acked := min(l.end, st.ackedNext)
	if acked > l.First {
		c.stats.OffsetsChecked += acked - l.First
	}
	o := sn.objects[key]
	vkey := key + "@" + o.ETag + "/" + strconv.FormatInt(o.Size, 10)
	if st.verified[vkey] && !full {
		if st.verifiedOld[vkey] {
			sn.oldKeys = append(sn.oldKeys, key)
		}
		return nil
	}
	b, err := c.cfg.Bucket.Get(ctx, key)
	if errors.Is(err, ErrNoSuchKey) {
		c.violate(id, "missing-object", "fragment %s was listed but is gone", key)
		return nil
	}
	if err != nil {
		return err
	}
	c.stats.FragmentsRead++
	f, err := DecodeFragment(b)
	if err != nil {
		c.violate(id, "corrupt-fragment", "%s: %v", key, err)
		return nil
	}
	first, last := f.Chunks[0], f.Chunks[len(f.Chunks)-1]
	switch {
	case first.ID != l.First || f.End() != l.end:
		c.violate(id, "hole", "fragment %s holds [%d,%d), its entry covers [%d,%d): offsets in no object and no declared gap", key, first.ID, f.End(), l.First, l.end)
		return nil
	case f.Region != l.Size:
		c.violate(id, "fragment-size", "fragment %s has %d chunk bytes, its entry says %d", key, f.Region, l.Size)
	case first.TS != l.FirstTS || last.TS != l.LastTS:
		c.violate(id, "fragment-timestamps", "fragment %s chunks %d..%d, its entry says %d..%d", key, first.TS, last.TS, l.FirstTS, l.LastTS)
	}
	// The expected chunks: the lineage's; while a fork is pending, a fragment reaching above
	// it may instead hold the old timeline's chunks there (not truncated yet).
	maps := []mapping{st.lin.tls}
	forkAbove := st.fork != nil && last.ID >= st.fork.at
	if forkAbove {
		maps = append(maps, st.fork.old)
	}
	var miss []mismatch
	for i, m := range maps {
		chunks, n, mm := compareChunks(f, b, m)
		if mm.rule == "" {
			c.stats.ChunksCompared += chunks
			c.stats.BytesCompared += n
			st.verified[vkey] = true
			switch {
			case forkAbove && i == 0:
				sn.newKeys = append(sn.newKeys, key)
			case forkAbove:
				sn.oldKeys = append(sn.oldKeys, key)
				st.verifiedOld[vkey] = true
			}
			return nil
		}
		miss = append(miss, mm)
	}
	detail := fmt.Sprintf("fragment %s: %s", key, miss[0].detail)
	if len(miss) > 1 {
		detail += fmt.Sprintf("; nor is it the timeline before the fork at %d: %s", st.fork.at, miss[1].detail)
	}
	c.violate(id, miss[0].rule, "%s", detail)
	return nil
}

// mismatch is why a fragment's chunks are not the expected ones (rule empty: they are).
type mismatch struct{ rule, detail string }

// compareChunks compares every chunk of fragment f (object bytes b) with the chunk mapping m
// expects at its offset, and returns how many chunks and bytes it compared.
func compareChunks(f Fragment, b []byte, m mapping) (chunks, n uint64, mm mismatch) {
	ids := make([]uint64, len(f.Chunks))
	for k, ch := range f.Chunks {
		ids[k] = ch.ID
	}
	runs, bad, ok := m.runs(ids)
	if !ok {
		return 0, 0, mismatch{"chunk-boundary", fmt.Sprintf("chunk %d starts where no chunk of the load (timeline from %d) starts", bad, m.at(bad).Base())}
	}
	for _, r := range runs {
		k := r.k
		err := r.ref.Walk(r.idx, r.n, func(rc RefChunk, want []byte) error {
			ch := f.Chunks[k]
			k++
			got := b[ch.Pos : ch.Pos+ch.Size]
			if rc.Offset != ch.ID || !bytes.Equal(got, want) {
				mm = mismatch{"bytes-differ", fmt.Sprintf("chunk %d (%d bytes, epoch %d) differs from the load's chunk %d (%d bytes, timeline from %d) at byte %d",
					ch.ID, len(got), ch.Epoch, rc.Offset, len(want), r.ref.Base(), firstDiff(got, want))}
				return errStop
			}
			chunks++
			n += uint64(len(got))
			return nil
		})
		if err != nil && !errors.Is(err, errStop) {
			return 0, 0, mismatch{"bytes-differ", err.Error()}
		}
		if mm.rule != "" {
			return 0, 0, mm
		}
	}
	return chunks, n, mismatch{}
}

var errStop = errors.New("stop")

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// Referenced is the set of keys stream's persisted manifest referenced at the last check
// (root, groups holding live offsets, live fragments), and every key listed then.
func (c *Checker) Referenced(stream string) (map[string]bool, []Object) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.streams[stream]
	out := map[string]bool{}
	for k := range st.referenced {
		out[k] = true
	}
	return out, append([]Object(nil), st.listed...)
}

// FragmentStarts are the first offsets of the live fragments of stream's persisted
// manifest at the last check.
func (c *Checker) FragmentStarts(stream string) []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]uint64(nil), c.streams[stream].fragStarts...)
}

// Report records a violation found outside the checker (the harness's comparison with
// `node verify` and `node gc`, a node that panicked, a lag that never returned to zero).
func (c *Checker) Report(stream, rule, format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.violate(stream, rule, format, args...)
}
