package loadgen

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/segments"
)

var testConfig = Config{
	Seed:            42,
	MinDataBytes:    100,
	MaxDataBytes:    3000,
	MinEntries:      1,
	MaxEntries:      20,
	SubBatchPercent: 30,
	TrackingEvery:   50,
	Epoch:           3,
	StartTimestamp:  1_700_000_000_000,
	BytesPerSecond:  1 << 20,
}

// generate writes n chunks of cfg into a new log and returns its directory.
func generate(t testing.TB, cfg Config, n int64) string {
	t.Helper()
	dir := t.TempDir()
	l, err := segments.Open(dir, segments.Options{MaxSegmentBytes: 100_000})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := Write(context.Background(), l, g, Limit{Chunks: n}, WriteOptions{Commit: true})
	if err != nil || st.Chunks != n {
		t.Fatalf("wrote %+v: %v", st, err)
	}
	if l.CommittedNext() != l.NextOffset() {
		t.Fatalf("committed next %d, next %d", l.CommittedNext(), l.NextOffset())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// digest hashes every file of dir, names included, in name order; the writer's lock file
// (empty, not part of the log) is left out.
func digest(t testing.TB, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if e.Name() == segments.LockFileName {
			continue
		}
		names = append(names, e.Name())
	}
	slices.Sort(names)
	h := sha256.New()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		h.Write([]byte(n))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// goldenDigest pins the bytes of testConfig's first 500 chunks: a change in the generator
// (or in the log's layout) that would make nodes or versions disagree fails here.
const goldenDigest = "8f65967a0d059662180a536fb80de97b30fd795ecfb65d55c25b95b9d59803dc"

func TestDeterministic(t *testing.T) {
	a := digest(t, generate(t, testConfig, 500))
	b := digest(t, generate(t, testConfig, 500))
	if a != b {
		t.Fatalf("two runs differ: %s and %s", a, b)
	}
	if a != goldenDigest {
		t.Fatalf("digest %s, golden %s", a, goldenDigest)
	}
	other := testConfig
	other.Seed++
	if digest(t, generate(t, other, 500)) == a {
		t.Fatal("another seed wrote the same log")
	}
}

func TestGeneratedChunks(t *testing.T) {
	dir := generate(t, testConfig, 400)
	var prevTS int64
	var n, subBatches, tracking int
	sum, err := segments.Scan(dir, func(c segments.ScannedChunk) error {
		n++
		h := c.Header
		if !c.CRCOK || h.Epoch != 3 || h.Timestamp < prevTS || h.Timestamp < testConfig.StartTimestamp {
			t.Fatalf("chunk %d: %+v", n, c)
		}
		prevTS = h.Timestamp
		if n%50 == 0 {
			if h.Type != chunk.TypeTrackingDelta {
				t.Fatalf("chunk %d is %s, want tracking_delta", n, h.Type)
			}
			tracking++
			return nil
		}
		if h.Type != chunk.TypeUser || h.Entries < 1 || h.Entries > 20 {
			t.Fatalf("chunk %d: %+v", n, h)
		}
		b, err := os.ReadFile(filepath.Join(dir, c.Location.Segment))
		if err != nil {
			return err
		}
		data := b[c.Location.Position+chunk.HeaderSize : c.Location.Position+chunk.HeaderSize+int64(h.DataLen)]
		entries, records, err := segments.DecodeEntries(data)
		if err != nil || records != h.Records || len(entries) != int(h.Entries) {
			t.Fatalf("chunk %d: %d entries, %d records: %v", n, len(entries), records, err)
		}
		var body int
		for _, e := range entries {
			body += len(e.Body)
			if e.SubBatch {
				subBatches++
				if e.Records < 2 || e.Records > 10 || e.UncompressedLen != uint32(len(e.Body)) {
					t.Fatalf("sub-batch %+v", e)
				}
				body -= 4 * int(e.Records)
			}
		}
		if body < 100 || body > 3000 {
			t.Fatalf("chunk %d holds %d record bytes", n, body)
		}
		return nil
	})
	if err != nil || n != 400 || sum.Segments < 2 {
		t.Fatalf("scan: %v, %d chunks, %+v", err, n, sum)
	}
	if tracking != 8 || subBatches == 0 {
		t.Fatalf("%d tracking chunks, %d sub-batches", tracking, subBatches)
	}
	// At 1 MiB/s of record bytes, the last timestamp is the bytes written so far / rate.
	if span := prevTS - testConfig.StartTimestamp; span <= 0 || span > 2000 {
		t.Fatalf("400 chunks of about 1.5 KB at 1 MiB/s span %d ms", span)
	}
}

func TestTimestampsWithoutRate(t *testing.T) {
	g, err := New(Config{Seed: 1, StartTimestamp: 500})
	if err != nil {
		t.Fatal(err)
	}
	for i := range int64(5) {
		if s := g.Next(); s.Timestamp != 500+i {
			t.Fatalf("chunk %d stamped %d", i, s.Timestamp)
		}
	}
}

func TestConfigRefusals(t *testing.T) {
	for _, c := range []Config{
		{MinDataBytes: 10, MaxDataBytes: 5},
		{MinEntries: 0, MaxEntries: 3},
		{MinEntries: 1, MaxEntries: 70000},
		{SubBatchPercent: 101},
		{MaxSubBatchRecords: 1},
		{TrackingEvery: -1},
		{BytesPerSecond: -1},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v): no error", c)
		}
	}
}

// Pacing waits in real time for the next chunk's timestamp and stops with the context.
func TestPaceStopsWithContext(t *testing.T) {
	l, err := segments.Open(t.TempDir(), segments.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	g, err := New(Config{Seed: 1, MinDataBytes: 1000, MaxDataBytes: 1000, BytesPerSecond: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	st, err := Write(ctx, l, g, Limit{Chunks: 10}, WriteOptions{Pace: true})
	if !errors.Is(err, context.DeadlineExceeded) || st.Chunks != 1 {
		t.Fatalf("paced write: %+v, %v; want one chunk, then the deadline", st, err)
	}
}

func TestByteLimit(t *testing.T) {
	l, err := segments.Open(t.TempDir(), segments.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	g, _ := New(Config{Seed: 9, MinDataBytes: 1000, MaxDataBytes: 1000})
	st, err := Write(context.Background(), l, g, Limit{Bytes: 10_500}, WriteOptions{})
	if err != nil || st.Chunks != 11 || st.Bytes != 11_000 {
		t.Fatalf("byte limit: %+v, %v", st, err)
	}
}

// BenchmarkWrite1GiB generates a 1 GiB log (64 KiB of records per chunk, segments of the
// default size) per iteration: run with -benchtime=1x.
func BenchmarkWrite1GiB(b *testing.B) {
	for range b.N {
		dir := b.TempDir()
		l, err := segments.Open(dir, segments.Options{})
		if err != nil {
			b.Fatal(err)
		}
		g, err := New(Config{Seed: 7, MinDataBytes: 60 << 10, MaxDataBytes: 68 << 10, MinEntries: 1, MaxEntries: 64, BytesPerSecond: 500 << 20})
		if err != nil {
			b.Fatal(err)
		}
		st, err := Write(context.Background(), l, g, Limit{Bytes: 1 << 30}, WriteOptions{Commit: true})
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(st.Bytes)
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.RemoveAll(dir)
		b.StartTimer()
	}
}
