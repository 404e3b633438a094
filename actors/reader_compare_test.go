package actors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/streamtier/streamtier/actors/divergence"
	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// TestPrefixCopyStreamsAndChecks copies the prefix of a fragment of several MiB (all its
// chunks but the last) as the divergence truncation does, streaming: the new object holds
// exactly the old one's chunk bytes below the cut and a valid index. A source object whose
// bytes do not match its index (a flipped data byte) is refused before anything is put.
func TestPrefixCopyStreamsAndChecks(t *testing.T) {
	f := newPrefixFixture(t)
	n, put, truncation, remote, desc := f.n, f.put, f.truncation, f.remote, f.desc
	ctx := context.Background()
	const stream = "copy"
	src := put(1, false)
	tr := truncation(src)
	copied, err := copyPrefix(ctx, n, remote(), stream, 2, tr)
	if err != nil {
		t.Fatal(err)
	}
	if copied.FirstOffset != src.FirstOffset || copied.Size != tr.PrefixBytes || copied.UID == src.UID || copied.LastTimestamp != tr.PrefixLastTimestamp {
		t.Fatalf("copy entry %+v for the prefix of %+v", copied, src)
	}
	oldObj, err := n.store.GetObject(ctx, manifest.FragmentKey(n.cfg.KeyPrefix, stream, src.FirstOffset, 1, src.UID))
	if err != nil {
		t.Fatal(err)
	}
	newObj, err := n.store.GetObject(ctx, manifest.FragmentKey(n.cfg.KeyPrefix, stream, copied.FirstOffset, 2, copied.UID))
	if err != nil {
		t.Fatal(err)
	}
	layout, err := fragment.ParseObject(newObj)
	if err != nil {
		t.Fatalf("the copy is not a valid fragment object: %v", err)
	}
	end := fragment.ObjectHeaderSize + tr.PrefixBytes
	if layout.Size != tr.PrefixBytes || len(layout.Chunks) != len(tr.Prefix) || !bytes.Equal(newObj[:end], oldObj[:end]) {
		t.Fatalf("the copy holds %d bytes in %d chunks, want the first %d bytes of the source in %d chunks", layout.Size, len(layout.Chunks), tr.PrefixBytes, len(tr.Prefix))
	}
	t.Logf("copied a prefix of %d bytes (%d chunks) of a %d-byte fragment", tr.PrefixBytes, len(tr.Prefix), desc.Size)

	// The figure: bytes allocated by a streamed copy and by the in-memory copy it replaced
	// (a ranged GET of the region, the object built in memory, one PUT), interleaved. The
	// S3 server runs in this process: both counts include what it allocates for the body.
	var streamed, inMemory []float64
	for round := 0; round < 3; round++ {
		streamed = append(streamed, allocated(func() {
			if _, err := copyPrefix(ctx, n, remote(), stream, 2, tr); err != nil {
				t.Fatal(err)
			}
		}))
		inMemory = append(inMemory, allocated(func() {
			srcKey := manifest.FragmentKey(n.cfg.KeyPrefix, stream, src.FirstOffset, 1, src.UID)
			region, err := n.store.GetRange(ctx, srcKey, fragment.ObjectHeaderSize, int64(tr.PrefixBytes))
			if err != nil {
				t.Fatal(err)
			}
			obj := fragment.AppendObjectHeader(make([]byte, 0, fragment.ObjectHeaderSize+len(region)+fragment.IndexRecordSize*len(tr.Prefix)))
			obj = append(obj, region...)
			for _, p := range tr.Prefix {
				obj = fragment.AppendIndexRecord(obj, fragment.IndexRecord{ChunkID: p.ID, Timestamp: p.Timestamp, Position: p.Position})
			}
			if err := n.store.PutObject(ctx, manifest.FragmentKey(n.cfg.KeyPrefix, stream, src.FirstOffset, 2, uint64(100+round)), obj); err != nil {
				t.Fatal(err)
			}
		}))
	}
	t.Logf("allocated per copy of %d bytes: streamed %v MiB, in memory %v MiB", tr.PrefixBytes, mib(streamed), mib(inMemory))
	slices.Sort(streamed)
	if streamed[1] > float64(tr.PrefixBytes)/4 { // the median
		t.Fatalf("a streamed copy of %d bytes allocated %.0f bytes: it holds the fragment", tr.PrefixBytes, streamed[1])
	}

	bad := put(3, true)
	keysBefore := objectCount(t, n, stream)
	_, err = copyPrefix(ctx, n, remote(), stream, 2, truncation(bad))
	if !errors.Is(err, fragment.ErrCorrupt) || !strings.Contains(err.Error(), "data CRC") {
		t.Fatalf("copy of a corrupt source: %v, want a data CRC error", err)
	}
	if got := objectCount(t, n, stream); got != keysBefore {
		t.Fatalf("%d objects after the refused copy, %d before: something was put", got, keysBefore)
	}
}

