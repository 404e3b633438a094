package main

import (
	"bufio"
	"bytes"
	"encoding/json"
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
// consecutive chunks from both tiers), stops it, reads the remote tier offline (raw), restores
// it into a new directory and checks that the restored chunks are the raw bytes read, that
// segments dump reads the directory, and that a non-empty target is refused.
func TestBinaryReadAndRestore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A hot window (16 MiB: 8 s of the demo's 2 MB/s, room for a read on a loaded machine;
	// 3 MiB failed once in CI) keeps uploaded segments locally for a while, so that the hand-off point is
	// still in the local log when the reader gets there: without one, at this rate and
	// segment size the log's first offset overtakes the remote end and a read can be all
	// remote, rightly (the reader reads on remotely), which would not show the hand-off.
	n := startNode(t, dir, append(slices.Clone(demoFlags), "--local-hot-window-bytes", "16MiB")...)
	waitFor(t, 60*time.Second, "remote data below the local log", func() bool {
		s := n.status()
		return s.Remote.PersistedNext > 0 && s.Local.First > 0
	})
	r := node(t, dir, "read", "demo", "--from", "first")
	if r.code != 0 {
		t.Fatalf("online read:\n%s", r)
	}
	var prev uint64
	tiers := map[string]int{}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	for i, l := range lines {
		var it itemLine
		if err := json.Unmarshal([]byte(l), &it); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, l)
		}
		if it.Kind != "chunk" || (i > 0 && it.Offset != prev) || it.CRC == "" {
			t.Fatalf("line %d: %s (previous chunk ended at %d)", i, l, prev)
		}
		prev = it.End
		tiers[it.Tier]++
	}
	if tiers["remote"] == 0 || tiers["local"] == 0 {
		t.Fatalf("online read: chunks per tier %v, want both\n%s", tiers, r.stderr)
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
