package check

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
)

// Format version 3: records and roots of every version decode strictly, keys parse, and the
// checker judges lineage, the bucket claim, the deletion marker and recovery from the bucket.

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
