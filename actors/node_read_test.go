package actors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// tieredStream runs a stream whose log rolls small segments, uploads 16 KiB fragments,
// folds groups of 4 and deletes uploaded segments at once, over 1 MiB of seed 31's load; it
// then holds the uploads back and appends 100 KiB more; it returns the node, the stream's
// log and a reference log holding the same chunks.
func tieredStream(t *testing.T, w *world, stream string) (*Node, *segments.Log, *segments.Log) {
	t.Helper()
	n, lg, ref := persistedStream(t, w, stream, Config{Stream: StreamOptions{RebalanceThreshold: 4}}, 31, 1<<20)
	until(t, 10*time.Second, "local retention", func() (bool, string) {
		return lg.FirstOffset() > 0, fmt.Sprint("local first ", lg.FirstOffset())
	})
	// Hold the uploads back: what comes next is only local.
	w.Inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: `/data/`, Fault: s3test.FaultForbidden})
	writeLog(t, lg, 33, loadgen.Limit{Bytes: 100 << 10})
	writeLog(t, ref, 33, loadgen.Limit{Bytes: 100 << 10})
	return n, lg, ref
}

// persistedStream starts a node with cfg (its logger, 16 KiB fragments and a persist after
// every edit, within 50 ms, set here) and a stream over a log of 64 KiB segments holding
// bytes of seed's load, and waits until all of it is persisted; it returns the node, the
// stream's log and a reference log holding the same chunks.
func persistedStream(t *testing.T, w *world, stream string, cfg Config, seed uint64, bytes int64) (*Node, *segments.Log, *segments.Log) {
	t.Helper()
	cfg.Logger, _ = testLogger(t)
	cfg.Stream.FragmentTargetSize, cfg.Stream.PersistThreshold, cfg.Stream.PersistInterval = 16<<10, 1, 50*time.Millisecond
	n := startNode(w, cfg)
	opts := segments.Options{MaxSegmentBytes: 64 << 10}
	lg, ref := openLog(t, opts), openLog(t, opts)
	writeLog(t, lg, seed, loadgen.Limit{Bytes: bytes})
	writeLog(t, ref, seed, loadgen.Limit{Bytes: bytes})
	if err := n.AddStream(StreamSpec{ID: stream, Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, stream, lg.NextOffset(), 30*time.Second)
	return n, lg, ref
}

// readAll reads until the reader's position reaches to, checking every item against ref:
// chunks byte-identical and in order, tiling the offsets from the start. It returns the
// tiers seen.
func readAll(t *testing.T, r *read.Reader, ref *segments.Log, to uint64) map[read.Tier]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rd, err := ref.NewReader(r.Start)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	tiers := map[read.Tier]int{}
	prev := uint64(0)
	for first := true; r.Position() < to; first = false {
		it, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("next at %d: %v", r.Position(), err)
		}
		if it.Kind != read.ItemChunk {
			t.Fatalf("at %d: %s [%d, %d), want chunks only", r.Position(), it.Kind, it.Offset, it.End)
		}
		if !first && it.Offset != prev {
			t.Fatalf("chunk %d follows one ending at %d", it.Offset, prev)
		}
		prev = it.End
		h, loc, err := rd.Next()
		if err != nil {
			t.Fatal(err)
		}
		want, _, err := ref.ReadChunk(loc)
		if err != nil {
			t.Fatal(err)
		}
		if h.ChunkID != it.Offset || !bytes.Equal(want, it.Chunk) {
			t.Fatalf("chunk %d (%s) differs from the reference chunk %d", it.Offset, it.Tier, h.ChunkID)
		}
		tiers[it.Tier]++
	}
	return tiers
}

