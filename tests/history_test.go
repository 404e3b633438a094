package tests

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
	"github.com/streamtier/streamtier/tiertest"
	"github.com/streamtier/streamtier/verify"
)

// durableChunks reads every fragment of stream's persisted manifest and returns its chunks'
// bytes by chunk id, with the gap ranges: what the remote tier holds, object by object.
func (e *env) durableChunks(stream string) (map[uint64][]byte, [][2]uint64, manifest.Manifest) {
	e.t.Helper()
	m, _, _ := e.remote(stream)
	fetch := e.fetcher(stream)
	if err := manifest.CheckTree(m, fetch); err != nil {
		e.t.Fatalf("manifest tree of %s: %v", stream, err)
	}
	chunks := map[uint64][]byte{}
	var gaps [][2]uint64
	it := manifest.Iterate(m, m.FirstOffset, fetch)
	for {
		fr, ok, err := it.Next()
		if err != nil {
			e.t.Fatalf("iterate %s: %v", stream, err)
		}
		if !ok {
			break
		}
		if fr.Gap {
			gaps = append(gaps, [2]uint64{fr.Entry.FirstOffset, fr.End})
			continue
		}
		key := e.locate(stream, fr.Entry)
		obj, err := e.store.ReadFragment(context.Background(), key)
		if err != nil {
			e.t.Fatalf("read fragment %s: %v", key, err)
		}
		for _, ch := range obj.Layout.Chunks {
			chunks[ch.Header.ChunkID] = obj.Bytes[ch.Position : ch.Position+ch.Header.Size()]
		}
	}
	return chunks, gaps, m
}

// sameAsLog checks that every chunk in got is byte for byte the reference log's chunk.
func sameAsLog(t *testing.T, got map[uint64][]byte, ref *segments.Log, what string) {
	t.Helper()
	rd, err := ref.NewReader(ref.FirstOffset())
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	seen := 0
	for {
		h, loc, err := rd.Next()
		if err != nil {
			break
		}
		b, ok := got[h.ChunkID]
		if !ok {
			continue
		}
		want, _, err := ref.ReadChunk(loc)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, want) {
			t.Fatalf("%s: chunk %d differs from the reference log", what, h.ChunkID)
		}
		seen++
	}
	if seen != len(got) {
		t.Fatalf("%s: %d chunks held remotely, %d of them in the reference log", what, len(got), seen)
	}
}

