package metadata

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/streamtier/streamtier/netport"
)

// EmbeddedConfig describes a single-member etcd server run inside this process. The zero value
// of every field but DataDir is a sensible production default.
type EmbeddedConfig struct {
	// DataDir holds the member's WAL and database; reusing it restarts the same member.
	DataDir string
	// ClientAddr and PeerAddr are loopback host:port listen addresses; empty (or port 0)
	// picks a free port. Pass the addresses of an earlier run to restart on the same ports.
	ClientAddr, PeerAddr string
	// Tick and Election are raft's heartbeat interval and election timeout (default 100 ms
	// and 1 s). Shorter values start faster and allow a 1 s minimum lease TTL.
	Tick, Election time.Duration
	// ReadyTimeout bounds the wait for the member to serve (default 30 s).
	ReadyTimeout time.Duration
	// UnsafeNoFsync skips fsync: only for tests, where a crash of the machine loses nothing
	// of value. A clean Close still leaves a consistent data directory.
	UnsafeNoFsync bool
	// Logger receives etcd's own logs; nil logs errors only, to stderr.
	Logger *zap.Logger
	// AutoCompaction is the periodic compaction retention (default 10 minutes; negative
	// disables it), so that a long-running embedded store does not grow without bound.
	AutoCompaction time.Duration
}

// Embedded is a running single-member etcd server on loopback, with a client connected to it.
// It is what `go run ./cmd/node` uses when no external etcd is configured, and what tests use.
type Embedded struct {
	etcd       *embed.Etcd
	cfg        EmbeddedConfig
	client     *clientv3.Client
	closeOnce  sync.Once
	closeErr   error
	clientAddr string
	peerAddr   string
	level      zap.AtomicLevel // of the default logger; raised when closing
}

// StartEmbedded starts a single-member etcd in dataDir on free loopback ports with production
// settings and waits until it serves; ctx bounds the wait. When etcd itself gives up while it
// starts (a full disk, a damaged data directory) the error says why (EtcdFailure) and the
// process should exit: etcd leaves its database open.
func StartEmbedded(ctx context.Context, dataDir string) (*Embedded, error) {
	return StartEmbeddedConfig(ctx, EmbeddedConfig{DataDir: dataDir})
}

// maxPortAttempts bounds the retries when a port chosen free was taken before etcd bound it.
const maxPortAttempts = 8

// StartEmbeddedConfig starts a single-member etcd as cfg describes and waits until it serves.
// Free ports are found by binding port 0; if another process takes one before etcd binds it,
// new ports are drawn (the data directory is untouched until the listeners are bound).
func StartEmbeddedConfig(ctx context.Context, cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("embedded etcd: data dir is empty")
	}
	if cfg.Tick == 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.Election == 0 {
		cfg.Election = 10 * cfg.Tick
	}
	if cfg.Tick < time.Millisecond || cfg.Election < 5*cfg.Tick {
		return nil, fmt.Errorf("embedded etcd: tick %v and election %v: tick must be >= 1ms and election >= 5 ticks", cfg.Tick, cfg.Election)
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 30 * time.Second
	}
	if cfg.AutoCompaction == 0 {
		cfg.AutoCompaction = 10 * time.Minute
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	for attempt := 1; ; attempt++ {
		clientAddr, peerAddr, chosen, err := loopbackAddrs(cfg.ClientAddr, cfg.PeerAddr)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("embedded etcd: data dir: %w", err)
		}
		e, err := startEtcd(ctx, cfg, clientAddr, peerAddr)
		if err == nil {
			return e, nil
		}
		if chosen && errors.Is(err, syscall.EADDRINUSE) && attempt < maxPortAttempts {
			continue // a chosen port was taken in between: draw new ones
		}
		return nil, err
	}
}

// loopbackAddrs resolves the listen addresses, drawing free ports for missing ones; chosen
// reports whether any port was drawn here (so that a bind conflict may be retried).
func loopbackAddrs(client, peer string) (clientAddr, peerAddr string, chosen bool, err error) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	resolve := func(what, addr string) (string, error) {
		if addr == "" {
			addr = "127.0.0.1:0"
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return "", fmt.Errorf("embedded etcd: %s address %q: %w", what, addr, err)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return "", fmt.Errorf("embedded etcd: %s address %q: only loopback addresses are served", what, addr)
		}
		if port != "0" {
			return addr, nil
		}
		// Hold every drawn port until all are drawn, so the two never coincide. They are
		// remembered for the next start, so they come from below the ephemeral range.
		l, err := netport.Listen(host)
		if err != nil {
			return "", fmt.Errorf("embedded etcd: %s port: %w", what, err)
		}
		held = append(held, l)
		chosen = true
		return l.Addr().String(), nil
	}
	if clientAddr, err = resolve("client", client); err != nil {
		return "", "", false, err
	}
	if peerAddr, err = resolve("peer", peer); err != nil {
		return "", "", false, err
	}
	return clientAddr, peerAddr, chosen, nil
}

