package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/backends"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/nodeconfig"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// TestBinaryDeletedStreamRefused: `node run` with a configuration that still declares a
// stream deleted since the last run starts, tiers the other stream, and refuses the deleted
// one by name (log, status, offline status) without writing anything for it; the clean
// stop does not wait for it.
func TestBinaryDeletedStreamRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "node.yaml")
	yaml := "fragment_target_size: 64KiB\npersist_interval: 200ms\nstreams:\n"
	for i, id := range []string{"keep", "gone"} {
		logDir := filepath.Join(dir, "logs", id)
		lg, err := segments.Open(logDir, segments.Options{MaxSegmentBytes: 256 << 10})
		if err != nil {
			t.Fatal(err)
		}
		g, _ := loadgen.New(loadgen.Config{Seed: uint64(i + 1)})
		if _, err := loadgen.Write(context.Background(), lg, g, loadgen.Limit{Chunks: 300}, loadgen.WriteOptions{Commit: true}); err != nil {
			t.Fatal(err)
		}
		if err := lg.Close(); err != nil {
			t.Fatal(err)
		}
		yaml += fmt.Sprintf("  - id: %s\n    log_dir: %s\n", id, logDir)
	}
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "data")
	args := []string{"run", "--config", cfg, "--data-dir", dataDir, "--progress", "off"}
	persisted := func(n *running) bool {
		rep, err := n.client.Status(context.Background())
		if err != nil || len(rep.Streams) != 2 {
			return false
		}
		for _, s := range rep.Streams {
			if s.Phase != "running" || s.Remote.PersistedNext == 0 { // the stop persists the rest
				return false
			}
		}
		return true
	}
	n := startNode(t, dir, args...)
	waitFor(t, 60*time.Second, "both streams persisted", func() bool { return persisted(n) })
	if code := n.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, n.stderr)
	}

	// Delete "gone" as an operator would with the node stopped: its etcd records (leaving
	// the tombstone), then its S3 prefix.
	s, _, _, ok := parseFlags("test", nodeconfig.ModeRun, []string{"--config", cfg, "--data-dir", dataDir}, io.Discard, nil)
	if !ok {
		t.Fatal("settings")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	traces := func(b *backends.Backends) []string {
		var out []string
		resp, err := b.EtcdClient.Get(ctx, metadata.StreamPrefix(b.Meta.Prefix(), "gone"), clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			out = append(out, string(kv.Key))
		}
		if err := b.Store.List(ctx, manifest.StreamPrefix(b.KeyPrefix, "gone"), func(o s3io.ObjectInfo) error {
			out = append(out, o.Key)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	b, err := backends.ForCommand(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Meta.DeleteStream(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, k := range traces(b) {
		if !strings.HasPrefix(k, "/") { // S3 keys; etcd keys start with the etcd prefix
			keys = append(keys, k)
		}
	}
	if failed, err := b.Store.DeleteObjects(ctx, keys); err != nil || len(failed) > 0 {
		t.Fatalf("empty the prefix of gone: %v %v", failed, err)
	}
	if left := traces(b); len(left) > 0 {
		t.Fatalf("left of gone after its deletion: %v", left)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	n = startNode(t, dir, args...)
	var reason string
	waitFor(t, 60*time.Second, "gone refused, keep running", func() bool {
		rep, err := n.client.Status(context.Background())
		if err != nil || len(rep.Streams) != 2 {
			return false
		}
		refused, running := false, false
		for _, s := range rep.Streams {
			switch s.Stream {
			case "gone":
				refused, reason = s.Phase == "stopped", s.StopReason
			case "keep":
				running = s.Phase == "running"
			}
		}
		return refused && running
	})
	for _, want := range []string{"stream gone was deleted at", "remove it from the configuration or use a new stream id"} {
		if !strings.Contains(reason, want) {
			t.Fatalf("stop reason of gone %q lacks %q", reason, want)
		}
	}
	waitFor(t, 10*time.Second, "the refusal in the log", func() bool {
		return strings.Contains(n.stderr.String(), "stream gone was deleted at")
	})
	if r := node(t, dir, "status", "--config", cfg, "--data-dir", dataDir); r.code != 0 || !strings.Contains(r.stdout, "gone: stopped for good: stream gone was deleted at") {
		t.Fatalf("node status while running:\n%s", r)
	}
	start := time.Now()
	if code := n.stop(syscall.SIGTERM); code != 0 || strings.Contains(n.stderr.String(), "stopping with work in flight") {
		t.Fatalf("second run: exit %d\n%s", code, n.stderr)
	}
	if d := time.Since(start); d > s.StopTimeout {
		t.Fatalf("the stop waited %v for the refused stream", d)
	}
	if r := node(t, dir, "status", "gone", "--config", cfg, "--data-dir", dataDir); r.code != exitFailed || !strings.Contains(r.stderr, "stream gone was deleted at") {
		t.Fatalf("offline status of the deleted stream:\n%s", r)
	}
	b, err = backends.ForCommand(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if left := traces(b); len(left) > 0 {
		t.Fatalf("the refused stream wrote %v", left)
	}
}
