package segments

import (
	"errors"
	"strings"
	"testing"

	"github.com/streamtier/streamtier/chunk"
)

// BenchmarkReaderNext measures the drain: headers read per second by the data reader over
// a committed log of small chunks (one 16-byte record each, 68 bytes on disk).
func BenchmarkReaderNext(b *testing.B) {
	const chunks = 200_000
	l := mustOpen(b, b.TempDir(), Options{MaxSegmentBytes: 4 << 20})
	spec := userChunk(1, 1, strings.Repeat("r", 16))
	var last chunk.Header
	for range chunks {
		h, _, err := l.Append(spec)
		if err != nil {
			b.Fatal(err)
		}
		last = h
	}
	if err := l.SetCommitted(last.ChunkID); err != nil {
		b.Fatal(err)
	}
	r, err := l.NewReader(0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		_, _, err := r.Next()
		if errors.Is(err, ErrEndOfStream) {
			r.Close()
			if r, err = l.NewReader(0); err != nil {
				b.Fatal(err)
			}
			_, _, err = r.Next()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "headers/s")
	r.Close()
}

// BenchmarkAppend measures the writer: appends per second of small chunks and of 64 KiB
// chunks (bytes/s), each a segment write and an index write, no fsync.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{100, 64 << 10} {
		b.Run(map[int]string{100: "100B", 64 << 10: "64KiB"}[size], func(b *testing.B) {
			l := mustOpen(b, b.TempDir(), Options{})
			spec := userChunk(1, 1, strings.Repeat("a", size))
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, _, err := l.Append(spec); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
		})
	}
}

// BenchmarkHeaderPread48 is the alternative the reader's read-ahead avoids: one 48-byte
// pread per header over the same kind of log. Compare its headers/s with BenchmarkReaderNext.
func BenchmarkHeaderPread48(b *testing.B) {
	const chunks = 50_000
	l := mustOpen(b, b.TempDir(), Options{})
	spec := userChunk(1, 1, strings.Repeat("r", 16))
	for range chunks {
		if _, _, err := l.Append(spec); err != nil {
			b.Fatal(err)
		}
	}
	f, err := OpenSegment(l.Dir(), SegmentName(0))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var hb [chunk.HeaderSize]byte
	pos := int64(FileHeaderSize)
	b.ResetTimer()
	for range b.N {
		if _, err := f.ReadAt(hb[:], pos); err != nil {
			pos = FileHeaderSize
			continue
		}
		h, err := chunk.ParseHeader(hb[:])
		if err != nil {
			b.Fatal(err)
		}
		pos += h.Size()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "headers/s")
}
