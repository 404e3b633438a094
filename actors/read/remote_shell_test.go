package read

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/streamtier/streamtier/actors/internal/actortest"
	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/s3io/s3test"
)

// The shell's own goroutines and buffers: GETs in goroutines the reader owns, stopped and
// awaited at Close; chunks across ranges copied into pooled buffers; buffers of GETs the
// reader gave up on never reused.

// await receives from ch or fails the test after 30 s (a guard against a hang, not a
// timing assertion).
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: nothing after 30 s", what)
		var zero T
		return zero
	}
}

// TestRemoteReadCloseMidGetLeavesNoGoroutine closes a reader while its range GETs are held
// by the server: Close cancels them and waits for their goroutines, so none outlives it
// (goleak, against the goroutines that ran before the reader opened).
func TestRemoteReadCloseMidGetLeavesNoGoroutine(t *testing.T) {
	f := newRemoteFixture(t, 200)
	hung := make(chan string, 64)
	f.w.Inj.Add(s3test.Rule{Method: "GET", KeyRegexp: `/data/.*\.fragment$`, Fault: s3test.FaultDelay, Delay: time.Hour, Count: 1000, Hit: hung})
	var started, returned atomic.Int64
	env := f.env
	env.getRange = func(ctx context.Context, key string, off, n int64, buf []byte) ([]byte, error) {
		started.Add(1)
		defer returned.Add(1)
		return f.w.Store.GetRangePartial(ctx, key, off, n, buf)
	}
	before := goleak.IgnoreCurrent()
	src, err := openRemoteSource(context.Background(), env, f.st.Manifest.FirstOffset)
	if err != nil {
		t.Fatal(err)
	}
	await(t, hung, "a range GET held by the server")
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if s, r := started.Load(), returned.Load(); s != r {
		t.Fatalf("Close returned while %d of %d GETs were still running", s-r, s)
	}
	// What may stay: the HTTP client's idle connections and the injector's side of them.
	if err := goleak.Find(before,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
	); err != nil {
		t.Fatalf("goroutines left after Close: %v", err)
	}
	if got := f.env.Stats.Open.Load(); got != 0 {
		t.Fatalf("%d readers counted open after Close", got)
	}
}

// TestRemoteReadPoisonsCrossRangeCopies reads a tier whose chunks often cross range
// boundaries (16 KiB ranges) under STREAMTIER_DEBUG_READ_POISON=1: a chunk across ranges is
// a copy in a pooled buffer, the source's bytes when Next returns it; the copies come back
// to the pool and are poisoned there, so a consumer that keeps one past the next Next sees
// it change (the debug mode still catches consumers that hold chunks too long).
func TestRemoteReadPoisonsCrossRangeCopies(t *testing.T) {
	t.Setenv(readPoisonEnv, "1")
	f := newRemoteFixture(t, 400)
	env := f.env
	env.Budget = NewBudget(256 << 10)
	if !env.Budget.bufs.poison {
		t.Fatalf("%s=1 did not turn the poison on", readPoisonEnv)
	}
	// A chunk inside one range is a full slice expression of the range's buffer (cap = len);
	// a copy lives in a pooled buffer of a size class, larger than the chunk.
	n, copies, changed := readKeeping(t, f, env, func(it Item) bool { return cap(it.Chunk) > len(it.Chunk) })
	if len(copies) == 0 || changed == 0 {
		t.Fatalf("%d chunks across ranges copied, %d of them changed once kept past Next: want copies, poisoned when they came back", len(copies), changed)
	}
	t.Logf("%d chunks, %d copied across ranges, %d of those changed after they came back to the pool", n, len(copies), changed)
}

