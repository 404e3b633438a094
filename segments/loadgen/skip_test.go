package loadgen

import (
	"bytes"
	"context"
	"testing"

	"github.com/streamtier/streamtier/segments"
)

// encode renders a spec as the bytes the log would store (id 0), to compare specs.
func encode(t *testing.T, spec segments.ChunkSpec) []byte {
	t.Helper()
	b, _, err := segments.EncodeChunk(nil, spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSkipResumesTheSameLoad: a generator that skips n chunks produces what a generator
// that returned them produces next, and SkipToOffset finds the chunk boundary of a log
// written by the same load.
func TestSkipResumesTheSameLoad(t *testing.T) {
	a, err := New(testConfig)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := New(testConfig)
	for range 137 {
		a.Next()
	}
	b.Skip(137)
	for i := range 20 {
		if x, y := encode(t, a.Next()), encode(t, b.Next()); !bytes.Equal(x, y) {
			t.Fatalf("chunk %d after the skip differs", i)
		}
	}

	dir := t.TempDir()
	l, err := segments.Open(dir, segments.Options{MaxSegmentBytes: 50_000})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	g, _ := New(testConfig)
	if _, err := Write(context.Background(), l, g, Limit{Chunks: 300}, WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	want := encode(t, g.Next())

	r, _ := New(testConfig)
	n, err := r.SkipToOffset(l.FirstOffset(), l.NextOffset())
	if err != nil || n != 300 {
		t.Fatalf("skipped %d chunks, %v; want 300", n, err)
	}
	if got := encode(t, r.Next()); !bytes.Equal(got, want) {
		t.Fatal("the chunk after SkipToOffset is not the one the load writes next")
	}

	other := testConfig
	other.Seed++
	o, _ := New(other)
	if _, err := o.SkipToOffset(0, l.NextOffset()); err == nil {
		// A different seed may by chance land on the same boundary; then the next chunk
		// still differs, which is what resuming would show.
		if bytes.Equal(encode(t, o.Next()), want) {
			t.Fatal("another seed resumed with the same chunk")
		}
	}
	if _, err := r.SkipToOffset(10, 5); err == nil {
		t.Fatal("skip below the first offset accepted")
	}
}
