package backends_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/backends"
	"github.com/streamtier/streamtier/metadata/etcdtest"
	"github.com/streamtier/streamtier/nodeconfig"
	"github.com/streamtier/streamtier/s3io/s3test"
)

func settings(t *testing.T, flags map[string]string) nodeconfig.Settings {
	t.Helper()
	s, err := nodeconfig.Resolve(nodeconfig.ModeRun, nodeconfig.Sources{Flags: flags, Dir: "/"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEmbeddedOpenAttachReopen starts the embedded servers under a data directory, attaches
// to them as a command does while the "node" holds the directory, and restarts them: the
// data and the S3 keys survive, the lock keeps a second owner out, and commands refuse a
// data directory that does not exist. (The embedded S3 endpoint is one per process, so
// one test covers it all.)
func TestEmbeddedOpenAttachReopen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	s := settings(t, map[string]string{"data_dir": dir})

	if _, err := backends.ForCommand(ctx, settings(t, map[string]string{"data_dir": dir + "/missing"})); err == nil || !strings.Contains(err.Error(), "no such directory") {
		t.Fatalf("missing data dir: %v", err)
	}

	lock, err := backends.Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := backends.Lock(dir); !errors.Is(err, backends.ErrLocked) {
		t.Fatalf("second lock: %v", err)
	}
	b, err := backends.Open(ctx, s, lock)
	if err != nil {
		t.Fatal(err)
	}
	if b.Etcd == nil || b.S3 == nil || b.Probe(ctx) != nil {
		t.Fatalf("embedded backends: %+v", b)
	}
	if err := b.Store.PutObject(ctx, "streams/hello", []byte("world")); err != nil {
		t.Fatal(err)
	}
	if err := b.Meta.Anchor(ctx, "s1"); err != nil {
		t.Fatal(err)
	}

	// A command while the node runs: without a run file it refuses, with one it attaches.
	if _, err := backends.ForCommand(ctx, s); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("command without run file: %v", err)
	}
	info := b.RunInfoFor(backends.RunInfo{PID: os.Getpid(), AdminURL: "http://127.0.0.1:1"})
	if err := backends.WriteRunInfo(dir, info); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(backends.RunFile(dir)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("run file: %v %v", fi, err)
	}
	a, err := backends.ForCommand(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if a.Attached == nil || a.Etcd != nil || a.S3 != nil || !strings.Contains(a.Describe(), "pid") {
		t.Fatalf("attached: %+v", a)
	}
	got, err := a.Store.GetObject(ctx, "streams/hello")
	if err != nil || string(got) != "world" {
		t.Fatalf("read through the attached store: %q %v", got, err)
	}
	if ok, err := a.Meta.HasAnchor(ctx, "s1", true); err != nil || !ok {
		t.Fatalf("anchor through the attached etcd: %t %v", ok, err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	// The node is gone (its run file stays, as after a kill): a command starts the servers.
	c, err := backends.ForCommand(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Etcd == nil || c.S3 == nil || c.S3.AccessKey != b.S3.AccessKey {
		t.Fatalf("reopened: %+v (keys must be the same as before)", c)
	}
	if _, found, _ := backends.ReadRunInfo(dir); found {
		t.Fatal("the stale run file was not removed")
	}
	got, err = c.Store.GetObject(ctx, "streams/hello")
	if err != nil || string(got) != "world" {
		t.Fatalf("after restart: %q %v", got, err)
	}
	if ok, err := c.Meta.HasAnchor(ctx, "s1", true); err != nil || !ok {
		t.Fatalf("anchor after restart: %t %v", ok, err)
	}

	// An embedded server that stops on its own is reported, with its error, not silently.
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	reported := make(chan string, 2)
	c.Watch(watchCtx, func(server string, err error) { reported <- server + ": " + err.Error() })
	c.S3.Close() // as if the gateway had died
	select {
	case r := <-reported:
		if !strings.HasPrefix(r, "embedded s3: embedded s3 endpoint stopped") {
			t.Fatalf("report: %q", r)
		}
	case <-ctx.Done():
		t.Fatal("the stopped embedded S3 endpoint was not reported")
	}
}

func TestExternalUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := settings(t, map[string]string{"data_dir": t.TempDir(), "etcd_endpoints": "127.0.0.1:1", "etcd_dial_timeout": "300ms",
		"s3_endpoint": "http://127.0.0.1:1", "s3_bucket": "tier", "s3_access_key": "a", "s3_secret_key": "b"})
	_, err := backends.ForCommand(ctx, s)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("unreachable etcd: %v", err)
	}
}

// TestExternal opens external etcd and S3 as the settings name them, and refuses a bucket
// that does not exist.
func TestExternal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	etcd := etcdtest.Start(t)
	srv := s3test.Start(t, s3test.Options{})
	cfg := srv.NewBucket(t)
	flags := map[string]string{"data_dir": t.TempDir(), "etcd_endpoints": strings.Join(etcd.Endpoints(), ","),
		"s3_endpoint": cfg.Endpoint, "s3_bucket": cfg.Bucket, "s3_path_style": "true", "s3_region": cfg.Region,
		"s3_access_key": cfg.AccessKey, "s3_secret_key": cfg.SecretKey, "key_prefix": "tier"}
	b, err := backends.ForCommand(ctx, settings(t, flags))
	if err != nil {
		t.Fatal(err)
	}
	if b.Etcd != nil || b.S3 != nil || b.Attached != nil || b.KeyPrefix != "tier" || b.Probe(ctx) != nil || b.Describe() != "external etcd and bucket "+cfg.Bucket {
		t.Fatalf("external backends: %+v (%s)", b, b.Describe())
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	flags["s3_bucket"] = "no-such-bucket-here"
	if _, err := backends.ForCommand(ctx, settings(t, flags)); err == nil || !strings.Contains(err.Error(), "no-such-bucket-here") {
		t.Fatalf("missing bucket: %v", err)
	}
}

// TestExternalBusyStore: opening the backends asks a busy store (503 SlowDown, 500) again
// a few times before giving up, and says how often it asked; a refusal (403) is said at once.
func TestExternalBusyStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	etcd := etcdtest.Start(t)
	srv := s3test.Start(t, s3test.Options{})
	bucket := srv.NewBucket(t).Bucket
	inj := s3test.NewInjector(t, srv)
	cfg := inj.Config()
	flags := map[string]string{"data_dir": t.TempDir(), "etcd_endpoints": strings.Join(etcd.Endpoints(), ","),
		"s3_endpoint": cfg.Endpoint, "s3_bucket": bucket, "s3_path_style": "true", "s3_region": cfg.Region,
		"s3_access_key": cfg.AccessKey, "s3_secret_key": cfg.SecretKey}
	list := s3test.Rule{Method: "GET", QueryRegexp: `list-type=2`}
	open := func(fault s3test.Fault, count int) (hits int, err error) {
		inj.Clear()
		before := inj.Hits()
		r := list
		r.Fault, r.Count = fault, count
		inj.Add(r)
		b, err := backends.ForCommand(ctx, settings(t, flags))
		if err == nil {
			b.Close()
		}
		return inj.Hits() - before, err
	}
	if hits, err := open(s3test.FaultSlowDown, 2); err != nil || hits != 2 {
		t.Fatalf("two SlowDown answers, then an answer: got %v after %d faults", err, hits)
	}
	if hits, err := open(s3test.FaultInternalError, 0); err == nil || hits != 5 || !strings.Contains(err.Error(), "(5 attempts)") || !strings.Contains(err.Error(), "InternalError") {
		t.Fatalf("a store answering 500 every time: got %v after %d faults", err, hits)
	}
	if hits, err := open(s3test.FaultForbidden, 0); err == nil || hits != 1 || strings.Contains(err.Error(), "attempts") || !strings.Contains(err.Error(), "AccessDenied") {
		t.Fatalf("a refusal: got %v after %d faults", err, hits)
	}
}
