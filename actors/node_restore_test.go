package actors

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// TestRestore: a tiered stream restored into an empty directory holds the chunks of the
// remote tier, byte for byte (ids, epochs, timestamps, CRCs), as the reference log has them;
// a non-empty target is refused.
func TestRestore(t *testing.T) {
	w := newWorld(t, worldOptions{})
	n, _, ref := tieredStream(t, w, "rs")
	p, _ := n.Cached("rs")
	dir := filepath.Join(t.TempDir(), "restored")
	src := read.OfflineSource{Store: w.Store, Meta: w.Meta, Stream: "rs"}
	rep, err := read.Restore(context.Background(), read.RestoreOptions{Source: src, Dir: dir, Segments: segments.Options{MaxSegmentBytes: 64 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.FirstOffset != p.Manifest.FirstOffset || rep.NextOffset != p.Manifest.NextOffset || rep.Segments < 2 {
		t.Fatalf("restored [%d, %d) in %d segments, the manifest holds [%d, %d)", rep.FirstOffset, rep.NextOffset, rep.Segments, p.Manifest.FirstOffset, p.Manifest.NextOffset)
	}
	refChunks := scanChunks(t, ref.Dir())
	got := scanChunks(t, dir)
	if len(got) != rep.Chunks {
		t.Fatalf("%d chunks scanned, the report says %d", len(got), rep.Chunks)
	}
	for i, c := range got {
		if !bytes.Equal(c, refChunks[i]) {
			t.Fatalf("restored chunk %d differs from the reference", i)
		}
	}
	if _, err := read.Restore(context.Background(), read.RestoreOptions{Source: src, Dir: dir}); !errors.Is(err, read.ErrTargetNotEmpty) {
		t.Fatalf("restore into a non-empty directory: %v", err)
	}
}

// scanChunks returns the bytes of every chunk of a stream directory, in order, checking
// each one's CRC.
func scanChunks(t *testing.T, dir string) [][]byte {
	t.Helper()
	var out [][]byte
	files := map[string][]byte{}
	if _, err := segments.Scan(dir, func(c segments.ScannedChunk) error {
		if !c.CRCOK {
			t.Errorf("%s chunk %d: bad CRC", dir, c.Header.ChunkID)
		}
		b, ok := files[c.Location.Segment]
		if !ok {
			var err error
			if b, err = os.ReadFile(filepath.Join(dir, c.Location.Segment)); err != nil {
				return err
			}
			files[c.Location.Segment] = b
		}
		out = append(out, b[c.Location.Position:c.Location.Position+c.Location.Size])
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRestoreDefaultsToTheLastRun: a remote tier holding [0,A), a declared gap [A,B) and
// [B,N) restores by default to the run a broker can continue, [B,N) byte for byte, and says
// which gap it followed; the earlier run is restored on request (FromFirst) and stops at the
// gap (issue 22 item 5: the default stopped at the gap and wrote [0,A), where a broker's
// next chunk would land in the gap).
func TestRestoreDefaultsToTheLastRun(t *testing.T) {
	w := newWorld(t, worldOptions{})
	n, lg, ref := persistedStream(t, w, "runs", Config{LocalHotWindowBytes: 1 << 30}, 51, 128<<10)
	gapFrom := lg.NextOffset()
	w.Inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: `/data/`, Fault: s3test.FaultForbidden})
	writeLog(t, lg, 53, loadgen.Limit{Bytes: 192 << 10})
	writeLog(t, ref, 53, loadgen.Limit{Bytes: 192 << 10})
	// The broker's retention takes what was never uploaded, up to the last segment.
	if _, err := lg.ApplyRetention(segments.RetentionPolicy{MayDelete: func(segments.SegmentInfo) bool { return true }}, time.Now()); err != nil {
		t.Fatal(err)
	}
	gapTo := lg.FirstOffset()
	writeLog(t, lg, 55, loadgen.Limit{Bytes: 96 << 10})
	writeLog(t, ref, 55, loadgen.Limit{Bytes: 96 << 10})
	w.Inj.Clear()
	persisted(t, n, "runs", lg.NextOffset(), 30*time.Second)
	if gapTo <= gapFrom {
		t.Fatalf("retention left the log at %d, not above the persisted %d", gapTo, gapFrom)
	}

	src := read.OfflineSource{Store: w.Store, Meta: w.Meta, Stream: "runs"}
	dir := filepath.Join(t.TempDir(), "last")
	rep, err := read.Restore(context.Background(), read.RestoreOptions{Source: src, Dir: dir})
	if err != nil {
		t.Fatalf("default restore: %v (report %+v)", err, rep)
	}
	if rep.FirstOffset != gapTo || rep.NextOffset != lg.NextOffset() || rep.AfterGap == nil || rep.AfterGap.To != gapTo {
		t.Fatalf("default restore wrote [%d,%d) after the gap %+v; want [%d,%d) after the gap ending at %d", rep.FirstOffset, rep.NextOffset, rep.AfterGap, gapTo, lg.NextOffset(), gapTo)
	}
	refChunks := scanChunks(t, ref.Dir())
	got := scanChunks(t, dir)
	tail := refChunks[len(refChunks)-len(got):]
	for i := range got {
		if !bytes.Equal(got[i], tail[i]) {
			t.Fatalf("restored chunk %d of the last run differs from the reference", i)
		}
	}

	early := filepath.Join(t.TempDir(), "first")
	rep, err = read.Restore(context.Background(), read.RestoreOptions{Source: src, Dir: early, From: read.FromFirst()})
	var gapErr *read.RestoreGapError
	if !errors.As(err, &gapErr) || gapErr.Start != rep.NextOffset || rep.FirstOffset != 0 || gapErr.End != gapTo {
		t.Fatalf("restore from first: [%d,%d), %v; want [0, gap start) and the gap ending at %d", rep.FirstOffset, rep.NextOffset, err, gapTo)
	}
}
