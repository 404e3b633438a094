package s3io

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/fragment"
)

// FragmentObject is a whole fragment object read back and verified.
type FragmentObject struct {
	Key    string
	Bytes  []byte          // the object, header to index
	Layout fragment.Layout // chunk region size S and chunks, every data CRC checked
}

// ReadFragment GETs a whole fragment object and verifies it: header, chunk walk, index
// records against the chunks, every chunk's data CRC. A corrupt object is
// ClassNonTransient (fragment.ErrCorrupt). It holds the object in memory: for verification
// and tests; consumers read ranges.
func (s *Store) ReadFragment(ctx context.Context, key string) (FragmentObject, error) {
	b, err := s.get(ctx, OpGetObject, s.cfg.TransferTimeout, key, nil)
	if err != nil {
		return FragmentObject{}, err
	}
	layout, err := fragment.ParseObject(b)
	if err != nil {
		return FragmentObject{}, fmt.Errorf("fragment s3://%s/%s: %w", s.cfg.Bucket, key, err)
	}
	return FragmentObject{Key: key, Bytes: b, Layout: layout}, nil
}

// FragmentRange is a run of whole chunks read from a fragment object and verified.
type FragmentRange struct {
	Key    string
	Offset int64                  // object position of the first chunk header
	Bytes  []byte                 // the chunks, byte for byte
	Chunks []fragment.LayoutChunk // positions are object positions
}

// ReadFragmentRange GETs n bytes at object position off, which must start at a chunk
// header and end at a chunk boundary (positions come from the index), and verifies each
// chunk's header, data CRC and id continuity.
func (s *Store) ReadFragmentRange(ctx context.Context, key string, off, n int64) (FragmentRange, error) {
	if off < fragment.ObjectHeaderSize || n <= 0 {
		return FragmentRange{}, fmt.Errorf("%w: fragment range of %d bytes at %d of s3://%s/%s", ErrInvalidArgument, n, off, s.cfg.Bucket, key)
	}
	rng := fmt.Sprintf("bytes=%d-%d", off, off+n-1)
	b, err := s.get(ctx, OpGetRange, s.cfg.TransferTimeout, key, &rng)
	if err != nil {
		return FragmentRange{}, err
	}
	if int64(len(b)) != n {
		return FragmentRange{}, fmt.Errorf("%w: fragment s3://%s/%s range %s: got %d bytes", ErrInvalidArgument, s.cfg.Bucket, key, rng, len(b))
	}
	chunks, err := fragment.WalkChunks(b, off)
	if err != nil {
		return FragmentRange{}, fmt.Errorf("fragment s3://%s/%s: %w", s.cfg.Bucket, key, err)
	}
	return FragmentRange{Key: key, Offset: off, Bytes: b, Chunks: chunks}, nil
}

// ReadFragmentIndex GETs and validates the index of a fragment object whose chunk region
// holds size bytes (the manifest entry's S). objectLen is the object's length; 0 reads
// the index without knowing it: one GET from the end of the chunk region to the end of
// the object, whose Content-Range says the object's length (no HEAD first).
func (s *Store) ReadFragmentIndex(ctx context.Context, key string, objectLen int64, size uint64) ([]fragment.IndexRecord, error) {
	if objectLen == 0 {
		return s.readIndexTail(ctx, key, size)
	}
	idxLen := objectLen - fragment.ObjectHeaderSize - int64(size)
	if idxLen <= 0 || idxLen%fragment.IndexRecordSize != 0 {
		return nil, fmt.Errorf("fragment s3://%s/%s: %w: object of %d bytes cannot hold a chunk region of %d and an index", s.cfg.Bucket, key, fragment.ErrCorrupt, objectLen, size)
	}
	b, err := s.GetRange(ctx, key, objectLen-idxLen, idxLen)
	if err != nil {
		return nil, err
	}
	recs, err := fragment.ParseIndex(b, objectLen, size)
	if err != nil {
		return nil, fmt.Errorf("fragment s3://%s/%s: %w", s.cfg.Bucket, key, err)
	}
	return recs, nil
}

// readIndexTail GETs bytes=8+size- of key: the index, if the object is what the manifest
// says. An object no longer than its chunk region (416), a tail longer than a region of
// size bytes can index (one record per 48-byte header at most: it is not read), or a
// Content-Range that disagrees with the bytes received is corrupt.
func (s *Store) readIndexTail(ctx context.Context, key string, size uint64) ([]fragment.IndexRecord, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if size == 0 || size > math.MaxInt64/2 {
		return nil, fmt.Errorf("%w: index of s3://%s/%s: chunk region of %d bytes", ErrInvalidArgument, s.cfg.Bucket, key, size)
	}
	from := fragment.ObjectHeaderSize + int64(size)
	most := int64(size) / chunk.HeaderSize * fragment.IndexRecordSize
	rng := fmt.Sprintf("bytes=%d-", from)
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("fragment s3://%s/%s: %w: %s", s.cfg.Bucket, key, fragment.ErrCorrupt, fmt.Sprintf(format, args...))
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	start := time.Now()
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.cfg.Bucket), Key: aws.String(key), Range: aws.String(rng), ExpectedBucketOwner: s.cfg.owner(),
	})
	var b []byte
	tooLong := false
	if err == nil {
		switch n := aws.ToInt64(out.ContentLength); {
		case n > most:
			out.Body.Close()
			tooLong = true
		case n < 0: // no length announced: read no more than an index can be
			b, err = io.ReadAll(io.LimitReader(out.Body, most+1))
			out.Body.Close()
			tooLong = int64(len(b)) > most
		default:
			b, err = readBody(out.Body, n)
		}
	}
	s.metrics.observe(OpGetRange, key, time.Since(start), int64(len(b)), err)
	if tooLong {
		return nil, corrupt("more bytes after its chunk region of %d than a region that size can index (%d)", size, most)
	}
	if responseStatus(err) == http.StatusRequestedRangeNotSatisfiable {
		return nil, corrupt("the object ends within its chunk region of %d bytes (no index): %v", size, err)
	}
	if err != nil {
		return nil, fmt.Errorf("get s3://%s/%s range %s: %w", s.cfg.Bucket, key, rng, err)
	}
	objectLen := from + int64(len(b))
	if total, ok := contentRangeTotal(aws.ToString(out.ContentRange)); ok && total != objectLen {
		return nil, corrupt("%d index bytes from %d, but the object is %d bytes", len(b), from, total)
	}
	recs, err := fragment.ParseIndex(b, objectLen, size)
	if err != nil {
		return nil, fmt.Errorf("fragment s3://%s/%s: %w", s.cfg.Bucket, key, err)
	}
	return recs, nil
}

// contentRangeTotal is the complete length a Content-Range header ("bytes 10-19/20") gives,
// if it gives one.
func contentRangeTotal(h string) (int64, bool) {
	i := strings.LastIndexByte(h, '/')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(h[i+1:], 10, 64)
	return n, err == nil
}