// prefixFixture is a fragment of several MiB written from a local log, ready to be put under
// the stream "copy" and to have its prefix (all its chunks but the last) copied.
type prefixFixture struct {
	w          *world
	n          *Node
	put        func(uid uint64, corrupt bool) manifest.Entry
	truncation func(e manifest.Entry) *divergence.Truncation
	remote     func() remoteChunks
	desc       fragment.Description
}

func newPrefixFixture(t *testing.T) prefixFixture {
	t.Helper()
	w := newWorld(t, worldOptions{})
	n := startNode(w, Config{})
	ctx := context.Background()
	lg := openLog(t, segments.Options{MaxSegmentBytes: 2 << 20})
	g, err := loadgen.New(loadgen.Config{Seed: 5, MinDataBytes: 100 << 10, MaxDataBytes: 300 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadgen.Write(ctx, lg, g, loadgen.Limit{Bytes: 6 << 20}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	asm, err := fragment.NewAssembly(fragment.MaxTargetSize)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := lg.NewReader(lg.FirstOffset())
	if err != nil {
		t.Fatal(err)
	}
	for {
		h, loc, err := rd.Next()
		if err != nil {
			break
		}
		if _, err := asm.Add(h, loc); err != nil {
			t.Fatal(err)
		}
	}
	rd.Close()
	desc := asm.Snapshot()
	if len(desc.Chunks) < 3 {
		t.Fatalf("%d chunks: too few", len(desc.Chunks))
	}
	const stream = "copy"
	put := func(uid uint64, corrupt bool) manifest.Entry {
		key := manifest.FragmentKey(n.cfg.KeyPrefix, stream, desc.FirstOffset, 1, uid)
		if _, err := n.store.PutFragment(ctx, key, lg.Dir(), desc); err != nil {
			t.Fatal(err)
		}
		if corrupt {
			obj, err := n.store.GetObject(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			c := desc.Chunks[1]
			obj[int64(c.Position)+48+int64(c.Header.BloomSize)] ^= 1
			if _, err := n.store.DeleteObjects(ctx, []string{key}); err != nil {
				t.Fatal(err)
			}
			if err := n.store.PutObject(ctx, key, obj); err != nil {
				t.Fatal(err)
			}
		}
		return manifest.Entry{FirstOffset: desc.FirstOffset, FirstTimestamp: desc.FirstTimestamp, LastTimestamp: desc.LastTimestamp, Size: desc.Size, UID: uid, Kind: manifest.KindFragment}
	}
	last := desc.Chunks[len(desc.Chunks)-1]
	truncation := func(e manifest.Entry) *divergence.Truncation {
		tr := &divergence.Truncation{At: last.Header.ChunkID, Straddle: &e, PrefixBytes: uint64(last.Position) - fragment.ObjectHeaderSize}
		for _, c := range desc.Chunks[:len(desc.Chunks)-1] {
			tr.Prefix = append(tr.Prefix, divergence.IndexEntry{ID: c.Header.ChunkID, Timestamp: c.Header.Timestamp, Position: c.Position})
			tr.PrefixLastTimestamp = c.Header.Timestamp
		}
		return tr
	}
	remote := func() remoteChunks {
		return remoteChunks{ctx: ctx, tier: n.store.Tier(n.cfg.KeyPrefix, stream), keys: map[manifest.Entry]string{}}
	}

	return prefixFixture{w: w, n: n, put: put, truncation: truncation, remote: remote, desc: desc}
}

// allocated is the bytes the process allocated while f ran.
func allocated(f func()) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc - before.TotalAlloc)
}

func mib(v []float64) []string {
	out := make([]string, len(v))
	for i, b := range v {
		out[i] = fmt.Sprintf("%.1f", b/(1<<20))
	}
	return out
}

func objectCount(t *testing.T, n *Node, stream string) int {
	t.Helper()
	count := 0
	if err := n.store.List(context.Background(), manifest.StreamPrefix(n.cfg.KeyPrefix, stream), func(s3io.ObjectInfo) error { count++; return nil }); err != nil {
		t.Fatal(err)
	}
	return count
}

// TestPrefixCopyRefusesAChangedSecondRead: the prefix is read twice, once to check it and
// compute the new object's CRC-32, once to stream it into the PUT. When the second read
// returns other bytes (one bit flipped in transit) and the server ignores the checksum
// header, the PUT body fails before its last bytes are sent: the copy fails with a
// retriable error naming both CRCs, no whole object is stored under a new key and the
// original stays. Through the same server, an intact copy still succeeds.
func TestPrefixCopyRefusesAChangedSecondRead(t *testing.T) {
	f := newPrefixFixture(t)
	n, inj := f.n, f.w.Inj
	ctx := context.Background()
	const stream = "copy"
	src := f.put(1, false)
	srcKey := manifest.FragmentKey(n.cfg.KeyPrefix, stream, src.FirstOffset, 1, src.UID)
	copies := regexp.QuoteMeta(manifest.StreamPrefix(n.cfg.KeyPrefix, stream)) + `data/\d{20}-0{19}2-`
	tr := f.truncation(src)
	before, err := n.store.Head(ctx, srcKey)
	if err != nil {
		t.Fatal(err)
	}

	inj.Add(s3test.Rule{Method: "GET", KeyRegexp: "^" + regexp.QuoteMeta(srcKey) + "$", Fault: s3test.FaultDelay, Count: 1}) // the check passes
	inj.Add(s3test.Rule{Method: "GET", KeyRegexp: "^" + regexp.QuoteMeta(srcKey) + "$", Fault: s3test.FaultCorruptResponse, Count: 1})
	inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: copies, Fault: s3test.FaultIgnoreChecksum})
	_, err = copyPrefix(ctx, n, f.remote(), stream, 2, tr)
	if !errors.Is(err, s3io.ErrBodyMismatch) || !s3io.IsRetriable(err) || !strings.Contains(err.Error(), srcKey) || strings.Count(err.Error(), "CRC-32") < 1 {
		t.Fatalf("copy through a corrupting GET: %v, want a retriable CRC mismatch naming %s", err, srcKey)
	}
	t.Logf("copy refused: %v", err)
	if hits := inj.Hits(); hits != 3 {
		t.Fatalf("%d faults injected, want 3 (pass, corrupt GET, PUT without checksum)", hits)
	}
	// The copy is refused before its last bytes are sent. No whole object may be stored
	// under a new key (the unchecked copy stored the corrupt one whole). A server that keeps
	// what it received of a broken request (versitygw sometimes does, after the copy's own
	// delete of the key) may leave a partial object: garbage no manifest names, collected
	// by gc; the original must be intact.
	full := int64(fragment.ObjectHeaderSize) + int64(tr.PrefixBytes) + int64(len(tr.Prefix))*fragment.IndexRecordSize // a whole copy
	var orig bool
	if err := n.store.List(ctx, manifest.StreamPrefix(n.cfg.KeyPrefix, stream), func(o s3io.ObjectInfo) error {
		switch {
		case o.Key == srcKey:
			orig = o.Size == before.Size && o.ETag == before.ETag
		case o.Size >= full:
			t.Errorf("a whole object %s (%d bytes) was stored by the refused copy", o.Key, o.Size)
		default:
			t.Logf("a partial object of the broken request remains: %s, %d bytes (garbage for gc)", o.Key, o.Size)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !orig {
		t.Fatalf("the original %s is not intact after the refused copy", srcKey)
	}

	inj.Clear()
	inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: copies, Fault: s3test.FaultIgnoreChecksum})
	copied, err := copyPrefix(ctx, n, f.remote(), stream, 2, tr)
	if err != nil {
		t.Fatalf("an intact copy through a server that ignores the checksum: %v", err)
	}
	obj, err := n.store.GetObject(ctx, manifest.FragmentKey(n.cfg.KeyPrefix, stream, copied.FirstOffset, 2, copied.UID))
	if err != nil {
		t.Fatal(err)
	}
	if layout, err := fragment.ParseObject(obj); err != nil || len(layout.Chunks) != len(tr.Prefix) {
		t.Fatalf("the copy: %v, %d chunks, want %d", err, len(layout.Chunks), len(tr.Prefix))
	}
	if inj.Hits() != 4 {
		t.Fatalf("%d faults injected, want 4: the PUT did not go through the rule", inj.Hits())
	}
}
