package read

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors/internal/actortest"
	"github.com/streamtier/streamtier/actors/read/fetchcore"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/tiertest"
)

// remoteFixture is a stream's remote tier written by hand (fragments, groups, root, etcd
// records) on a real S3 server behind the fault injector, and the chunks it holds.
type remoteFixture struct {
	w      *actortest.World
	st     tiertest.Stream
	chunks map[uint64][]byte // chunk id -> bytes as written
	order  []uint64
	env    Env
}

func newRemoteFixture(t *testing.T, chunks int) *remoteFixture {
	return newRemoteFixtureIn(t, chunks, actortest.WorldOptions{})
}

// newRemoteFixtureIn is newRemoteFixture in a world built with o.
func newRemoteFixtureIn(t *testing.T, chunks int, o actortest.WorldOptions) *remoteFixture {
	w := actortest.NewWorld(t, o)
	st := tiertest.Write(t, tiertest.Env{Store: w.Store, Meta: w.Meta}, tiertest.Spec{
		Stream: "remote-read", Seed: 5, Chunks: chunks, FragmentSize: 48 << 10, Rebalance: 3,
	})
	f := &remoteFixture{w: w, st: st, chunks: map[uint64][]byte{}}
	segs := map[string][]byte{}
	for _, c := range st.Chunks {
		b, ok := segs[c.Location.Segment]
		if !ok {
			var err error
			if b, err = os.ReadFile(filepath.Join(st.Dir, c.Location.Segment)); err != nil {
				t.Fatal(err)
			}
			segs[c.Location.Segment] = b
		}
		f.chunks[c.Header.ChunkID] = b[c.Location.Position : c.Location.Position+c.Location.Size]
		f.order = append(f.order, c.Header.ChunkID)
	}
	log, _ := actortest.Logger(t)
	m := st.Manifest
	f.env = Env{
		Tier: w.Store.Tier(manifest.DefaultKeyPrefix, st.ID), Log: log,
		Latest: func(context.Context) (manifest.Manifest, int64, error) { return m, st.Revision, nil },
		System: actortest.NewSystem(t, log),
		Stats:  &RemoteStats{}, Panics: new(atomic.Int64),
		Fetch: fetchcore.Config{RangeSize: 16 << 10, MaxConcurrency: 8},
	}
	return f
}

// readAll reads a source until the end of the remote tier, checking that the items tile the
// offsets from `from` on and that every chunk is the one written, byte for byte.
func (f *remoteFixture) readAll(t *testing.T, src remoteSource, from uint64) (chunks int, end uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	expect, first := from, true
	for {
		it, err := src.Next(ctx)
		var endErr *RemoteEndError
		if errors.As(err, &endErr) {
			if endErr.At != expect {
				t.Fatalf("end at %d, delivered up to %d", endErr.At, expect)
			}
			return chunks, endErr.At
		}
		if err != nil {
			t.Fatalf("next after %d chunks (at %d): %v", chunks, expect, err)
		}
		if it.Kind != ItemChunk || it.Tier != TierRemote {
			t.Fatalf("item %s from tier %s at %d: want remote chunks only", it.Kind, it.Tier, it.Offset)
		}
		if it.Offset > expect || it.End <= expect || (!first && it.Offset != expect) {
			t.Fatalf("chunk [%d,%d) does not follow offset %d (a duplicate or a loss)", it.Offset, it.End, expect)
		}
		if want, ok := f.chunks[it.Offset]; !ok || !bytes.Equal(want, it.Chunk) {
			t.Fatalf("chunk %d differs from the chunk written", it.Offset)
		}
		first, expect = false, it.End
		chunks++
	}
}

