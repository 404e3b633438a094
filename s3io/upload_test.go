package s3io_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	smithy "github.com/aws/smithy-go"

	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
)

// TestPutFragmentRabbitMQ uploads fragments cut from the real RabbitMQ directory (several
// spanning a segment roll, and one holding all 456 chunks over 7 segments), then GETs them
// back and compares them byte for byte with the segment files.
func TestPutFragmentRabbitMQ(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	st := newStore(t, srv.Config())
	dir, err := s3test.RabbitMQDir()
	if err != nil {
		t.Fatal(err)
	}
	chunks, err := s3test.ReadLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 456 {
		t.Fatalf("%d chunks in the RabbitMQ directory, want 456", len(chunks))
	}
	var trailers int64
	for _, c := range chunks {
		trailers += int64(c.Header.TrailerLen) + int64(c.Header.BloomSize)
	}
	frags := s3test.Describe(chunks, 1<<20)
	whole := s3test.Describe(chunks, 1<<40)[0]
	frags = append(frags, whole)
	spanning := 0
	for i, d := range frags {
		if len(d.Spans) > 1 {
			spanning++
		}
		key := keyFor("rabbitmq", i)
		info, err := st.PutFragment(context.Background(), key, dir, d)
		if err != nil {
			t.Fatalf("fragment %d (offsets %d-%d): %v", i, d.FirstOffset, d.NextOffset, err)
		}
		if info.ObjectSize != d.ObjectSize() || info.ChunkBytesRead != int64(d.Size) {
			t.Fatalf("fragment %d: PutInfo %+v, want size %d, %d chunk bytes read", i, info, d.ObjectSize(), d.Size)
		}
		checkStored(t, st, key, dir, d)
	}
	if spanning < 2 || len(whole.Spans) != 7 {
		t.Fatalf("%d fragments span segments and the whole log has %d spans; the test should cover rolls", spanning, len(whole.Spans))
	}
	// The whole-log upload read exactly the chunk bytes while streaming, plus the trailers
	// (RabbitMQ 3.10 writes tracking trailers, no bloom filters) for the CRC.
	info, err := st.PutFragment(context.Background(), keyFor("rabbitmq-again", 0), dir, whole)
	if err != nil {
		t.Fatal(err)
	}
	if info.CRCBytesRead != trailers || trailers == 0 {
		t.Fatalf("CRC pass read %d bytes, trailers and blooms hold %d", info.CRCBytesRead, trailers)
	}
}

// TestPutFragmentGenerated uploads fragments of generated logs of several shapes and reads
// them back whole, by index and by range.
func TestPutFragmentGenerated(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	st := newStore(t, srv.Config())
	specs := map[string]struct {
		spec   s3test.LogSpec
		target int64
	}{
		"small chunks, many rolls": {s3test.LogSpec{Seed: 1, Chunks: 300, MinData: 0, MaxData: 300, MaxTrailer: 60, SegmentBytes: 4000, TrackingEach: 17}, 10_000},
		"bloom filters":            {s3test.LogSpec{Seed: 2, Chunks: 50, MinData: 100, MaxData: 2000, MaxTrailer: 10, BloomSize: 255, SegmentBytes: 20_000}, 30_000},
		"big chunks":               {s3test.LogSpec{Seed: 3, Chunks: 12, MinData: 200_000, MaxData: 700_000, SegmentBytes: 2 << 20, FirstChunkID: 1 << 40, Epoch: 7}, 3 << 20},
		"one chunk per fragment":   {s3test.LogSpec{Seed: 4, Chunks: 5, MinData: 10, MaxData: 10}, 1},
	}
	for name, tc := range specs {
		t.Run(name, func(t *testing.T) {
			dir, frags := genLog(t, tc.spec, tc.target)
			for i, d := range frags {
				key := keyFor(name, i)
				if _, err := st.PutFragment(context.Background(), key, dir, d); err != nil {
					t.Fatalf("fragment %d: %v", i, err)
				}
				checkStored(t, st, key, dir, d)
				recs, err := st.ReadFragmentIndex(context.Background(), key, 0, d.Size)
				if err != nil {
					t.Fatalf("index of fragment %d: %v", i, err)
				}
				if len(recs) != len(d.Chunks) {
					t.Fatalf("index of fragment %d: %d records, want %d", i, len(recs), len(d.Chunks))
				}
				half := len(recs) / 2
				off := int64(recs[half].Position)
				rng, err := st.ReadFragmentRange(context.Background(), key, off, fragment.ObjectHeaderSize+int64(d.Size)-off)
				if err != nil {
					t.Fatalf("range of fragment %d from record %d: %v", i, half, err)
				}
				if len(rng.Chunks) != len(d.Chunks)-half || rng.Chunks[0].Header != d.Chunks[half].Header {
					t.Fatalf("range of fragment %d: %d chunks from %+v", i, len(rng.Chunks), rng.Chunks[0].Header)
				}
			}
		})
	}
	// A range that does not start at a chunk header is refused as corrupt.
	dir, frags := genLog(t, s3test.LogSpec{Seed: 5, Chunks: 4, MinData: 100, MaxData: 100}, 1<<20)
	key := keyFor("misaligned", 0)
	if _, err := st.PutFragment(context.Background(), key, dir, frags[0]); err != nil {
		t.Fatal(err)
	}
	_, err := st.ReadFragmentRange(context.Background(), key, fragment.ObjectHeaderSize+1, 100)
	if !errors.Is(err, fragment.ErrCorrupt) {
		t.Fatalf("misaligned range: %v, want ErrCorrupt", err)
	}
	wantClass(t, err, s3io.ClassNonTransient)
}

