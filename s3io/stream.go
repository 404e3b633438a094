package s3io

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// GetRangeStream opens n bytes of an object from offset off as a stream, for a range too
// large to hold in memory (a fragment's chunk region). The stream ends with
// io.ErrUnexpectedEOF when the server sends fewer bytes than asked. The request honours ctx
// and the transfer timeout, which run until Close; Close must be called.
func (s *Store) GetRangeStream(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	in, rng, err := s.rangeInput(key, off, n)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.TransferTimeout)
	start := time.Now()
	out, err := s.client.GetObject(ctx, in)
	if err != nil {
		cancel()
		s.metrics.observe(OpGetRange, key, time.Since(start), 0, err)
		return nil, fmt.Errorf("get s3://%s/%s range %s: %w", s.cfg.Bucket, key, rng, err)
	}
	return &rangeStream{s: s, key: key, rng: rng, body: out.Body, left: n, cancel: cancel, start: start}, nil
}

// rangeStream is a ranged GET's body, counted against the range asked for.
type rangeStream struct {
	s      *Store
	key    string
	rng    string
	body   io.ReadCloser
	left   int64
	read   int64
	cancel context.CancelFunc
	start  time.Time
	err    error
	closed bool
}

func (r *rangeStream) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.body.Read(p)
	r.left -= int64(n)
	r.read += int64(n)
	switch {
	case errors.Is(err, io.EOF) && r.left > 0:
		err = io.ErrUnexpectedEOF // announced bytes that never came: a cut body
	case errors.Is(err, io.EOF):
		err = nil
	}
	if err != nil {
		r.err = fmt.Errorf("get s3://%s/%s range %s: read body (%d bytes, %d missing): %w", r.s.cfg.Bucket, r.key, r.rng, r.read, r.left, err)
		return n, r.err
	}
	return n, nil
}

// Close ends the request and records it.
func (r *rangeStream) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	err := r.body.Close()
	r.cancel()
	opErr := r.err
	if opErr == nil && r.left > 0 {
		opErr = fmt.Errorf("closed with %d of the range unread", r.left)
	}
	r.s.metrics.observe(OpGetRange, r.key, time.Since(r.start), r.read, opErr)
	return err
}

// PutObjectStream stores an object of size bytes read from body in one PUT, without holding
// it in memory; crc is the CRC-32 of the whole object, known beforehand, which the server
// verifies, so a body that differs from what crc was computed over is refused. A body that
// ends early or fails fails the PUT. It honours ctx and the transfer timeout.
func (s *Store) PutObjectStream(ctx context.Context, key string, body io.Reader, size int64, crc uint32) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if size <= 0 {
		return fmt.Errorf("%w: object of %d bytes for s3://%s/%s", ErrInvalidArgument, size, s.cfg.Bucket, key)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.TransferTimeout)
	defer cancel()
	b := &countedBody{r: body}
	start := time.Now()
	out, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(s.cfg.Bucket),
		Key:           aws.String(key),
		Body:          b, // not seekable: the SDK cannot read it twice
		ContentLength: aws.Int64(size),
		ChecksumCRC32: aws.String(crcHeader(crc)),

		ServerSideEncryption: s.cfg.sse(),
		SSEKMSKeyId:          s.cfg.kmsKey(),
		ExpectedBucketOwner:  s.cfg.owner(),
	}, unsignedPayload)
	sent, bodyErr := b.state()
	if err == nil && sent != size {
		err = fmt.Errorf("server answered after %d of %d body bytes", sent, size)
	}
	if err == nil && out.ChecksumCRC32 != nil && *out.ChecksumCRC32 != crcHeader(crc) {
		err = fmt.Errorf("server stored CRC-32 %s, sent %s", *out.ChecksumCRC32, crcHeader(crc))
	}
	if bodyErr != nil {
		err = fmt.Errorf("%w (request: %v)", bodyErr, err) // the body's failure is the cause
	}
	s.metrics.observe(OpPutObject, key, time.Since(start), sent, err)
	if err != nil {
		return fmt.Errorf("put s3://%s/%s (%d bytes, streamed): %w", s.cfg.Bucket, key, size, err)
	}
	return nil
}

// countedBody counts what the transport read from a PUT body and keeps its first error
// other than io.EOF; the transport reads from its own goroutine.
type countedBody struct {
	mu   sync.Mutex
	r    io.Reader
	sent int64
	err  error
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sent += int64(n)
	if err != nil && !errors.Is(err, io.EOF) && b.err == nil {
		b.err = err
	}
	return n, err
}

func (b *countedBody) state() (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sent, b.err
}
