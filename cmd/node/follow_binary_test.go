package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// hashDir is a digest of every file name and its bytes in dir.
func hashDir(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s %d\n", n, len(b))
		h.Write(b)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// TestBinaryFollowLiveWriter runs `node run` on a stream declared with follow: true whose
// directory a writer in the test process keeps appending to (rolling segments), as a live
// broker does. The node tiers the chunks appended after its start; the half chunk the
// writer leaves at the end is not tiered, not cut and reported as pending; the node never
// changes a byte of the directory; `node verify` and the bucket show every complete chunk
// tiered.
func TestBinaryFollowLiveWriter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	logDir := filepath.Join(dir, "broker", "s1")
	w, err := segments.Open(logDir, segments.Options{MaxSegmentBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	g, err := loadgen.New(loadgen.Config{Seed: 11, MinDataBytes: 1000, MaxDataBytes: 3000, StartTimestamp: 1_700_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	appendChunks := func(n int) {
		for range n {
			if _, _, err := w.Append(g.Next()); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendChunks(100)
	atStart := w.NextOffset()
	n := startFollowing(t, dir, data, logDir, "local_hot_window_bytes: 1GiB\n")
	waitFor(t, 30*time.Second, "the log at start drained", func() bool { return n.status().Pipeline.DrainNext == atStart })
	if s := n.status(); s.Follow == nil || s.Local.Committed != atStart {
		t.Fatalf("status of a followed stream at start: follow %+v, committed %d, want %d", s.Follow, s.Local.Committed, atStart)
	}

	// The writer appends while the node runs: three batches, each seen before the next.
	for range 3 {
		appendChunks(80)
		want := w.NextOffset()
		waitFor(t, 30*time.Second, fmt.Sprintf("the node to commit and drain up to %d", want), func() bool {
			s := n.status()
			return s.Local.Committed == want && s.Pipeline.DrainNext == want
		})
	}
	if segs := len(w.Segments()); segs < 5 {
		t.Fatalf("the writer rolled %d segments, want several", segs)
	}
	complete := w.NextOffset()

	// The writer leaves half a chunk at the end of its active segment (it is writing it, or
	// it crashed): invisible to the node, which must not cut it.
	active := w.Segments()[len(w.Segments())-1]
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	torn, _, err := segments.EncodeChunk(nil, g.Next(), complete)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(logDir, active.Name), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(torn[:len(torn)/2]); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	written := hashDir(t, logDir)
	waitFor(t, 30*time.Second, "the pending half chunk reported", func() bool {
		s := n.status()
		return s.Follow != nil && s.Follow.PendingBytes == int64(len(torn)/2)
	})
	if r := node(t, dir, "cut", "s1", "--data-dir", data); r.code != 0 {
		t.Fatalf("cut:\n%s", r)
	}
	waitFor(t, 30*time.Second, "every complete chunk persisted", func() bool { return n.status().Remote.PersistedNext == complete })
	if s := n.status(); s.Local.Committed != complete || s.Local.Next != complete || s.Follow.Error != "" {
		t.Fatalf("committed %d, next %d, follow %+v: want %d and no error", s.Local.Committed, s.Local.Next, s.Follow, complete)
	}
	if r := node(t, dir, "status", "--data-dir", data); r.code != 0 || !strings.Contains(r.stdout, "s1: followed") || !strings.Contains(r.stdout, "not tiered until complete") {
		t.Fatalf("status text of a followed stream:\n%s", r)
	}
	store := hostStore(t, n) // the embedded S3 endpoint stops with the node
	var fragments int
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := manifest.StreamPrefix("streams", "s1")
	if err := store.List(ctx, prefix, func(o s3io.ObjectInfo) error {
		if strings.HasSuffix(o.Key, ".fragment") {
			fragments++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fragments == 0 {
		t.Fatalf("bucket holds no fragment object under %s", prefix)
	}
	if code := n.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, n.stderr)
	}
	if got := hashDir(t, logDir); got != written {
		t.Fatal("the node changed the followed directory (the torn tail must stay as the writer left it)")
	}
	b, err := os.ReadFile(filepath.Join(logDir, active.Name))
	if err != nil || int64(len(b)) != active.Size+int64(len(torn)/2) {
		t.Fatalf("active segment %d bytes (%v), want %d with the half chunk", len(b), err, active.Size+int64(len(torn)/2))
	}

	rep, r := verifyStream(t, dir, "s1", "--config", filepath.Join(dir, "node.yaml"))
	if r.code != 0 || !rep.OK() || rep.FirstOffset != 0 || rep.NextOffset != complete || rep.Chunks != 340 || rep.LocalCompared != rep.Chunks || rep.Gaps != 0 {
		t.Fatalf("verify of the followed stream (want [0, %d), 340 chunks, each compared with the log, no gap):\n%s", complete, r)
	}
	if rep.Fragments > fragments {
		t.Fatalf("verify read %d fragments, the bucket held %d", rep.Fragments, fragments)
	}
}

// TestBinaryFollowRewrittenTail: the followed writer truncates a tail the node had already
// tiered and writes other chunks there at a higher epoch (an osiris replica following a new
// leader after an unclean failover). The node logs the rewrite naming the stream and the
// offsets, restarts the stream on the reopened log, and the existing divergence handling
// cuts the remote tier back to where the two part; the new chunks are then tiered and
// verify passes against the rewritten log.
func TestBinaryFollowRewrittenTail(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	logDir := filepath.Join(dir, "broker", "s1")
	first := writeSeededLog(t, logDir, 21, 120)
	n := startFollowing(t, dir, data, logDir, "local_hot_window_bytes: 1GiB\n")
	waitFor(t, 30*time.Second, "the log drained", func() bool { return n.status().Pipeline.DrainNext == first })
	if r := node(t, dir, "cut", "s1", "--data-dir", data); r.code != 0 {
		t.Fatalf("cut:\n%s", r)
	}
	waitFor(t, 30*time.Second, "the log persisted", func() bool { return n.status().Remote.PersistedNext == first })

	// The writer cuts its last 15 chunks (as osiris's recovery does to an uncommitted
	// tail) and writes 30 others at epoch 2.
	var locs []chunk.Location
	var ids []uint64
	if _, err := segments.Scan(logDir, func(c segments.ScannedChunk) error {
		locs, ids = append(locs, c.Location), append(ids, c.Header.ChunkID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	cut := locs[len(locs)-15]
	if cut.Segment != locs[len(locs)-1].Segment {
		t.Fatalf("the 15 last chunks span segments (%s to %s): pick a smaller cut", cut.Segment, locs[len(locs)-1].Segment)
	}
	segID, err := segments.ParseSegmentName(cut.Segment)
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, l := range locs {
		if l.Segment == cut.Segment && l.Position < cut.Position {
			kept++
		}
	}
	if err := os.Truncate(filepath.Join(logDir, cut.Segment), cut.Position); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(logDir, segments.IndexName(segID)), segments.FileHeaderSize+int64(kept)*segments.IndexRecordSize); err != nil {
		t.Fatal(err)
	}
	w, err := segments.Open(logDir, segments.Options{MaxSegmentBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if w.NextOffset() != ids[len(ids)-15] {
		t.Fatalf("writer reopened at %d, want %d", w.NextOffset(), ids[len(ids)-15])
	}
	g, err := loadgen.New(loadgen.Config{Seed: 22, Epoch: 2, MinDataBytes: 1000, MaxDataBytes: 3000, StartTimestamp: 1_800_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	for range 30 {
		if _, _, err := w.Append(g.Next()); err != nil {
			t.Fatal(err)
		}
	}
	second := w.NextOffset()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the new timeline drained", func() bool {
		s, ok := n.streamStatus("s1") // absent while the node restarts the stream
		return ok && s.Phase == "running" && s.Local.Committed == second && s.Pipeline.DrainNext == second
	})
	if r := node(t, dir, "cut", "s1", "--data-dir", data); r.code != 0 {
		t.Fatalf("cut:\n%s", r)
	}
	waitFor(t, 30*time.Second, "the new timeline persisted", func() bool {
		s, ok := n.streamStatus("s1")
		return ok && s.Remote.PersistedNext == second
	})
	if s := n.status(); s.Counters["truncations"] == 0 || s.Follow == nil {
		t.Fatalf("after the rewrite: counters %v, follow %+v; want a truncation of the remote tier", s.Counters, s.Follow)
	}
	if code := n.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, n.stderr)
	}
	logs := n.stderr.String()
	if !strings.Contains(logs, "the followed log was rewritten") || !strings.Contains(logs, `"stream":"s1"`) || !strings.Contains(logs, "seen_next") || !strings.Contains(logs, "followed stream restarted") {
		t.Fatalf("the rewrite was not logged with the stream and offsets:\n%s", logs)
	}
	rep, r := verifyStream(t, dir, "s1", "--config", filepath.Join(dir, "node.yaml"))
	if r.code != 0 || !rep.OK() || rep.NextOffset != second || rep.LocalCompared != rep.Chunks || rep.Chunks != 120-15+30 {
		t.Fatalf("verify after the rewrite (want [0, %d), %d chunks, each compared with the rewritten log):\n%s", second, 120-15+30, r)
	}
}

// truncateLogAt cuts an osiris directory at chunk id next, as a broker's truncation does:
// the segments above it go, the one holding it is cut before it with its index.
func truncateLogAt(t *testing.T, dir string, next uint64) {
	t.Helper()
	var locs []chunk.Location
	var ids []uint64
	if _, err := segments.Scan(dir, func(c segments.ScannedChunk) error {
		locs, ids = append(locs, c.Location), append(ids, c.Header.ChunkID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	at := slices.Index(ids, next)
	if at < 0 {
		t.Fatalf("no chunk %d in %s", next, dir)
	}
	cut := locs[at]
	for _, l := range locs[at:] {
		if l.Segment == cut.Segment {
			continue
		}
		id, err := segments.ParseSegmentName(l.Segment)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{l.Segment, segments.IndexName(id)} {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
		}
	}
	kept := 0
	for _, l := range locs[:at] {
		if l.Segment == cut.Segment {
			kept++
		}
	}
	segID, err := segments.ParseSegmentName(cut.Segment)
	if err != nil {
		t.Fatal(err)
	}
	if kept == 0 { // the cut is at the segment's start: the segment goes too
		for _, name := range []string{cut.Segment, segments.IndexName(segID)} {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	if err := os.Truncate(filepath.Join(dir, cut.Segment), cut.Position); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, segments.IndexName(segID)), segments.FileHeaderSize+int64(kept)*segments.IndexRecordSize); err != nil {
		t.Fatal(err)
	}
}

// appendEpoch appends n generated chunks at epoch to the log in dir and returns its next
// offset.
func appendEpoch(t *testing.T, dir string, seed, epoch uint64, n int) uint64 {
	t.Helper()
	w, err := segments.Open(dir, segments.Options{MaxSegmentBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	g, err := loadgen.New(loadgen.Config{Seed: seed, Epoch: epoch, MinDataBytes: 1000, MaxDataBytes: 3000, StartTimestamp: 1_800_000_000_000 + int64(epoch)*1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if _, _, err := w.Append(g.Next()); err != nil {
			t.Fatal(err)
		}
	}
	next := w.NextOffset()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return next
}

// TestBinaryFollowEpochNeverFalls (issue 22, item 1): the followed broker replica holds a
// tail of epoch 2 from a leader that lost leadership; the node opens at epoch 2 and
// persists it. The replica truncates that tail (the node restarts the stream on the
// shorter log, whose last chunk is of epoch 1) and the new leader appends at epoch 3. The
// stream must reopen at the epoch etcd stores (2), not at the log's 1: the new timeline is
// tiered, the remote tier is cut back where the two part, and verify compares every chunk
// with the broker's log. Before, the stream reopened at epoch 1, its truncation's persist
// was fenced and it stopped for good: "deposed by epoch 2 (this writer is at epoch 1)".
func TestBinaryFollowEpochNeverFalls(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	logDir := filepath.Join(dir, "broker", "s1")
	common := writeSeededLog(t, logDir, 31, 100)
	first := appendEpoch(t, logDir, 32, 2, 20) // the deposed leader's tail, replicated
	n := startFollowing(t, dir, data, logDir, "")
	waitFor(t, 30*time.Second, "the log drained", func() bool { return n.status().Pipeline.DrainNext == first })
	if r := node(t, dir, "cut", "s1", "--data-dir", data); r.code != 0 {
		t.Fatalf("cut:\n%s", r)
	}
	waitFor(t, 30*time.Second, "the epoch-2 tail persisted", func() bool { return n.status().Remote.PersistedNext == first })

	truncateLogAt(t, logDir, common)
	waitFor(t, 30*time.Second, "the stream restarted on the truncated log", func() bool {
		s, ok := n.streamStatus("s1")
		return ok && s.Phase == "behind" && s.Local.Committed == common
	})
	second := appendEpoch(t, logDir, 33, 3, 30) // the new leader's timeline
	waitFor(t, 60*time.Second, "the new timeline persisted", func() bool {
		s, ok := n.streamStatus("s1") // absent while the node restarts the stream
		if ok && s.Phase == "stopped" {
			t.Fatalf("the stream stopped: %s", s.StopReason)
		}
		if ok && s.Local.Committed == second && s.Pipeline.DrainNext == second && s.Remote.PersistedNext != second {
			node(t, dir, "cut", "s1", "--data-dir", data)
		}
		return ok && s.Remote.PersistedNext == second
	})
	if s := n.status(); s.Counters["truncations"] == 0 {
		t.Fatalf("after the new timeline: counters %v; want a truncation of the remote tier", s.Counters)
	}
	if code := n.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, n.stderr)
	}
	if logs := n.stderr.String(); !strings.Contains(logs, "opening the stream at the epoch etcd stores") {
		t.Fatalf("the raised epoch was not logged:\n%s", logs)
	}
	rep, r := verifyStream(t, dir, "s1", "--config", filepath.Join(dir, "node.yaml"))
	if r.code != 0 || !rep.OK() || rep.NextOffset != second || rep.LocalCompared != rep.Chunks || rep.Chunks != 100+30 {
		t.Fatalf("verify after the new timeline (want [0, %d), %d chunks, each compared with the broker's log):\n%s", second, 100+30, r)
	}
}

// startFollowing starts `node run` with data under data on a config that follows the osiris
// directory logDir as stream s1 (looked at every 100 ms), extra YAML settings and args
// added, small fragments and frequent persists.
func startFollowing(t *testing.T, dir, data, logDir, extra string, args ...string) *running {
	t.Helper()
	cfg := filepath.Join(dir, "node.yaml")
	yaml := fmt.Sprintf("data_dir: %s\nfollow_interval: 100ms\n%sstreams:\n  - id: s1\n    log_dir: %s\n    follow: true\n", data, extra, logDir)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return startNode(t, dir, append([]string{"run", "--config", cfg, "--data-dir", data, "--progress", "off", "--fragment-target-size", "32KiB", "--persist-interval", "200ms"}, args...)...)
}
