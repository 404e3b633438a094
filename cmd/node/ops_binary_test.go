package main

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamtier/streamtier/backends"
	"github.com/streamtier/streamtier/s3io/s3test"
)

// TestBinaryDamagedEmbeddedEtcd: an embedded etcd that cannot start from its data directory
// (a WAL file that is none: etcd's own start panics on it) stops `node run` with exit 1, the
// directory named and how to recover from the bucket, not a Go panic.
func TestBinaryDamagedEmbeddedEtcd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	wal := filepath.Join(backends.EtcdDir(data), "member", "wal")
	if err := os.MkdirAll(wal, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wal, "0000000000000000-0000000000000000.wal"), []byte("not a write-ahead log"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := node(t, dir, "run", "--data-dir", data, "--admin-addr", "127.0.0.1:0", "--progress", "off")
	if r.code != 1 || !strings.Contains(r.stderr, "embedded etcd in "+backends.EtcdDir(data)) ||
		!strings.Contains(r.stderr, "`node recover --yes`") || strings.Contains(r.stderr, "goroutine ") {
		t.Fatalf("want exit 1 naming the directory and the recovery, no panic:\n%s", r)
	}
}

// TestBinaryUsageErrors: an unknown flag or a wrong argument prints the problem, the
// command's one-line synopsis and where to look, not the flag package's dump of every
// setting; -h still lists the flags.
func TestBinaryUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		args     []string
		problem  string
		synopsis string
	}{
		{[]string{"--no-such-flag"}, "node: flag provided but not defined: -no-such-flag", "usage: node [flags]"},
		{[]string{"run", "--no-such-flag"}, "node run: flag provided but not defined: -no-such-flag", "usage: node run [--config node.yaml]"},
		{[]string{"gc", "--delet"}, "node gc: flag provided but not defined: -delet", "usage: node gc [stream] [--delete]"},
		{[]string{"verify", "demo", "--jsn"}, "node verify: flag provided but not defined: -jsn", "usage: node verify <stream>"},
		{[]string{"status", "--data-dir"}, "node status: flag needs an argument: -data-dir", "usage: node status [stream]"},
		{[]string{"verify"}, "node verify: give exactly one stream", "usage: node verify <stream>"},
		{[]string{"run", "extra"}, `node run: unexpected argument "extra"`, "usage: node run"},
	} {
		r := node(t, dir, c.args...)
		lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
		if r.code != 2 || len(lines) != 3 || lines[0] != c.problem && !strings.HasPrefix(lines[0], c.problem) ||
			!strings.HasPrefix(lines[1], c.synopsis) || !strings.Contains(lines[2], "`node help`") || !strings.Contains(lines[2], "`node settings`") {
			t.Errorf("node %v: want exit 2 and three lines (%q, %q, a pointer to node help and node settings):\n%s", c.args, c.problem, c.synopsis, r)
		}
	}
	if r := node(t, dir, "gc", "-h"); r.code != 0 || !strings.Contains(r.stderr, "usage: node gc") || !strings.Contains(r.stderr, "-etcd-endpoints") {
		t.Errorf("gc -h: want the synopsis and the flags:\n%s", r)
	}
}