func startEtcd(ctx context.Context, cfg EmbeddedConfig, clientAddr, peerAddr string) (*Embedded, error) {
	ec := embed.NewConfig()
	ec.Name = "streamtier"
	ec.Dir = cfg.DataDir
	curl := url.URL{Scheme: "http", Host: clientAddr}
	purl := url.URL{Scheme: "http", Host: peerAddr}
	ec.ListenClientUrls = []url.URL{curl}
	ec.AdvertiseClientUrls = []url.URL{curl}
	ec.ListenPeerUrls = []url.URL{purl}
	ec.AdvertisePeerUrls = []url.URL{purl}
	ec.InitialCluster = ec.Name + "=" + purl.String()
	ec.InitialClusterToken = "streamtier"
	ec.TickMs = uint(cfg.Tick / time.Millisecond)
	ec.ElectionMs = uint(cfg.Election / time.Millisecond)
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync
	ec.EnableGRPCGateway = false
	ec.ListenMetricsUrls = nil
	if cfg.AutoCompaction > 0 {
		ec.AutoCompactionMode = embed.CompactorModePeriodic
		ec.AutoCompactionRetention = cfg.AutoCompaction.String()
	}
	lg, level := cfg.Logger, zap.NewAtomicLevelAt(zapcore.ErrorLevel)
	if lg == nil {
		lg = errorLogger(level)
	}
	hook := &failureHook{}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(hook.on(lg))
	ec.LogLevel = "error"

	etcd, err := startRecovering(ec, hook)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd in %s (client %s, peer %s): %w", cfg.DataDir, clientAddr, peerAddr, err)
	}
	timer := time.NewTimer(cfg.ReadyTimeout)
	defer timer.Stop()
	select {
	case <-etcd.Server.ReadyNotify():
	case err := <-etcd.Err():
		etcd.Close()
		return nil, fmt.Errorf("embedded etcd in %s: failed before ready: %w", cfg.DataDir, err)
	case <-timer.C:
		etcd.Close()
		return nil, fmt.Errorf("embedded etcd in %s: not ready after %v: %w", cfg.DataDir, cfg.ReadyTimeout, context.DeadlineExceeded)
	case <-ctx.Done():
		etcd.Close()
		return nil, fmt.Errorf("embedded etcd in %s: waiting for ready: %w", cfg.DataDir, ctx.Err())
	}
	e := &Embedded{etcd: etcd, cfg: cfg, clientAddr: clientAddr, peerAddr: peerAddr, level: level}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   e.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		etcd.Close()
		return nil, fmt.Errorf("embedded etcd in %s: client: %w", cfg.DataDir, err)
	}
	e.client = cli
	return e, nil
}

// EtcdFailure is where the embedded etcd gave up: the message of its Panic (or, while it
// starts, Fatal) log and the error logged with it. During the start (a full disk while the
// write-ahead log is created, a WAL that cannot be read) it is returned as an error,
// wrapping the cause (errors.Is(err, syscall.ENOSPC)), instead of a panic without the cause
// or an exit; later a Panic still ends the process, now saying why, and a Fatal exits it.
type EtcdFailure struct {
	Msg    string
	Err    error  // the error etcd logged with the message; nil if none
	Detail string // the entry's other fields, "key=value" separated by spaces ("limit=80 ...")
}

// Error is etcd's message, the error it logged with it and the entry's other fields.
func (f EtcdFailure) Error() string {
	msg := f.Msg
	if f.Err != nil {
		msg += ": " + f.Err.Error()
	}
	if f.Detail != "" {
		msg += " (" + f.Detail + ")"
	}
	return msg
}

// Unwrap is the error etcd logged.
func (f EtcdFailure) Unwrap() error { return f.Err }