// TestRemoteReadOverdueGetBufferNeverReused: a GET stuck outside its context (here in the
// GET itself, past its deadline) is given up on when its overdue timer fires; the range is
// fetched again and the read completes. The stuck GET's buffer is never handed to another
// GET nor kept in the pool, because its goroutine may still write into it, and it does,
// once released; Close waits for that goroutine.
func TestRemoteReadOverdueGetBufferNeverReused(t *testing.T) {
	f := newRemoteFixture(t, 200)
	m := f.st.Manifest
	env := f.env
	clock := actortest.NewManualClock()
	env.Clock = clock
	env.Budget = NewBudget(1 << 20)
	env.Fetch.FixedConcurrency = 4
	var (
		mu      sync.Mutex
		stuck   []byte // the first GET's buffer
		reused  atomic.Int64
		wrote   atomic.Bool
		stopped = make(chan struct{})
		release = make(chan struct{})
	)
	first := true
	env.getRange = func(ctx context.Context, key string, off, n int64, buf []byte) ([]byte, error) {
		mu.Lock()
		isFirst := first
		first = false
		if !isFirst && stuck != nil && &buf[:1][0] == &stuck[:1][0] {
			reused.Add(1)
		}
		if isFirst {
			stuck = buf[:cap(buf)]
		}
		mu.Unlock()
		if !isFirst {
			return f.w.Store.GetRangePartial(ctx, key, off, n, buf)
		}
		close(stopped)
		<-release // ignores its context: its result comes too late
		for i := range buf[:n] {
			buf[i] = 0x5A // a late write into the buffer the reader gave up on
		}
		wrote.Store(true)
		return buf[:n], nil
	}
	src := f.open(t, env, m.FirstOffset)
	await(t, stopped, "the first GET") // its overdue timer was armed before it started
	timeout := f.w.Store.TransferTimeout()
	clock.Advance(timeout + shell.TaskGrace(timeout))
	// Backoff timers (the stuck range is fetched again after one) fire as soon as armed.
	done := make(chan struct{})
	var advancer sync.WaitGroup
	advancer.Add(1)
	go func() {
		defer advancer.Done()
		for {
			armed := clock.Armed()
			if n, next := clock.Pending(); n > 0 && next <= time.Minute {
				clock.Advance(next)
				continue
			}
			select {
			case <-armed:
			case <-done:
				return
			}
		}
	}()
	chunks, end := f.readAll(t, src, m.FirstOffset)
	close(done)
	advancer.Wait()
	if chunks != len(f.order) || end != m.NextOffset {
		t.Fatalf("read %d chunks up to %d, the tier holds %d up to %d", chunks, end, len(f.order), m.NextOffset)
	}
	if n := reused.Load(); n > 0 {
		t.Fatalf("the overdue GET's buffer was handed to %d later GETs", n)
	}
	mu.Lock()
	gaveUp := stuck
	mu.Unlock()
	pool := env.Budget.bufs
	pool.mu.Lock()
	inPool := false
	for _, l := range pool.free {
		for _, b := range l {
			inPool = inPool || &b[:1][0] == &gaveUp[:1][0]
		}
	}
	pool.mu.Unlock()
	if inPool {
		t.Fatal("the overdue GET's buffer is in the pool's free list")
	}
	if got := f.env.Stats.Errors[RemoteErrRetriable].Load(); got < 1 {
		t.Fatalf("%d retriable errors counted, want the overdue GET's", got)
	}
	close(release)
	src.Close()
	if !wrote.Load() {
		t.Fatal("Close returned before the stuck GET's goroutine did")
	}
}

// TestRemoteReadStartsAtTheLearnedLevel: a read on a budget whose earlier reads settled at
// 8 range GETs in flight starts its search there, not at fetchcore.DefaultStartConcurrency
// (4): the server holds every GET until 8 are in flight at once, and the read completes.
func TestRemoteReadStartsAtTheLearnedLevel(t *testing.T) {
	f := newRemoteFixture(t, 400)
	env := f.env
	env.Budget = NewBudget(0)
	env.Budget.learn(8)
	var (
		mu      sync.Mutex
		running int
		peak    int
	)
	all := make(chan struct{})
	env.getRange = func(ctx context.Context, key string, off, n int64, buf []byte) ([]byte, error) {
		mu.Lock()
		running++
		if running > peak {
			peak = running
			if peak == 8 {
				close(all)
			}
		}
		mu.Unlock()
		defer func() { mu.Lock(); running--; mu.Unlock() }()
		select {
		case <-all:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return f.w.Store.GetRangePartial(ctx, key, off, n, buf)
	}
	src := f.open(t, env, f.st.Manifest.FirstOffset)
	await(t, all, "8 range GETs in flight at once")
	if n, _ := f.readAll(t, src, f.st.Manifest.FirstOffset); n == 0 {
		t.Fatal("the read delivered no chunk")
	}
	mu.Lock()
	defer mu.Unlock()
	if peak > env.Fetch.MaxConcurrency {
		t.Fatalf("%d range GETs in flight, above the ceiling %d", peak, env.Fetch.MaxConcurrency)
	}
}
