package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// promtool is the path of Prometheus's promtool, or "" when it is not installed. Outside CI
// the tests that need it skip; in CI (CI set, as .ci/run sets it) its absence fails them.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("promtool is not on the PATH in CI (.ci/run installs Debian's prometheus package): %v", err)
	}
	t.Skip("promtool is not installed (Debian: apt-get install prometheus); CI runs this test")
	return ""
}

// TestBinaryPromtool runs `promtool check metrics` on a running node's /metrics, at its
// defaults (no automatic garbage collection: its series are there at 0), once it persisted,
// and `promtool check rules` on the shipped alert rules. Both must be clean: no gauge with
// a quantile label, no counter without _total, no unit trouble, rules that load.
func TestBinaryPromtool(t *testing.T) {
	tool := promtool(t)
	t.Parallel()

	rules := filepath.Join(monitoringDir, "streamtier-rules.yml")
	out, err := exec.Command(tool, "check", "rules", rules).CombinedOutput()
	if err != nil {
		t.Errorf("promtool check rules %s: %v\n%s", rules, err, out)
	}

	n := startNode(t, t.TempDir(), demoFlags...)
	waitFor(t, 30*time.Second, "a first persist", func() bool { return n.status().Remote.PersistedNext > 0 })
	resp, err := http.Get(n.client.Base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(body, []byte(`streamtier_gc_last_sweep_objects{kind="orphans"} 0`)) {
		t.Errorf("/metrics of a node without automatic GC lacks streamtier_gc_last_sweep_objects{kind=\"orphans\"} 0")
	}
	cmd := exec.Command(tool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err = cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("promtool check metrics on the node's /metrics: %v\n%s", err, strings.TrimSpace(string(out)))
	}
}
