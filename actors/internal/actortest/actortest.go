// Package actortest holds what the tests of the actor packages share: a manual clock, a
// log buffer, a probe actor, an actor system per test, and a world of real servers (an
// embedded etcd, a versitygw S3 process behind a fault injector).
package actortest

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// ManualClock is a clock that moves only when the test advances it. Timers due at or before
// the new time fire in order, from Advance's goroutine.
type ManualClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  map[*manualTimer]bool
	changed chan struct{} // closed and replaced whenever a timer is added
}

type manualTimer struct {
	at time.Time
	f  func()
}

// NewManualClock returns a manual clock standing at a fixed time.
func NewManualClock() *ManualClock {
	return &ManualClock{now: time.Unix(1_700_000_000, 0), timers: map[*manualTimer]bool{}, changed: make(chan struct{})}
}

// Now is the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc arms f to run once the clock has been advanced by d.
func (c *ManualClock) AfterFunc(d time.Duration, f func()) func() bool {
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
func (c *ManualClock) Advance(d time.Duration) {
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

// Armed returns a channel closed when the next timer is Armed.
func (c *ManualClock) Armed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// Pending is the number of Armed timers and the time until the earliest (0 when none).
func (c *ManualClock) Pending() (int, time.Duration) {
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

// AwaitTimer waits until a timer is Armed that fires within d from now, and returns how
// long until it does.
func (c *ManualClock) AwaitTimer(t *testing.T, within time.Duration, what string) time.Duration {
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
			n, next := c.Pending()
			t.Fatalf("%s: no timer within %v Armed after 10 s (%d Armed, the first in %v)", what, within, n, next)
		}
	}
}

// LogBuffer collects a test's logs (JSON lines) so that it can check what was said; with
// STREAMTIER_TEST_LOG set they also go to stderr.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write takes one JSON log line.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// Count is how many log lines contain every one of parts.
func (l *LogBuffer) Count(parts ...string) int {
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

// Logger returns a logger writing to a new LogBuffer (and to stderr with
// STREAMTIER_TEST_LOG set).
func Logger(t *testing.T) (zerolog.Logger, *LogBuffer) {
	buf := &LogBuffer{}
	var w zerolog.LevelWriter = zerolog.MultiLevelWriter(buf)
	if os.Getenv("STREAMTIER_TEST_LOG") != "" {
		w = zerolog.MultiLevelWriter(buf, zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000"})
	}
	t.Cleanup(func() { buf.dumpIfFailed(t) })
	return zerolog.New(w).With().Str("test", t.Name()).Logger().Hook(msTimestamp{}), buf
}

// dumpLines is how many of a failed test's last log lines dumpIfFailed shows.
const dumpLines = 300

// dumpIfFailed shows a failed test's last log lines in its output, so that a failure seen
// once (in CI, under load) can be understood without running it again.
func (l *LogBuffer) dumpIfFailed(t *testing.T) {
	if !t.Failed() || os.Getenv("STREAMTIER_TEST_LOG") != "" {
		return
	}
	l.mu.Lock()
	lines := strings.Split(strings.TrimSuffix(l.b.String(), "\n"), "\n")
	l.mu.Unlock()
	if len(lines) > dumpLines {
		t.Logf("the log's last %d lines of %d:", dumpLines, len(lines))
		lines = lines[len(lines)-dumpLines:]
	}
	t.Log("log:\n" + strings.Join(lines, "\n"))
}

// msTimestamp stamps log lines to the millisecond (zerolog's default is the second).
type msTimestamp struct{}

func (msTimestamp) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Str("time", time.Now().Format("15:04:05.000"))
}

// Probe is an actor that hands every message it receives to the test.
type Probe struct {
	PID *actor.PID
	ch  chan any
}

// C is the channel of the messages the probe received, for a test that selects on it.
func (p *Probe) C() <-chan any { return p.ch }

// NewProbe spawns a probe actor in sys.
func NewProbe(t *testing.T, sys *actor.ActorSystem) *Probe {
	t.Helper()
	p := &Probe{ch: make(chan any, 4096)}
	p.PID = sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch c.Message().(type) {
		case actor.SystemMessage, actor.AutoReceiveMessage:
		default:
			p.ch <- c.Message()
		}
	}))
	return p
}

// Expect returns the next message of type T, failing after d; messages of other types
// before it are returned too, for the test to inspect.
func Expect[T any](t *testing.T, p *Probe, d time.Duration) (T, []any) {
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

// Quiet fails if p receives a message of type T within d.
func Quiet[T any](t *testing.T, p *Probe, d time.Duration) {
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

// NewSystem returns an actor system logging to log, shut down at cleanup.
func NewSystem(t *testing.T, log zerolog.Logger) *actor.ActorSystem {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(shell.ZerologHandler{Log: log})
	}))
	t.Cleanup(sys.Shutdown)
	return sys
}

