package metadata_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/goleak"
	"go.uber.org/zap/zapcore"

	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
)

func TestEmbeddedRestartKeepsDataAndPorts(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	// Production settings (fsync, 100 ms ticks), as `go run ./cmd/node` uses them.
	dir := filepath.Join(t.TempDir(), "etcd")
	e, err := metadata.StartEmbedded(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if ep := e.Endpoints(); len(ep) != 1 || !strings.HasPrefix(ep[0], "http://127.0.0.1:") {
		t.Fatalf("endpoints %v, want one loopback URL", ep)
	}
	if e.ClientAddr() == e.PeerAddr() {
		t.Fatalf("client and peer share %s", e.ClientAddr())
	}
	s := metadata.NewStore(e.Client(), "")
	if err := s.Anchor(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	cfg := e.Config()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	again, err := metadata.StartEmbeddedConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if again.ClientAddr() != e.ClientAddr() || again.PeerAddr() != e.PeerAddr() {
		t.Fatalf("restarted on %s/%s, was %s/%s", again.ClientAddr(), again.PeerAddr(), e.ClientAddr(), e.PeerAddr())
	}
	if ok, err := metadata.NewStore(again.Client(), "").HasAnchor(ctx, "s1", true); err != nil || !ok {
		t.Fatalf("anchor lost across a restart: %v %v", ok, err)
	}
}

func TestEmbeddedBadConfig(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		name string
		cfg  metadata.EmbeddedConfig
		want string
	}{
		{"no data dir", metadata.EmbeddedConfig{}, "data dir is empty"},
		{"not loopback", metadata.EmbeddedConfig{DataDir: t.TempDir(), ClientAddr: "10.1.2.3:0"}, "only loopback"},
		{"not host:port", metadata.EmbeddedConfig{DataDir: t.TempDir(), PeerAddr: "nope"}, "peer address"},
		{"ticks", metadata.EmbeddedConfig{DataDir: t.TempDir(), Tick: 100 * time.Millisecond, Election: 200 * time.Millisecond}, "election >= 5 ticks"},
	} {
		if _, err := metadata.StartEmbeddedConfig(ctx, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	// A port given explicitly and taken is an error, not silently replaced.
	cfg := etcdtest.Config(t)
	cfg.ClientAddr = busy.Addr().String()
	if _, err := metadata.StartEmbeddedConfig(ctx, cfg); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("start on a busy port: %v, want EADDRINUSE", err)
	}
}

func TestEmbeddedStartCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := metadata.StartEmbeddedConfig(ctx, etcdtest.Config(t))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("start with a canceled context: %v", err)
	}
}

// TestEmbeddedDamagedDataDirIsAnError: an etcd data directory whose WAL file is not one makes
// etcd's own start panic; StartEmbedded returns an error naming the directory instead of
// taking the process down (a node then says why it could not start). The start runs in a
// child process: etcd's failed bootstrap leaves its database's goroutines behind, which the
// error says (the process should exit), and which this package's leak check would count.
func TestEmbeddedDamagedDataDirIsAnError(t *testing.T) {
	if dir := os.Getenv("STREAMTIER_DAMAGED_ETCD_DIR"); dir != "" {
		_, err := metadata.StartEmbedded(context.Background(), dir)
		fmt.Printf("start error: %v\n", err)
		os.Exit(0) // before the leak check: the child's only job is the start
	}
	dir := filepath.Join(t.TempDir(), "etcd")
	wal := filepath.Join(dir, "member", "wal")
	if err := os.MkdirAll(wal, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wal, "0000000000000000-0000000000000000.wal"), []byte("not a write-ahead log"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 60*time.Second)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestEmbeddedDamagedDataDirIsAnError$")
	cmd.Env = append(os.Environ(), "STREAMTIER_DAMAGED_ETCD_DIR="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the start took the process down (%v):\n%s", err, out)
	}
	if !strings.Contains(string(out), "start error: embedded etcd in "+dir) || !strings.Contains(string(out), "exit the process") {
		t.Fatalf("the start did not return an error naming %s and saying what to do:\n%s", dir, out)
	}
}

