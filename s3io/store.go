// Package s3io is the object store of the remote tier: one Store wraps an aws-sdk-go-v2 S3
// client and offers what the system needs (a streaming fragment PUT with a server-verified
// CRC-32, small object PUT/GET, ranged GET, HEAD, batched delete, paginated list), classifies
// every error in one place (Classify) and counts requests per operation. It never retries:
// the SDK's retryer is disabled and the upload core decides what to do with each class.
package s3io

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/logging"
	"github.com/aws/smithy-go/middleware"

	"github.com/streamtier/streamtier/segments"
)

// ErrInvalidArgument marks a call this package refuses before (or instead of) a request: an
// empty key, a negative range, a range the object cannot satisfy.
var ErrInvalidArgument = errors.New("invalid argument")

// deleteBatch is the most keys one DeleteObjects request may carry.
const deleteBatch = 1000

// Store is the object store of one bucket. It is safe for concurrent use.
type Store struct {
	cfg     Config
	client  *s3.Client
	metrics *Metrics

	// openSegment opens a segment file for ranged reads; tests wrap it to count bytes.
	openSegment func(dir, name string) (segmentFile, error)
}

// segmentFile is what an upload needs of an open segment.
type segmentFile interface {
	io.ReaderAt
	io.Closer
}

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key          string
	Size         int64
	ETag         string
	LastModified time.Time
}

// NewStore validates c and builds the S3 client. The HTTP client is the SDK's buildable one,
// so that AWS_CA_BUNDLE (or CAFile) can be applied to it; the SDK's retryer is a no-op.
func NewStore(ctx context.Context, c Config) (*Store, error) { return newStore(ctx, c) }

// newStore is NewStore with extra middleware on every request (tests record requests).
func newStore(ctx context.Context, c Config, apiOptions ...func(*middleware.Stack) error) (*Store, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("s3 config: %w", err)
	}
	c = c.withDefaults()
	httpClient := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		// Larger socket writes than the 4 KiB default: fewer syscalls per fragment.
		tr.WriteBufferSize = 64 << 10
		tr.ReadBufferSize = 64 << 10
		// One endpoint: the pool is sized to the node's bound on concurrent uploads (plus
		// small requests), so that neither connections churn (the SDK keeps 10 idle per
		// host) nor descriptors pile up beyond the bound.
		tr.MaxConnsPerHost = c.MaxConns
		tr.MaxIdleConnsPerHost = c.MaxConns
		tr.MaxIdleConns = c.MaxConns
		tr.DisableKeepAlives = c.DisableKeepAlives
	})
	opts := []func(*config.LoadOptions) error{
		config.WithRegion(c.Region),
		config.WithHTTPClient(httpClient),
		config.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }),
		config.WithLogger(logging.Nop{}),
	}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("s3 CA file: %w", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("s3 CA file %s: no PEM certificate in it", c.CAFile)
		}
		opts = append(opts, config.WithCustomCABundle(bytes.NewReader(pem)))
	}
	if c.AccessKey != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(c.AccessKey, c.SecretKey, c.SessionToken)))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3 client config: %w", err)
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		o.UsePathStyle = c.PathStyle
		o.Retryer = aws.NopRetryer{}
		o.DisableLogOutputChecksumValidationSkipped = true
		o.APIOptions = append(o.APIOptions, apiOptions...)
	})
	return &Store{
		cfg:     c,
		client:  client,
		metrics: &Metrics{streams: streamTally{keyPrefix: c.KeyPrefix}},
		openSegment: func(dir, name string) (segmentFile, error) {
			return segments.OpenSegment(dir, name)
		},
	}, nil
}

// Bucket is the bucket this store works in.
func (s *Store) Bucket() string { return s.cfg.Bucket }

// Metrics exposes the store's request counters and latency histograms.
func (s *Store) Metrics() *Metrics { return s.metrics }

