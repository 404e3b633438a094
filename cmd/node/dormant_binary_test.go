package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBinaryDormantStream: as an operator sees it, a stream with everything persisted goes
// dormant (its status says so, /metrics counts it), a command wakes it and is carried out,
// it goes dormant again, and the node stops cleanly with it dormant.
func TestBinaryDormantStream(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := startNode(t, dir, demoFlags...)
	waitFor(t, 30*time.Second, "a persist", func() bool { return n.status().Remote.PersistedNext > 0 })
	if code := n.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("demo: exit %d\n%s", code, n.stderr)
	}

	// The same stream without the demo load: nothing writes it any more (its tail, left
	// unpersisted by the stop, is cut by the fragment's max age, then persisted).
	config := filepath.Join(dir, "node.yaml")
	yaml := fmt.Sprintf("fragment_max_age: 200ms\npersist_interval: 200ms\nstream_dormant_after: 200ms\nstreams:\n  - id: demo\n    log_dir: %s\n",
		filepath.Join(n.dataDir, "streams", "demo"))
	if err := os.WriteFile(config, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	n = startNode(t, dir, "run", "--config", config, "--progress", "off")
	waitFor(t, 60*time.Second, "the stream dormant", func() bool {
		rep, err := n.client.Status(context.Background())
		return err == nil && len(rep.Streams) == 1 && rep.Streams[0].Dormant
	})
	st := n.status()
	if st.Phase != "running" || st.Remote.PersistedNext != st.Local.Committed {
		t.Fatalf("dormant stream's status: phase %s, persisted next %d, committed %d", st.Phase, st.Remote.PersistedNext, st.Local.Committed)
	}
	m, _ := n.metrics()
	if m["streamtier_streams_dormant{}"] != 1 || m["streamtier_streams_running{}"] != 1 || m[`streamtier_events_total{event="stream_dormant"}`] < 1 {
		t.Fatalf("metrics of a node with one dormant stream: dormant %v, running %v, dormancies %v",
			m["streamtier_streams_dormant{}"], m["streamtier_streams_running{}"], m[`streamtier_events_total{event="stream_dormant"}`])
	}

	if r := node(t, dir, "status", "--config", config); r.code != 0 || !strings.Contains(r.stdout, "running (dormant)") || !strings.Contains(r.stdout, "1 of 1 running streams dormant") {
		t.Fatalf("node status of a dormant stream:\n%s", r)
	}

	// A command reaches it: it wakes, takes the cut (nothing to cut) and goes dormant again.
	if _, err := n.client.Cut(context.Background(), st.Stream); err != nil {
		t.Fatalf("cut of a dormant stream: %v", err)
	}
	waitFor(t, 30*time.Second, "woken, then dormant again", func() bool {
		m, _ := n.metrics()
		return m[`streamtier_events_total{event="stream_woken"}`] >= 1 && m[`streamtier_events_total{event="stream_dormant"}`] >= 2 && n.status().Dormant
	})
	if code := n.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("stop with a dormant stream: exit %d\n%s", code, n.stderr)
	}
	if rep, r := verifyJSON(t, dir); r.code != 0 || !rep.OK() {
		t.Fatalf("verify after the dormant run:\n%s", r)
	}
}