// TestReaderAcrossTiers: readers at first, inside the remote tier (inside groups), at a
// timestamp, at last and at next read byte-identical chunks in order, the remote ones
// handing off to the local log; a reader at next gets what is appended afterwards.
func TestReaderAcrossTiers(t *testing.T) {
	w := newWorld(t, worldOptions{})
	n, lg, ref := tieredStream(t, w, "rt")
	p, _ := n.Cached("rt")
	if len(p.Manifest.Entries) >= int(p.Manifest.NextOffset) || p.Manifest.Entries[0].Kind == 0 {
		t.Fatalf("want groups in the manifest: %d root entries, first a %s", len(p.Manifest.Entries), p.Manifest.Entries[0].Kind)
	}
	ctx := context.Background()
	end := lg.CommittedNext()

	r, err := n.OpenReader(ctx, "rt", read.FromFirst())
	if err != nil {
		t.Fatal(err)
	}
	if r.Start != 0 || r.Attached != nil || r.NextAtOpen != end {
		t.Fatalf("first: start %d attached %v next %d", r.Start, r.Attached, r.NextAtOpen)
	}
	tiers := readAll(t, r, ref, end)
	if tiers[read.TierRemote] == 0 || tiers[read.TierLocal] == 0 {
		t.Fatalf("tiers read: %v, want both", tiers)
	}
	r.Close()

	mid := lg.FirstOffset() / 3
	r, err = n.OpenReader(ctx, "rt", read.FromOffset(mid))
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, r, ref, end)
	r.Close()

	hr, err := ref.NewReader(lg.FirstOffset() / 2)
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := hr.Next()
	hr.Close()
	if err != nil || h.ChunkID == 0 {
		t.Fatalf("reference chunk at %d: %d, %v", lg.FirstOffset()/2, h.ChunkID, err)
	}
	r, err = n.OpenReader(ctx, "rt", read.FromTimestamp(h.Timestamp))
	if err != nil {
		t.Fatal(err)
	}
	if r.Start != h.ChunkID {
		t.Fatalf("timestamp %d: start %d, after chunk %d that has it", h.Timestamp, r.Start, h.ChunkID)
	}
	readAll(t, r, ref, end)
	r.Close()

	r, err = n.OpenReader(ctx, "rt", read.FromLast())
	if err != nil {
		t.Fatal(err)
	}
	if tiers := readAll(t, r, ref, end); tiers[read.TierLocal] != 1 || tiers[read.TierRemote] != 0 {
		t.Fatalf("last: read %v, want one local chunk", tiers)
	}
	r.Close()

	r, err = n.OpenReader(ctx, "rt", read.FromNext())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		it, err := r.Next(rctx)
		if err == nil && it.Offset != end {
			err = fmt.Errorf("first chunk after next is %d, want %d", it.Offset, end)
		}
		got <- err
	}()
	writeLog(t, lg, 32, loadgen.Limit{Chunks: 1})
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if m := &n.Metrics().Read; m.ReadersOpened.Load() != 5 || m.ReadersOpen.Load() != 1 || m.BytesRemote.Load() == 0 || m.Handoffs.Load() < 3 {
		t.Fatalf("metrics: opened %d open %d remote bytes %d hand-offs %d", m.ReadersOpened.Load(), m.ReadersOpen.Load(), m.BytesRemote.Load(), m.Handoffs.Load())
	}
}

// TestReaderBelowBothAttaches: with remote retention past the start, a reader at offset 0
// attaches at the remote tier's first offset and says so.
func TestReaderBelowBothAttaches(t *testing.T) {
	w := newWorld(t, worldOptions{})
	n, lg, ref := tieredStream(t, w, "rb")
	p, _ := n.Cached("rb")
	keep := p.Manifest.TotalSize / 2
	if err := n.SetRetention("rb", manifest.Policy{MaxBytes: keep}); err != nil {
		t.Fatal(err)
	}
	until(t, 10*time.Second, "remote retention", func() (bool, string) {
		p, _ := n.Cached("rb")
		return p.Manifest.FirstOffset > 0, fmt.Sprint("first ", p.Manifest.FirstOffset)
	})
	p, _ = n.Cached("rb")
	r, err := n.OpenReader(context.Background(), "rb", read.FromOffset(0))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Attached == nil || r.Attached.Requested != 0 || r.Attached.At < p.Manifest.FirstOffset || r.Start != r.Attached.At {
		t.Fatalf("attached %+v start %d, manifest first %d", r.Attached, r.Start, p.Manifest.FirstOffset)
	}
	readAll(t, r, ref, lg.CommittedNext())
}

// TestReaderFaults: 503s, resets mid-body and slow answers on the reads: the reader
// retries and delivers every chunk once, in order.
func TestReaderFaults(t *testing.T) {
	w := newWorld(t, worldOptions{})
	n, lg, ref := tieredStream(t, w, "rf")
	hits := make(chan string, 64)
	w.Inj.Add(s3test.Rule{Method: "GET", KeyRegexp: `/data/`, Fault: s3test.FaultInternalError, Count: 5, Hit: hits})
	w.Inj.Add(s3test.Rule{Method: "GET", KeyRegexp: `/data/`, Fault: s3test.FaultResetResponse, AfterBytes: 1000, Count: 3, Hit: hits})
	w.Inj.Add(s3test.Rule{Method: "GET", KeyRegexp: `/meta/`, Fault: s3test.FaultDelay, Delay: 200 * time.Millisecond, Count: 3, Hit: hits})
	w.Inj.Add(s3test.Rule{Method: "GET", KeyRegexp: `/data/`, Fault: s3test.FaultTruncateResponse, AfterBytes: 100, Count: 2, Hit: hits})
	r, err := n.OpenReader(context.Background(), "rf", read.FromFirst())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	readAll(t, r, ref, lg.CommittedNext())
	if len(hits) != 13 {
		t.Fatalf("%d read faults fired, want all 13", len(hits))
	}
}

