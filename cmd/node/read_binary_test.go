package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamtier/streamtier/segments"
)

// TestBinaryReadAndRestore runs the demo, reads the stream through the running node (json:
// consecutive chunks from the first on; from just below the local log's first offset, from
// both tiers: the hand-off), stops it, reads the remote tier offline (raw), restores
// it into a new directory and checks that the restored chunks are the raw bytes read, that
// segments dump reads the directory, and that a non-empty target is refused.
func TestBinaryReadAndRestore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A slow demo (200 KB/s) with a small hot window (2 MiB): local retention then moves
	// the local log's first offset one 1 MiB segment every five seconds, so that a reader
	// opened just below it reaches it before it moves on, even under -race on a loaded
	// machine. (At the demo's 2 MB/s such a reader, slower than the writer, chased a first
	// offset it never caught and read everything remotely: rightly, but no hand-off.)
	n := startNode(t, dir, append(slices.Clone(demoFlags), "--demo-rate", "200KB", "--local-hot-window-bytes", "2MiB")...)
	waitFor(t, 60*time.Second, "remote data below the local log", func() bool {
		s := n.status()
		return s.Remote.PersistedNext > 0 && s.Local.First > 0
	})
	// From first: consecutive chunks from the remote first on. How much of it comes from
	// the local log depends on how fast the read goes against local retention (the reader
	// hands off where the local log begins, which moves on while it reads).
	if tiers := readTiers(t, dir, "first"); tiers["remote"] == 0 {
		t.Fatalf("read from first: chunks per tier %v, want remote ones", tiers)
	}
	// From just below where the local log begins: a few remote chunks, then the hand-off.
	st := n.status()
	if tiers := readTiers(t, dir, fmt.Sprint(st.Local.First-1)); tiers["remote"] == 0 || tiers["local"] == 0 {
		t.Fatalf("read from %d (the local log began at %d): chunks per tier %v, want both", st.Local.First-1, st.Local.First, tiers)
	}
	if r := node(t, dir, "read", "demo", "--from", "last", "--format", "records"); r.code != 0 || !strings.Contains(r.stdout, `"offset"`) {
		t.Fatalf("online read of the last chunk's records:\n%s", r)
	}
	if code := n.stop(syscall.SIGINT); code != 0 {
		t.Fatalf("SIGINT: exit %d\n%s", code, n.stderr)
	}

	raw := node(t, dir, "read", "demo", "--format", "raw")
	if raw.code != 0 || len(raw.stdout) == 0 {
		t.Fatalf("offline raw read:\n%s", raw.stderr)
	}
	target := filepath.Join(dir, "restored")
	rs := node(t, dir, "restore", "demo", "--to", target, "--json")
	if rs.code != 0 {
		t.Fatalf("restore:\n%s", rs)
	}
	var restored bytes.Buffer
	files := map[string][]byte{} // each segment read once: a read per chunk is quadratic
	if _, err := segments.Scan(target, func(c segments.ScannedChunk) error {
		b, ok := files[c.Location.Segment]
		if !ok {
			var err error
			if b, err = os.ReadFile(filepath.Join(target, c.Location.Segment)); err != nil {
				return err
			}
			files[c.Location.Segment] = b
		}
		if !c.CRCOK {
			t.Errorf("restored chunk %d: bad CRC", c.Header.ChunkID)
		}
		restored.Write(b[c.Location.Position : c.Location.Position+c.Location.Size])
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(restored.Bytes(), []byte(raw.stdout)) {
		t.Fatalf("restored chunks (%d bytes) differ from the raw read (%d bytes)", restored.Len(), len(raw.stdout))
	}
	dump := node(t, dir, "segments", "dump", target)
	sc := bufio.NewScanner(strings.NewReader(dump.stdout))
	count := 0
	for sc.Scan() {
		count++
	}
	if dump.code != 0 || count == 0 {
		t.Fatalf("segments dump of the restored directory:\n%s", dump)
	}
	if again := node(t, dir, "restore", "demo", "--to", target); again.code == 0 || !strings.Contains(again.stderr, "not empty") {
		t.Fatalf("restore into a non-empty directory:\n%s", again)
	}
	if bad := node(t, dir, "read", "demo", "--from", "@yesterday"); bad.code != exitBadInput {
		t.Fatalf("read --from @yesterday:\n%s", bad)
	}
}

// readTiers reads the demo stream through the running node from from (json), checks that
// the chunks are consecutive and carry CRCs, and counts them per tier.
func readTiers(t *testing.T, dir, from string) map[string]int {
	t.Helper()
	r := node(t, dir, "read", "demo", "--from", from)
	if r.code != 0 {
		t.Fatalf("online read from %s:\n%s", from, r)
	}
	var prev uint64
	tiers := map[string]int{}
	for i, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var it itemLine
		if err := json.Unmarshal([]byte(l), &it); err != nil {
			t.Fatalf("read from %s, line %d: %v: %s", from, i, err, l)
		}
		if it.Kind != "chunk" || (i > 0 && it.Offset != prev) || it.CRC == "" {
			t.Fatalf("read from %s, line %d: %s (previous chunk ended at %d)", from, i, l, prev)
		}
		prev = it.End
		tiers[it.Tier]++
	}
	return tiers
}
