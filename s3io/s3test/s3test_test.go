package s3test_test

import (
	"context"
	"testing"

	"pgregory.net/rapid"

	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
)

// TestLogRoundTrip: a generated log walks back to the chunks written, and Describe cuts it
// into consistent fragments that tile it, each reaching the target except the last.
func TestLogRoundTrip(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		spec := s3test.LogSpec{
			Seed:         rapid.Uint64().Draw(rt, "seed"),
			Chunks:       rapid.IntRange(1, 60).Draw(rt, "chunks"),
			FirstChunkID: rapid.Uint64Range(0, 1<<50).Draw(rt, "first"),
			MinData:      rapid.IntRange(0, 100).Draw(rt, "min"),
			MaxTrailer:   rapid.IntRange(0, 50).Draw(rt, "trailer"),
			BloomSize:    uint8(rapid.IntRange(0, 3).Draw(rt, "bloom")),
			SegmentBytes: int64(rapid.IntRange(0, 5000).Draw(rt, "roll")),
			TrackingEach: rapid.IntRange(0, 5).Draw(rt, "tracking"),
		}
		spec.MaxData = spec.MinData + rapid.IntRange(0, 2000).Draw(rt, "spread")
		dir := t.TempDir()
		wrote, err := s3test.WriteLog(dir, spec)
		if err != nil {
			rt.Fatal(err)
		}
		read, err := s3test.ReadLog(dir)
		if err != nil {
			rt.Fatal(err)
		}
		if len(read) != len(wrote) {
			rt.Fatalf("read %d chunks, wrote %d", len(read), len(wrote))
		}
		for i := range read {
			if read[i] != wrote[i] {
				rt.Fatalf("chunk %d: read %+v, wrote %+v", i, read[i], wrote[i])
			}
		}
		target := int64(rapid.IntRange(1, 20_000).Draw(rt, "target"))
		frags := s3test.Describe(read, target)
		next := spec.FirstChunkID
		for i, d := range frags {
			if err := fragment.CheckDescription(d); err != nil {
				rt.Fatalf("fragment %d: %v", i, err)
			}
			if d.FirstOffset != next {
				rt.Fatalf("fragment %d starts at %d, want %d", i, d.FirstOffset, next)
			}
			if i < len(frags)-1 && int64(d.Size) < target {
				rt.Fatalf("fragment %d holds %d bytes, under the target %d", i, d.Size, target)
			}
			next = d.NextOffset
		}
		if last := wrote[len(wrote)-1].Header.NextID(); next != last {
			rt.Fatalf("fragments end at %d, log at %d", next, last)
		}
	})
}

// TestInjectorCounts: a rule with a count fires that many times, then requests pass.
func TestInjectorCounts(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	inj := s3test.NewInjector(t, srv)
	st, err := s3io.NewStore(context.Background(), inj.Config())
	if err != nil {
		t.Fatal(err)
	}
	inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: `^counted/`, Fault: s3test.FaultInternalError, Count: 2})
	var errs int
	for i := 0; i < 4; i++ {
		if err := st.PutObject(context.Background(), "counted/x", []byte("x")); err != nil {
			errs++
		}
	}
	if errs != 2 || inj.Hits() != 2 {
		t.Fatalf("%d failures, %d hits; want 2 and 2", errs, inj.Hits())
	}
	// Other keys and methods never matched.
	if err := st.PutObject(context.Background(), "other", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetObject(context.Background(), "counted/x"); err != nil {
		t.Fatal(err)
	}
}

// TestBinaryCached: the gateway is built once; asking again gives the same file.
func TestBinaryCached(t *testing.T) {
	a, err := s3test.Binary()
	if err != nil {
		t.Fatal(err)
	}
	b, err := s3test.Binary()
	if err != nil || a != b {
		t.Fatalf("second Binary: %q %v, first %q", b, err, a)
	}
}