func (f *remoteFixture) open(t *testing.T, env Env, from uint64) remoteSource {
	t.Helper()
	src, err := openRemoteSource(context.Background(), env, from)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

// TestRemoteReadThroughFaults reads a stream's remote tier through a storm of 503s, bodies
// reset mid-way and slow responses: every chunk comes once, in order, byte for byte, the
// end is at the manifest's next offset, and a read afterwards (from the middle of a
// fragment, positioned through its index) works at once.
func TestRemoteReadThroughFaults(t *testing.T) {
	f := newRemoteFixture(t, 600)
	m := f.st.Manifest
	data := `/data/.*\.fragment$`
	f.w.Inj.Add(s3test.Rule{Method: "GET", KeyRegexp: data, Fault: s3test.FaultSlowDown, Count: 25})
	f.w.Inj.Add(s3test.Rule{Method: "GET", KeyRegexp: data, Fault: s3test.FaultResetResponse, AfterBytes: 5000, Count: 8})
	f.w.Inj.Add(s3test.Rule{Method: "GET", KeyRegexp: data, Fault: s3test.FaultTruncateResponse, AfterBytes: 7000, Count: 4})
	f.w.Inj.Add(s3test.Rule{Method: "GET", KeyRegexp: data, Fault: s3test.FaultDelay, Delay: 100 * time.Millisecond, Count: 6})

	src := f.open(t, f.env, m.FirstOffset)
	n, end := f.readAll(t, src, m.FirstOffset)
	if n != len(f.order) || end != m.NextOffset {
		t.Fatalf("read %d chunks up to %d, the tier holds %d up to %d", n, end, len(f.order), m.NextOffset)
	}
	rs := f.env.Stats
	if rs.Errors[RemoteErrRetriable].Load() < 25 {
		t.Errorf("%d retriable errors counted, at least the 25 503s were injected", rs.Errors[RemoteErrRetriable].Load())
	}
	if p50, _ := rs.FirstChunkQuantiles(); p50 <= 0 {
		t.Errorf("no time to first chunk recorded")
	}
	t.Logf("%d chunks, %d GETs, %d bytes, %d retriable errors", n, rs.GETs.Load(), rs.Bytes.Load(), rs.Errors[RemoteErrRetriable].Load())
	// The source stays usable at the end: it asks the manifest again and ends again.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := src.Next(ctx); !errors.Is(err, ErrRemoteEnd) {
		t.Fatalf("next after the end: %v, want the end again", err)
	}
	src.Close()

	// Progress afterwards, from inside a fragment: the chunk holding the offset comes first.
	f.w.Inj.Clear()
	mid := f.order[len(f.order)/2] + 1
	src2 := f.open(t, f.env, mid)
	n2, _ := f.readAll(t, src2, mid)
	if n2 == 0 || n2 >= n {
		t.Fatalf("read %d chunks from offset %d, want some and fewer than %d", n2, mid, n)
	}
	src2.Close()
	if open := rs.Open.Load(); open != 0 {
		t.Fatalf("%d readers still counted open", open)
	}
}

// TestRemoteReadSlowReaderDoesNotSlowAnother opens two readers under one small node-wide
// budget: one consumer takes nothing, the other reads the whole tier. The slow one fills
// its share and stops fetching; the fast one is not held back; what the node holds stays
// within the shares.
func TestRemoteReadSlowReaderDoesNotSlowAnother(t *testing.T) {
	f := newRemoteFixture(t, 400)
	m := f.st.Manifest
	const total = 256 << 10
	env := f.env
	env.Budget = NewBudget(total)
	slow := f.open(t, env, m.FirstOffset)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := slow.Next(ctx); err != nil { // it has started and holds its share
		t.Fatal(err)
	}
	fast := f.open(t, env, m.FirstOffset)
	n, _ := f.readAll(t, fast, m.FirstOffset)
	if n != len(f.order) {
		t.Fatalf("the fast reader read %d chunks of %d", n, len(f.order))
	}
	fast.Close()
	var largest int64
	for _, b := range f.chunks {
		largest = max(largest, int64(len(b)))
	}
	bound := max(int64(total), largest+env.Fetch.RangeSize)
	if held := f.env.Stats.Buffered.Load(); held > bound || held == 0 {
		t.Fatalf("the slow reader holds %d bytes, want some and at most %d", held, bound)
	}
	// The slow reader still delivers everything once its consumer takes it.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if _, err := slow.Next(ctx); err != nil {
				if !errors.Is(err, ErrRemoteEnd) {
					t.Errorf("slow reader: %v", err)
				}
				return
			}
		}
	}()
	wg.Wait()
}

// TestRemoteReadLostObjectFails deletes a fragment the manifest still lists: the reader
// delivers everything before it, then fails with a typed error naming the object; it never
// skips what the persisted manifest says is remote.
func TestRemoteReadLostObjectFails(t *testing.T) {
	f := newRemoteFixture(t, 200)
	m := f.st.Manifest
	var lost manifest.Entry
	for e := range f.st.Keys {
		if e.Kind == manifest.KindFragment && e.FirstOffset > m.FirstOffset && (lost.UID == 0 || e.FirstOffset < lost.FirstOffset) {
			lost = e
		}
	}
	if failed, err := f.w.Store.DeleteObjects(context.Background(), []string{f.st.Keys[lost]}); err != nil || len(failed) > 0 {
		t.Fatalf("delete: %v %v", failed, err)
	}
	src := f.open(t, f.env, m.FirstOffset)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	expect := m.FirstOffset
	for {
		it, err := src.Next(ctx)
		if err != nil {
			var missing *fetchcore.MissingObjectError
			if !errors.As(err, &missing) || missing.First != lost.FirstOffset {
				t.Fatalf("read failed with %v, want the missing object at %d", err, lost.FirstOffset)
			}
			if expect != lost.FirstOffset {
				t.Fatalf("delivered up to %d, the lost fragment starts at %d", expect, lost.FirstOffset)
			}
			return
		}
		expect = it.End
	}
}