// TestBinaryDemoRetentionBound runs the demo from a copy of the binary where `go run` keeps
// its executables (the build cache), writing ten times the remote bound given (the bucket
// would reach 150 MiB without retention), and checks:
// the embedded bucket's bytes on disk stay under the bound plus one fragment plus the
// slack the pipeline holds (fragments uploaded ahead of the persist that triggers
// retention, and deletes queued behind it); the summary's bucket listing is under
// the bound plus one fragment; the hints say `go run ./cmd/node`; durations in the JSON
// log carry their unit.
func TestBinaryDemoRetentionBound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	exe := filepath.Join(dir, "gocache", "5f", strings.Repeat("5f", 32)+"-d", "node")
	copyFile(t, nodeBinary(t), exe)
	const (
		bound = 16 << 20
		frag  = 1 << 20
		rate  = 20_000_000
		// The slack: 4 fragments uploaded ahead of the persist after which retention drops
		// the oldest (at 20 MB/s the settled persist follows each upload; the default
		// max_unpersisted_bytes would let 50 wait only if persists fell behind); a second of
		// the load in deletes queued behind that persist and the reaper (a loaded machine);
		// roots and groups.
		slack = 4*frag + rate + 1<<20
	)
	n := startNodeWith(t, exe, dir, "--demo-rate", "20MB", "--fragment-target-size", "1MiB", "--segment-max-bytes", "4MiB",
		"--persist-interval", "200ms", "--demo-retention-max-bytes", "16MiB", "--progress", "log", "--progress-interval", "1s", "--log-format", "json")
	bucketDir := filepath.Join(n.dataDir, "s3", "data", "streamtier")
	// Sample until the node has uploaded six times the bound (a loaded machine takes longer
	// than the 8 s an idle one needs), the peak on disk every 100 ms.
	var peak int64
	deadline := time.Now().Add(90 * time.Second)
	for {
		peak = max(peak, dirBytes(t, bucketDir))
		rep, err := n.client.Status(context.Background())
		if err == nil && rep.Node.Uploads.Bytes >= 6*bound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo uploaded %d bytes in 90 s (%v): too little to test a bound of %d MiB", rep.Node.Uploads.Bytes, err, bound>>20)
		}
		time.Sleep(100 * time.Millisecond) // sampling the bucket's size, not synchronisation
	}
	written := n.status().Local.Committed
	if code := n.stop(syscall.SIGINT); code != 0 {
		t.Fatalf("SIGINT: exit %d\n%s", code, n.stderr)
	}
	out := n.stdout.String()
	m := regexp.MustCompile(`the demo load wrote ([0-9.]+) MiB this run`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("summary lacks what the load wrote:\n%s", out)
	}
	if wrote, _ := strconv.ParseFloat(m[1], 64); wrote < 5*bound>>20 {
		t.Fatalf("the demo wrote only %s MiB (offset %d): too little to test a bound of %d MiB", m[1], written, bound>>20)
	}
	if peak > bound+frag+slack {
		t.Errorf("the bucket held %d bytes on disk at its peak, over the bound %d + a fragment %d + slack %d", peak, bound, frag, slack)
	}
	listed := regexp.MustCompile(`bucket streamtier: (\d+) objects, ([0-9.]+) MiB`).FindStringSubmatch(out)
	if listed == nil {
		t.Fatalf("summary lacks the bucket listing:\n%s", out)
	}
	if mib, _ := strconv.ParseFloat(listed[2], 64); mib*(1<<20) > bound+frag+slack {
		t.Errorf("after the stop the bucket lists %s MiB, over the bound %d MiB + a fragment + slack", listed[2], bound>>20)
	}
	kept := regexp.MustCompile(`stream demo: persisted offsets \[\d+, \d+\), ([0-9.]+) MiB`).FindStringSubmatch(out)
	if kept == nil {
		t.Fatalf("summary lacks the stream's remote size:\n%s", out)
	}
	if mib, _ := strconv.ParseFloat(kept[1], 64); mib*(1<<20) > bound+frag {
		t.Errorf("the persisted manifest holds %s MiB, over the bound %d MiB + a fragment", kept[1], bound>>20)
	}
	t.Logf("wrote %s MiB; bucket peak %.1f MiB on disk, %s MiB listed at the stop, %s MiB in the manifest", m[1], float64(peak)/(1<<20), listed[2], kept[1])
	for _, want := range []string{"\n  go run ./cmd/node status\n", "\n  go run ./cmd/node verify demo\n", "\n  go run ./cmd/node gc\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("a demo run from the build cache: the hints lack %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, exe) {
		t.Errorf("the hints name the build cache's executable:\n%s", out)
	}
	retentionLines := 0
	for _, l := range strings.Split(n.stderr.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) != nil {
			continue
		}
		switch rec["message"] {
		case "node ready", "node started":
			for _, k := range []string{"startup", "transfer_deadline"} {
				if v, ok := rec[k]; ok {
					if s, isStr := v.(string); !isStr {
						t.Errorf("%s: %s=%v has no unit", rec["message"], k, v)
					} else if _, err := time.ParseDuration(s); err != nil {
						t.Errorf("%s: %s=%q: %v", rec["message"], k, s, err)
					}
				}
			}
		case "remote retention dropped the oldest data":
			retentionLines++
		}
	}
	if retentionLines == 0 || retentionLines > 3 {
		t.Errorf("%d remote retention lines in an 8 s run (want the first at once, then at most one per 30 s, and the rest at the stop)", retentionLines)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// dirBytes sums the sizes of the files under dir (0 before it exists); files that go
// while it walks are skipped.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// TestBinaryDataDirRemembersBackends runs the demo against an external bucket (the
// embedded etcd), then the commands on its data directory with the S3 keys only: they read
// the bucket from the directory's record (which holds no key), so verify checks the
// fragments the demo uploaded instead of an empty embedded store. Settings that name
// another bucket are refused with a message that says where the data went, and so are
// external backends on a directory tiered to its embedded ones.
func TestBinaryDataDirRemembersBackends(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := s3test.Start(t, s3test.Options{})
	data := filepath.Join(dir, "ext")
	keys := []string{"--s3-access-key", srv.AccessKey, "--s3-secret-key", srv.SecretKey}
	ext := append([]string{"--data-dir", data, "--s3-endpoint", srv.Endpoint, "--s3-bucket", srv.Bucket, "--s3-path-style"}, keys...)
	n := startNode(t, dir, append(slices.Clone(demoFlags), ext...)...)
	waitFor(t, 30*time.Second, "a first persist", func() bool { return n.status().Remote.PersistedNext > 0 })
	if code := n.stop(syscall.SIGINT); code != 0 {
		t.Fatalf("SIGINT: exit %d\n%s", code, n.stderr)
	}
	if out := n.stdout.String(); !strings.Contains(out, "bucket "+srv.Bucket+" at "+srv.Endpoint) || !strings.Contains(out, "backends.json") {
		t.Fatalf("the hints do not say which bucket the commands use:\n%s", out)
	}
	rec, err := os.ReadFile(backends.LocationFile(data))
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{srv.AccessKey, srv.SecretKey} {
		if strings.Contains(string(rec), secret) {
			t.Fatalf("the data dir's record holds a credential:\n%s", rec)
		}
	}
	if !strings.Contains(string(rec), srv.Bucket) || !strings.Contains(string(rec), srv.Endpoint) {
		t.Fatalf("the record lacks the bucket:\n%s", rec)
	}

	withKeys := func(args ...string) []string { return append(append(args, "--data-dir", data), keys...) }
	rep, r := verifyJSON(t, dir, withKeys()...)
	if r.code != 0 || !rep.OK() || rep.Fragments == 0 || rep.LocalCompared == 0 {
		t.Fatalf("verify on the data dir, the bucket from its record:\n%s", r)
	}
	if r := node(t, dir, withKeys("verify", "demo")...); r.code != 0 || !strings.Contains(r.stdout, "verify demo: OK") || !strings.Contains(r.stdout, "bucket "+srv.Bucket) {
		t.Fatalf("verify table:\n%s", r)
	}
	if r := node(t, dir, withKeys("status")...); r.code != 0 || !strings.Contains(r.stdout, "bucket "+srv.Bucket) || !strings.Contains(r.stdout, "demo") {
		t.Fatalf("offline status:\n%s", r)
	}
	if plan, r := gcJSON(t, dir, withKeys()...); r.code != 0 || plan.Plan.Referenced == 0 {
		t.Fatalf("gc on the data dir, the bucket from its record:\n%s", r)
	}
	// The same settings given again agree with the record.
	if r := node(t, dir, withKeys("status", "--s3-endpoint", srv.Endpoint+"/", "--s3-bucket", srv.Bucket)...); r.code != 0 {
		t.Fatalf("status with the recorded bucket given:\n%s", r)
	}

	for _, c := range []struct {
		args []string
		want []string
	}{
		{withKeys("verify", "demo", "--s3-bucket", "elsewhere"), []string{"was tiered to the embedded etcd (prefix /streamtier) and bucket " + srv.Bucket + " at " + srv.Endpoint,
			`s3_bucket is "elsewhere" (from flag --s3-bucket)`, "remove " + backends.LocationFile(data)}},
		{withKeys("gc", "--key-prefix", "other"), []string{`key_prefix is "other"`, "bucket " + srv.Bucket}},
		{append(slices.Clone(demoFlags), withKeys("--etcd-endpoints", "127.0.0.1:1")...), []string{`etcd_endpoints is "127.0.0.1:1"`, "the embedded etcd"}},
	} {
		r := node(t, dir, c.args...)
		for _, want := range c.want {
			if r.code != 2 || !strings.Contains(r.stderr, want) {
				t.Errorf("node %v: want exit 2 and %q:\n%s", c.args, want, r)
			}
		}
	}

	// A data dir tiered to its embedded servers refuses an external bucket.
	emb := filepath.Join(dir, "emb")
	n = startNode(t, dir, append(slices.Clone(demoFlags), "--data-dir", emb)...)
	waitFor(t, 30*time.Second, "a first persist", func() bool { return n.status().Remote.PersistedNext > 0 })
	if code := n.stop(syscall.SIGINT); code != 0 {
		t.Fatalf("SIGINT: exit %d\n%s", code, n.stderr)
	}
	r = node(t, dir, append([]string{"verify", "demo", "--data-dir", emb, "--s3-endpoint", srv.Endpoint, "--s3-bucket", srv.Bucket}, keys...)...)
	if r.code != 2 || !strings.Contains(r.stderr, "the embedded etcd (prefix /streamtier) and the embedded S3 bucket") || !strings.Contains(r.stderr, "s3_bucket") {
		t.Fatalf("an external bucket on an embedded data dir:\n%s", r)
	}
	if rep, r := verifyJSON(t, dir, "--data-dir", emb); r.code != 0 || !rep.OK() || rep.Fragments == 0 {
		t.Fatalf("verify on the embedded data dir:\n%s", r)
	}
}
