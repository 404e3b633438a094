package s3io

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"sync"
	"time"
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
// it in memory; crc is the CRC-32 (IEEE) of the whole object, known beforehand. It is sent
// for the server to verify, and checked here too as the body passes: a body whose CRC-32
// differs fails (ErrBodyMismatch) before its last bytes reach the transport, so the request
// is aborted even on a server that ignores the header. A body that ends early or fails
// fails the PUT. It honours ctx and the transfer timeout.
//
// After a failure no whole object is stored under key, but a server may keep what it
// received of the aborted request, even after PutObjectStream returned: the caller puts
// under a key nobody else writes, deletes it after a failure (a late partial object is
// garbage no manifest names, for gc) and retries under a new key, never the same one.
func (s *Store) PutObjectStream(ctx context.Context, key string, body io.Reader, size int64, crc uint32) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if size <= 0 {
		return fmt.Errorf("%w: object of %d bytes for s3://%s/%s", ErrInvalidArgument, size, s.cfg.Bucket, key)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.TransferTimeout)
	defer cancel()
	b := &countedBody{r: body, key: s.cfg.Bucket + "/" + key, size: size, crc: crc, sum: crc32.NewIEEE()}
	start := time.Now()
	out, err := s.client.PutObject(ctx, s.putInput(key, b, size, crc), unsignedPayload) // b is not seekable: the SDK cannot read it twice
	sent, bodyErr := b.state()
	err = streamedOutcome(out, err, sent == size, sent, size, crc, bodyErr)
	s.metrics.observe(OpPutObject, key, time.Since(start), sent, err)
	if err != nil {
		return fmt.Errorf("put s3://%s/%s (%d bytes, streamed): %w", s.cfg.Bucket, key, size, err)
	}
	return nil
}

// ErrBodyMismatch marks a streamed PUT body whose bytes do not match the CRC-32 (or length)
// declared for it: bytes changed between the read that computed the CRC and the one that
// streamed them (in transit, or a server bug). No whole object was stored (a server may keep
// a partial one of the aborted request under that key, at any time: see PutObjectStream);
// it is worth retrying under a new key.
var ErrBodyMismatch = errors.New("streamed body does not match its declared CRC-32")

// countedBody counts what the transport read from a PUT body, computes its CRC-32 as it
// passes and keeps its first error other than io.EOF; the transport reads from its own
// goroutine. The read that would complete size bytes is checked against crc first: on a
// mismatch it hands over none of its bytes and fails, so the server never sees a whole body.
// An error sticks: a later read returns it again, so a retried send cannot complete it.
type countedBody struct {
	mu   sync.Mutex
	r    io.Reader
	key  string
	size int64
	crc  uint32
	sum  hash.Hash32
	sent int64
	err  error
}

func (b *countedBody) Read(p []byte) (int, error) {
	// r, sum and the bytes in flight belong to the transport's one reading goroutine; the
	// lock guards sent and err, which state reads, and is not held across the read.
	b.mu.Lock()
	sent, stuck := b.sent, b.err
	b.mu.Unlock()
	if stuck != nil {
		return 0, stuck
	}
	if left := b.size - sent; int64(len(p)) > left {
		p = p[:left] // never past the declared size: the check below sees every byte sent
	}
	if len(p) == 0 {
		return 0, io.EOF
	}
	n, err := b.r.Read(p)
	b.sum.Write(p[:n])
	if sent+int64(n) == b.size {
		if got := b.sum.Sum32(); got != b.crc {
			n, err = 0, fmt.Errorf("%w: s3://%s: CRC-32 %s of the %d bytes streamed, %s declared (withheld the last %d bytes)",
				ErrBodyMismatch, b.key, crcHeader(got), b.size, crcHeader(b.crc), n)
		}
	} else if errors.Is(err, io.EOF) {
		err = fmt.Errorf("%w: s3://%s: body ended after %d of %d bytes", ErrBodyMismatch, b.key, sent+int64(n), b.size)
	}
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