// TestRemoteReadRecyclesRangeBuffers reads a tier with the range buffers poisoned when they
// come back to the node's pool (the debug mode): every chunk is still the one written when
// Next returns it (no buffer comes back while a chunk cut from it may be held), the buffers
// are reused (far fewer allocated than GETs issued), and a chunk kept past the next Next
// does change (the contract is real: a consumer must copy what it keeps).
func TestRemoteReadRecyclesRangeBuffers(t *testing.T) {
	f := newRemoteFixture(t, 400)
	env := f.env
	env.Budget = NewBudget(256 << 10)
	env.Budget.bufs.poison = true
	_, keep, changed := readKeeping(t, f, env, func(Item) bool { return true })
	gets, allocs, reuses := f.env.Stats.GETs.Load(), env.Budget.bufs.allocs.Load(), env.Budget.bufs.reuses.Load()
	// Buffers are taken for GETs and for copies of chunks across ranges alike: at least
	// half of all takes must be reuses.
	if reuses == 0 || allocs > reuses {
		t.Fatalf("%d GETs: %d buffers allocated, %d reused (GETs and cross-range copies); want most reused", gets, allocs, reuses)
	}
	if changed == 0 {
		t.Fatalf("no chunk kept past the next Next changed: the buffers were not recycled")
	}
	t.Logf("%d GETs, %d buffers allocated, %d reused; %d of %d chunks kept past Next changed", gets, allocs, reuses, changed, len(keep))
}

// TestRemoteReadGetPastDeadlineOrPanicRetried: a range GET that hangs (the server holds
// its answer for a minute) ends at its deadline, s3_transfer_timeout (1 s here), and a GET
// task that panics reports a failure: the core sees both as retriable and fetches the range
// again. The read completes, every chunk once and byte for byte, well within the minute.
func TestRemoteReadGetPastDeadlineOrPanicRetried(t *testing.T) {
	f := newRemoteFixtureIn(t, 200, actortest.WorldOptions{S3: func(c *s3io.Config) { c.TransferTimeout = time.Second }})
	m := f.st.Manifest
	hung := make(chan string, 2)
	f.w.Inj.Add(s3test.Rule{Method: "GET", KeyRegexp: `/data/.*\.fragment$`, Fault: s3test.FaultDelay, Delay: time.Minute, Count: 2, Hit: hung})
	var mu sync.Mutex
	panics := 0
	env := f.env
	env.AtTask = func(name string) {
		mu.Lock()
		defer mu.Unlock()
		if name == "remote-read-get" && panics < 3 {
			panics++
			panic("injected remote GET fault")
		}
	}
	start := time.Now()
	src := f.open(t, env, m.FirstOffset)
	n, end := f.readAll(t, src, m.FirstOffset)
	took := time.Since(start)
	if n != len(f.order) || end != m.NextOffset {
		t.Fatalf("read %d chunks up to %d, the tier holds %d up to %d", n, end, len(f.order), m.NextOffset)
	}
	if len(hung) != 2 {
		t.Fatalf("%d GETs held by the server, want 2", len(hung))
	}
	rs := f.env.Stats
	if got := rs.Errors[RemoteErrRetriable].Load(); got < 5 {
		t.Fatalf("%d retriable errors counted, want at least 5 (2 GETs past their deadline, 3 panics)", got)
	}
	if p := f.env.Panics.Load(); p != 3 {
		t.Fatalf("%d task panics counted, want 3", p)
	}
	if took > 30*time.Second {
		t.Fatalf("the read took %v: a hung GET waited for the server instead of its 1 s deadline", took)
	}
	t.Logf("%d chunks in %v through 2 hung GETs and 3 panicking GET tasks; %d retriable errors", n, took.Round(time.Millisecond), rs.Errors[RemoteErrRetriable].Load())
}

// keptChunk is a chunk a test kept past the next Next (what a consumer must not do).
type keptChunk struct {
	id    uint64
	chunk []byte
}

// readKeeping reads f's whole remote tier through env, checking that every chunk is the one
// written when Next returns it, and keeps the chunks keep says. It closes the source (every
// GET is then done: the kept slices can be read) and returns how many chunks it read (all
// of them, or it fails), the kept ones, and how many of those changed after Next.
func readKeeping(t *testing.T, f *remoteFixture, env Env, keep func(Item) bool) (n int, kept []keptChunk, changed int) {
	t.Helper()
	src := f.open(t, env, f.st.Manifest.FirstOffset)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		it, err := src.Next(ctx)
		if errors.Is(err, ErrRemoteEnd) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		if !bytes.Equal(f.chunks[it.Offset], it.Chunk) {
			t.Fatalf("chunk %d differs from the chunk written when Next returns it: a buffer came back too early", it.Offset)
		}
		if keep(it) {
			kept = append(kept, keptChunk{it.Offset, it.Chunk})
		}
	}
	src.Close()
	if n != len(f.order) {
		t.Fatalf("read %d chunks of %d", n, len(f.order))
	}
	for _, k := range kept {
		if !bytes.Equal(f.chunks[k.id], k.chunk) {
			changed++
		}
	}
	return n, kept, changed
}
