package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBinaryDamagedLogStopsOnlyItsStream: of two declared streams, one's directory has an
// older segment cut short (its index names chunks past the file's end). The node starts
// anyway: that stream is listed as stopped with the open error and the repair, /readyz
// fails naming it, its files are left as they were, and the other stream is tiered and
// persisted; a stop does not wait for the damaged one.
func TestBinaryDamagedLogStopsOnlyItsStream(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad, good := filepath.Join(dir, "logs", "bad"), filepath.Join(dir, "logs", "good")
	writeLoadLog(t, bad, 200)
	writeLoadLog(t, good, 200)
	segs, err := filepath.Glob(filepath.Join(bad, "*.segment"))
	if err != nil || len(segs) < 3 {
		t.Fatalf("segments of the log to damage: %v %v", segs, err)
	}
	slices.Sort(segs)
	fi, err := os.Stat(segs[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(segs[1], fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	before := dirDigest(t, bad)

	cfg := filepath.Join(dir, "node.yaml")
	yaml := fmt.Sprintf("fragment_target_size: 32KiB\nfragment_max_age: 200ms\npersist_interval: 100ms\nstreams:\n  - id: bad\n    log_dir: %s\n  - id: good\n    log_dir: %s\n", bad, good)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "data")
	n := startNode(t, dir, "run", "--config", cfg, "--data-dir", dataDir, "--progress", "off", "--stop-timeout", "2m")
	r := node(t, dir, "await", "good", "--config", cfg, "--data-dir", dataDir, "--timeout", "60s")
	if r.code != 0 {
		t.Fatalf("await the intact stream:\n%s", r)
	}
	rep, err := n.client.Stream(t.Context(), "bad")
	if err != nil || rep.Phase != "stopped" || !strings.Contains(rep.StopReason, filepath.Base(segs[1])) || !strings.Contains(rep.StopReason, "node segments dump") {
		t.Fatalf("the damaged stream: want stopped, naming the segment and the repair: %+v %v", rep, err)
	}
	resp, err := http.Get(n.client.Base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var ready struct {
		Ready  bool              `json:"ready"`
		Checks map[string]string `json:"checks"`
	}
	if err := json.Unmarshal(body, &ready); err != nil || resp.StatusCode != http.StatusServiceUnavailable || ready.Ready || !strings.Contains(ready.Checks["local_logs"], "bad") {
		t.Fatalf("/readyz: want 503 naming the damaged stream: %d %s", resp.StatusCode, body)
	}
	if r := node(t, dir, "status", "--data-dir", dataDir); r.code != 0 || !strings.Contains(r.stdout, "bad: stopped for good") {
		t.Fatalf("status:\n%s", r)
	}
	began := time.Now()
	if code := n.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", code, n.stderr)
	}
	if d := time.Since(began); d > 30*time.Second {
		t.Fatalf("the stop waited %v", d)
	}
	if got := dirDigest(t, bad); got != before {
		t.Fatalf("the damaged directory changed:\n%s\nnow:\n%s", before, got)
	}
}

// dirDigest lists dir's files with their sizes and modification times.
func dirDigest(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %d %d\n", e.Name(), fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String()
}