// TransferTimeout is the bound on one fragment PUT or whole-fragment GET (defaults applied).
func (s *Store) TransferTimeout() time.Duration { return s.cfg.TransferTimeout }

// unsignedPayload makes the SigV4 signature cover the headers only (UNSIGNED-PAYLOAD) so the
// SDK never reads a body to hash it; integrity comes from the CRC-32 header instead.
func unsignedPayload(o *s3.Options) {
	o.APIOptions = append(o.APIOptions, v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware)
}

// crcHeader is the x-amz-checksum-crc32 value: base64 of the big-endian CRC.
func crcHeader(crc uint32) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], crc)
	return base64.StdEncoding.EncodeToString(b[:])
}

func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty object key", ErrInvalidArgument)
	}
	return nil
}

// putInput is the PUT of size bytes of body, whose CRC-32 (IEEE) is crc, under key, with the
// bucket's encryption and expected owner.
func (s *Store) putInput(key string, body io.Reader, size int64, crc uint32) *s3.PutObjectInput {
	return &s3.PutObjectInput{
		Bucket:        aws.String(s.cfg.Bucket),
		Key:           aws.String(key),
		Body:          body,
		ContentLength: aws.Int64(size),
		ChecksumCRC32: aws.String(crcHeader(crc)),

		ServerSideEncryption: s.cfg.sse(),
		SSEKMSKeyId:          s.cfg.kmsKey(),
		ExpectedBucketOwner:  s.cfg.owner(),
	}
}

// streamedOutcome judges the answer (out, err) to a PUT whose body is read as it is sent:
// a server that answered before the whole body was handed over (complete false, sent
// bytes of size), or that stored another CRC-32 than crc, fails it; a body that failed on
// its own (bodyErr: a corrupt chunk, a changed read) is the cause, whatever the transport
// made of the aborted request.
func streamedOutcome(out *s3.PutObjectOutput, err error, complete bool, sent, size int64, crc uint32, bodyErr error) error {
	if err == nil && !complete {
		err = fmt.Errorf("server answered after %d of %d body bytes", sent, size)
	}
	if err == nil && out.ChecksumCRC32 != nil && *out.ChecksumCRC32 != crcHeader(crc) {
		err = fmt.Errorf("server stored CRC-32 %s, sent %s", *out.ChecksumCRC32, crcHeader(crc))
	}
	if bodyErr != nil {
		if errors.Is(err, bodyErr) {
			// The transport failed because the body refused to go on (a corrupt local chunk,
			// a failed read): the body's error says why, and the transport's repeats it.
			return fmt.Errorf("%w (the request was aborted)", bodyErr)
		}
		err = fmt.Errorf("%w (request: %v)", bodyErr, err)
	}
	return err
}

// PutObject stores a small object (root, group) from memory with its CRC-32, which the
// server verifies.
func (s *Store) PutObject(ctx context.Context, key string, body []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	start := time.Now()
	_, err := s.client.PutObject(ctx, s.putInput(key, bytes.NewReader(body), int64(len(body)), crc32.ChecksumIEEE(body)), unsignedPayload)
	s.metrics.observe(OpPutObject, key, time.Since(start), int64(len(body)), err)
	if err != nil {
		return fmt.Errorf("put s3://%s/%s: %w", s.cfg.Bucket, key, err)
	}
	return nil
}

// GetObject reads a whole (small) object into memory.
func (s *Store) GetObject(ctx context.Context, key string) ([]byte, error) {
	return s.get(ctx, OpGetObject, s.cfg.RequestTimeout, key, nil)
}

