package segments

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/streamtier/streamtier/chunk"
	"pgregory.net/rapid"
)

// retentionLog writes 10 chunks in segments of two, chunk i stamped at i seconds.
func retentionLog(t *testing.T) (*Log, string) {
	t.Helper()
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{MaxSegmentChunks: 2})
	for i := range 10 {
		if _, _, err := l.Append(userChunk(1, int64(i)*1000, "0123456789")); err != nil {
			t.Fatal(err)
		}
	}
	return l, dir
}

// segSize is the size of a segment of retentionLog: file header and two 62-byte chunks.
const segSize = 8 + 2*(chunk.HeaderSize+4+10)

func names(segs []SegmentInfo) []string {
	var out []string
	for _, s := range segs {
		out = append(out, s.Name)
	}
	return out
}

func TestRetentionRules(t *testing.T) {
	always := func(SegmentInfo) bool { return true }
	cases := []struct {
		name    string
		policy  RetentionPolicy
		now     time.Time
		deleted int
	}{
		{"no rule", RetentionPolicy{}, time.UnixMilli(1e9), 0},
		{"max bytes keeps what fits", RetentionPolicy{MaxBytes: 2 * segSize}, time.Time{}, 3},
		{"max bytes never the active segment", RetentionPolicy{MaxBytes: 1}, time.Time{}, 4},
		// Segment i's last chunk is stamped (2i+1) seconds.
		{"max age", RetentionPolicy{MaxAge: 3 * time.Second}, time.UnixMilli(7500), 2},
		{"max age never the active segment", RetentionPolicy{MaxAge: time.Millisecond}, time.UnixMilli(1e9), 4},
		{"predicate never the active segment", RetentionPolicy{MayDelete: always}, time.Time{}, 4},
		{"predicate stops at the first refusal", RetentionPolicy{MayDelete: func(s SegmentInfo) bool { return s.FirstOffset != 2 }}, time.Time{}, 1},
		{"rules combine: the longest run goes", RetentionPolicy{MaxBytes: 4 * segSize, MayDelete: func(s SegmentInfo) bool { return s.FirstOffset < 4 }}, time.Time{}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, dir := retentionLog(t)
			before := l.Segments()
			if before[0].Size != segSize {
				t.Fatalf("segment size %d; the cases assume %d", before[0].Size, segSize)
			}
			deleted, err := l.ApplyRetention(c.policy, c.now)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(deleted, names(before[:c.deleted])) {
				t.Fatalf("deleted %v, want %v", deleted, names(before[:c.deleted]))
			}
			after := l.Segments()
			if !slices.Equal(names(after), names(before[c.deleted:])) || !after[len(after)-1].Active {
				t.Fatalf("left %v", names(after))
			}
			if l.FirstOffset() != after[0].FirstOffset {
				t.Fatalf("first offset %d, first segment %+v", l.FirstOffset(), after[0])
			}
			for _, s := range before {
				_, serr := os.Stat(filepath.Join(dir, s.Name))
				_, ierr := os.Stat(filepath.Join(dir, IndexName(s.FirstOffset)))
				gone := slices.Contains(deleted, s.Name)
				if gone != os.IsNotExist(serr) || gone != os.IsNotExist(ierr) {
					t.Fatalf("%s deleted=%v but files: %v, %v", s.Name, gone, serr, ierr)
				}
			}
		})
	}
}

// retainCount never reaches the active segment, and the predicate alone never deletes a
// segment it refuses, nor anything after one.
func TestRetentionProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 12).Draw(t, "segments")
		segs := make([]SegmentInfo, n)
		ts := int64(0)
		for i := range segs {
			ts += rapid.Int64Range(0, 5000).Draw(t, "gap")
			segs[i] = SegmentInfo{FirstOffset: uint64(i * 10), NextOffset: uint64(i*10 + 10), Size: rapid.Int64Range(8, 1000).Draw(t, "size"),
				Chunks: 1, LastTimestamp: ts, Active: i == n-1}
		}
		keep := map[uint64]bool{}
		for _, s := range segs {
			keep[s.FirstOffset] = rapid.Bool().Draw(t, "keep")
		}
		p := RetentionPolicy{MayDelete: func(s SegmentInfo) bool { return !keep[s.FirstOffset] }}
		predOnly := rapid.Bool().Draw(t, "predicate only")
		if !predOnly {
			p.MaxBytes = rapid.Int64Range(0, 5000).Draw(t, "max bytes")
			p.MaxAge = time.Duration(rapid.Int64Range(0, 20000).Draw(t, "max age ms")) * time.Millisecond
		}
		now := time.UnixMilli(rapid.Int64Range(0, 70000).Draw(t, "now"))
		d := retainCount(segs, p, now)
		if d < 0 || d >= n {
			t.Fatalf("deletes %d of %d segments", d, n)
		}
		if predOnly {
			for _, s := range segs[:d] {
				if keep[s.FirstOffset] {
					t.Fatalf("deleted %+v that the predicate keeps", s)
				}
			}
		}
		// Each rule's reach is justified: the last deleted segment is reached by some rule.
		if d > 0 {
			var total int64
			for _, s := range segs[d-1:] {
				total += s.Size
			}
			last := segs[d-1]
			byBytes := p.MaxBytes > 0 && total > p.MaxBytes
			byAge := p.MaxAge > 0 && last.LastTimestamp < now.Add(-p.MaxAge).UnixMilli()
			byPred := !keep[last.FirstOffset]
			if !byBytes && !byAge && !byPred {
				t.Fatalf("deleted %+v, which no rule reaches (policy %+v)", last, p)
			}
		}
	})
}