// World is one test's servers: a real etcd (optionally behind a partitionable proxy) and a
// real S3 server behind the fault injector.
type World struct {
	T        *testing.T
	Meta     *metadata.Store
	Proxy    *etcdtest.Proxy
	Etcd     *RestartableEtcd // with EtcdRestart
	Inj      *s3test.Injector
	Store    *s3io.Store
	S3Config s3io.Config
}

// WorldOptions choose how a World's servers are reached.
type WorldOptions struct {
	EtcdFaults  bool // a partitionable proxy between the node and etcd
	EtcdRestart bool // an etcd the test stops and starts again (w.Etcd)
	S3          func(*s3io.Config)
}

// NewWorld starts a test's etcd and S3 server and a store on them.
func NewWorld(t *testing.T, o WorldOptions) *World {
	t.Helper()
	w := &World{T: t}
	if o.EtcdRestart {
		w.Etcd = NewRestartableEtcd(t)
		w.Meta = w.Etcd.Meta
	} else if etcd := etcdtest.Start(t); o.EtcdFaults {
		w.Proxy = etcdtest.NewProxy(t, etcd)
		w.Meta = metadata.NewStore(w.Proxy.Client(t), "/test/"+t.Name())
	} else {
		w.Meta = etcdtest.Store(t, etcd)
	}
	srv := s3test.Start(t, s3test.Options{})
	w.S3Config = srv.NewBucket(t)
	// Always through the injector (without rules it passes everything): its cleanup closes
	// the client connections, so the server stops at once instead of after its grace period.
	w.Inj = s3test.NewInjector(t, srv)
	cfg := w.Inj.Config()
	cfg.Bucket = w.S3Config.Bucket
	w.S3Config = cfg
	if o.S3 != nil {
		o.S3(&w.S3Config)
	}
	var err error
	if w.Store, err = s3io.NewStore(context.Background(), w.S3Config); err != nil {
		t.Fatalf("s3 store: %v", err)
	}
	return w
}

// WriteLog appends chunks of generated load to a log in dir (opened on first use) and
// commits them; it returns the log.
func WriteLog(t *testing.T, lg *segments.Log, seed uint64, limit loadgen.Limit) {
	t.Helper()
	g, err := loadgen.New(loadgen.Config{Seed: seed, MinDataBytes: 2000, MaxDataBytes: 6000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadgen.Write(context.Background(), lg, g, limit, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
}

// OpenLog opens a local log in a new temporary directory, closed at cleanup.
func OpenLog(t *testing.T, opts segments.Options) *segments.Log {
	t.Helper()
	lg, err := segments.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lg.Close() })
	return lg
}

// Eventually polls cond until it holds or d passes; what names the condition on failure.
func Eventually(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %s", what, d, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// RestartableEtcd is an embedded etcd that a test stops and starts again on the same data
// directory and ports, with a store on a client of its own that outlives the restarts (as a
// node's would).
type RestartableEtcd struct {
	t      *testing.T
	cfg    metadata.EmbeddedConfig
	member *metadata.Embedded // nil while stopped
	Meta   *metadata.Store
}

// NewRestartableEtcd starts an embedded etcd member that the test may stop and start.
func NewRestartableEtcd(t *testing.T) *RestartableEtcd {
	t.Helper()
	e := &RestartableEtcd{t: t, cfg: etcdtest.Config(t)}
	t.Cleanup(e.Stop) // registered first: runs after the client below is closed
	e.Start()
	e.cfg = e.member.Config() // its ports, to restart on
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := metadata.NewClient(ctx, metadata.ClientConfig{Endpoints: e.member.Endpoints(), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	e.Meta = metadata.NewStore(cli, "/test/"+t.Name())
	return e
}

// Start starts the member (again).
func (e *RestartableEtcd) Start() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := metadata.StartEmbeddedConfig(ctx, e.cfg)
	if err != nil {
		e.t.Fatalf("start etcd: %v", err)
	}
	e.member = m
}

// Stop closes the member; its data directory stays.
func (e *RestartableEtcd) Stop() {
	if e.member == nil {
		return
	}
	if err := e.member.Close(); err != nil {
		e.t.Errorf("stop etcd: %v", err)
	}
	e.member = nil
}

// ChildEnv names the test a child process runs (see Isolated).
const ChildEnv = "STREAMTIER_ACTORS_CLUSTER_CHILD"

// Isolated runs the calling test in a fresh process of this test binary and reports
// whether this is that process (the test body runs there). protoactor's remote may only
// start once per process, before gRPC does anything (see Listen): a test of its own
// process starts its listener first, then etcd.
func Isolated(t *testing.T) bool {
	t.Helper()
	if os.Getenv(ChildEnv) == t.Name() {
		return true
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), ChildEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("%s in its own process: %v\n%s", t.Name(), err, out)
	}
	return false
}

// ConsoleLogger is a test's console logger when STREAMTIER_TEST_LOG is set, else a logger
// that says nothing: for tests that need no log assertions.
func ConsoleLogger(t *testing.T) zerolog.Logger {
	if os.Getenv("STREAMTIER_TEST_LOG") == "" {
		return zerolog.Nop()
	}
	return zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000"}).With().Timestamp().Str("test", t.Name()).Logger()
}