// GetRange reads n bytes of an object from offset off. A range the object cannot fully
// satisfy is an error (ErrInvalidArgument when the server returned fewer bytes).
func (s *Store) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if off < 0 || n <= 0 {
		return nil, fmt.Errorf("%w: range of %d bytes at %d of s3://%s/%s", ErrInvalidArgument, n, off, s.cfg.Bucket, key)
	}
	rng := fmt.Sprintf("bytes=%d-%d", off, off+n-1)
	b, err := s.get(ctx, OpGetRange, s.cfg.RequestTimeout, key, &rng)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != n {
		return nil, fmt.Errorf("%w: range %s of s3://%s/%s: got %d bytes", ErrInvalidArgument, rng, s.cfg.Bucket, key, len(b))
	}
	return b, nil
}

func (s *Store) get(ctx context.Context, op Op, timeout time.Duration, key string, rng *string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket:              aws.String(s.cfg.Bucket),
		Key:                 aws.String(key),
		Range:               rng,
		ExpectedBucketOwner: s.cfg.owner(),
	})
	var b []byte
	if err == nil {
		b, err = readBody(out.Body, aws.ToInt64(out.ContentLength))
	}
	s.metrics.observe(op, key, time.Since(start), int64(len(b)), err)
	if err != nil {
		if rng != nil {
			return nil, fmt.Errorf("get s3://%s/%s range %s: %w", s.cfg.Bucket, key, *rng, err)
		}
		return nil, fmt.Errorf("get s3://%s/%s: %w", s.cfg.Bucket, key, err)
	}
	return b, nil
}

// readBody reads a response body of the announced length and closes it; a body that ends
// early is io.ErrUnexpectedEOF (retriable), one that runs long is refused.
func readBody(body io.ReadCloser, n int64) ([]byte, error) {
	defer body.Close()
	if n < 0 {
		return io.ReadAll(body)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(body, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read body (%d bytes announced): %w", n, err)
	}
	var one [1]byte
	if m, _ := body.Read(one[:]); m > 0 {
		return nil, fmt.Errorf("read body: more than the %d bytes announced", n)
	}
	return b, nil
}

// Head describes an object without reading it.
func (s *Store) Head(ctx context.Context, key string) (ObjectInfo, error) {
	if err := checkKey(key); err != nil {
		return ObjectInfo{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	start := time.Now()
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(key), ExpectedBucketOwner: s.cfg.owner()})
	s.metrics.observe(OpHead, key, time.Since(start), 0, err)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("head s3://%s/%s: %w", s.cfg.Bucket, key, err)
	}
	return ObjectInfo{Key: key, Size: aws.ToInt64(out.ContentLength), ETag: aws.ToString(out.ETag), LastModified: aws.ToTime(out.LastModified)}, nil
}

// KeyError is the server's refusal to delete one key of a batch.
type KeyError struct {
	Code    string
	Message string
}

// Error says why the key was not deleted.
func (e *KeyError) Error() string { return fmt.Sprintf("delete refused: %s: %s", e.Code, e.Message) }

// DeleteObjects deletes keys, 1000 per request. Keys the server refused are returned in
// failed with the server's reason; err reports a request that failed as a whole, in which
// case the keys of that batch and of later batches are left untouched (failed holds only
// the per-key errors of earlier batches). Deleting a missing key is a success in S3.
func (s *Store) DeleteObjects(ctx context.Context, keys []string) (failed map[string]error, err error) {
	failed = map[string]error{}
	for lo := 0; lo < len(keys); lo += deleteBatch {
		batch := keys[lo:min(lo+deleteBatch, len(keys))]
		objs := make([]types.ObjectIdentifier, len(batch))
		for i, k := range batch {
			if err := checkKey(k); err != nil {
				return failed, err
			}
			objs[i] = types.ObjectIdentifier{Key: aws.String(k)}
		}
		out, err := s.deleteBatch(ctx, objs)
		if err != nil {
			return failed, fmt.Errorf("delete %d keys (batch at %d of %d) in s3://%s: %w", len(batch), lo, len(keys), s.cfg.Bucket, err)
		}
		for _, e := range out.Errors {
			failed[aws.ToString(e.Key)] = &KeyError{Code: aws.ToString(e.Code), Message: aws.ToString(e.Message)}
		}
	}
	return failed, nil
}