// TestReaderUnavailable: a stream whose manifest is not resolved (etcd unreachable) fails
// closed with read.ErrUnavailable, whatever the start.
func TestReaderUnavailable(t *testing.T) {
	w := newWorld(t, worldOptions{EtcdFaults: true})
	log, _ := testLogger(t)
	n := startNode(w, Config{Logger: log}) // a node opens its claim in etcd before it runs
	w.Proxy.Partition()
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 5, loadgen.Limit{Chunks: 10})
	if err := n.AddStream(StreamSpec{ID: "ru", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	for _, from := range []read.From{read.FromFirst(), read.FromLast(), read.FromNext(), read.FromOffset(3), read.FromTimestamp(0)} {
		r, err := n.OpenReader(context.Background(), "ru", from)
		if !errors.Is(err, read.ErrUnavailable) {
			if r != nil {
				r.Close()
			}
			t.Fatalf("from %s: %v, want ErrReadUnavailable", from, err)
		}
	}
	if c := n.Metrics().Read.Errors[read.ClassUnavailable].Load(); c != 5 {
		t.Fatalf("%d unavailable errors counted", c)
	}
	w.Proxy.Heal()
	_, err := n.OpenReader(context.Background(), "nope", read.FromFirst())
	if !errors.Is(err, ErrUnknownStream) {
		t.Fatalf("unknown stream: %v", err)
	}
}

// TestReaderSegmentGoneBetweenHeaderAndBody: local retention may delete a segment after the
// local reader read a chunk's header (through its open file) and before the chunk's body is
// read (by name). The reader then reads on remotely from that chunk, not from the one after
// it: nothing is skipped. The deletion is staged by removing the segment file behind the
// log's back, which leaves the reader in exactly that state.
func TestReaderSegmentGoneBetweenHeaderAndBody(t *testing.T) {
	w := newWorld(t, worldOptions{})
	n, lg, ref := persistedStream(t, w, "gone", Config{LocalHotWindowBytes: 1 << 30}, 41, 512<<10)
	next := lg.NextOffset()
	segs := lg.Segments()
	if len(segs) < 4 || lg.FirstOffset() != 0 {
		t.Fatalf("%d segments, local first %d: want at least 4, all kept", len(segs), lg.FirstOffset())
	}
	seg := segs[1]
	r, err := n.OpenReader(context.Background(), "gone", read.FromOffset(seg.FirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// The reader opened the segment's file; its first Next reads the header from it, then
	// the body by name.
	if err := os.Remove(filepath.Join(lg.Dir(), seg.Name)); err != nil {
		t.Fatal(err)
	}
	tiers := readAll(t, r, ref, next)
	if tiers[read.TierRemote] == 0 {
		t.Fatalf("tiers %v: the reader never read remotely", tiers)
	}
}

// TestReaderHandsOffWhereTheLocalLogBegins: a reader of the remote tier moves to the local
// log as soon as its position is held there, not only at the remote tier's end: the chunks
// below the local first offset come from S3, every later one from the local log, although
// S3 holds them all.
func TestReaderHandsOffWhereTheLocalLogBegins(t *testing.T) {
	w := newWorld(t, worldOptions{})
	n, lg, ref := persistedStream(t, w, "early", Config{LocalHotWindowBytes: 192 << 10}, 43, 768<<10)
	next := lg.NextOffset()
	until(t, 30*time.Second, "local retention past the first segments", func() (bool, string) {
		return lg.FirstOffset() > 0, fmt.Sprintf("local first %d", lg.FirstOffset())
	})
	first := lg.FirstOffset()
	below := 0
	rd, err := ref.NewReader(0)
	if err != nil {
		t.Fatal(err)
	}
	for {
		h, _, err := rd.Next()
		if err != nil || h.ChunkID >= first {
			break
		}
		below++
	}
	rd.Close()
	r, err := n.OpenReader(context.Background(), "early", read.FromFirst())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tiers := readAll(t, r, ref, next)
	if tiers[read.TierRemote] != below || tiers[read.TierLocal] == 0 {
		t.Fatalf("tiers %v: want the %d chunks below the local first offset %d from S3 and the rest locally", tiers, below, first)
	}
	if h := n.Metrics().Read.Handoffs.Load(); h != 1 {
		t.Fatalf("%d hand-offs, want 1", h)
	}
}

// TestReaderGapWhereTheLocalSegmentWentBeforeUpload: a reader in the local tier, above the
// remote tier's next offset, whose segment the broker's retention deletes before it was
// uploaded (issue 22 item 2). The reader must not open the remote tier above its end (it
// failed with "the remote tier was truncated"): it waits for the gap the writer declares
// and delivers it as a gap item, then reads on locally from the gap's end.
func TestReaderGapWhereTheLocalSegmentWentBeforeUpload(t *testing.T) {
	w := newWorld(t, worldOptions{})
	n, lg, _ := persistedStream(t, w, "lost", Config{LocalHotWindowBytes: 1 << 30}, 47, 128<<10)
	remoteNext := lg.NextOffset()
	// Hold the uploads back (the manifest's roots still land): what comes next is only local.
	w.Inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: `/data/`, Fault: s3test.FaultForbidden})
	writeLog(t, lg, 49, loadgen.Limit{Bytes: 320 << 10})
	var seg segments.SegmentInfo
	for _, s := range lg.Segments() {
		if s.FirstOffset > remoteNext {
			seg = s // the first segment wholly above the remote tier's next offset
			break
		}
	}
	if seg.Name == "" || seg.NextOffset >= lg.NextOffset() {
		t.Fatalf("segments %+v: want one wholly above the remote next offset %d, not the last", lg.Segments(), remoteNext)
	}
	r, err := n.OpenReader(context.Background(), "lost", read.FromOffset(seg.FirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// The broker's retention takes every segment up to and including the reader's.
	if _, err := lg.ApplyRetention(segments.RetentionPolicy{MayDelete: func(s segments.SegmentInfo) bool { return s.NextOffset <= seg.NextOffset }}, time.Now()); err != nil {
		t.Fatal(err)
	}
	localFirst := lg.FirstOffset()
	if localFirst != seg.NextOffset {
		t.Fatalf("local first %d after retention, want %d", localFirst, seg.NextOffset)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	it, err := r.Next(ctx)
	if err != nil {
		t.Fatalf("next at %d (in the deleted segment): %v; want a gap item", seg.FirstOffset, err)
	}
	if it.Kind != read.ItemGap || it.Offset > seg.FirstOffset || it.End != localFirst {
		t.Fatalf("first item %s [%d, %d); want a gap holding %d and ending at the local first offset %d", it.Kind, it.Offset, it.End, seg.FirstOffset, localFirst)
	}
	it, err = r.Next(ctx)
	if err != nil || it.Kind != read.ItemChunk || it.Offset != localFirst {
		t.Fatalf("after the gap: %s [%d, %d), %v; want the chunk at %d", it.Kind, it.Offset, it.End, err, localFirst)
	}
}

// TestReadsUseTheKeysTheNodeKnows: a node reads the fragments and groups it uploaded
// without listing the stream's directories to find their keys (every LIST is refused while
// it reads); a node that did not upload them lists them, then knows them too.
func TestReadsUseTheKeysTheNodeKnows(t *testing.T) {
	w := newWorld(t, worldOptions{})
	n, lg, ref := persistedStream(t, w, "kt", Config{Stream: StreamOptions{RebalanceThreshold: 4}}, 31, 512<<10)
	until(t, 10*time.Second, "local retention", func() (bool, string) {
		return lg.FirstOffset() > 0, fmt.Sprint("local first ", lg.FirstOffset())
	})
	if p, _ := n.Cached("kt"); p.Manifest.Entries[0].Kind == manifest.KindFragment {
		t.Fatalf("want groups in the manifest: %d root entries, the first a fragment", len(p.Manifest.Entries))
	}
	remote := lg.FirstOffset() // [0, remote) is only in S3
	readRemote := func(n *Node) {
		t.Helper()
		r, err := n.OpenReader(context.Background(), "kt", read.FromFirst())
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if tiers := readAll(t, r, ref, remote); tiers[read.TierRemote] == 0 {
			t.Fatalf("tiers read: %v, want the remote one", tiers)
		}
	}
	lists := make(chan string, 1024)
	refuse := s3test.Rule{Method: "GET", KeyRegexp: `^$`, Fault: s3test.FaultForbidden, Hit: lists}
	w.Inj.Add(refuse)
	readRemote(n)
	w.Inj.Clear()
	if len(lists) > 0 {
		t.Fatalf("the uploading node listed the bucket %d times to read what it uploaded", len(lists))
	}
	stopNode(t, n)

	// A node that uploaded nothing lists the keys once, then reads without listing again.
	other := startNode(w, Config{NodeID: "other", Stream: StreamOptions{RebalanceThreshold: 4}})
	defer stopNode(t, other)
	if err := other.AddStream(StreamSpec{ID: "kt", Log: lg, Epoch: 2}); err != nil {
		t.Fatal(err)
	}
	persisted(t, other, "kt", lg.NextOffset(), 30*time.Second)
	readRemote(other)
	w.Inj.Add(refuse)
	readRemote(other)
	if len(lists) > 0 {
		t.Fatalf("the second read listed the bucket %d times", len(lists))
	}
}
