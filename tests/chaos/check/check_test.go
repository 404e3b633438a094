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
