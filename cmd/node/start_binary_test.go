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

// TestBinaryStartRetriesTransientS3Errors: S3 answers the start's first listings of the
// declared streams' roots with 500 InternalError, as S3 does now and then among thousands of
// requests; the start (three streams opened at once) retries them and the node runs every
// stream (before, `node run` exited on the first one).
func TestBinaryStartRetriesTransientS3Errors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := s3test.Start(t, s3test.Options{})
	inj := s3test.NewInjector(t, srv)
	const faults = 3
	inj.Add(s3test.Rule{Method: "GET", QueryRegexp: `prefix=[^&]*root-`, Fault: s3test.FaultInternalError, Count: faults})
	streams := []string{"s1", "s2", "s3"}
	conf := []byte("streams:\n")
	for i, id := range streams {
		logDir := filepath.Join(dir, "broker", id)
		writeSeededLog(t, logDir, 91+uint64(i), 20)
		conf = fmt.Appendf(conf, "  - id: %s\n    log_dir: %s\n", id, logDir)
	}
	confFile := filepath.Join(dir, "node.yaml")
	if err := os.WriteFile(confFile, conf, 0o644); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, dir, "run", "--config", confFile, "--data-dir", filepath.Join(dir, "data"), "--progress", "off",
		"--start-concurrency", "3", "--s3-endpoint", inj.Endpoint(), "--s3-bucket", srv.Bucket, "--s3-path-style",
		"--s3-access-key", srv.AccessKey, "--s3-secret-key", srv.SecretKey)
	waitFor(t, 30*time.Second, "every stream running", func() bool {
		for _, id := range streams {
			if s, ok := n.streamStatus(id); !ok || s.Phase != "running" {
				return false
			}
		}
		return true
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