// failureHook runs after etcd logs at Panic or Fatal level. A Panic log panics with an
// EtcdFailure that carries the logged error (zap's own panic carries the message only); a
// Fatal log does too while the start runs (startRecovering returns it), and afterwards exits
// the process as zap would: a goroutine of etcd's that recovered the panic must not run on.
type failureHook struct {
	starting atomic.Bool
}

// on is lg with the hook run after its Panic and Fatal logs.
func (h *failureHook) on(lg *zap.Logger) *zap.Logger {
	return lg.WithOptions(zap.WithPanicHook(h), zap.WithFatalHook(h))
}

// OnWrite raises the failure (or exits) once etcd's entry is written.
func (h *failureHook) OnWrite(ce *zapcore.CheckedEntry, fields []zapcore.Field) {
	if ce.Level == zapcore.FatalLevel && !h.starting.Load() {
		os.Exit(1)
	}
	f := EtcdFailure{Msg: ce.Message}
	enc := zapcore.NewMapObjectEncoder()
	for _, fl := range fields {
		if err, ok := fl.Interface.(error); ok && fl.Type == zapcore.ErrorType && f.Err == nil {
			f.Err = err
			continue
		}
		fl.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		if i > 0 {
			f.Detail += " "
		}
		f.Detail += fmt.Sprintf("%s=%v", k, enc.Fields[k])
	}
	panic(f)
}

// startRecovering is embed.StartEtcd with a panic while it starts returned as an error: etcd's
// logged failures (EtcdFailure, raised in this goroutine by its bootstrap) and its own panics
// on a damaged data directory (a WAL file that is not one makes its bootstrap dereference
// nil), so that a node says which directory it could not start from instead of crashing.
func startRecovering(ec *embed.Config, hook *failureHook) (etcd *embed.Etcd, err error) {
	hook.starting.Store(true)
	defer func() {
		hook.starting.Store(false)
		r := recover()
		if r == nil {
			return
		}
		cause, ok := r.(EtcdFailure)
		if !ok {
			cause = EtcdFailure{Msg: "etcd panicked while starting (is its data directory damaged?)", Err: fmt.Errorf("%v", r)}
		}
		// etcd's start may have opened its database before it gave up, and nothing closes it.
		etcd, err = nil, fmt.Errorf("%w (etcd may have left its database open: exit the process rather than start it again)", cause)
	}()
	return embed.StartEtcd(ec)
}

// errorLogger logs etcd errors (only) to stderr, as JSON lines, at a level Close can raise:
// etcd reports its own orderly shutdown ("http: Server closed", closed listeners) as errors.
func errorLogger(level zap.AtomicLevel) *zap.Logger {
	zc := zap.NewProductionConfig()
	zc.Level = level
	zc.Sampling = nil
	zc.DisableStacktrace = true
	lg, err := zc.Build()
	if err != nil {
		return zap.NewNop()
	}
	return lg
}

// Endpoints are the client URLs to dial (one, on loopback).
func (e *Embedded) Endpoints() []string {
	return []string{"http://" + e.clientAddr}
}

// ClientAddr is the host:port the member serves clients on.
func (e *Embedded) ClientAddr() string { return e.clientAddr }

// PeerAddr is the host:port the member listens on for raft peers.
func (e *Embedded) PeerAddr() string { return e.peerAddr }

// Config is the configuration this member runs with, its ports filled in: passing it to
// StartEmbeddedConfig after Close restarts the same member on the same ports.
func (e *Embedded) Config() EmbeddedConfig {
	c := e.cfg
	c.ClientAddr, c.PeerAddr = e.clientAddr, e.peerAddr
	return c
}

// Client is a client connected to this member; the Embedded owns it and closes it on Close.
func (e *Embedded) Client() *clientv3.Client { return e.client }

// Err reports errors the server hits while running; it is closed once Close has finished.
func (e *Embedded) Err() <-chan error { return e.etcd.Err() }

// Close closes the client, then stops the server and waits for its goroutines; calling it
// again is harmless.
func (e *Embedded) Close() error {
	e.closeOnce.Do(func() {
		e.level.SetLevel(zapcore.FatalLevel)
		if err := e.client.Close(); err != nil && !errors.Is(err, context.Canceled) {
			e.closeErr = fmt.Errorf("embedded etcd: close client: %w", err)
		}
		e.etcd.Close()
		for err := range e.etcd.Err() {
			if err != nil && e.closeErr == nil {
				e.closeErr = fmt.Errorf("embedded etcd: %w", err)
			}
		}
	})
	return e.closeErr
}
