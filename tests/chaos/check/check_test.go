package check

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// The checker's own tests build remote tiers by hand on a real S3 server and a real etcd:
// fragment objects from the load's chunks, roots and groups with streamtier's encoder (so
// the checker's decoder is checked against it), records written straight into etcd. Then
// they break one promise each and expect the checker to say so.

const (
	tPrefix = "/t"
	tKeys   = "k"
	tStream = "s"
)

var tLoad = loadgen.Config{Seed: 5, MinDataBytes: 200, MaxDataBytes: 900, MinEntries: 1, MaxEntries: 3, SubBatchPercent: 30, TrackingEvery: 7, StartTimestamp: 1_700_000_000_000}

type tier struct {
	t      *testing.T
	ctx    context.Context
	bucket *Bucket
	etcd   *clientv3.Client
	load   loadgen.Config
	ref    *Reference
	rev    int
	// v1 makes persist write version 2 roots named by epoch and uid and version 1 records,
	// as buckets of format versions 1 and 2 hold; otherwise it writes version 3 roots, each
	// the child of the last, and version 2 records naming them by seq.
	v1      bool
	lastSeq uint64
	lastUID uint64
	records map[uint64]string // seq -> the record persist wrote for it
}

func newTier(t *testing.T) *tier { return newTierLoad(t, tLoad) }

