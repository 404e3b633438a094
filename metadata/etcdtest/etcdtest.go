// Package etcdtest starts a real etcd server, embedded in the test process, for tests of any
// package that needs etcd: fast to start (short raft ticks, no fsync), quiet, and closed when
// the test ends.
package etcdtest

import (
	"context"
	"os"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/logutil"
	"go.uber.org/zap"

	"github.com/streamtier/streamtier/metadata"
)

// LogEnv names the environment variable that turns etcd's logs on in tests
// (debug, info, warn or error); by default they are discarded.
const LogEnv = "STREAMTIER_ETCD_LOG"

// Config is the configuration Start uses, in a fresh temporary directory of t: a 10 ms raft
// tick (the member is leader within tens of milliseconds, and leases may be as short as 1 s)
// and no fsync (test data need not survive a machine crash; a clean Close keeps it).
func Config(t testing.TB) metadata.EmbeddedConfig {
	t.Helper()
	return metadata.EmbeddedConfig{
		DataDir:       t.TempDir(),
		Tick:          10 * time.Millisecond,
		Election:      100 * time.Millisecond,
		ReadyTimeout:  20 * time.Second,
		UnsafeNoFsync: true,
		Logger:        Logger(),
	}
}

// Logger is the logger test members use: a no-op unless LogEnv names a level.
func Logger() *zap.Logger {
	level := os.Getenv(LogEnv)
	if level == "" {
		return zap.NewNop()
	}
	zc := logutil.DefaultZapLoggerConfig
	zc.Level = zap.NewAtomicLevelAt(logutil.ConvertToZapLevel(level))
	lg, err := zc.Build()
	if err != nil {
		return zap.NewNop()
	}
	return lg
}

// Start starts a single-member etcd for t and closes it when t ends (failing t if it does
// not stop cleanly). Close other clients of it first (t.Cleanup registered after Start runs
// before it): etcd waits about 5 s for the open watch and keepalive streams of clients it
// does not own before it forces them shut.
func Start(t testing.TB) *metadata.Embedded {
	t.Helper()
	return StartConfig(t, Config(t))
}

// StartConfig starts a member with cfg (for instance Config(t) with chosen ports, or the
// Config of a closed member to restart it) and closes it when t ends.
func StartConfig(t testing.TB, cfg metadata.EmbeddedConfig) *metadata.Embedded {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := metadata.StartEmbeddedConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("etcdtest: close: %v", err)
		}
	})
	return e
}

// Store returns a store on e's client under a prefix unique to t, so that tests sharing one
// member never see each other's records.
func Store(t testing.TB, e *metadata.Embedded) *metadata.Store {
	t.Helper()
	return metadata.NewStore(e.Client(), "/test/"+t.Name())
}
