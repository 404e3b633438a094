package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamtier/streamtier/s3io/s3test"
)

// TestBinaryStartRetriesTransientS3Errors: S3 answers the start's first listings of a
// declared stream's roots with 500 InternalError, as S3 does now and then among thousands of
// requests; the start retries them and the node runs the stream (before, `node run` exited
// on the first one).
func TestBinaryStartRetriesTransientS3Errors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := s3test.Start(t, s3test.Options{})
	inj := s3test.NewInjector(t, srv)
	const faults = 3
	inj.Add(s3test.Rule{Method: "GET", QueryRegexp: `prefix=[^&]*root-`, Fault: s3test.FaultInternalError, Count: faults})
	logDir := filepath.Join(dir, "broker", "s1")
	writeSeededLog(t, logDir, 91, 20)
	conf := filepath.Join(dir, "node.yaml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "streams:\n  - id: s1\n    log_dir: %s\n", logDir), 0o644); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, dir, "run", "--config", conf, "--data-dir", filepath.Join(dir, "data"), "--progress", "off",
		"--s3-endpoint", inj.Endpoint(), "--s3-bucket", srv.Bucket, "--s3-path-style",
		"--s3-access-key", srv.AccessKey, "--s3-secret-key", srv.SecretKey)
	waitFor(t, 30*time.Second, "the stream running", func() bool {
		s, ok := n.streamStatus("s1")
		return ok && s.Phase == "running"
	})
	if hits := inj.Hits(); hits != faults {
		t.Errorf("%d faults injected, want %d", hits, faults)
	}
	if code := n.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, n.stderr)
	}
	if logs := n.stderr.String(); strings.Count(logs, "a transient failure, retrying") != faults {
		t.Errorf("want %d retries logged:\n%s", faults, logs)
	}
}
