package actors

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// manualClock is a clock that moves only when the test advances it. Timers due at or before
// the new time fire in order, from Advance's goroutine.
type manualClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  map[*manualTimer]bool
	changed chan struct{} // closed and replaced whenever a timer is added
}

type manualTimer struct {
	at time.Time
	f  func()
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Unix(1_700_000_000, 0), timers: map[*manualTimer]bool{}, changed: make(chan struct{})}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) AfterFunc(d time.Duration, f func()) func() bool {
	if d <= 0 {
		go f()
		return func() bool { return false }
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{at: c.now.Add(d), f: f}
	c.timers[t] = true
	close(c.changed)
	c.changed = make(chan struct{})
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		live := c.timers[t]
		delete(c.timers, t)
		return live
	}
}

// Advance moves the clock by d and fires the timers due.
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*manualTimer
	for t := range c.timers {
		if !t.at.After(c.now) {
			due = append(due, t)
			delete(c.timers, t)
		}
	}
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		t.f()
	}
}

// armed returns a channel closed when the next timer is armed.
func (c *manualClock) armed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// pending is the number of armed timers and the time until the earliest (0 when none).
func (c *manualClock) pending() (int, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first time.Duration
	for t := range c.timers {
		if d := t.at.Sub(c.now); first == 0 || d < first {
			first = d
		}
	}
	return len(c.timers), first
}

// awaitTimer waits until a timer is armed that fires within d from now, and returns how
// long until it does.
func (c *manualClock) awaitTimer(t *testing.T, within time.Duration, what string) time.Duration {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		changed := c.changed
		var first time.Duration = -1
		for tm := range c.timers {
			if d := tm.at.Sub(c.now); d <= within && (first < 0 || d < first) {
				first = d
			}
		}
		c.mu.Unlock()
		if first >= 0 {
			return first
		}
		select {
		case <-changed:
		case <-deadline:
			n, next := c.pending()
			t.Fatalf("%s: no timer within %v armed after 10 s (%d armed, the first in %v)", what, within, n, next)
		}
	}
}

// logBuffer collects a test's logs (JSON lines) so that it can check what was said; with
// STREAMTIER_TEST_LOG set they also go to stderr.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// count is how many log lines contain every one of parts.
func (l *logBuffer) count(parts ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range strings.Split(l.b.String(), "\n") {
		all := line != ""
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

func testLogger(t *testing.T) (zerolog.Logger, *logBuffer) {
	buf := &logBuffer{}
	var w zerolog.LevelWriter = zerolog.MultiLevelWriter(buf)
	if os.Getenv("STREAMTIER_TEST_LOG") != "" {
		w = zerolog.MultiLevelWriter(buf, zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000"})
	}
	return zerolog.New(w).With().Str("test", t.Name()).Logger().Hook(msTimestamp{}), buf
}

// msTimestamp stamps log lines to the millisecond (zerolog's default is the second).
type msTimestamp struct{}

func (msTimestamp) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Str("time", time.Now().Format("15:04:05.000"))
}

// probe is an actor that hands every message it receives to the test.
type probe struct {
	pid *actor.PID
	ch  chan any
}

func newProbe(t *testing.T, sys *actor.ActorSystem) *probe {
	t.Helper()
	p := &probe{ch: make(chan any, 4096)}
	p.pid = sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch c.Message().(type) {
		case actor.SystemMessage, actor.AutoReceiveMessage:
		default:
			p.ch <- c.Message()
		}
	}))
	return p
}

// expect returns the next message of type T, failing after d; messages of other types
// before it are returned too, for the test to inspect.
func expect[T any](t *testing.T, p *probe, d time.Duration) (T, []any) {
	t.Helper()
	var skipped []any
	timeout := time.After(d)
	for {
		select {
		case m := <-p.ch:
			if v, ok := m.(T); ok {
				return v, skipped
			}
			skipped = append(skipped, m)
		case <-timeout:
			var zero T
			t.Fatalf("no %T within %v (got %d others: %v)", zero, d, len(skipped), skipped)
			return zero, nil
		}
	}
}

