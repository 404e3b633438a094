package tests

import (
	"context"
	"fmt"
	"hash/crc64"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

var smallFragments = actors.Config{Stream: actors.StreamOptions{
	FragmentTargetSize: 128 << 10, PersistThreshold: 2, PersistInterval: 100 * time.Millisecond,
	UploadRetryDelay: 200 * time.Millisecond, UploadRetryMaxDelay: time.Second,
}}

// copyRabbitMQ copies the bundled RabbitMQ 3.10.8 stream directory into a temp dir.
func copyRabbitMQ(t *testing.T) string {
	t.Helper()
	src := filepath.Join("..", "segments", "testdata", "rabbitmq-3.10.8-amqp")
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range ents {
		in, err := os.Open(filepath.Join(src, en.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, en.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		out.Close()
	}
	return dst
}

func openCommitted(t *testing.T, dir string) *segments.Log {
	t.Helper()
	lg, err := segments.Open(dir, segments.Options{MaxSegmentBytes: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lg.Close() })
	last, ok := lg.LastChunkID()
	if !ok {
		t.Fatal("empty log")
	}
	if err := lg.SetCommitted(last); err != nil {
		t.Fatal(err)
	}
	return lg
}

// TestTierRabbitMQDirectory tiers the real RabbitMQ stream and reads it back identically.
func TestTierRabbitMQDirectory(t *testing.T) {
	e := newEnv(t, envOptions{node: smallFragments})
	lg := openCommitted(t, copyRabbitMQ(t))
	ref := openCommitted(t, copyRabbitMQ(t))
	if err := e.node.AddStream(actors.StreamSpec{ID: "rabbitmq-amqp", Log: lg, Epoch: 2}); err != nil {
		t.Fatal(err)
	}
	next := lg.NextOffset()
	if next != 25006 {
		t.Fatalf("real log next offset %d, want 25006", next)
	}
	forceTail(t, e, "rabbitmq-amqp", next)
	m, frags := e.verifyRemote("rabbitmq-amqp", ref)
	if m.NextOffset != 25006 || m.FirstOffset != 0 || frags < 40 {
		t.Fatalf("remote [%d,%d) in %d fragments, want [0,25006) in about 50", m.FirstOffset, m.NextOffset, frags)
	}
}

// forceTail waits until everything committed was drained and the full fragments persisted,
// cuts the tail and awaits the last offset.
func forceTail(t *testing.T, e *env, stream string, next uint64) {
	t.Helper()
	waitFor(t, 60*time.Second, "drain to reach the end", func() bool {
		st, err := e.node.Status(context.Background(), stream)
		return err == nil && st.Core.DrainNext == next
	})
	if err := e.node.ForceCut(stream); err != nil {
		t.Fatal(err)
	}
	e.await(stream, next-1, 60*time.Second)
}

// TestAwaitOffsetOnlyAfterPersist checks, at the moment await_offset returns, that etcd and
// S3 already hold a manifest covering the offset and the cache reflects it.
func TestAwaitOffsetOnlyAfterPersist(t *testing.T) {
	e := newEnv(t, envOptions{node: smallFragments})
	lg, err := segments.Open(t.TempDir(), segments.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	if err := e.node.AddStream(actors.StreamSpec{ID: "await", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	g, _ := loadgen.New(loadgen.Config{Seed: 3, MinDataBytes: 4000, MaxDataBytes: 9000})
	for round := 0; round < 5; round++ {
		// An await for data not yet written must wait, then return once it is persisted.
		target := lg.NextOffset() + 10
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			done <- e.node.AwaitOffset(ctx, "await", target)
		}()
		if _, err := loadgen.Write(context.Background(), lg, g, loadgen.Limit{Bytes: 400 << 10}, loadgen.WriteOptions{Commit: true}); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("round %d: await %d: %v", round, target, err)
		}
		m, rec, _ := e.remote("await")
		if rec.NextOffset <= target || m.NextOffset <= target {
			t.Fatalf("round %d: await %d returned with etcd next %d", round, target, rec.NextOffset)
		}
		fr, err := manifest.LookupOffset(m, target, e.fetcher("await"))
		if err != nil {
			t.Fatalf("round %d: offset %d not in the persisted manifest: %v", round, target, err)
		}
		if _, err := e.store.LocateEntry(context.Background(), prefix(e.cfg), "await", fr.Entry); err != nil {
			t.Fatalf("round %d: fragment holding %d not in S3: %v", round, target, err)
		}
		if p, ok := e.node.Cached("await"); !ok || p.Manifest.NextOffset <= target {
			t.Fatalf("round %d: cache not updated when await returned: %+v", round, p)
		}
	}
}

// TestConflictReinitializes injects a second writer's persist: the stream actor gets a
// conflict, is restarted by its supervisor, resolves again and resumes with nothing lost.
func TestConflictReinitializes(t *testing.T) {
	e := newEnv(t, envOptions{node: smallFragments})
	gen := loadgen.Config{Seed: 11, MinDataBytes: 3000, MaxDataBytes: 12000}
	dir, refDir := t.TempDir(), t.TempDir()
	opts := segments.Options{MaxSegmentBytes: 512 << 10}
	ref := genLog(t, refDir, gen, loadgen.Limit{Chunks: 900}, opts)
	lg, err := segments.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	g, _ := loadgen.New(gen)
	if _, err := loadgen.Write(context.Background(), lg, g, loadgen.Limit{Chunks: 300}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.node.AddStream(actors.StreamSpec{ID: "conflict", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	e.await("conflict", 100, 60*time.Second)

	// A second writer persists over the node's revision (same root, new revision). The node
	// may persist between its read and its write (it persists on, the load's tail): it
	// reads again then, until its own persist succeeds.
	ctx := context.Background()
	for attempt := 1; ; attempt++ {
		rec, rev, _, err := e.meta.ReadManifest(ctx, "conflict")
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.meta.Persist(ctx, "conflict", 1, rev, rec)
		if err != nil {
			t.Fatalf("second writer's persist: %v", err)
		}
		if res.Outcome == metadata.PersistOK {
			break
		}
		if attempt == 20 {
			t.Fatalf("second writer's persist: %+v after %d attempts", res, attempt)
		}
	}
	// More data: the node's next persist conflicts, it reinitializes and carries on.
	if _, err := loadgen.Write(ctx, lg, g, loadgen.Limit{Chunks: 600}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "a reinitialization", func() bool { return e.node.Metrics().Reinitializations.Load() > 0 })
	forceTail(t, e, "conflict", lg.NextOffset())
	_, _ = e.verifyRemote("conflict", ref)
}

// TestDeletedStreamStops deletes a stream's records behind the node's back: the next persist
// finds them gone, the reader stops for good, waiters fail and nothing more is written.
func TestDeletedStreamStops(t *testing.T) {
	e := newEnv(t, envOptions{node: smallFragments})
	lg, err := segments.Open(t.TempDir(), segments.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	if err := e.node.AddStream(actors.StreamSpec{ID: "doomed", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	g, _ := loadgen.New(loadgen.Config{Seed: 5, MinDataBytes: 4000, MaxDataBytes: 8000})
	ctx := context.Background()
	if _, err := loadgen.Write(ctx, lg, g, loadgen.Limit{Bytes: 1 << 20}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	e.await("doomed", 10, 60*time.Second)
	if err := e.meta.DeleteStream(ctx, "doomed"); err != nil {
		t.Fatal(err)
	}
	// A waiter for data to come must be told the stream is gone.
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		done <- e.node.AwaitOffset(ctx, "doomed", lg.NextOffset()+1000)
	}()
	if _, err := loadgen.Write(ctx, lg, g, loadgen.Limit{Bytes: 1 << 20}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !isStopped(err) {
		t.Fatalf("waiter of a deleted stream got %v, want ErrStreamStopped", err)
	}
	// Uploads in flight when it stopped are cancelled or land as orphans; then nothing more.
	waitFor(t, 30*time.Second, "in-flight uploads to end", func() bool { return e.node.Metrics().TransfersRunning.Load() == 0 })
	before := e.objectKeys("doomed")
	if _, err := loadgen.Write(ctx, lg, g, loadgen.Limit{Bytes: 1 << 20}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, found, _ := e.meta.ReadManifest(ctx, "doomed"); found {
		t.Fatal("a stopped reader wrote a manifest record again")
	}
	// A sentinel await proves the node processed the writes above: it fails at once.
	if err := e.node.AwaitOffset(ctx, "doomed", 0); !isStopped(err) {
		t.Fatalf("await on a stopped stream: %v", err)
	}
	after := e.objectKeys("doomed")
	for k := range after {
		if !before[k] {
			t.Fatalf("object %s written after the reader stopped", k)
		}
	}
}

// TestS3Faults runs the pipeline through 503 storms, a spell of 403s, connection resets
// mid-body, dropped responses and slow responses: nothing is lost or skipped, the stalled
// offset is reported while the 403s last, and the pipeline recovers by itself.
func TestS3Faults(t *testing.T) {
	cfg := smallFragments
	cfg.Stream.TransferDeadline = 3 * time.Second
	e := newEnv(t, envOptions{faults: true, node: cfg})
	gen := loadgen.Config{Seed: 13, MinDataBytes: 3000, MaxDataBytes: 12000}
	limit := loadgen.Limit{Bytes: 4 << 20}
	lg := genLog(t, t.TempDir(), gen, limit, segments.Options{MaxSegmentBytes: 1 << 20})
	ref := genLog(t, t.TempDir(), gen, limit, segments.Options{MaxSegmentBytes: 1 << 20})

	frag := `/data/.*\.fragment$`
	e.inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: frag, Fault: s3test.FaultSlowDown, Count: 6})
	e.inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: frag, Fault: s3test.FaultInternalError, Count: 3})
	e.inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: frag, Fault: s3test.FaultResetRequest, Count: 2})
	e.inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: frag, Fault: s3test.FaultDropResponse, Count: 1})
	e.inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: frag, Fault: s3test.FaultForbidden, Count: 4})
	e.inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: `\.manifest$`, Fault: s3test.FaultSlowDown, Count: 2})
	e.inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: frag, Fault: s3test.FaultDelay, Delay: 300 * time.Millisecond, Count: 3})

	if err := e.node.AddStream(actors.StreamSpec{ID: "faulty", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	sawStall := false
	waitFor(t, 60*time.Second, "the stall to be reported", func() bool {
		st, err := e.node.Status(context.Background(), "faulty")
		sawStall = err == nil && st.Core.Stalled
		return sawStall
	})
	forceTail(t, e, "faulty", lg.NextOffset())
	m, _ := e.verifyRemote("faulty", ref)
	if m.FirstOffset != 0 || m.NextOffset != lg.NextOffset() {
		t.Fatalf("remote [%d,%d) after faults, want [0,%d)", m.FirstOffset, m.NextOffset, lg.NextOffset())
	}
	st, _ := e.node.Status(context.Background(), "faulty")
	if st.Core.Stalled {
		t.Fatal("still stalled after the faults stopped")
	}
	mt := e.node.Metrics()
	if mt.TransferErrors[2].Load() == 0 || mt.TransferErrors[1].Load() == 0 {
		t.Fatalf("faults not seen by the node: retriable %d non-transient %d", mt.TransferErrors[1].Load(), mt.TransferErrors[2].Load())
	}
}

// TestRemoteRetentionMaxAge sets a max-age policy on a tiered stream whose chunks are all
// older than it: remote retention empties the manifest (next offset kept) and, after the
// persist that records it, the reaper deletes every fragment and group.
func TestRemoteRetentionMaxAge(t *testing.T) {
	cfg := smallFragments
	cfg.Stream.RebalanceThreshold = 4
	e := newEnv(t, envOptions{node: cfg})
	old := time.Now().Add(-48 * time.Hour).UnixMilli()
	lg := genLog(t, t.TempDir(), loadgen.Config{Seed: 17, MinDataBytes: 4000, MaxDataBytes: 9000, StartTimestamp: old},
		loadgen.Limit{Bytes: 3 << 20}, segments.Options{MaxSegmentBytes: 512 << 10})
	if err := e.node.AddStream(actors.StreamSpec{ID: "aged", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	next := lg.NextOffset()
	forceTail(t, e, "aged", next)
	if err := e.node.SetRetention("aged", manifest.Policy{MaxAgeMillis: int64(time.Hour / time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "retention to empty the remote tier", func() bool {
		p, ok := e.node.Cached("aged")
		return ok && len(p.Manifest.Entries) == 0
	})
	m, _, _ := e.remote("aged")
	if m.FirstOffset != next || m.NextOffset != next || m.TotalSize != 0 || m.FirstTimestamp != -1 {
		t.Fatalf("retained-away manifest: [%d,%d) size %d ts %d; want [%d,%d) size 0 ts -1", m.FirstOffset, m.NextOffset, m.TotalSize, m.FirstTimestamp, next, next)
	}
	want := e.referencedKeys("aged")
	waitFor(t, 30*time.Second, "the reaper to delete every dropped object", func() bool {
		return sameKeys(e.objectKeys("aged"), want)
	})
	if len(want) != 1 {
		t.Fatalf("an empty manifest references %d objects, want only its root", len(want))
	}
}

// TestCorruptRootIsNeverEmpty corrupts the persisted root object: a restarted reader refuses
// it with an error naming the key, keeps retrying without writing anything, and resumes once
// the object is readable again.
func TestCorruptRootIsNeverEmpty(t *testing.T) {
	e := newEnv(t, envOptions{node: smallFragments})
	lg := genLog(t, t.TempDir(), loadgen.Config{Seed: 23, MinDataBytes: 4000, MaxDataBytes: 9000},
		loadgen.Limit{Bytes: 1 << 20}, segments.Options{})
	if err := e.node.AddStream(actors.StreamSpec{ID: "fragile", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	// Everything persisted before the removal: a persist in flight at RemoveStream may leave
	// its root in the bucket unanchored, and the re-added reader then adopts that child of the
	// record (the spec's adoption) without reading the record's root this test corrupts
	// (failed 3 of 24 runs when the test removed the stream mid-write).
	forceTail(t, e, "fragile", lg.NextOffset())
	ctx := context.Background()
	if err := e.node.RemoveStream(ctx, "fragile"); err != nil {
		t.Fatal(err)
	}
	// More committed data while the stream is away: tiered once the root is readable again.
	g, _ := loadgen.New(loadgen.Config{Seed: 24, MinDataBytes: 4000, MaxDataBytes: 9000})
	if _, err := loadgen.Write(ctx, lg, g, loadgen.Limit{Bytes: 256 << 10}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	_, rec, rev := e.remote("fragile")
	key := rec.RootKey(prefix(e.cfg), "fragile")
	good, err := e.store.GetObject(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), good...)
	bad[len(bad)/2] ^= 0xff
	if err := e.store.PutObject(ctx, key, bad); err != nil {
		t.Fatal(err)
	}
	if err := e.node.AddStream(actors.StreamSpec{ID: "fragile", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	var st actors.StreamStatus
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err = e.node.Status(ctx, "fragile")
		if err == nil && st.ResolveError != "" {
			break
		}
		if time.Now().After(deadline) {
			_, now, _, _ := e.meta.ReadManifest(ctx, "fragile")
			t.Fatalf("the corrupt root was not reported in 30 s: status %+v (err %v); record revision %d, %d when the root was corrupted", st, err, now, rev)
		}
	}
	if st.Phase != "resolving" || !strings.Contains(st.ResolveError, key) || !strings.Contains(st.ResolveError, "corrupt") {
		t.Fatalf("status while the root is corrupt: phase %q, error %q; want resolving and an error naming %s", st.Phase, st.ResolveError, key)
	}
	if _, now, _, _ := e.meta.ReadManifest(ctx, "fragile"); now != rev {
		t.Fatalf("a reader that could not resolve persisted (revision %d -> %d)", rev, now)
	}
	if err := e.store.PutObject(ctx, key, good); err != nil {
		t.Fatal(err)
	}
	forceTail(t, e, "fragile", lg.NextOffset())
}

// TestTierFollowedRabbitMQDirectory tiers the RabbitMQ directory opened read-only (follow
// mode) with a torn tail a live broker would leave: the remote tier is RabbitMQ's chunks
// and the directory is byte for byte as before, torn tail included, with the default hot
// window of 0: the node's local retention never deletes a followed log's segments.
func TestTierFollowedRabbitMQDirectory(t *testing.T) {
	cfg := smallFragments
	e := newEnv(t, envOptions{node: cfg})
	dir := copyRabbitMQ(t)
	last := filepath.Join(dir, "00000000000000022366.segment")
	f, err := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 30)); err != nil { // a chunk header being written
		t.Fatal(err)
	}
	f.Close()
	before := dirDigest(t, dir)
	lg, err := segments.Open(dir, segments.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lg.Close() })
	if id, ok := lg.LastChunkID(); !ok || lg.SetCommitted(id) != nil {
		t.Fatal("followed log holds no chunk")
	}
	if err := e.node.AddStream(actors.StreamSpec{ID: "rabbitmq-followed", Log: lg, Epoch: 2}); err != nil {
		t.Fatal(err)
	}
	forceTail(t, e, "rabbitmq-followed", 25006)
	m, _ := e.verifyRemote("rabbitmq-followed", openCommitted(t, copyRabbitMQ(t)))
	if m.NextOffset != 25006 || m.FirstOffset != 0 {
		t.Fatalf("remote [%d,%d), want [0,25006)", m.FirstOffset, m.NextOffset)
	}
	st, err := e.node.Status(context.Background(), "rabbitmq-followed")
	if err != nil || st.Follow == nil || st.Follow.PendingBytes != 30 {
		t.Fatalf("status of the followed stream: %+v %v", st.Follow, err)
	}
	if after := dirDigest(t, dir); after != before {
		t.Fatal("tiering a followed directory changed it")
	}
}

// dirDigest is every file name of dir with its size and CRC-64 of its bytes.
func dirDigest(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, en := range ents {
		data, err := os.ReadFile(filepath.Join(dir, en.Name()))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %d %x\n", en.Name(), len(data), crc64.Checksum(data, crc64.MakeTable(crc64.ECMA)))
	}
	return b.String()
}