// TestPutFragmentTLS uploads and reads back over https, the client trusting the test CA.
func TestPutFragmentTLS(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{TLS: true})
	st := newStore(t, srv.Config())
	dir, frags := genLog(t, s3test.LogSpec{Seed: 6, Chunks: 40, MinData: 1000, MaxData: 50_000, MaxTrailer: 30, SegmentBytes: 300_000}, 500_000)
	for i, d := range frags {
		key := keyFor("tls", i)
		if _, err := st.PutFragment(context.Background(), key, dir, d); err != nil {
			t.Fatalf("fragment %d over TLS: %v", i, err)
		}
		checkStored(t, st, key, dir, d)
	}
	// A client that does not trust the CA fails, and not in a way worth retrying soon.
	cfg := srv.Config()
	cfg.CAFile = ""
	untrusting := newStore(t, cfg)
	err := untrusting.PutObject(context.Background(), "x", []byte("x"))
	wantClass(t, err, s3io.ClassNonTransient)
}

// TestCABundleEnvironment is the AWS_CA_BUNDLE trap: with the variable set, the SDK's
// config loader must be given a client it can add the bundle to.
func TestCABundleEnvironment(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{TLS: true})
	t.Setenv("AWS_CA_BUNDLE", srv.CAFile)
	cfg := srv.Config()
	cfg.CAFile = ""
	st := newStore(t, cfg)
	if err := st.PutObject(context.Background(), "bundle", []byte("trusted through AWS_CA_BUNDLE")); err != nil {
		t.Fatalf("put with AWS_CA_BUNDLE: %v", err)
	}
}