func (s *Store) deleteBatch(ctx context.Context, objs []types.ObjectIdentifier) (*s3.DeleteObjectsOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	start := time.Now()
	out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
		Bucket:              aws.String(s.cfg.Bucket),
		Delete:              &types.Delete{Objects: objs, Quiet: aws.Bool(true)},
		ExpectedBucketOwner: s.cfg.owner(),
	})
	s.metrics.observe(OpDeleteObjects, batchKey(s.cfg.KeyPrefix, objs), time.Since(start), 0, err)
	return out, err
}

// List calls fn for every object whose key starts with prefix, in key order, one page
// request at a time (each page has its own deadline). An error from fn stops the listing
// and is returned as is.
func (s *Store) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	return s.list(ctx, listInput{prefix: prefix}, fn)
}

// ListAfter is List of the keys under prefix that sort after startAfter ("" lists all).
func (s *Store) ListAfter(ctx context.Context, prefix, startAfter string, fn func(ObjectInfo) error) error {
	return s.list(ctx, listInput{prefix: prefix, startAfter: startAfter}, fn)
}

func (s *Store) list(ctx context.Context, li listInput, fn func(ObjectInfo) error) error {
	prefix := li.prefix
	in := &s3.ListObjectsV2Input{Bucket: aws.String(s.cfg.Bucket), Prefix: aws.String(prefix), StartAfter: li.startAfterPtr(), ExpectedBucketOwner: s.cfg.owner()}
	if s.cfg.ListPageSize > 0 {
		in.MaxKeys = aws.Int32(s.cfg.ListPageSize)
	}
	for {
		out, err := s.listPage(ctx, in)
		if err != nil {
			return fmt.Errorf("list s3://%s/%s: %w", s.cfg.Bucket, prefix, err)
		}
		for _, o := range out.Contents {
			info := ObjectInfo{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size), ETag: aws.ToString(o.ETag), LastModified: aws.ToTime(o.LastModified)}
			if err := fn(info); err != nil {
				return err
			}
		}
		if !aws.ToBool(out.IsTruncated) {
			return nil
		}
		if aws.ToString(out.NextContinuationToken) == "" {
			return fmt.Errorf("list s3://%s/%s: truncated page without a continuation token", s.cfg.Bucket, prefix)
		}
		in.ContinuationToken = out.NextContinuationToken
	}
}

func (s *Store) listPage(ctx context.Context, in *s3.ListObjectsV2Input) (*s3.ListObjectsV2Output, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	start := time.Now()
	out, err := s.client.ListObjectsV2(ctx, in)
	s.metrics.observe(OpList, aws.ToString(in.Prefix), time.Since(start), 0, err)
	return out, err
}

// EnsureBucket creates the bucket unless it exists already (owned by these credentials).
func (s *Store) EnsureBucket(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	start := time.Now()
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.cfg.Bucket), ExpectedBucketOwner: s.cfg.owner()})
	s.metrics.observe(OpEnsureBucket, "", time.Since(start), 0, err)
	if err == nil {
		return nil
	}
	if !IsNotFound(err) {
		return fmt.Errorf("head bucket %s: %w", s.cfg.Bucket, err)
	}
	in := &s3.CreateBucketInput{Bucket: aws.String(s.cfg.Bucket)}
	if s.cfg.Region != "us-east-1" {
		in.CreateBucketConfiguration = &types.CreateBucketConfiguration{LocationConstraint: types.BucketLocationConstraint(s.cfg.Region)}
	}
	start = time.Now()
	_, err = s.client.CreateBucket(ctx, in)
	s.metrics.observe(OpEnsureBucket, "", time.Since(start), 0, err)
	var owned *types.BucketAlreadyOwnedByYou
	if err != nil && !errors.As(err, &owned) {
		return fmt.Errorf("create bucket %s: %w", s.cfg.Bucket, err)
	}
	return nil
}
