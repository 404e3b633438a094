package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/backends"
	"github.com/streamtier/streamtier/segments"
)

// bucketKeys lists the objects of the embedded bucket's directory (the bucket as files):
// what "nothing deleted" compares.
func bucketKeys(t *testing.T, dataDir string) []string {
	t.Helper()
	root := filepath.Join(dataDir, "s3", "data", "streamtier")
	var keys []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.Contains(p, "/probe/") && !strings.Contains(p, ".sgwtmp") {
			keys = append(keys, strings.TrimPrefix(p, root+"/"))
		}
		return nil
	})
	sort.Strings(keys)
	return keys
}

// restoredBytes restores the stream into a new directory with the extra flags and returns
// its chunks' bytes in order.
func restoredBytes(t *testing.T, dir, target string, extra ...string) []byte {
	t.Helper()
	rs := node(t, dir, append([]string{"restore", "demo", "--to", target, "--json"}, extra...)...)
	if rs.code != 0 {
		t.Fatalf("restore %v:\n%s", extra, rs)
	}
	var out bytes.Buffer
	if _, err := segments.Scan(target, func(c segments.ScannedChunk) error {
		b, err := os.ReadFile(filepath.Join(target, c.Location.Segment))
		if err != nil {
			return err
		}
		out.Write(b[c.Location.Position : c.Location.Position+c.Location.Size])
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func recoverJSON(t *testing.T, dir string, args ...string) (recoverOutput, result) {
	t.Helper()
	r := node(t, dir, append([]string{"recover", "--json"}, args...)...)
	var out recoverOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("recover --json output: %v\n%s", err, r)
	}
	return out, r
}

// TestBinaryRecoverAfterEtcdWipe tiers the demo stream until its history is only in the
// bucket (local retention removed the first segments), lets `gc --delete` claim the key
// prefix, stops, and wipes every etcd key under the prefix. Then: offline status knows no
// stream, gc refuses by name and deletes nothing, read, restore and verify --from-bucket
// give the data byte for byte, recover refuses while the roots are younger than 10 minutes
// and writes nothing, recover --yes --takeover rebuilds the records, verify through etcd
// passes and the demo resumes from the recovered root; `node run` on the wiped etcd is
// refused, naming the repair. A second cluster (another etcd prefix on the same bucket and
// key prefix) is refused by run, gc and recover, and its takeover stops the first
// cluster's running node (claim_changed) and fences its deleting commands.
func TestBinaryRecoverAfterEtcdWipe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := startNode(t, dir, demoFlags...)
	waitFor(t, 60*time.Second, "remote data below the local log", func() bool {
		s := n.status()
		return s.Remote.PersistedNext > 0 && s.Local.First > 0
	})
	if code := n.stop(syscall.SIGINT); code != 0 {
		t.Fatalf("SIGINT: exit %d\n%s", code, n.stderr)
	}
	if r := node(t, dir, "gc", "--delete", "--grace", "5m"); r.code != 0 {
		t.Fatalf("gc --delete (claims the prefix):\n%s", r)
	}
	if out, r := recoverJSON(t, dir); r.code != 0 || out.Claim.Action != "none" || out.Claim.Target == nil || out.Claim.Target.Generation != 1 {
		t.Fatalf("recover dry run on intact etcd: want the claim agreed at generation 1:\n%s", r)
	}
	raw := node(t, dir, "read", "demo", "--format", "raw")
	if raw.code != 0 || len(raw.stdout) == 0 {
		t.Fatalf("raw read before the wipe:\n%s", raw)
	}
	before := bucketKeys(t, n.dataDir)

	// Wipe etcd: every key under the prefix, through a node that serves the embedded etcd.
	host := startNode(t, dir, "run", "--progress", "off")
	info, _, err := backends.ReadRunInfo(host.dataDir)
	if err != nil || len(info.EtcdEndpoints) == 0 || info.S3 == nil {
		t.Fatalf("run file of the host node: %+v %v", info, err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: info.EtcdEndpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(context.Background(), "/streamtier", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	if code := host.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("host node: exit %d\n%s", code, host.stderr)
	}

	if r := node(t, dir, "status"); r.code != 0 || !strings.Contains(r.stdout, "(no streams)") {
		t.Fatalf("offline status after the wipe:\n%s", r)
	}
	// The node refuses to start on a claimed bucket whose etcd lost the claim, naming the
	// repair; it anchors nothing on the way.
	if r := node(t, dir, demoFlags...); r.code != 1 || !strings.Contains(r.stderr, "node recover") {
		t.Fatalf("node run after the wipe: want a refusal naming node recover:\n%s", r)
	}
	if r := node(t, dir, "gc", "--grace", "0"); r.code != 1 || !strings.Contains(r.stderr, "not claimed by this cluster") {
		t.Fatalf("gc after the wipe: want a refusal by name:\n%s", r)
	}
	if r := node(t, dir, "gc", "--delete", "--grace", "5m"); r.code != 1 || !strings.Contains(r.stderr, "nothing deleted") || !strings.Contains(r.stderr, "node recover") {
		t.Fatalf("gc --delete after the wipe: want a refusal naming node recover:\n%s", r)
	}
	if got := bucketKeys(t, n.dataDir); !slices.Equal(got, before) {
		t.Fatalf("objects changed after the wipe: %d before, %d now", len(before), len(got))
	}

	// The bucket alone: read, restore, verify and status.
	if r := node(t, dir, "read", "demo", "--format", "raw", "--from-bucket"); r.code != 0 || r.stdout != raw.stdout {
		t.Fatalf("read --from-bucket: exit %d, %d bytes, want the %d bytes read before the wipe\n%s", r.code, len(r.stdout), len(raw.stdout), r.stderr)
	}
	if got := restoredBytes(t, dir, filepath.Join(dir, "restored"), "--from-bucket"); !bytes.Equal(got, []byte(raw.stdout)) {
		t.Fatalf("restore --from-bucket: %d bytes differ from the %d read before the wipe", len(got), len(raw.stdout))
	}
	if r := node(t, dir, "verify", "demo", "--from-bucket"); r.code != 0 || !strings.Contains(r.stdout, "OK") {
		t.Fatalf("verify --from-bucket:\n%s", r)
	}
	if r := node(t, dir, "status", "--from-bucket"); r.code != 0 || !strings.Contains(r.stdout, "demo") || !strings.Contains(r.stdout, "root-") {
		t.Fatalf("status --from-bucket:\n%s", r)
	}
	if r := node(t, dir, "read", "demo"); r.code != 1 {
		t.Fatalf("read through the wiped etcd should fail:\n%s", r)
	}

	// Recover: refused while the roots are younger than 10 minutes (a live cluster may own
	// the prefix), nothing written; with --takeover it writes the records.
	out, r := recoverJSON(t, dir)
	if r.code != 1 || len(out.Streams) != 1 || out.Streams[0].Action != "write" || !strings.Contains(r.stderr, "--takeover") {
		t.Fatalf("recover dry run after the wipe:\n%s", r)
	}
	if _, r := recoverJSON(t, dir, "--yes"); r.code != 1 || !strings.Contains(r.stderr, "live cluster may own") {
		t.Fatalf("recover --yes with young roots:\n%s", r)
	}
	if r := node(t, dir, "status"); r.code != 0 || !strings.Contains(r.stdout, "(no streams)") {
		t.Fatalf("a refused recover wrote records:\n%s", r)
	}
	out, r = recoverJSON(t, dir, "--yes", "--takeover")
	if r.code != 0 || len(out.Streams) != 1 || !out.Streams[0].Written || out.Claim.Target == nil || out.Claim.Target.Generation != 2 || !out.Claim.Written {
		t.Fatalf("recover --yes --takeover:\n%s", r)
	}
	if out2, r := recoverJSON(t, dir); r.code != 0 || out2.Streams[0].Action != "up-to-date" || out2.Claim.Action != "none" {
		t.Fatalf("recover after recovery: want up to date:\n%s", r)
	}
	if rep, r := verifyJSON(t, dir); r.code != 0 || !rep.OK() {
		t.Fatalf("verify through etcd after recovery:\n%s", r)
	}
	if r := node(t, dir, "read", "demo", "--format", "raw"); r.code != 0 || r.stdout != raw.stdout {
		t.Fatalf("read through etcd after recovery: %d bytes, want %d\n%s", len(r.stdout), len(raw.stdout), r.stderr)
	}
	if got := bucketKeys(t, n.dataDir); !slices.Equal(got, before) {
		t.Fatalf("objects changed by recovery: %d before, %d now", len(before), len(got))
	}

	// The demo resumes from the recovered root.
	n = startNode(t, dir, demoFlags...)
	recovered := out.Streams[0].Next
	waitFor(t, 60*time.Second, "persists past the recovered root", func() bool { return n.status().Remote.PersistedNext > recovered })
	if code := n.stop(syscall.SIGINT); code != 0 {
		t.Fatalf("SIGINT: exit %d\n%s", code, n.stderr)
	}
	if rep, r := verifyJSON(t, dir); r.code != 0 || !rep.OK() || rep.FirstOffset != 0 {
		t.Fatalf("verify after resuming:\n%s", r)
	}

	// A second cluster: another etcd prefix, the same bucket and key prefix, through the
	// embedded servers of the first cluster's node, which tiers the demo meanwhile.
	host = startNode(t, dir, demoFlags...)
	info, _, _ = backends.ReadRunInfo(host.dataDir)
	other := []string{"--data-dir", filepath.Join(dir, "other"), "--etcd-endpoints", strings.Join(info.EtcdEndpoints, ","), "--etcd-prefix", "/other",
		"--s3-endpoint", info.S3.Endpoint, "--s3-bucket", info.S3.Bucket, "--s3-region", info.S3.Region, "--s3-path-style",
		"--s3-access-key", info.S3.AccessKey, "--s3-secret-key", info.S3.SecretKey}
	if err := os.MkdirAll(filepath.Join(dir, "other"), 0o755); err != nil {
		t.Fatal(err)
	}
	if r := node(t, dir, append([]string{"gc", "--grace", "0"}, other...)...); r.code != 1 || !strings.Contains(r.stderr, "not claimed by this cluster") {
		t.Fatalf("gc of a second cluster:\n%s", r)
	}
	if r := node(t, dir, append([]string{"recover", "--yes"}, other...)...); r.code != 1 || !strings.Contains(r.stderr, `etcd prefix "/streamtier"`) || !strings.Contains(r.stderr, "--takeover") {
		t.Fatalf("recover of a second cluster while the first is live:\n%s", r)
	}
	if r := node(t, dir, append([]string{"run", "--progress", "off"}, other...)...); r.code != 1 || !strings.Contains(r.stderr, "claim") {
		t.Fatalf("node run of a second cluster: want a refusal naming the claim:\n%s", r)
	}
	if r := node(t, dir, append([]string{"recover", "--yes", "--takeover"}, other...)...); r.code != 0 {
		t.Fatalf("recover --takeover of a second cluster:\n%s", r)
	}
	// The first cluster's running node sees the takeover at its next look at the claim
	// (every 30 s) and stops persisting, saying why.
	waitFor(t, 60*time.Second, "the first cluster's stream in claim_changed", func() bool { return host.status().Phase == "claim_changed" })
	if code := host.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("host node: exit %d\n%s", code, host.stderr)
	}
	// The first cluster is fenced: its deleting commands refuse by name.
	if r := node(t, dir, "gc", "--delete", "--grace", "5m"); r.code != 1 || !strings.Contains(r.stderr, "nothing deleted") {
		t.Fatalf("gc --delete of the cluster taken over:\n%s", r)
	}
	if got := bucketKeys(t, n.dataDir); len(got) < len(before) {
		t.Fatalf("objects deleted across the takeover: %d before, %d now", len(before), len(got))
	}
}
