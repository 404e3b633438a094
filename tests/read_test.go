package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// readBytes is the size of the log TestReadExactlyOnceAcrossTiers writes: 64 MiB by
// default (under -race on a shared 2-core machine a larger log takes minutes);
// STREAMTIER_READ_BYTES (for example 1073741824) runs it at any size.
func readBytes(t *testing.T) int64 {
	if v := os.Getenv("STREAMTIER_READ_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			t.Fatalf("STREAMTIER_READ_BYTES=%q: want a byte count", v)
		}
		return n
	}
	return 64 << 20
}

// TestReadExactlyOnceAcrossTiers: while a writer appends and uploads, local retention
// deletes uploaded segments and remote retention trims by size, readers attached at first,
// at offsets inside groups, at a timestamp, at next and at last read to the tail: each
// delivers every offset from its start once, in order, byte-identical to what was written.
func TestReadExactlyOnceAcrossTiers(t *testing.T) {
	t.Setenv("STREAMTIER_DEBUG_READ_POISON", "1") // recycled range buffers poisoned: a chunk used too late fails
	total := readBytes(t)
	e := newEnv(t, envOptions{node: actors.Config{Stream: actors.StreamOptions{
		FragmentTargetSize: 256 << 10, PersistThreshold: 4, PersistInterval: 100 * time.Millisecond, RebalanceThreshold: 8,
	}}})
	gen := loadgen.Config{Seed: 11, MinDataBytes: 8 << 10, MaxDataBytes: 64 << 10, MinEntries: 1, MaxEntries: 8, SubBatchPercent: 20, StartTimestamp: 1_700_000_000_000, BytesPerSecond: 1 << 20}
	opts := segments.Options{MaxSegmentBytes: 1 << 20}
	ref := genLog(t, t.TempDir(), gen, loadgen.Limit{Bytes: total}, opts)
	lg, err := segments.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lg.Close() })
	if err := e.node.AddStream(actors.StreamSpec{ID: "eo", Log: lg, Epoch: 1, Retention: manifest.Policy{MaxBytes: uint64(total / 3)}}); err != nil {
		t.Fatal(err)
	}
	g, err := loadgen.New(gen)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	write := func(n int64) {
		t.Helper()
		if _, err := loadgen.Write(ctx, lg, g, loadgen.Limit{Bytes: n}, loadgen.WriteOptions{Commit: true}); err != nil {
			t.Fatal(err)
		}
	}
	// A third first, so that the remote tier has groups and retention has begun.
	write(total / 3)
	e.await("eo", lg.CommittedNext()/2, 2*time.Minute)
	var target atomic.Uint64 // the final committed next, once the writer is done
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	var checkers []*checker
	start := func(name string, from read.From) {
		var r *read.Reader
		waitFor(t, 30*time.Second, "reader "+name+" opens", func() bool {
			var err error
			r, err = e.node.OpenReader(ctx, "eo", from)
			return err == nil
		})
		c := newChecker(name, ref)
		checkers = append(checkers, c)
		t.Logf("%s: from %s starts at %d (attached %v)", name, from, r.Start, r.Attached)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.Close()
			for {
				if tg := target.Load(); tg > 0 && r.Position() >= tg {
					return
				}
				rctx, rcancel := context.WithTimeout(ctx, time.Second)
				it, err := r.Next(rctx)
				rcancel()
				if err != nil {
					if rctx.Err() != nil && ctx.Err() == nil {
						continue // waiting at the tail: check the target again
					}
					errs <- fmt.Errorf("%s at %d: %w", name, r.Position(), err)
					return
				}
				if err := c.item(it); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	p, _ := e.node.Cached("eo")
	if p.Manifest.Entries[0].Kind == manifest.KindFragment {
		t.Fatalf("no group at the head of the manifest (%d entries)", len(p.Manifest.Entries))
	}
	start("first", read.FromFirst())
	mid := p.Manifest.FirstOffset + (p.Manifest.NextOffset-p.Manifest.FirstOffset)/2
	start("in-group", read.FromOffset(mid))
	start("in-group-2", read.FromOffset(p.Manifest.FirstOffset+(p.Manifest.NextOffset-p.Manifest.FirstOffset)/5))
	h := chunkHolding(t, ref, mid+(lg.CommittedNext()-mid)/2)
	start("timestamp", read.FromTimestamp(h.Timestamp))
	t.Logf("timestamp %d is chunk %d's", h.Timestamp, h.ChunkID)
	hr := chunkHolding(t, ref, p.Manifest.FirstOffset+(p.Manifest.NextOffset-p.Manifest.FirstOffset)/3)
	start("timestamp-remote", read.FromTimestamp(hr.Timestamp))
	start("next", read.FromNext())
	start("last", read.FromLast())
	write(total - total/3)
	target.Store(lg.CommittedNext())
	forceTail(t, e, "eo", lg.CommittedNext())
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, c := range checkers {
		t.Logf("%s: %d chunks (%d remote, %d local), %d skipped ranges", c.name, c.chunks, c.tiers[read.TierRemote], c.tiers[read.TierLocal], c.skips)
		c.close()
		if c.prev != target.Load() {
			t.Errorf("%s ended at %d, want %d", c.name, c.prev, target.Load())
		}
	}
	if m := &e.node.Metrics().Read; m.ReadersOpen.Load() != 0 || m.BytesRemote.Load() == 0 || m.BytesLocal.Load() == 0 {
		t.Errorf("read metrics: %d open, %d remote bytes, %d local bytes", m.ReadersOpen.Load(), m.BytesRemote.Load(), m.BytesLocal.Load())
	}
}

// TestReadRabbitMQDirectory: the RabbitMQ directory, tiered with local retention, reads back
// from the first offset chunk for chunk as the original holds them, remote then local.
func TestReadRabbitMQDirectory(t *testing.T) {
	t.Setenv("STREAMTIER_DEBUG_READ_POISON", "1") // recycled range buffers poisoned: a chunk used too late fails
	e := newEnv(t, envOptions{faults: true, node: actors.Config{Stream: actors.StreamOptions{
		FragmentTargetSize: 64 << 10, PersistThreshold: 1, PersistInterval: 50 * time.Millisecond, RebalanceThreshold: 4,
	}}})
	orig := filepath.Join("/work/shared/testdata/osiris", "rabbitmq-3.10.8-amqp")
	if _, err := os.Stat(orig); err != nil {
		orig = filepath.Join("..", "segments", "testdata", "rabbitmq-3.10.8-amqp")
	}
	lg, err := segments.Open(copyDir(t, orig), segments.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lg.Close() })
	ref, err := segments.Open(copyDir(t, orig), segments.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Close() })
	for _, l := range []*segments.Log{lg, ref} {
		last, _ := l.LastChunkID()
		if err := l.SetCommitted(last); err != nil {
			t.Fatal(err)
		}
	}
	next := lg.NextOffset()
	if err := e.node.AddStream(actors.StreamSpec{ID: "rmq", Log: lg, Epoch: 2}); err != nil {
		t.Fatal(err)
	}
	forceTail(t, e, "rmq", next)
	waitFor(t, 10*time.Second, "local retention", func() bool { return lg.FirstOffset() > 0 })
	// Uploads held back, 20 more chunks stay local: the reader hands off to them.
	e.inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: `/data/`, Fault: s3test.FaultForbidden})
	for _, l := range []*segments.Log{lg, ref} {
		g, err := loadgen.New(loadgen.Config{Seed: 3, Epoch: 2, StartTimestamp: 1_800_000_000_000})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := loadgen.Write(context.Background(), l, g, loadgen.Limit{Chunks: 20}, loadgen.WriteOptions{Commit: true}); err != nil {
			t.Fatal(err)
		}
	}
	next = lg.CommittedNext()
	r, err := e.node.OpenReader(context.Background(), "rmq", read.FromFirst())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := newChecker("rabbitmq", ref)
	defer c.close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for r.Position() < next {
		it, err := r.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.item(it); err != nil {
			t.Fatal(err)
		}
	}
	if c.chunks != 456+20 || c.tiers[read.TierRemote] == 0 || c.tiers[read.TierLocal] == 0 {
		t.Fatalf("%d chunks read (%v), want the directory's 456 and 20 more over both tiers", c.chunks, c.tiers)
	}
}

// copyDir copies the files of src into a fresh temporary directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range ents {
		if filepath.Ext(en.Name()) != ".segment" && filepath.Ext(en.Name()) != ".index" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, en.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, en.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// chunkHolding is the header of the reference chunk holding offset.
func chunkHolding(t *testing.T, ref *segments.Log, offset uint64) chunk.Header {
	t.Helper()
	rd, err := ref.NewReader(offset)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	h, _, err := rd.Next()
	if err != nil {
		t.Fatal(err)
	}
	return h
}
