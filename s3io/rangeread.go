package s3io

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// GetRangePartial reads up to n bytes of an object from offset off into buf (grown when
// too small) and returns what arrived, even when the body fails mid-way: then it returns
// the bytes received so far with the error (a reset or a truncated body is
// io.ErrUnexpectedEOF or a network error, ClassRetriable), so that the caller asks again
// only for the rest. A server that answers fewer bytes than asked without an error (the
// object is shorter) returns them and no error: the caller decides. It honours ctx and the
// transfer timeout.
func (s *Store) GetRangePartial(ctx context.Context, key string, off, n int64, buf []byte) ([]byte, error) {
	in, rng, err := s.rangeInput(key, off, n)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.TransferTimeout)
	defer cancel()
	start := time.Now()
	out, err := s.client.GetObject(ctx, in)
	var b []byte
	if err == nil {
		want := n
		if cl := aws.ToInt64(out.ContentLength); cl >= 0 && cl < n {
			want = cl
		}
		if int64(cap(buf)) < want {
			buf = make([]byte, want)
		}
		b = buf[:want]
		var k int
		k, err = io.ReadFull(out.Body, b)
		out.Body.Close()
		b = b[:k]
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // announced bytes that never came: a cut body
		}
		if err != nil {
			err = fmt.Errorf("read body (%d of %d bytes): %w", k, want, err)
		}
	}
	s.metrics.observe(OpGetRange, key, time.Since(start), int64(len(b)), err)
	if err != nil {
		return b, fmt.Errorf("get s3://%s/%s range %s: %w", s.cfg.Bucket, key, rng, err)
	}
	return b, nil
}

// rangeInput validates a range of n bytes at off of key and returns its GET request and
// Range header.
func (s *Store) rangeInput(key string, off, n int64) (*s3.GetObjectInput, string, error) {
	if off < 0 || n <= 0 {
		return nil, "", fmt.Errorf("%w: range of %d bytes at %d of s3://%s/%s", ErrInvalidArgument, n, off, s.cfg.Bucket, key)
	}
	if err := checkKey(key); err != nil {
		return nil, "", err
	}
	rng := fmt.Sprintf("bytes=%d-%d", off, off+n-1)
	return &s3.GetObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(key), Range: aws.String(rng), ExpectedBucketOwner: s.cfg.owner()}, rng, nil
}