// TestLocalAheadKeepsHistory tiers a stream, takes S3 down, lets the stream's own retention
// delete segments the upload never reached, and brings S3 back: every offset persisted
// before the outage is still in S3 byte for byte, the lost range is a declared gap in the
// manifest (and in verify), and tiering goes on after it. Before format version 2 the whole
// remote history was deleted here.
func TestLocalAheadKeepsHistory(t *testing.T) {
	e := newEnv(t, envOptions{faults: true, node: smallFragments})
	gen := loadgen.Config{Seed: 21, MinDataBytes: 2000, MaxDataBytes: 8000}
	opts := segments.Options{MaxSegmentBytes: 256 << 10}
	lg := genLog(t, t.TempDir(), gen, loadgen.Limit{Bytes: 2 << 20}, opts)
	refDir := t.TempDir()
	ref := genLog(t, refDir, gen, loadgen.Limit{Bytes: 6 << 20}, opts)
	g, err := loadgen.New(gen)
	if err != nil {
		t.Fatal(err)
	}
	// the generator of lg, positioned after what lg holds
	if _, err := loadgen.Write(context.Background(), genSink(t, opts), g, loadgen.Limit{Bytes: 2 << 20}, loadgen.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.node.AddStream(actors.StreamSpec{ID: "ahead", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	forceTail(t, e, "ahead", lg.NextOffset())
	before, _, m1 := e.durableChunks("ahead")
	if len(before) == 0 || m1.NextOffset != lg.NextOffset() {
		t.Fatalf("tiered %d chunks up to %d, want all up to %d", len(before), m1.NextOffset, lg.NextOffset())
	}

	// S3 goes down; the broker writes on and its retention deletes every sealed segment.
	lost := goLocalAhead(t, e, lg, g, 2<<20, 1<<20, m1.NextOffset)
	forceTail(t, e, "ahead", lg.NextOffset())

	after, gaps, m2 := e.durableChunks("ahead")
	for id, b := range before {
		if !bytes.Equal(after[id], b) {
			t.Fatalf("chunk %d, durable before the outage, is gone or changed", id)
		}
	}
	if len(gaps) != 1 || gaps[0][0] != m1.NextOffset || gaps[0][1] != lost {
		t.Fatalf("gaps %v, want one [%d,%d)", gaps, m1.NextOffset, lost)
	}
	if m2.FirstOffset != 0 || m2.NextOffset != lg.NextOffset() {
		t.Fatalf("remote [%d,%d), want [0,%d)", m2.FirstOffset, m2.NextOffset, lg.NextOffset())
	}
	sameAsLog(t, after, ref, "remote tier after the gap")
	for id := range after {
		if id >= m1.NextOffset && id < lost {
			t.Fatalf("chunk %d inside the gap is held remotely", id)
		}
	}
	rep := e.verify("ahead")
	if rep.Gaps != 1 || rep.GapOffsets != lost-m1.NextOffset || len(rep.Findings) != 0 {
		t.Fatalf("verify: %d gaps, %d gap offsets, findings %v; want 1, %d, none", rep.Gaps, rep.GapOffsets, rep.Findings, lost-m1.NextOffset)
	}
	if n := e.node.Metrics().Gaps.Load(); n != 1 {
		t.Fatalf("gaps counted: %d, want 1", n)
	}
}

// TestLostUnsyncedTailKeepsPrefix tiers a stream, then restarts the node on a local log that
// lost its unsynced tail (the same chunks, fewer of them, same epoch) and goes on with other
// data at those offsets: the remote tier is truncated to the last chunk both hold (the
// straddling fragment re-drained from the local log), every object below that point is
// untouched, only the lost chunks' objects go, and the stream continues from the local end.
func TestLostUnsyncedTailKeepsPrefix(t *testing.T) {
	// 256 KiB written after the loss: the log ends below the remote next offset. 3 MiB: it
	// ends above it, an unclean failover that comparing offsets alone never noticed.
	for _, more := range []int64{256 << 10, 3 << 20} {
		t.Run(fmt.Sprintf("then-%dKiB", more>>10), func(t *testing.T) { lostTail(t, more) })
	}
}

func lostTail(t *testing.T, more int64) {
	e := newEnv(t, envOptions{node: smallFragments})
	gen := loadgen.Config{Seed: 22, MinDataBytes: 2000, MaxDataBytes: 8000}
	opts := segments.Options{MaxSegmentBytes: 512 << 10}
	full := genLog(t, t.TempDir(), gen, loadgen.Limit{Bytes: 3 << 20}, opts)
	ref := genLog(t, t.TempDir(), gen, loadgen.Limit{Bytes: 3 << 20}, opts) // local retention leaves it alone
	if err := e.node.AddStream(actors.StreamSpec{ID: "tail", Log: full, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	forceTail(t, e, "tail", full.NextOffset())
	before, _, m1 := e.durableChunks("tail")
	keysBefore := e.objectKeys("tail")
	e.stopNode()

	// The restarted broker's log kept only a prefix, then was written on with other data.
	cut := full.NextOffset() * 2 / 3
	n := chunksBelow(t, ref, cut)
	shortLog := func() *segments.Log {
		lg := genLog(t, t.TempDir(), gen, loadgen.Limit{Chunks: n}, opts)
		other, err := loadgen.New(loadgen.Config{Seed: 99, MinDataBytes: 2000, MaxDataBytes: 8000, Epoch: 2})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := loadgen.Write(context.Background(), lg, other, loadgen.Limit{Bytes: more}, loadgen.WriteOptions{Commit: true}); err != nil {
			t.Fatal(err)
		}
		return lg
	}
	short, shortRef := shortLog(), shortLog()
	shortEnd := firstOfEpoch(t, shortRef, 2)
	e.startNode()
	if err := e.node.AddStream(actors.StreamSpec{ID: "tail", Log: short, Epoch: 2}); err != nil {
		t.Fatal(err)
	}
	forceTail(t, e, "tail", short.NextOffset())

	after, gaps, m2 := e.durableChunks("tail")
	if len(gaps) != 0 || m2.FirstOffset != 0 || m2.NextOffset != short.NextOffset() {
		t.Fatalf("remote [%d,%d) gaps %v, want [0,%d) and none", m2.FirstOffset, m2.NextOffset, gaps, short.NextOffset())
	}
	sameAsLog(t, after, shortRef, "remote tier after the truncation")
	for id, b := range before {
		if id < shortEnd && !bytes.Equal(after[id], b) {
			t.Fatalf("chunk %d below the divergence point %d changed or went", id, shortEnd)
		}
	}
	// Every fragment object wholly below the divergence point is the very same object.
	keysAfter := e.objectKeys("tail")
	kept := 0
	for _, en := range leafEntries(t, e, "tail", m1) {
		end := entryEnd(t, e, "tail", m1, en)
		if end <= shortEnd {
			key := e.locate("tail", en) // after the truncation: fails if the object went
			if !keysBefore[key] || !keysAfter[key] {
				t.Fatalf("fragment [%d,%d) below the divergence point %d: key %q not kept", en.FirstOffset, end, shortEnd, key)
			}
			kept++
		}
	}
	if kept == 0 {
		t.Fatal("no fragment lay wholly below the divergence point: the test proves nothing")
	}
	if n := e.node.Metrics().Truncations.Load(); n != 1 {
		t.Fatalf("truncations counted: %d, want 1", n)
	}
	if rep := e.verify("tail"); len(rep.Findings) != 0 {
		t.Fatalf("verify after the truncation: %v", rep.Findings)
	}
}

// chunksBelow counts the chunks of lg that end at or below offset.
func chunksBelow(t *testing.T, lg *segments.Log, offset uint64) int64 {
	t.Helper()
	rd, err := lg.NewReader(lg.FirstOffset())
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var n int64
	for {
		h, _, err := rd.Next()
		if err != nil || h.NextID() > offset {
			return n
		}
		n++
	}
}

// firstOfEpoch is the first chunk id of lg written at epoch.
func firstOfEpoch(t *testing.T, lg *segments.Log, epoch uint64) uint64 {
	t.Helper()
	rd, err := lg.NewReader(lg.FirstOffset())
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	for {
		h, _, err := rd.Next()
		if err != nil {
			t.Fatalf("no chunk of epoch %d: %v", epoch, err)
		}
		if h.Epoch == epoch {
			return h.ChunkID
		}
	}
}

// leafEntries lists the fragment entries of m, descending into groups.
func leafEntries(t *testing.T, e *env, stream string, m manifest.Manifest) []manifest.Entry {
	t.Helper()
	var out []manifest.Entry
	it := manifest.Iterate(m, m.FirstOffset, e.fetcher(stream))
	for {
		fr, ok, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		if !fr.Gap {
			out = append(out, fr.Entry)
		}
	}
}

// entryEnd is where a leaf entry of stream's manifest m ends.
func entryEnd(t *testing.T, e *env, stream string, m manifest.Manifest, en manifest.Entry) uint64 {
	it := manifest.Iterate(m, en.FirstOffset, e.fetcher(stream))
	fr, ok, err := it.Next()
	if err != nil || !ok {
		t.Fatalf("entry at %d: %v", en.FirstOffset, err)
	}
	return fr.End
}

// genSink is a throwaway log to advance a generator through.
func genSink(t *testing.T, opts segments.Options) *segments.Log {
	t.Helper()
	lg, err := segments.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lg.Close() })
	return lg
}

// verify runs `node verify`'s check of stream's remote tier.
func (e *env) verify(stream string) verify.Report {
	e.t.Helper()
	rep, err := verify.Stream(context.Background(), verify.Options{Store: e.store, Meta: e.meta, KeyPrefix: prefix(e.cfg), Stream: stream})
	if err != nil {
		e.t.Fatalf("verify %s: %v", stream, err)
	}
	return rep
}

// TestDivergenceCopiesPrefixTheLogLacks is the lost-tail case where the divergence point
// falls inside a fragment whose first chunks the local log no longer holds (its retention
// ran): the prefix below the divergence point is copied from the remote object into a new
// one, so nothing the local log lacks is lost, and the old object goes only after the
// truncation persisted.
func TestDivergenceCopiesPrefixTheLogLacks(t *testing.T) {
	e := newEnv(t, envOptions{node: smallFragments})
	gen := loadgen.Config{Seed: 23, MinDataBytes: 2000, MaxDataBytes: 6000}
	opts := segments.Options{MaxSegmentBytes: 32 << 10}
	full := genLog(t, t.TempDir(), gen, loadgen.Limit{Bytes: 2 << 20}, opts)
	ref := genLog(t, t.TempDir(), gen, loadgen.Limit{Bytes: 2 << 20}, opts)
	if err := e.node.AddStream(actors.StreamSpec{ID: "copy", Log: full, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	forceTail(t, e, "copy", full.NextOffset())
	before, _, m1 := e.durableChunks("copy")
	e.stopNode()

	// The divergence point: just before the last chunk of a fragment in the middle.
	leaves := leafEntries(t, e, "copy", m1)
	straddler := leaves[len(leaves)/2]
	end := entryEnd(t, e, "copy", m1, straddler)
	var ids []uint64
	for id := range before {
		if id >= straddler.FirstOffset && id < end {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	if len(ids) < 3 {
		t.Fatalf("fragment at %d holds %d chunks: too few", straddler.FirstOffset, len(ids))
	}
	divergeAt := ids[len(ids)-1]
	lastCommon := ids[len(ids)-2]
	n := chunksBelow(t, ref, divergeAt)
	shortLog := func() *segments.Log {
		lg := genLog(t, t.TempDir(), gen, loadgen.Limit{Chunks: n}, opts)
		other, err := loadgen.New(loadgen.Config{Seed: 98, MinDataBytes: 2000, MaxDataBytes: 6000, Epoch: 2})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := loadgen.Write(context.Background(), lg, other, loadgen.Limit{Bytes: 512 << 10}, loadgen.WriteOptions{Commit: true}); err != nil {
			t.Fatal(err)
		}
		return lg
	}
	short, shortRef := shortLog(), shortLog()
	if _, err := short.ApplyRetention(segments.RetentionPolicy{MayDelete: func(s segments.SegmentInfo) bool { return s.NextOffset <= lastCommon }}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if f := short.FirstOffset(); f <= straddler.FirstOffset || f > lastCommon {
		t.Fatalf("local log starts at %d, want inside (%d, %d]: the setup does not make a copy necessary", f, straddler.FirstOffset, lastCommon)
	}
	oldKey := e.locate("copy", straddler)

	e.startNode()
	if err := e.node.AddStream(actors.StreamSpec{ID: "copy", Log: short, Epoch: 2}); err != nil {
		t.Fatal(err)
	}
	forceTail(t, e, "copy", short.NextOffset())
	after, gaps, m2 := e.durableChunks("copy")
	if len(gaps) != 0 || m2.FirstOffset != 0 || m2.NextOffset != short.NextOffset() {
		t.Fatalf("remote [%d,%d) gaps %v, want [0,%d) and none", m2.FirstOffset, m2.NextOffset, gaps, short.NextOffset())
	}
	sameAsLog(t, after, shortRef, "remote tier after the truncation")
	for _, id := range ids[:len(ids)-1] { // the prefix the local log lacks, held remotely still
		if !bytes.Equal(after[id], before[id]) {
			t.Fatalf("chunk %d of the copied prefix differs or is gone", id)
		}
	}
	waitFor(t, 30*time.Second, "the reaper to delete the straddling fragment's old object", func() bool {
		return !e.objectKeys("copy")[oldKey]
	})
	if n := e.node.Metrics().Truncations.Load(); n != 1 {
		t.Fatalf("truncations counted: %d, want 1", n)
	}
}

// TestVersion1BucketReadVerifiedAppended starts a node on a stream that an earlier version
// tiered (version 1 keys without epochs, version 1 root and group objects): the node resolves
// it, compares it with the local log, appends to it with version 2 objects, and verify
// passes over the mixed bucket; no version 1 object is rewritten or lost.
func TestVersion1BucketReadVerifiedAppended(t *testing.T) {
	e := newEnv(t, envOptions{node: smallFragments})
	env := tiertest.Env{Store: e.store, Meta: e.meta, KeyPrefix: prefix(e.cfg)}
	old := tiertest.Write(t, env, tiertest.Spec{Stream: "v1", Seed: 41, Chunks: 80, Rebalance: 3, KeyVersion: 1, FormatVersion: 1})
	if rep := e.verify("v1"); len(rep.Findings) != 0 || rep.Fragments == 0 || rep.Groups == 0 {
		t.Fatalf("verify of the version 1 bucket: %d fragments %d groups, findings %v", rep.Fragments, rep.Groups, rep.Findings)
	}
	v1Keys := e.objectKeys("v1")
	lg := openCommitted(t, old.Dir)
	before := lg.NextOffset()
	g, err := loadgen.New(loadgen.Config{Seed: 42, MinDataBytes: 500, MaxDataBytes: 3000})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.node.AddStream(actors.StreamSpec{ID: "v1", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := loadgen.Write(context.Background(), lg, g, loadgen.Limit{Bytes: 512 << 10}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	forceTail(t, e, "v1", lg.NextOffset())
	_, gaps, m := e.durableChunks("v1")
	if len(gaps) != 0 || m.FirstOffset != 0 || m.NextOffset != lg.NextOffset() || m.NextOffset <= before {
		t.Fatalf("remote [%d,%d) gaps %v, want [0,%d) above %d", m.FirstOffset, m.NextOffset, gaps, lg.NextOffset(), before)
	}
	now := e.objectKeys("v1")
	for k := range v1Keys {
		if strings.Contains(k, "/data/") && !now[k] {
			t.Fatalf("version 1 fragment %s is gone after the append", k)
		}
	}
	if rep := e.verify("v1"); len(rep.Findings) != 0 {
		t.Fatalf("verify of the mixed bucket: %v", rep.Findings)
	}
	// The node upgraded the stream at its resolution (a version 3 root of the same manifest,
	// named by the record): the version 1 root is replaced, and its reaper deletes it.
	waitFor(t, 20*time.Second, "the replaced version 1 root "+old.RootKey+" deleted", func() bool {
		return !e.objectKeys("v1")[old.RootKey]
	})
	if n := e.node.Metrics().Upgrades.Load(); n != 1 {
		t.Fatalf("%d upgrades to version 3, want 1", n)
	}
}

// TestEmptyLogBehindRemoteComparedWhenDataArrives restarts a tiered stream on an empty
// local log (a replaced disk) and then lets the broker write other data from offset 0: the
// reader, which had nothing to compare at resolution, compares again once data arrives and
// stalls as diverged; nothing remote is deleted, and nothing written below the remote next
// offset is left undrained behind the node's back.
func TestEmptyLogBehindRemoteComparedWhenDataArrives(t *testing.T) {
	e := newEnv(t, envOptions{node: smallFragments})
	gen := loadgen.Config{Seed: 24, MinDataBytes: 2000, MaxDataBytes: 8000}
	opts := segments.Options{MaxSegmentBytes: 256 << 10}
	lg := genLog(t, t.TempDir(), gen, loadgen.Limit{Bytes: 1 << 20}, opts)
	if err := e.node.AddStream(actors.StreamSpec{ID: "wiped", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	forceTail(t, e, "wiped", lg.NextOffset())
	before := e.referencedKeys("wiped")
	e.stopNode()

	empty, err := segments.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { empty.Close() })
	e.startNode()
	if err := e.node.AddStream(actors.StreamSpec{ID: "wiped", Log: empty, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the reader to resolve on the empty log", func() bool {
		st, err := e.node.Status(context.Background(), "wiped")
		return err == nil && st.Phase == "running"
	})
	other, err := loadgen.New(loadgen.Config{Seed: 97, MinDataBytes: 2000, MaxDataBytes: 8000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadgen.Write(context.Background(), empty, other, loadgen.Limit{Bytes: 256 << 10}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the stream to stall as diverged", func() bool {
		st, err := e.node.Status(context.Background(), "wiped")
		return err == nil && st.Phase == "diverged"
	})
	after := e.objectKeys("wiped")
	for k := range before {
		if !after[k] {
			t.Fatalf("%s, referenced by the persisted manifest, is gone", k)
		}
	}
	if now := e.referencedKeys("wiped"); !sameKeys(before, now) {
		t.Fatalf("the persisted manifest changed while diverged: %d objects referenced before, %d after", len(before), len(now))
	}
}

// TestWipedLogRefilledWithSameChunksKeepsEverything restarts a tiered stream on a wiped log
// that fills again with the very same chunks (a replica re-replicating; the demo's
// deterministic load after its directory was deleted): while the log is a prefix of the
// remote tier the stream waits behind and deletes nothing; once the log reaches the remote
// next offset the comparison matches and tiering goes on from there. Before the behind
// rule the first comparison took the short prefix for a lost tail and deleted everything
// above it.
func TestWipedLogRefilledWithSameChunksKeepsEverything(t *testing.T) {
	e := newEnv(t, envOptions{node: smallFragments})
	gen := loadgen.Config{Seed: 25, MinDataBytes: 2000, MaxDataBytes: 8000}
	opts := segments.Options{MaxSegmentBytes: 256 << 10}
	lg := genLog(t, t.TempDir(), gen, loadgen.Limit{Bytes: 1 << 20}, opts)
	if err := e.node.AddStream(actors.StreamSpec{ID: "refill", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	forceTail(t, e, "refill", lg.NextOffset())
	remoteNext := lg.NextOffset()
	before := e.referencedKeys("refill")
	e.stopNode()

	g, err := loadgen.New(gen)
	if err != nil {
		t.Fatal(err)
	}
	refill, err := segments.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { refill.Close() })
	if _, err := loadgen.Write(context.Background(), refill, g, loadgen.Limit{Chunks: 10}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	e.startNode()
	if err := e.node.AddStream(actors.StreamSpec{ID: "refill", Log: refill, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the stream to wait behind the remote tier", func() bool {
		st, err := e.node.Status(context.Background(), "refill")
		return err == nil && st.Phase == "behind"
	})
	for k := range before {
		if !e.objectKeys("refill")[k] {
			t.Fatalf("%s went while the log was behind", k)
		}
	}
	// The log fills up with the same chunks, past the remote next offset.
	more, err := loadgen.Write(context.Background(), refill, g, loadgen.Limit{Bytes: 1<<20 + 256<<10}, loadgen.WriteOptions{Commit: true})
	if err != nil {
		t.Fatal(err)
	}
	if refill.NextOffset() <= remoteNext {
		t.Fatalf("the refilled log ends at %d, not past the remote next offset %d", refill.NextOffset(), remoteNext)
	}
	forceTail(t, e, "refill", refill.NextOffset())
	for k := range before {
		if !e.objectKeys("refill")[k] && strings.Contains(k, "/data/") {
			t.Fatalf("fragment %s, durable before the wipe, is gone", k)
		}
	}
	if n := e.node.Metrics().Truncations.Load(); n != 0 {
		t.Fatalf("%d truncations of a log that only caught up", n)
	}
	ref := genLog(t, t.TempDir(), gen, loadgen.Limit{Chunks: 10 + more.Chunks}, opts) // local retention trims refill
	got, gaps, m := e.durableChunks("refill")
	if len(gaps) != 0 || m.FirstOffset != 0 || m.NextOffset != refill.NextOffset() {
		t.Fatalf("remote [%d,%d) gaps %v, want [0,%d)", m.FirstOffset, m.NextOffset, gaps, refill.NextOffset())
	}
	sameAsLog(t, got, ref, "remote tier after the refill")
}

// goLocalAhead makes the local log run ahead of the remote tier, as a broker whose
// retention outran an S3 outage does: with every PUT refused it appends before bytes,
// deletes every segment it may, appends after bytes and lifts the fault. It returns the
// log's first offset, which lies above persistedNext (the offsets between are lost).
func goLocalAhead(t *testing.T, e *env, lg *segments.Log, g *loadgen.Generator, before, after int64, persistedNext uint64) uint64 {
	t.Helper()
	e.inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: `.*`, Fault: s3test.FaultInternalError})
	if _, err := loadgen.Write(context.Background(), lg, g, loadgen.Limit{Bytes: before}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := lg.ApplyRetention(segments.RetentionPolicy{MayDelete: func(segments.SegmentInfo) bool { return true }}, time.Now()); err != nil {
		t.Fatal(err)
	}
	lost := lg.FirstOffset()
	if lost <= persistedNext {
		t.Fatalf("retention left the log at %d, not above the persisted %d", lost, persistedNext)
	}
	if _, err := loadgen.Write(context.Background(), lg, g, loadgen.Limit{Bytes: after}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	e.inj.Clear()
	return lost
}