// quiet fails if p receives a message of type T within d.
func quiet[T any](t *testing.T, p *probe, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case m := <-p.ch:
			if _, ok := m.(T); ok {
				t.Fatalf("unexpected %T: %+v", m, m)
			}
		case <-timeout:
			return
		}
	}
}

// newSystem returns an actor system logging to log, shut down at cleanup.
func newSystem(t *testing.T, log zerolog.Logger) *actor.ActorSystem {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(zerologHandler{log: log})
	}))
	t.Cleanup(sys.Shutdown)
	return sys
}

// world is one test's servers: a real etcd (optionally behind a partitionable proxy) and a
// real S3 server behind the fault injector.
type world struct {
	t     *testing.T
	meta  *metadata.Store
	proxy *etcdtest.Proxy
	etcd  *restartableEtcd // with etcdRestart
	inj   *s3test.Injector
	store *s3io.Store
	s3cfg s3io.Config
}

type worldOptions struct {
	etcdFaults  bool // a partitionable proxy between the node and etcd
	etcdRestart bool // an etcd the test stops and starts again (w.etcd)
	s3          func(*s3io.Config)
}

func newWorld(t *testing.T, o worldOptions) *world {
	t.Helper()
	w := &world{t: t}
	if o.etcdRestart {
		w.etcd = newRestartableEtcd(t)
		w.meta = w.etcd.meta
	} else if etcd := etcdtest.Start(t); o.etcdFaults {
		w.proxy = etcdtest.NewProxy(t, etcd)
		w.meta = metadata.NewStore(w.proxy.Client(t), "/test/"+t.Name())
	} else {
		w.meta = etcdtest.Store(t, etcd)
	}
	srv := s3test.Start(t, s3test.Options{})
	w.s3cfg = srv.NewBucket(t)
	// Always through the injector (without rules it passes everything): its cleanup closes
	// the client connections, so the server stops at once instead of after its grace period.
	w.inj = s3test.NewInjector(t, srv)
	cfg := w.inj.Config()
	cfg.Bucket = w.s3cfg.Bucket
	w.s3cfg = cfg
	if o.s3 != nil {
		o.s3(&w.s3cfg)
	}
	var err error
	if w.store, err = s3io.NewStore(context.Background(), w.s3cfg); err != nil {
		t.Fatalf("s3 store: %v", err)
	}
	return w
}

// startNode starts a node on the world and stops it at cleanup.
func (w *world) startNode(cfg Config) *Node {
	w.t.Helper()
	n, err := Start(context.Background(), cfg, w.store, w.meta)
	if err != nil {
		w.t.Fatalf("start node: %v", err)
	}
	w.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := n.Stop(ctx); err != nil {
			w.t.Errorf("stop node: %v", err)
		}
	})
	return n
}

// writeLog appends chunks of generated load to a log in dir (opened on first use) and
// commits them; it returns the log.
func writeLog(t *testing.T, lg *segments.Log, seed uint64, limit loadgen.Limit) {
	t.Helper()
	g, err := loadgen.New(loadgen.Config{Seed: seed, MinDataBytes: 2000, MaxDataBytes: 6000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadgen.Write(context.Background(), lg, g, limit, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
}

func openLog(t *testing.T, opts segments.Options) *segments.Log {
	t.Helper()
	lg, err := segments.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lg.Close() })
	return lg
}

// until polls cond every 10 ms until it holds, failing after d with what and its state.
func until(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	eventually(t, d, what, cond)
}

// persisted waits until every offset below next of stream is persisted, cutting the tail.
func persisted(t *testing.T, n *Node, stream string, next uint64, d time.Duration) {
	t.Helper()
	until(t, d, fmt.Sprintf("%s persisted up to %d", stream, next), func() (bool, string) {
		_ = n.ForceCut(stream)
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		err := n.AwaitOffset(ctx, stream, next-1)
		st, _ := n.Status(context.Background(), stream)
		return err == nil, fmt.Sprintf("%v; %s", err, st.Core)
	})
}