// newTierLoad is a tier whose stream is written by load.
func newTierLoad(t *testing.T, load loadgen.Config) *tier {
	srv := s3test.Start(t, s3test.Options{})
	e := etcdtest.Start(t)
	ref, err := NewReference(load)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	b := NewBucket(BucketConfig{Endpoint: srv.Endpoint, Region: s3test.Region, Bucket: srv.Bucket, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	return &tier{t: t, ctx: ctx, bucket: b, etcd: e.Client(), load: load, ref: ref, records: map[uint64]string{}}
}

func (tr *tier) checker() *Checker {
	c, err := New(Config{Bucket: tr.bucket, Etcd: tr.etcd, EtcdPrefix: tPrefix, KeyPrefix: tKeys,
		Streams: []StreamConfig{{ID: tStream, Load: tr.load}}, RetentionSlack: 4096})
	if err != nil {
		tr.t.Fatal(err)
	}
	return c
}

// fragment uploads the load's chunks [i, j) as one fragment object and returns its entry.
func (tr *tier) fragment(i, j int) (manifest.Entry, string, []byte) {
	return tr.fragmentOf(tr.ref, i, j, 1000)
}

// fragmentOf uploads chunks [i, j) of the timeline ref as one fragment object (uid
// uidBase+i) and returns its entry.
func (tr *tier) fragmentOf(ref *Reference, i, j int, uidBase uint64) (manifest.Entry, string, []byte) {
	obj := []byte("OSIF\x00\x00\x00\x01")
	var index []byte
	err := ref.Walk(i, j-i, func(c RefChunk, b []byte) error {
		index = binary.BigEndian.AppendUint64(index, c.Offset)
		index = binary.BigEndian.AppendUint64(index, uint64(c.TS))
		index = binary.BigEndian.AppendUint32(index, uint32(len(obj)))
		obj = append(obj, b...)
		return nil
	})
	if err != nil {
		tr.t.Fatal(err)
	}
	first, last := ref.Chunk(i), ref.Chunk(j-1)
	e := manifest.Entry{FirstOffset: first.Offset, FirstTimestamp: first.TS, LastTimestamp: last.TS, Size: uint64(len(obj) - 8), UID: uidBase + uint64(i), Kind: manifest.KindFragment}
	obj = append(obj, index...)
	key := fmt.Sprintf("%sdata/%020d-%020d-%016x.fragment", StreamPrefix(tKeys, tStream), e.FirstOffset, 1, e.UID)
	tr.put(key, obj)
	return e, key, obj
}

func (tr *tier) put(key string, b []byte) {
	if err := tr.bucket.Put(tr.ctx, key, b); err != nil {
		tr.t.Fatal(err)
	}
}

// persist writes a root holding entries (the first groupSize of them folded into a group
// when groupSize > 0) with [first, next) and the record naming it.
func (tr *tier) persist(entries []manifest.Entry, first, next uint64, groupSize int) {
	tr.rev++
	leaves := entries
	if groupSize > 0 {
		g := entries[:groupSize]
		ge := manifest.Entry{FirstOffset: g[0].FirstOffset, FirstTimestamp: g[0].FirstTimestamp, LastTimestamp: g[len(g)-1].LastTimestamp, UID: uint64(9000 + tr.rev), Kind: manifest.KindGroup}
		for _, e := range g {
			ge.Size += e.Size
		}
		tr.put(fmt.Sprintf("%smeta/%020d-%020d-%016x.group", StreamPrefix(tKeys, tStream), ge.FirstOffset, 1, ge.UID), manifest.EncodeGroup(manifest.KindGroup, g))
		entries = append([]manifest.Entry{ge}, entries[groupSize:]...)
	}
	m := manifest.Manifest{FirstOffset: first, NextOffset: next, FirstTimestamp: -1, FirstLastTimestamp: -1, Entries: entries}
	var live []manifest.Entry // live fragments (gaps carry no bytes or timestamps)
	for i, e := range leaves {
		end := next
		if i+1 < len(leaves) {
			end = leaves[i+1].FirstOffset
		}
		if end > first && e.Kind == manifest.KindFragment {
			live = append(live, e)
		}
	}
	for _, e := range live {
		m.TotalSize += e.Size
	}
	if len(live) > 0 {
		m.FirstTimestamp, m.FirstLastTimestamp = live[0].FirstTimestamp, live[0].LastTimestamp
	}
	uid := uint64(0xabc0 + tr.rev)
	var rec string
	if tr.v1 {
		tr.put(RootKey(tKeys, tStream, 1, uid), manifest.EncodeRoot(m))
		rec = fmt.Sprintf(`{"version":1,"epoch":1,"rootUid":"%016x","firstOffset":%d,"nextOffset":%d,"totalSize":%d,"firstTimestamp":%d}`, uid, first, next, m.TotalSize, m.FirstTimestamp)
	} else {
		l := manifest.Lineage{Seq: tr.lastSeq + 1, Epoch: 1, UID: uid, ParentSeq: tr.lastSeq, ParentUID: tr.lastUID}
		tr.putRoot(l, m)
		rec = tr.record(l, m)
		tr.lastSeq, tr.lastUID = l.Seq, l.UID
		tr.records[l.Seq] = rec
	}
	tr.putRecord(rec)
}

// putRoot writes the version 3 root of lineage l holding m under its seq's key.
func (tr *tier) putRoot(l manifest.Lineage, m manifest.Manifest) {
	tr.put(SeqRootKey(tKeys, tStream, l.Seq), manifest.EncodeRootV3(l, m))
}

// record is the version 2 record naming the root of l holding m, as streamtier encodes it.
func (tr *tier) record(l manifest.Lineage, m manifest.Manifest) string {
	b, err := json.Marshal(metadata.ManifestRecord{Seq: l.Seq, Epoch: l.Epoch, RootUID: l.UID, FirstOffset: m.FirstOffset,
		NextOffset: m.NextOffset, TotalSize: m.TotalSize, FirstTimestamp: m.FirstTimestamp})
	if err != nil {
		tr.t.Fatal(err)
	}
	return string(b)
}

// putRecord writes the anchor, the manifest record rec and the epoch, and returns the
// record's key-value as etcd holds it.
func (tr *tier) putRecord(rec string) *mvccpb.KeyValue {
	base := tPrefix + "/streams/" + tStream + "/"
	for k, v := range map[string]string{"anchor": tStream, "manifest": rec, "epoch": fmt.Sprintf("%020d", 1)} {
		if _, err := tr.etcd.Put(tr.ctx, base+k, v); err != nil {
			tr.t.Fatal(err)
		}
	}
	return tr.recordKV()
}

// recordKV is the manifest record as etcd holds it now (nil: none).
func (tr *tier) recordKV() *mvccpb.KeyValue {
	resp, err := tr.etcd.Get(tr.ctx, tPrefix+"/streams/"+tStream+"/manifest")
	if err != nil {
		tr.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	return resp.Kvs[0]
}

// three writes fragments of chunks [0,10), [10,25), [25,40) and persists them.
func (tr *tier) three(groupSize int) ([]manifest.Entry, []string, uint64) {
	var es []manifest.Entry
	var keys []string
	for _, r := range [][2]int{{0, 10}, {10, 25}, {25, 40}} {
		e, k, _ := tr.fragment(r[0], r[1])
		es, keys = append(es, e), append(keys, k)
	}
	next := tr.ref.Chunk(39).End()
	tr.persist(es, 0, next, groupSize)
	return es, keys, next
}

func rules(c *Checker) []string {
	var out []string
	for _, v := range c.Violations() {
		out = append(out, v.Rule+": "+v.Detail)
	}
	return out
}

func wantRule(t *testing.T, c *Checker, rule string) {
	t.Helper()
	for _, v := range c.Violations() {
		if v.Rule == rule {
			return
		}
	}
	t.Fatalf("want a %s violation, got %v", rule, rules(c))
}

func mustCheck(t *testing.T, c *Checker, full bool) {
	t.Helper()
	if err := c.Check(context.Background(), full); err != nil {
		t.Fatal(err)
	}
}

func TestCheckerAcceptsAGoodTier(t *testing.T) {
	tr := newTier(t)
	tr.three(2)
	c := tr.checker()
	mustCheck(t, c, true)
	if v := rules(c); len(v) != 0 {
		t.Fatalf("violations on a good tier: %v", v)
	}
	st := c.Stats()
	if st.ChunksCompared != 40 || st.GroupsRead != 1 || st.FragmentsRead != 3 || st.OffsetsChecked != tr.ref.Chunk(39).End() {
		t.Fatalf("stats %+v", st)
	}
	refs, _ := c.Referenced(tStream)
	if len(refs) != 5 { // root, group, three fragments
		t.Fatalf("referenced %v", refs)
	}
}

func TestCheckerReportsDeletedReferencedObject(t *testing.T) {
	tr := newTier(t)
	_, keys, _ := tr.three(2)
	c := tr.checker()
	mustCheck(t, c, false)
	if err := tr.bucket.Delete(tr.ctx, keys[1]); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, c, false)
	wantRule(t, c, "missing-object")
}

func TestCheckerReportsRegressedManifest(t *testing.T) {
	for _, explained := range []bool{false, true} {
		t.Run(fmt.Sprintf("truncation-noted=%t", explained), func(t *testing.T) {
			tr := newTier(t)
			es, _, _ := tr.three(0)
			c := tr.checker()
			mustCheck(t, c, false)
			if explained {
				c.Truncated(tStream, es[2].FirstOffset)
			}
			tr.persist(es[:2], 0, es[2].FirstOffset, 0) // the last fragment is gone, next offset went back
			mustCheck(t, c, false)
			if !explained {
				wantRule(t, c, "next-regressed")
			} else if v := rules(c); len(v) != 0 {
				t.Fatalf("a truncation the harness caused explains the regression, yet: %v", v)
			}
		})
	}
}

// A lost tail cut the log inside a fragment: the chunks below the cut are the same in both,
// so the remote tier may give up only what lies above the cut; a next offset that falls to
// the fragment's start drops acknowledged chunks below the divergence point.
func TestCheckerReportsTruncationBelowTheDivergencePoint(t *testing.T) {
	tr := newTier(t)
	es, _, _ := tr.three(0)
	c := tr.checker()
	mustCheck(t, c, false)
	c.Truncated(tStream, tr.ref.Chunk(30).Offset)
	tr.persist(es[:2], 0, es[2].FirstOffset, 0)
	mustCheck(t, c, false)
	wantRule(t, c, "truncated-below-divergence")
}

func TestCheckerReportsFlippedByte(t *testing.T) {
	tr := newTier(t)
	_, keys, _ := tr.three(0)
	b, err := tr.bucket.Get(tr.ctx, keys[1])
	if err != nil {
		t.Fatal(err)
	}
	// Flip a byte of the first chunk's data and mend its CRC: the object is self-consistent,
	// only the comparison with the load can tell.
	data := int(binary.BigEndian.Uint32(b[8+36:]))
	b[8+48+data/2] ^= 0x10
	binary.BigEndian.PutUint32(b[8+32:], crc32.ChecksumIEEE(b[8+48:8+48+data]))
	tr.put(keys[1], b)
	c := tr.checker()
	mustCheck(t, c, false)
	wantRule(t, c, "bytes-differ")
	if v := rules(c); len(v) != 1 || !strings.Contains(v[0], keys[1]) {
		t.Fatalf("want exactly the flipped fragment reported: %v", v)
	}
}

func TestCheckerReportsUndeclaredHole(t *testing.T) {
	tr := newTier(t)
	var es []manifest.Entry
	for _, r := range [][2]int{{0, 10}, {10, 25}} {
		e, _, _ := tr.fragment(r[0], r[1])
		es = append(es, e)
	}
	// The second fragment's object holds chunks 10..24, but the root says the stream goes
	// on to chunk 30's end: offsets in no object and no gap.
	tr.persist(es, 0, tr.ref.Chunk(30).End(), 0)
	c := tr.checker()
	mustCheck(t, c, false)
	wantRule(t, c, "hole")
}

func TestCheckerReportsGapOverDataTheLogHad(t *testing.T) {
	tr := newTier(t)
	e0, _, _ := tr.fragment(0, 10)
	e2, _, _ := tr.fragment(20, 30)
	gap := manifest.Entry{FirstOffset: tr.ref.Chunk(10).Offset, FirstTimestamp: -1, LastTimestamp: -1, Kind: manifest.KindGap}
	tr.persist([]manifest.Entry{e0, gap, e2}, 0, tr.ref.Chunk(29).End(), 0)
	c := tr.checker()
	mustCheck(t, c, false)
	wantRule(t, c, "undeclared-loss")

	// The same gap, where the harness said the local log lost those offsets, is fine.
	tr2 := newTier(t)
	e0, _, _ = tr2.fragment(0, 10)
	e2, _, _ = tr2.fragment(20, 30)
	c2 := tr2.checker()
	c2.Lost(tStream, tr2.ref.Chunk(10).Offset, tr2.ref.Chunk(20).Offset)
	tr2.persist([]manifest.Entry{e0, gap, e2}, 0, tr2.ref.Chunk(29).End(), 0)
	mustCheck(t, c2, false)
	if v := rules(c2); len(v) != 0 {
		t.Fatalf("a declared gap over what the log lost: %v", v)
	}
}

func TestCheckerReportsRetentionNoPolicyAllows(t *testing.T) {
	tr := newTier(t)
	es, _, next := tr.three(0)
	c := tr.checker()
	mustCheck(t, c, false)
	tr.persist(es[1:], es[1].FirstOffset, next, 0) // the first fragment left, no policy
	mustCheck(t, c, false)
	wantRule(t, c, "retention-not-allowed")

	c.PolicySet(tStream, Policy{MaxBytes: 1}) // a policy in force now allows the next removal
	tr.persist(es[2:], es[2].FirstOffset, next, 0)
	before := len(c.Violations())
	mustCheck(t, c, false)
	if len(c.Violations()) != before {
		t.Fatalf("a removal the policy allows was reported: %v", rules(c)[before:])
	}
}

// A watch that resumes after an etcd outage replays records older than the one a read at a
// check already showed: they come in etcd's revision order, so they are no regression. A
// record at a later revision with a lower next offset still is one.
func TestCheckerOrdersRecordsByRevision(t *testing.T) {
	tr := newTier(t)
	es, _, _ := tr.three(0)
	key := tPrefix + "/streams/" + tStream + "/manifest"
	older, err := tr.etcd.Get(tr.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	tr.persist(es[:2], 0, es[2].FirstOffset, 0) // a regression, at a later revision
	regressed, err := tr.etcd.Get(tr.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	c := tr.checker()
	o, r := older.Kvs[0], regressed.Kvs[0]
	c.Observe(tStream, o)
	// A lower next offset from before, replayed late.
	c.Observe(tStream, &mvccpb.KeyValue{Key: r.Key, Value: r.Value, CreateRevision: r.CreateRevision, Version: r.Version, ModRevision: o.ModRevision - 1})
	if v := rules(c); len(v) != 0 {
		t.Fatalf("a record replayed out of order was judged: %v", v)
	}
	c.Observe(tStream, r)
	wantRule(t, c, "next-regressed")
}

// forkLoad is the load of a timeline forking off tr's: another seed and a higher epoch.
func (tr *tier) forkLoad() loadgen.Config {
	cfg := tr.load
	cfg.Seed ^= 0x5eed
	cfg.Epoch = 2
	return cfg
}

// forked writes three fragments of the load, checks them, and has the harness fork the log
// at chunk 30 (inside the third fragment, [25,40)): the local log holds another timeline from
// there. It returns the entries, the fork's offset and the new timeline.
func (tr *tier) forked(c *Checker) ([]manifest.Entry, uint64, *Reference) {
	es, _, _ := tr.three(0)
	mustCheck(tr.t, c, false)
	at := tr.ref.Chunk(30).Offset
	if err := c.Forked(tStream, at, tr.forkLoad()); err != nil {
		tr.t.Fatal(err)
	}
	nt, err := NewReferenceAt(tr.forkLoad(), at)
	if err != nil {
		tr.t.Fatal(err)
	}
	if !c.ForkPending(tStream) {
		tr.t.Fatal("a fork below the acknowledged next offset is not pending")
	}
	return es, at, nt
}

// A fork followed as the spec asks: the remote tier keeps the old timeline while the node has
// not resolved (no violation), is cut back to the fork exactly (the straddling fragment
// replaced by its prefix), then holds the new timeline's chunks from there. The checker sees
// the truncation record, or (watch behind) only the bucket holding the new chunks.
func TestCheckerFollowsAFork(t *testing.T) {
	t.Run("cut-and-appends-in-one-persist", func(t *testing.T) {
		// The cut's own persist failed; its retry carried the new timeline's first
		// fragment: the next offset falls from above the fork to above it.
		tr := newTier(t)
		c := tr.checker()
		es, at, nt := tr.forked(c)
		prefix, _, _ := tr.fragmentOf(tr.ref, 25, 30, 5000)
		nf, _, _ := tr.fragmentOf(nt, 0, 3, 7000)
		if nt.Chunk(2).End() >= tr.ref.Chunk(39).End() || nt.Chunk(2).End() <= at {
			t.Fatalf("want a next offset between the fork and the old one: %d", nt.Chunk(2).End())
		}
		tr.persist([]manifest.Entry{es[0], es[1], prefix, nf}, 0, nt.Chunk(2).End(), 0)
		mustCheck(t, c, true)
		if v := rules(c); len(v) != 0 {
			t.Fatalf("a cut persisted with the new timeline's first fragment: %v", v)
		}
		if st := c.Stats(); c.ForkPending(tStream) || st.ForksFollowed != 1 {
			t.Fatalf("fork not followed: %+v", st)
		}
	})
	for _, seen := range []bool{true, false} {
		t.Run(fmt.Sprintf("truncation-record-seen=%t", seen), func(t *testing.T) {
			tr := newTier(t)
			c := tr.checker()
			es, at, nt := tr.forked(c)
			mustCheck(t, c, false) // not resolved yet: the old timeline is still there
			prefix, _, _ := tr.fragmentOf(tr.ref, 25, 30, 5000)
			tr.persist([]manifest.Entry{es[0], es[1], prefix}, 0, at, 0)
			if seen {
				mustCheck(t, c, false)
				if c.ForkPending(tStream) {
					t.Fatal("the truncation to the fork did not settle it")
				}
			}
			nf, _, _ := tr.fragmentOf(nt, 0, 12, 7000)
			tr.persist([]manifest.Entry{es[0], es[1], prefix, nf}, 0, nt.Chunk(11).End(), 0)
			mustCheck(t, c, true)
			if v := rules(c); len(v) != 0 {
				t.Fatalf("a fork followed as it should be: %v", v)
			}
			st := c.Stats()
			if c.ForkPending(tStream) || st.Forks != 1 || st.ForksFollowed != 1 {
				t.Fatalf("fork not followed: %+v", st)
			}
			if seen != (st.Truncations == 1) {
				t.Fatalf("truncations %d, truncation record seen %t", st.Truncations, seen)
			}
		})
	}
}

// Truncations that break the fork rule are each reported: one that cuts below the fork
// (acknowledged shared chunks lost), one that keeps old-timeline chunks above it, old
// chunks uploaded again after the cut, and a remote tier that never follows.
func TestCheckerReportsBrokenForkTruncation(t *testing.T) {
	t.Run("below", func(t *testing.T) {
		tr := newTier(t)
		c := tr.checker()
		es, _, _ := tr.forked(c)
		tr.persist(es[:2], 0, es[2].FirstOffset, 0) // cut at 25, the fork is at 30
		mustCheck(t, c, false)
		wantRule(t, c, "truncated-below-divergence")
	})
	t.Run("above", func(t *testing.T) {
		tr := newTier(t)
		c := tr.checker()
		es, _, _ := tr.forked(c)
		kept, _, _ := tr.fragmentOf(tr.ref, 25, 35, 5000) // old chunks 30..34 kept
		tr.persist([]manifest.Entry{es[0], es[1], kept}, 0, tr.ref.Chunk(34).End(), 0)
		mustCheck(t, c, false)
		// The record alone may be the cut with new chunks in the same persist: the check's
		// fragments show the old chunks kept.
		wantRule(t, c, "bytes-differ")
	})
	t.Run("old-chunks-again", func(t *testing.T) {
		tr := newTier(t)
		c := tr.checker()
		es, at, _ := tr.forked(c)
		prefix, _, _ := tr.fragmentOf(tr.ref, 25, 30, 5000)
		tr.persist([]manifest.Entry{es[0], es[1], prefix}, 0, at, 0)
		mustCheck(t, c, false)
		old, _, _ := tr.fragmentOf(tr.ref, 30, 40, 6000) // the old timeline's chunks, uploaded after the cut
		tr.persist([]manifest.Entry{es[0], es[1], prefix, old}, 0, tr.ref.Chunk(39).End(), 0)
		mustCheck(t, c, false)
		wantRule(t, c, "bytes-differ")
	})
	t.Run("never-followed", func(t *testing.T) {
		tr := newTier(t)
		c := tr.checker()
		tr.forked(c)
		mustCheck(t, c, false)
		if v := rules(c); len(v) != 0 {
			t.Fatalf("a fork not resolved yet, mid-soak: %v", v)
		}
		mustCheck(t, c, true)
		wantRule(t, c, "fork-not-followed")
	})
}

// deposed has the remote tier follow a leader elected at epoch 2 from the end of the three
// fragments (chunk 40 of the load: no truncation due), tiering ten of its chunks, then has
// the harness cut that deposed leader's suffix away at chunk 30 of the load, below the
// epoch-2 timeline's start, and write a timeline at epoch 3 from there (a replica rejoining
// the new leader). It returns the entries, the epoch-2 fragment, the cut and the epoch-3
// timeline.
func (tr *tier) deposed(c *Checker) ([]manifest.Entry, manifest.Entry, uint64, *Reference) {
	es, _, next := tr.three(0)
	mustCheck(tr.t, c, false)
	bumped := tr.load
	bumped.Seed ^= 0xb0b
	bumped.Epoch = 2
	if err := c.Forked(tStream, next, bumped); err != nil {
		tr.t.Fatal(err)
	}
	if c.ForkPending(tStream) {
		tr.t.Fatal("a leader going on from the log's end left a fork pending")
	}
	t1, err := NewReferenceAt(bumped, next)
	if err != nil {
		tr.t.Fatal(err)
	}
	f1, _, _ := tr.fragmentOf(t1, 0, 10, 6000)
	tr.persist(append(es[:3:3], f1), 0, t1.Chunk(9).End(), 0)
	mustCheck(tr.t, c, false)
	if v := rules(c); len(v) != 0 {
		tr.t.Fatalf("the epoch-2 leader's chunks tiered: %v", v)
	}
	rejoined := tr.load
	rejoined.Seed ^= 0xc0c
	rejoined.Epoch = 3
	at := tr.ref.Chunk(30).Offset
	if err := c.Forked(tStream, at, rejoined); err != nil {
		tr.t.Fatal(err)
	}
	if !c.ForkPending(tStream) {
		tr.t.Fatal("a cut below the deposed leader's suffix is not pending")
	}
	t2, err := NewReferenceAt(rejoined, at)
	if err != nil {
		tr.t.Fatal(err)
	}
	return es, f1, at, t2
}

// A replica cutting a deposed leader's higher-epoch suffix away below its first chunk, then
// following a new leader (a fork below the latest fork): the remote tier cut back to the cut
// (the straddling fragment replaced by its prefix, the deposed leader's fragment dropped)
// and the epoch-3 timeline tiered is right; cutting only at the deposed leader's start, or
// never cutting, is reported.
func TestCheckerFollowsADeposedSuffixCut(t *testing.T) {
	t.Run("followed", func(t *testing.T) {
		tr := newTier(t)
		c := tr.checker()
		es, _, at, t2 := tr.deposed(c)
		mustCheck(t, c, false) // not resolved yet: the old timelines are still there
		prefix, _, _ := tr.fragmentOf(tr.ref, 25, 30, 5000)
		tr.persist([]manifest.Entry{es[0], es[1], prefix}, 0, at, 0)
		mustCheck(t, c, false)
		nf, _, _ := tr.fragmentOf(t2, 0, 12, 7000)
		tr.persist([]manifest.Entry{es[0], es[1], prefix, nf}, 0, t2.Chunk(11).End(), 0)
		mustCheck(t, c, true)
		if v := rules(c); len(v) != 0 {
			t.Fatalf("a deposed suffix cut followed as it should be: %v", v)
		}
		if st := c.Stats(); c.ForkPending(tStream) || st.Forks != 2 || st.ForksFollowed != 1 || st.Truncations != 1 {
			t.Fatalf("the cut not followed: %+v", st)
		}
	})
	t.Run("cut-at-the-deposed-start", func(t *testing.T) {
		tr := newTier(t)
		c := tr.checker()
		es, _, _, _ := tr.deposed(c)
		tr.persist(es, 0, tr.ref.Chunk(39).End(), 0) // the epoch-2 chunks dropped, the load's 30..39 kept
		mustCheck(t, c, false)
		wantRule(t, c, "bytes-differ")
	})
	t.Run("never-followed", func(t *testing.T) {
		tr := newTier(t)
		c := tr.checker()
		tr.deposed(c)
		mustCheck(t, c, true) // the epoch-2 fragment still above the cut at the end
		wantRule(t, c, "fork-not-followed")
	})
}

// Old-timeline chunks above the fork next to new-timeline ones (with every chunk one offset,
// so that both timelines have a chunk at every offset) are two histories mixed.
func TestCheckerReportsMixedTimelines(t *testing.T) {
	one := loadgen.Config{Seed: 9, MinDataBytes: 200, MaxDataBytes: 900, MinEntries: 1, MaxEntries: 1, StartTimestamp: 1_700_000_000_000}
	tr := newTierLoad(t, one)
	c := tr.checker()
	es, at, nt := tr.forked(c)
	kept, _, _ := tr.fragmentOf(tr.ref, 25, 35, 5000) // old 30..34
	nf, _, _ := tr.fragmentOf(nt, 5, 12, 7000)        // new from offset 35 on
	if kept.FirstOffset != 25 || at != 30 || nf.FirstOffset != 35 {
		t.Fatalf("one offset per chunk expected: %d %d %d", kept.FirstOffset, at, nf.FirstOffset)
	}
	// Between two checks: the checker sees no regression, only the bucket.
	tr.persist([]manifest.Entry{es[0], es[1], kept, nf}, 0, nt.Chunk(11).End(), 0)
	mustCheck(t, c, false)
	wantRule(t, c, "mixed-timelines")

	// The same with the old fragment the checker had already compared before the fork
	// ([25,40), old 30..39) kept whole, and the new timeline appended after it.
	tr2 := newTierLoad(t, one)
	c2 := tr2.checker()
	es2, _, nt2 := tr2.forked(c2)
	after, _, _ := tr2.fragmentOf(nt2, 10, 15, 7000) // new from offset 40 on
	tr2.persist(append(es2[:3:3], after), 0, nt2.Chunk(14).End(), 0)
	mustCheck(t, c2, false)
	wantRule(t, c2, "mixed-timelines")
}

// fixCRC mends the CRC-32 at the end of an object after a test changed its bytes.
func fixCRC(b []byte) []byte {
	binary.BigEndian.PutUint32(b[len(b)-4:], crc32.ChecksumIEEE(b[:len(b)-4]))
	return b
}

// Records of both versions decode as remote-format.md lays them out, strictly: version 1
// without a seq, version 2 with one of at least 1; what streamtier writes decodes.
func TestDecodeRecordVersions(t *testing.T) {
	const rest = `"epoch":3,"rootUid":"00000000000abc01","firstOffset":5,"nextOffset":9,"totalSize":40,"firstTimestamp":-1`
	good := map[string]Record{
		`{"version":1,` + rest + `}`:         {Version: 1, Epoch: 3, RootUID: "00000000000abc01", FirstOffset: 5, NextOffset: 9, TotalSize: 40, FirstTimestamp: -1},
		`{"version":2,"seq":7,` + rest + `}`: {Version: 2, Seq: 7, Epoch: 3, RootUID: "00000000000abc01", FirstOffset: 5, NextOffset: 9, TotalSize: 40, FirstTimestamp: -1},
		`{"seq":1,` + rest + `,"version":2}`: {Version: 2, Seq: 1, Epoch: 3, RootUID: "00000000000abc01", FirstOffset: 5, NextOffset: 9, TotalSize: 40, FirstTimestamp: -1},
	}
	for in, want := range good {
		r, uid, err := DecodeRecord([]byte(in))
		if err != nil || r != want || uid != 0xabc01 {
			t.Errorf("%s: %+v uid %x %v, want %+v", in, r, uid, err, want)
		}
	}
	bad := map[string]string{
		`{"version":1,"seq":7,` + rest + `}`:                                       "a seq in a version 1 record",
		`{"version":2,` + rest + `}`:                                               "a version 2 record without a seq",
		`{"version":2,"seq":0,` + rest + `}`:                                       "seq 0",
		`{"version":3,"seq":7,` + rest + `}`:                                       "an unknown version",
		`{"version":2,"seq":7,"parentSeq":6,` + rest + `}`:                         "an unknown field",
		`{"version":2,"seq":-1,` + rest + `}`:                                      "a negative seq",
		`{"version":2,"seq":7,` + strings.Replace(rest, "abc01", "ABC01", 1) + `}`: "an upper-case uid",
		`{"version":2,"seq":7,` + strings.Replace(rest, "abc01", "abcz1", 1) + `}`: "a uid that is not hex",
		`{"version":2,"seq":7,` + strings.Replace(rest, `"epoch":3,`, "", 1) + `}`: "no epoch",
		`{"version":2,"seq":7,` + rest + `} {}`:                                    "data after the document",
	}
	for in, why := range bad {
		if r, _, err := DecodeRecord([]byte(in)); err == nil {
			t.Errorf("%s (%s) decoded: %+v", in, why, r)
		}
	}
	// What streamtier writes, both versions.
	for _, m := range []metadata.ManifestRecord{
		{Seq: 12, Epoch: 4, RootUID: 0xfeedface01020304, FirstOffset: 1, NextOffset: 2, TotalSize: 3, FirstTimestamp: 4},
		{Epoch: 4, RootUID: 0x1, NextOffset: 2, FirstTimestamp: -1},
	} {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		r, uid, err := DecodeRecord(b)
		if err != nil || r.Seq != m.Seq || uid != m.RootUID || r.Epoch != m.Epoch || r.Version != m.RecordVersion() || r.NextOffset != m.NextOffset {
			t.Errorf("%s: %+v uid %x %v", b, r, uid, err)
		}
	}
}

// Version 3 roots decode with their identity and lineage, and every later field is where
// version 2 has it shifted by 40; versions 1 and 2 still decode; impossible lineages, a
// wrong length and unknown versions do not.
func TestDecodeRootVersion3(t *testing.T) {
	e := manifest.Entry{FirstOffset: 10, FirstTimestamp: 100, LastTimestamp: 200, Size: 777, UID: 0x55, Kind: manifest.KindFragment}
	gap := manifest.Entry{FirstOffset: 40, FirstTimestamp: -1, LastTimestamp: -1, Kind: manifest.KindGap}
	m := manifest.Manifest{FirstOffset: 10, NextOffset: 50, FirstTimestamp: 100, FirstLastTimestamp: 200, TotalSize: 777, Entries: []manifest.Entry{e, gap}}
	l := manifest.Lineage{Seq: 7, Epoch: 3, UID: 0xfeedface01020304, ParentSeq: 6, ParentUID: 0x0102030405060708}
	b := manifest.EncodeRootV3(l, m)
	r, err := DecodeRoot(b)
	if err != nil {
		t.Fatal(err)
	}
	want := RootLineage{Seq: 7, Epoch: 3, UID: 0xfeedface01020304, ParentSeq: 6, ParentUID: 0x0102030405060708}
	if r.Version != 3 || r.Lineage != want || r.First != 10 || r.Next != 50 || r.FirstTS != 100 || r.FirstLastTS != 200 || r.Total != 777 ||
		len(r.Entries) != 2 || r.Entries[0].UID != 0x55 || r.Entries[1].Kind != KindGap {
		t.Fatalf("decoded %+v", r)
	}
	// The first version 3 root of a stream that had a version 2 root: parent seq 0, the old
	// root's uid.
	if r, err := DecodeRoot(manifest.EncodeRootV3(manifest.Lineage{Seq: 1, Epoch: 1, UID: 9, ParentUID: 0xabc}, m)); err != nil || r.Lineage.ParentUID != 0xabc {
		t.Fatalf("child of a version 2 root: %+v %v", r.Lineage, err)
	}
	if r, err := DecodeRoot(manifest.EncodeRoot(m)); err != nil || r.Version != 2 || r.Lineage != (RootLineage{}) || r.Next != 50 {
		t.Fatalf("version 2 root: %+v %v", r, err)
	}
	put64 := func(at int, v uint64) []byte {
		c := append([]byte(nil), b...)
		binary.BigEndian.PutUint64(c[at:], v)
		return fixCRC(c)
	}
	version := func(v uint32) []byte {
		c := append([]byte(nil), b...)
		binary.BigEndian.PutUint32(c[4:], v)
		return fixCRC(c)
	}
	for why, bad := range map[string][]byte{
		"parent seq equal to seq":  put64(32, 7),
		"parent seq above seq":     put64(32, 9),
		"seq 0":                    put64(8, 0),
		"uid 0":                    put64(24, 0),
		"a parent seq with uid 0":  put64(40, 0),
		"version 4":                version(4),
		"read as version 2":        version(2),
		"CRC":                      append(append([]byte(nil), b[:len(b)-1]...), b[len(b)-1]^1),
		"truncated":                fixCRC(append([]byte(nil), b[:len(b)-48]...)),
		"shorter than the lineage": b[:40],
	} {
		if r, err := DecodeRoot(bad); err == nil {
			t.Errorf("%s: decoded %+v", why, r.Lineage)
		}
	}
}

func TestParseKeyVersion3(t *testing.T) {
	k, err := parseKey("meta/root-00000000000000000042.manifest")
	if err != nil || !k.isRoot || k.seq != 42 || k.epoch != 0 || k.uid != 0 {
		t.Fatalf("version 3 root key: %+v %v", k, err)
	}
	if k, err := parseKey("meta/root-00000000000000000003-00000000000000ab.manifest"); err != nil || !k.isRoot || k.seq != 0 || k.epoch != 3 || k.uid != 0xab {
		t.Fatalf("version 2 root key: %+v %v", k, err)
	}
	if k, err := parseKey("deleted"); err != nil || !k.marker {
		t.Fatalf("deletion marker: %+v %v", k, err)
	}
	if got := strings.TrimPrefix(SeqRootKey(tKeys, tStream, 42), StreamPrefix(tKeys, tStream)); got != "meta/root-00000000000000000042.manifest" {
		t.Fatalf("SeqRootKey: %s", got)
	}
	for _, bad := range []string{"meta/root-0000000000000000042.manifest", "meta/root-00000000000000000000.manifest", "meta/root-0000000000000000004x.manifest",
		"data/root-00000000000000000042.manifest", "deleted/x", "claim", "meta/root-00000000000000000042.group"} {
		if k, err := parseKey(bad); err == nil {
			t.Errorf("%s parsed: %+v", bad, k)
		}
	}
}

// The key prefix's claim lies outside every stream prefix: the checker never lists it. A
// deletion marker is a known key (no foreign-key), reported because the soak deletes no
// stream.
func TestCheckerClaimAndMarker(t *testing.T) {
	tr := newTier(t)
	tr.three(0)
	tr.put(tKeys+"/claim", []byte(`{"format":3,"cluster_id":"00112233445566778899aabbccddeeff","generation":1,"etcd_prefix":"/t","created":"2026-01-01T00:00:00Z"}`))
	c := tr.checker()
	mustCheck(t, c, true)
	if v := rules(c); len(v) != 0 {
		t.Fatalf("a claim object: %v", v)
	}
	tr.put(StreamPrefix(tKeys, tStream)+"deleted", []byte(`{"stream":"s"}`))
	mustCheck(t, c, false)
	wantRule(t, c, "deletion-marker")
	for _, v := range c.Violations() {
		if v.Rule == "foreign-key" {
			t.Fatalf("the marker is a foreign key: %v", rules(c))
		}
	}
}

// A tier written in format versions 1 and 2 (version 2 roots, version 1 records) is still
// judged as before.
func TestCheckerAcceptsAVersion2Tier(t *testing.T) {
	tr := newTier(t)
	tr.v1 = true
	es, _, _ := tr.three(2)
	c := tr.checker()
	mustCheck(t, c, false)
	tr.persist(es, 0, tr.ref.Chunk(39).End(), 0)
	mustCheck(t, c, true)
	if v := rules(c); len(v) != 0 {
		t.Fatalf("violations on a version 2 tier: %v", v)
	}
	if st := c.Stats(); st.RootLineages != 0 || st.Acks != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// A version 3 tier whose records each follow the last: every root's lineage is read and
// every record's parent judged against the record before it.
func TestCheckerJudgesLineage(t *testing.T) {
	tr := newTier(t)
	es, _, next := tr.three(0)
	c := tr.checker()
	mustCheck(t, c, false)
	tr.persist(es, 0, next, 0)
	mustCheck(t, c, false)
	tr.persist(es, 0, next, 1)
	mustCheck(t, c, true)
	if v := rules(c); len(v) != 0 {
		t.Fatalf("violations on a good version 3 tier: %v", v)
	}
	// Three records, each seen: the first created the key (no parent), the others follow.
	if st := c.Stats(); st.RootLineages != 3 || st.ParentsJudged != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// The record's seq falls (a record naming an older root, still in the bucket) with no
// declared etcd fault: a violation, though the offsets are the same.
func TestCheckerReportsSeqRegressed(t *testing.T) {
	tr := newTier(t)
	es, _, next := tr.three(0)
	c := tr.checker()
	mustCheck(t, c, false)
	tr.persist(es, 0, next, 0) // seq 2, the same manifest
	mustCheck(t, c, false)
	tr.putRecord(tr.records[1])
	mustCheck(t, c, false)
	wantRule(t, c, "seq-regressed")
}

// A record naming a root whose parent is not the record it replaced: the root of seq 3 was
// built on seq 1, while the record had moved to seq 2.
func TestCheckerReportsParentNotPreviousRecord(t *testing.T) {
	tr := newTier(t)
	es, _, next := tr.three(0)
	c := tr.checker()
	mustCheck(t, c, false)
	first := tr.lastUID
	tr.persist(es, 0, next, 0) // seq 2, seen
	mustCheck(t, c, false)
	m := manifest.Manifest{FirstOffset: 0, NextOffset: next, FirstTimestamp: es[0].FirstTimestamp, FirstLastTimestamp: es[0].LastTimestamp, Entries: es}
	for _, e := range es {
		m.TotalSize += e.Size
	}
	l := manifest.Lineage{Seq: 3, Epoch: 1, UID: 0x3333, ParentSeq: 1, ParentUID: first}
	tr.putRoot(l, m)
	tr.putRecord(tr.record(l, m))
	mustCheck(t, c, false)
	wantRule(t, c, "parent-not-previous-record")

	// The same root with the record of seq 2 missed (a watch behind): nothing is certain,
	// nothing is reported.
	tr2 := newTier(t)
	es2, _, next2 := tr2.three(0)
	c2 := tr2.checker()
	mustCheck(t, c2, false)
	first2 := tr2.lastUID
	tr2.persist(es2, 0, next2, 0) // seq 2, never seen by c2
	l2 := manifest.Lineage{Seq: 3, Epoch: 1, UID: 0x3333, ParentSeq: 1, ParentUID: first2}
	tr2.putRoot(l2, m)
	tr2.putRecord(tr2.record(l2, m))
	mustCheck(t, c2, false)
	for _, v := range c2.Violations() {
		if v.Rule == "parent-not-previous-record" {
			t.Fatalf("a missed record made the parent rule fire: %v", rules(c2))
		}
	}
	// But the bucket shows root 3 names parent seq 1, and seq 2 is in the bucket too: root
	// 2's parent (seq 1) is fine; nothing else to say either.
	if v := rules(c2); len(v) != 0 {
		t.Fatalf("violations: %v", v)
	}
}

// A root naming a parent that was never persisted: seq 1 with another uid than the record
// and the root of seq 1 have; and a created record whose root names a parent.
func TestCheckerReportsParentNotPersisted(t *testing.T) {
	tr := newTier(t)
	es, _, next := tr.three(0)
	c := tr.checker()
	mustCheck(t, c, false)
	m := manifest.Manifest{FirstOffset: 0, NextOffset: next, FirstTimestamp: es[0].FirstTimestamp, FirstLastTimestamp: es[0].LastTimestamp, Entries: es}
	for _, e := range es {
		m.TotalSize += e.Size
	}
	tr.putRoot(manifest.Lineage{Seq: 2, Epoch: 1, UID: 0x2222, ParentSeq: 1, ParentUID: tr.lastUID + 1}, m) // a stray on a parent that never was
	mustCheck(t, c, false)
	wantRule(t, c, "parent-not-persisted")

	tr2 := newTier(t)
	c2 := tr2.checker()
	es2, _, _ := tr2.three(0)
	l := manifest.Lineage{Seq: 5, Epoch: 1, UID: 0x5555, ParentSeq: 4, ParentUID: 0x4444}
	// A new stream whose first record names a root built on seq 4: etcd never held seq 4.
	if _, err := tr2.etcd.Delete(tr2.ctx, tPrefix+"/streams/"+tStream+"/manifest"); err != nil {
		t.Fatal(err)
	}
	tr2.putRoot(l, m2(es2, tr2))
	tr2.putRecord(tr2.record(l, m2(es2, tr2)))
	mustCheck(t, c2, false)
	wantRule(t, c2, "parent-not-persisted")
}

// m2 is the manifest of es over tr's first 40 chunks.
func m2(es []manifest.Entry, tr *tier) manifest.Manifest {
	m := manifest.Manifest{FirstOffset: 0, NextOffset: tr.ref.Chunk(39).End(), FirstTimestamp: es[0].FirstTimestamp, FirstLastTimestamp: es[0].LastTimestamp, Entries: es}
	for _, e := range es {
		m.TotalSize += e.Size
	}
	return m
}

// The bucket holds a root whose parent is seq 3 while etcd's record names seq 2: seq 3 was
// persisted and the record went back, though no record of seq 3 was ever seen.
func TestCheckerReportsRecordBehindBucket(t *testing.T) {
	tr := newTier(t)
	es, _, _ := tr.three(0)
	m := m2(es, tr)
	tr.persist(es, 0, m.NextOffset, 0) // seq 2
	c := tr.checker()
	mustCheck(t, c, false)
	if v := rules(c); len(v) != 0 {
		t.Fatalf("violations: %v", v)
	}
	tr.putRoot(manifest.Lineage{Seq: 3, Epoch: 1, UID: 0x3333, ParentSeq: 2, ParentUID: tr.lastUID}, m) // a child: fine
	mustCheck(t, c, false)
	if v := rules(c); len(v) != 0 {
		t.Fatalf("an unpersisted child of the record: %v", v)
	}
	tr.putRoot(manifest.Lineage{Seq: 4, Epoch: 1, UID: 0x4444, ParentSeq: 3, ParentUID: 0x3333}, m)
	mustCheck(t, c, false)
	wantRule(t, c, "record-behind-bucket")
}

// The record names a root whose identity contradicts it (another epoch), and a root key
// holds the root of another seq.
func TestCheckerReportsRootIdentity(t *testing.T) {
	tr := newTier(t)
	es, _, _ := tr.three(0)
	m := m2(es, tr)
	l := manifest.Lineage{Seq: 2, Epoch: 2, UID: 0x2222, ParentSeq: 1, ParentUID: tr.lastUID}
	tr.putRoot(l, m)
	rec := strings.Replace(tr.record(l, m), `"epoch":2`, `"epoch":1`, 1)
	tr.putRecord(rec)
	c := tr.checker()
	mustCheck(t, c, false)
	wantRule(t, c, "record-root-mismatch")

	tr.put(SeqRootKey(tKeys, tStream, 9), manifest.EncodeRootV3(manifest.Lineage{Seq: 8, Epoch: 2, UID: 0x8888, ParentSeq: 2, ParentUID: 0x2222}, m))
	mustCheck(t, c, false)
	wantRule(t, c, "root-key-seq")
}

// An etcd restore the harness declared: records go back in time in between, unjudged; the
// record the recovery leaves must cover everything acknowledged before, or it is reported.
func TestCheckerJudgesRecoveryAfterRewind(t *testing.T) {
	for _, recovered := range []bool{true, false} {
		t.Run(fmt.Sprintf("recovered=%t", recovered), func(t *testing.T) {
			tr := newTier(t)
			es, _, _ := tr.three(0)
			m := m2(es, tr)
			c := tr.checker()
			mustCheck(t, c, false)
			snapshot := tr.records[1]
			tr.persist(es, 0, m.NextOffset, 0) // seq 2
			more, _, _ := tr.fragment(40, 50)  // and seq 3 holds more
			tr.persist(append(es[:3:3], more), 0, tr.ref.Chunk(49).End(), 0)
			c.Observe(tStream, tr.recordKV())
			if err := c.EtcdRewound("etcd-snapshot-restore", tr.recordKV().ModRevision); err != nil {
				t.Fatal(err)
			}
			c.Observe(tStream, tr.putRecord(snapshot)) // the restore: back to seq 1
			kv := tr.recordKV()
			if recovered {
				kv = tr.putRecord(tr.records[3]) // node recover raised it to the bucket's top
			}
			if err := c.EtcdRecovered(tr.etcdRev(), map[string]*mvccpb.KeyValue{tStream: kv}); err != nil {
				t.Fatal(err)
			}
			mustCheck(t, c, false)
			if recovered {
				if v := rules(c); len(v) != 0 {
					t.Fatalf("a declared restore, then a full recovery: %v", v)
				}
				// After the recovery the node persists on: its record follows the recovered one.
				tr.persist(append(es[:3:3], more), 0, tr.ref.Chunk(49).End(), 0)
				mustCheck(t, c, false)
				if v := rules(c); len(v) != 0 {
					t.Fatalf("the persist after the recovery: %v", v)
				}
				return
			}
			wantRule(t, c, "seq-regressed")
			wantRule(t, c, "next-regressed")
		})
	}
}

// etcdRev is etcd's revision now.
func (tr *tier) etcdRev() int64 {
	resp, err := tr.etcd.Get(tr.ctx, tPrefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		tr.t.Fatal(err)
	}
	return resp.Header.Revision
}

// The claim decodes strictly and agrees with etcd's cluster record once that says claimed;
// anything else outside the stream prefixes but probe leftovers is foreign.
func TestCheckerJudgesTheClaim(t *testing.T) {
	const id = "00112233445566778899aabbccddeeff"
	claim := func(gen int) []byte {
		return []byte(fmt.Sprintf(`{"format":3,"cluster_id":"%s","generation":%d,"etcd_prefix":"/t","created":"2026-01-01T00:00:00Z"}`, id, gen))
	}
	tr := newTier(t)
	tr.three(0)
	tr.put(tKeys+"/claim", claim(2))
	tr.put(tKeys+"/probe/0123", []byte("x"))
	if _, err := tr.etcd.Put(tr.ctx, tPrefix+"/cluster", `{"cluster_id":"`+id+`","generation":2,"claimed":true}`); err != nil {
		t.Fatal(err)
	}
	c := tr.checker()
	mustCheck(t, c, false)
	if v := rules(c); len(v) != 0 || c.OutsideObjects() != 2 {
		t.Fatalf("a claim that agrees with etcd: %v, %d outside", v, c.OutsideObjects())
	}
	tr.put(tKeys+"/claim-old", []byte("x"))
	if _, err := tr.etcd.Put(tr.ctx, tPrefix+"/cluster", `{"cluster_id":"`+id+`","generation":3,"claimed":true}`); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, c, false)
	wantRule(t, c, "claim-mismatch")
	wantRule(t, c, "foreign-key")
	for _, bad := range []string{`{"format":2,"cluster_id":"` + id + `","generation":1,"etcd_prefix":"/t","created":"2026-01-01T00:00:00Z"}`,
		`{"format":3,"cluster_id":"` + id + `","generation":0,"etcd_prefix":"/t","created":"2026-01-01T00:00:00Z"}`,
		`{"format":3,"cluster_id":"` + id[:30] + `","generation":1,"etcd_prefix":"/t","created":"2026-01-01T00:00:00Z"}`,
		`{"format":3,"cluster_id":"` + id + `","generation":1,"etcd_prefix":"/t"}`,
		`{"format":3,"cluster_id":"` + id + `","generation":1,"etcd_prefix":"/t","created":"2026-01-01T00:00:00Z","x":1}`} {
		if _, err := DecodeClaim([]byte(bad)); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
	if _, err := DecodeClaim(claim(1)); err != nil {
		t.Fatal(err)
	}
}