// TestEtcdGivingUpIsAnError: where etcd gives up through its logger (Panic: a full disk while
// it creates its WAL; Fatal: a WAL it cannot read) the start returns an error that says
// etcd's message and wraps the error it logged, instead of panicking without the cause or
// exiting the process.
func TestEtcdGivingUpIsAnError(t *testing.T) {
	for _, level := range []zapcore.Level{zapcore.PanicLevel, zapcore.FatalLevel} {
		err := metadata.LogAsEtcd(level, "failed to create WAL", syscall.ENOSPC)
		var f metadata.EtcdFailure
		if !errors.As(err, &f) || !errors.Is(err, syscall.ENOSPC) || err.Error() != "failed to create WAL: no space left on device (path=/x)" {
			t.Errorf("%v: got %v, want an EtcdFailure wrapping ENOSPC and naming the path", level, err)
		}
	}
}

// TestHasAnchorLinearizable shows what the linearizable option buys garbage collection: on a
// member cut off from its quorum, a serializable read still answers from local (possibly
// stale) state, while a linearizable read refuses with a retriable error instead of guessing.
func TestHasAnchorLinearizable(t *testing.T) {
	before := goleak.IgnoreCurrent()
	defer awaitGoroutinesGone(t, before)
	dir := t.TempDir()
	names := []string{"m1", "m2"}
	var clientURLs, peerURLs []url.URL
	var initial []string
	for _, n := range names {
		c := url.URL{Scheme: "http", Host: closedPort(t)}
		p := url.URL{Scheme: "http", Host: closedPort(t)}
		clientURLs, peerURLs = append(clientURLs, c), append(peerURLs, p)
		initial = append(initial, n+"="+p.String())
	}
	var members []*embed.Etcd
	closed := make(map[*embed.Etcd]bool) // embed.Etcd.Close must run once
	defer func() {
		for _, m := range members {
			if !closed[m] {
				m.Close()
			}
		}
	}()
	for i, n := range names {
		cfg := embed.NewConfig()
		cfg.Name, cfg.Dir = n, filepath.Join(dir, n)
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(etcdtest.Logger())
		cfg.TickMs, cfg.ElectionMs = 20, 400
		cfg.UnsafeNoFsync = true
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = clientURLs[i:i+1], clientURLs[i:i+1]
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = peerURLs[i:i+1], peerURLs[i:i+1]
		cfg.InitialCluster = strings.Join(initial, ",")
		m, err := embed.StartEtcd(cfg)
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, m)
	}
	for _, m := range members {
		select {
		case <-m.Server.ReadyNotify():
		case <-time.After(20 * time.Second):
			t.Fatal("cluster not ready")
		}
	}
	ctx := testCtx(t, 20*time.Second)
	// The client talks to m2 only.
	cli, err := metadata.NewClient(ctx, metadata.ClientConfig{Endpoints: []string{"http://" + clientURLs[1].Host}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	s := metadata.NewStore(cli, "")
	if err := s.Anchor(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.HasAnchor(ctx, "s1", true); err != nil || !ok {
		t.Fatalf("linearizable read with quorum: %v %v", ok, err)
	}
	members[0].Close() // m2 alone has no quorum
	closed[members[0]] = true
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = s.HasAnchor(rctx, "s1", true)
	cancel()
	if err == nil || !metadata.IsRetriable(err) {
		t.Fatalf("linearizable read without quorum: %v, want a retriable error", err)
	}
	if ok, err := s.HasAnchor(ctx, "s1", false); err != nil || !ok {
		t.Fatalf("serializable read without quorum: %v %v, want the local answer", ok, err)
	}
}

// awaitGoroutinesGone waits until every goroutine started since before has ended. Members of a
// multi-member etcd closed while they stream to each other leave a peer connection reader
// that ends only at etcd's 5 s peer read timeout (it re-arms the read deadline net/http sets
// to abort the read), so this waits up to 15 s; a goroutine still there then is a leak.
func awaitGoroutinesGone(t *testing.T, before goleak.Option) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := goleak.Find(before) // itself retries for about a second
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines left behind: %v", err)
		}
	}
}