// flipByte flips one bit of a file in place (the open handles of an upload see it).
func flipByte(t testing.TB, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptionAfterCRC corrupts a segment after the object CRC was computed and before
// the bytes stream. A data byte is caught while streaming (the chunk's CRC no longer
// matches its header, the request is aborted); a trailer byte, which no header checksums,
// reaches the server, whose CRC-32 check refuses the object (BadDigest). Both are
// non-transient. The refused whole body leaves nothing in the bucket; an aborted request
// leaves no whole object (a server may keep what it received: checkNoWholeObject).
func TestCorruptionAfterCRC(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	st := newStore(t, srv.Config())
	spec := s3test.LogSpec{Seed: 7, Chunks: 60, MinData: 5000, MaxData: 90_000, MaxTrailer: 40, SegmentBytes: 1 << 20}

	t.Run("data byte", func(t *testing.T) {
		dir, frags := genLog(t, spec, 1<<40)
		d := frags[0]
		c := d.Chunks[len(d.Chunks)*2/3]
		key := keyFor("corrupt-data", 0)
		_, err := s3io.PutFragmentPaused(st, context.Background(), key, dir, d, func() {
			flipByte(t, filepath.Join(dir, c.Location.Segment), c.Location.Position+chunk.HeaderSize+int64(c.Header.DataLen)/2)
		})
		wantClass(t, err, s3io.ClassNonTransient)
		var ce *fragment.ChunkCheckError
		if !errors.As(err, &ce) || ce.ChunkID != c.Header.ChunkID || ce.Segment != c.Location.Segment {
			t.Fatalf("error %v does not name chunk %d of %s", err, c.Header.ChunkID, c.Location.Segment)
		}
		// Said once: the transport's error, which wraps the body's, is not appended to it.
		if n := strings.Count(err.Error(), ce.Error()); n != 1 {
			t.Errorf("error names the corrupt chunk %d times, want once: %v", n, err)
		}
		checkNoWholeObject(t, st, key, d.ObjectSize())
	})

	t.Run("trailer byte", func(t *testing.T) {
		dir, frags := genLog(t, spec, 1<<40)
		d := frags[0]
		var c fragment.Chunk
		for _, c = range d.Chunks[len(d.Chunks)/2:] {
			if c.Header.TrailerLen > 0 {
				break
			}
		}
		key := keyFor("corrupt-trailer", 0)
		_, err := s3io.PutFragmentPaused(st, context.Background(), key, dir, d, func() {
			flipByte(t, filepath.Join(dir, c.Location.Segment), c.Location.Position+c.Location.Size-1)
		})
		wantClass(t, err, s3io.ClassNonTransient)
		var apiErr smithy.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "BadDigest" {
			t.Fatalf("error %v is not the server's BadDigest", err)
		}
		checkAbsent(t, st, key)
	})

	t.Run("data byte before the upload", func(t *testing.T) {
		dir, frags := genLog(t, spec, 1<<40)
		d := frags[0]
		c := d.Chunks[0]
		flipByte(t, filepath.Join(dir, c.Location.Segment), c.Location.Position+chunk.HeaderSize)
		key := keyFor("corrupt-early", 0)
		_, err := st.PutFragment(context.Background(), key, dir, d)
		wantClass(t, err, s3io.ClassNonTransient)
		checkNoWholeObject(t, st, key, d.ObjectSize())
	})

	t.Run("header differs from the drained one", func(t *testing.T) {
		dir, frags := genLog(t, spec, 1<<40)
		d := frags[0]
		d.Chunks = append([]fragment.Chunk(nil), d.Chunks...)
		d.Chunks[3].Header.Epoch++ // the drain saw another chunk than the file now holds
		key := keyFor("corrupt-header", 0)
		_, err := st.PutFragment(context.Background(), key, dir, d)
		var ce *fragment.ChunkCheckError
		if !errors.As(err, &ce) || ce.ChunkID != d.Chunks[3].Header.ChunkID {
			t.Fatalf("error %v does not name chunk %d", err, d.Chunks[3].Header.ChunkID)
		}
		checkNoWholeObject(t, st, key, d.ObjectSize())
	})
}

// TestSegmentGone: a segment deleted before the upload opens it is ClassSegmentGone, wraps
// segments.ErrSegmentGone and is no S3 error (no request is made); one cut short likewise.
// A segment deleted after the upload opened it is still read whole through the open handle.
func TestSegmentGone(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	st := newStore(t, srv.Config())
	spec := s3test.LogSpec{Seed: 8, Chunks: 30, MinData: 1000, MaxData: 5000, MaxTrailer: 20, SegmentBytes: 30_000}

	dir, frags := genLog(t, spec, 1<<40)
	d := frags[0]
	if len(d.Spans) < 3 {
		t.Fatalf("fixture has %d spans, want 3 or more", len(d.Spans))
	}
	before := requests(st, s3io.OpPutFragment)
	if err := os.Remove(filepath.Join(dir, d.Spans[1].Segment)); err != nil {
		t.Fatal(err)
	}
	_, err := st.PutFragment(context.Background(), keyFor("gone", 0), dir, d)
	wantClass(t, err, s3io.ClassSegmentGone)
	var apiErr smithy.APIError
	if !errors.Is(err, segments.ErrSegmentGone) || errors.As(err, &apiErr) {
		t.Fatalf("error %v: want segments.ErrSegmentGone and no S3 error", err)
	}
	if n := requests(st, s3io.OpPutFragment); n != before {
		t.Fatalf("%d S3 requests for an upload whose segment is gone", n-before)
	}

	dir, frags = genLog(t, spec, 1<<40)
	d = frags[0]
	last := d.Spans[len(d.Spans)-1]
	if err := os.Truncate(filepath.Join(dir, last.Segment), last.End-1); err != nil {
		t.Fatal(err)
	}
	_, err = st.PutFragment(context.Background(), keyFor("truncated", 0), dir, d)
	wantClass(t, err, s3io.ClassSegmentGone)
	checkNoWholeObject(t, st, keyFor("truncated", 0), d.ObjectSize())

	dir, frags = genLog(t, spec, 1<<40)
	d = frags[0]
	key := keyFor("deleted-after-open", 0)
	want, err := s3test.ExpectedObject(dir, d)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s3io.PutFragmentPaused(st, context.Background(), key, dir, d, func() {
		for _, sp := range d.Spans {
			os.Remove(filepath.Join(dir, sp.Segment))
		}
	})
	if err != nil {
		t.Fatalf("upload of segments deleted after open: %v", err)
	}
	got, err := st.GetObject(context.Background(), key)
	if err != nil || string(got) != string(want) {
		t.Fatalf("object uploaded from deleted segments differs (err %v)", err)
	}
}

// TestBadDescription is refused before any I/O, as non-transient.
func TestBadDescription(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	st := newStore(t, srv.Config())
	dir, frags := genLog(t, s3test.LogSpec{Seed: 9, Chunks: 5, MinData: 10, MaxData: 100}, 1<<20)
	d := frags[0]
	d.Size++
	_, err := st.PutFragment(context.Background(), keyFor("bad", 0), dir, d)
	if !errors.Is(err, fragment.ErrBadDescription) {
		t.Fatalf("error %v, want ErrBadDescription", err)
	}
	wantClass(t, err, s3io.ClassNonTransient)
	if n := requests(st, s3io.OpPutFragment); n != 0 {
		t.Fatalf("%d requests for a bad description", n)
	}
}

// countingReaderAt counts bytes read, per segment and in total.
type countingReaderAt struct {
	r interface {
		ReadAt([]byte, int64) (int, error)
	}
	mu   *sync.Mutex
	read map[string]int64
	name string
}

func (c countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.mu.Lock()
	c.read[c.name] += int64(n)
	c.mu.Unlock()
	return n, err
}

// TestReadsOnce counts, through the files the store opens, that an upload reads the chunk
// region once plus the trailer bytes needed for the CRC, and nothing else.
func TestReadsOnce(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	st := newStore(t, srv.Config())
	var mu sync.Mutex
	read := map[string]int64{}
	s3io.WrapSegments(st, func(name string, r io.ReaderAt) io.ReaderAt {
		return countingReaderAt{r: r, mu: &mu, read: read, name: name}
	})
	dir, frags := genLog(t, s3test.LogSpec{Seed: 10, Chunks: 200, MinData: 100, MaxData: 20_000, MaxTrailer: 50, BloomSize: 8, SegmentBytes: 500_000}, 1<<40)
	d := frags[0]
	info, err := st.PutFragment(context.Background(), keyFor("count", 0), dir, d)
	if err != nil {
		t.Fatal(err)
	}
	var total, extra int64
	for _, n := range read {
		total += n
	}
	for _, c := range d.Chunks {
		extra += int64(c.Header.TrailerLen) + int64(c.Header.BloomSize)
	}
	if total != int64(d.Size)+extra || info.ChunkBytesRead != int64(d.Size) || info.CRCBytesRead != extra {
		t.Fatalf("read %d bytes (PutInfo: %d streaming + %d for the CRC), want %d + %d", total, info.ChunkBytesRead, info.CRCBytesRead, d.Size, extra)
	}
	t.Logf("read %d bytes for a %d-byte chunk region: %.4f per chunk byte, %.4f per uploaded byte",
		total, d.Size, float64(total)/float64(d.Size), float64(total)/float64(d.ObjectSize()))
}
