package s3io

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithy "github.com/aws/smithy-go"
)

// ErrPreconditionFailed marks a conditional write the store refused: an object exists
// already under the key (If-None-Match: *), or it is no longer the one named (If-Match).
// For a version 3 root it means another writer took that seq: a persist conflict.
var ErrPreconditionFailed = errors.New("precondition failed")

// ErrNoConditionalCreate marks an object store that does not honour If-None-Match: * (the
// second of two conditional creates of one key succeeded, or the header was refused): it
// cannot keep one root per seq, and a node refuses it.
var ErrNoConditionalCreate = errors.New("object store does not honour conditional creates (If-None-Match: *)")

// IsPreconditionFailed reports whether err is a conditional write's refusal: 412
// PreconditionFailed, or 409 ConditionalRequestConflict (a concurrent conditional write of
// the same key), or ErrPreconditionFailed.
func IsPreconditionFailed(err error) bool {
	if errors.Is(err, ErrPreconditionFailed) {
		return true
	}
	switch responseStatus(err) {
	case 412:
		return true
	case 409:
		var apiErr smithy.APIError
		return errors.As(err, &apiErr) && apiErr.ErrorCode() == "ConditionalRequestConflict"
	}
	return false
}

// PutObjectIfAbsent stores a small object only if no object exists under key
// (If-None-Match: *), with its CRC-32 as PutObject does. A refusal wraps
// ErrPreconditionFailed; any other error leaves the outcome as the class says (a retriable
// error may have stored it: retry the same bytes, and a refusal then may be one's own PUT,
// which the caller tells apart by reading the object).
func (s *Store) PutObjectIfAbsent(ctx context.Context, key string, body []byte) error {
	return s.putConditional(ctx, key, body, func(in *s3.PutObjectInput) { in.IfNoneMatch = aws.String("*") })
}

// PutObjectIfMatch replaces the object under key only if its ETag is still etag
// (If-Match); a refusal wraps ErrPreconditionFailed.
func (s *Store) PutObjectIfMatch(ctx context.Context, key string, body []byte, etag string) error {
	if etag == "" {
		return fmt.Errorf("%w: conditional replace of s3://%s/%s without an ETag", ErrInvalidArgument, s.cfg.Bucket, key)
	}
	return s.putConditional(ctx, key, body, func(in *s3.PutObjectInput) { in.IfMatch = aws.String(etag) })
}

func (s *Store) putConditional(ctx context.Context, key string, body []byte, cond func(*s3.PutObjectInput)) error {
	if err := checkKey(key); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	in := s.putInput(key, bytes.NewReader(body), int64(len(body)), crc32.ChecksumIEEE(body))
	cond(in)
	start := time.Now()
	_, err := s.client.PutObject(ctx, in, unsignedPayload)
	s.metrics.observe(OpPutObject, key, time.Since(start), int64(len(body)), err)
	switch {
	case err == nil:
		return nil
	case IsPreconditionFailed(err):
		return fmt.Errorf("conditional put s3://%s/%s: %w: %w", s.cfg.Bucket, key, ErrPreconditionFailed, err)
	}
	return fmt.Errorf("conditional put s3://%s/%s: %w", s.cfg.Bucket, key, err)
}

// GetObjectInfo reads a whole (small) object with its ETag and LastModified, what a
// conditional replace (If-Match) and the store-clock ages need.
func (s *Store) GetObjectInfo(ctx context.Context, key string) ([]byte, ObjectInfo, error) {
	if err := checkKey(key); err != nil {
		return nil, ObjectInfo{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	start := time.Now()
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(key), ExpectedBucketOwner: s.cfg.owner()})
	var b []byte
	if err == nil {
		b, err = readBody(out.Body, aws.ToInt64(out.ContentLength))
	}
	s.metrics.observe(OpGetObject, key, time.Since(start), int64(len(b)), err)
	if err != nil {
		return nil, ObjectInfo{}, fmt.Errorf("get s3://%s/%s: %w", s.cfg.Bucket, key, err)
	}
	return b, ObjectInfo{Key: key, Size: int64(len(b)), ETag: aws.ToString(out.ETag), LastModified: aws.ToTime(out.LastModified)}, nil
}

// ProbeKeyPrefix is where the conditional-create probe writes, under the key prefix:
// <key-prefix>/probe/<random>. Its objects are deleted at once; a leftover of a crash is
// neither a stream's object nor the claim, and the claim check ignores it.
func ProbeKeyPrefix(keyPrefix string) string { return keyPrefix + "/probe/" }

// ProbeConditionalCreate checks that the store honours If-None-Match: *: it creates a
// fresh probe key conditionally twice, and the second must be refused (412 or 409). It
// deletes the probe key afterwards. An error wrapping ErrNoConditionalCreate says why the
// store is refused; any other error is the store failing (retry).
func (s *Store) ProbeConditionalCreate(ctx context.Context, keyPrefix string) error {
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return fmt.Errorf("conditional create probe: random key: %w", err)
	}
	key := ProbeKeyPrefix(keyPrefix) + hex.EncodeToString(r[:])
	body := []byte("streamtier conditional create probe\n")
	defer func() {
		// Best effort: a leftover is ignored by the claim check and by gc.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RequestTimeout)
		defer cancel()
		_, _ = s.DeleteObjects(dctx, []string{key})
	}()
	if err := s.PutObjectIfAbsent(ctx, key, body); err != nil {
		if errors.Is(err, ErrPreconditionFailed) {
			return fmt.Errorf("%w: s3://%s/%s: the first conditional create of a fresh key was refused: %v", ErrNoConditionalCreate, s.cfg.Bucket, key, err)
		}
		if Classify(err) == ClassNonTransient {
			return fmt.Errorf("%w: s3://%s/%s: a conditional create was refused: %v", ErrNoConditionalCreate, s.cfg.Bucket, key, err)
		}
		return fmt.Errorf("conditional create probe: %w", err)
	}
	err := s.PutObjectIfAbsent(ctx, key, body)
	switch {
	case err == nil:
		return fmt.Errorf("%w: s3://%s/%s: the second conditional create of one key succeeded (the store ignores If-None-Match; a store that honours it answers 412)", ErrNoConditionalCreate, s.cfg.Bucket, key)
	case errors.Is(err, ErrPreconditionFailed):
		return nil
	}
	return fmt.Errorf("conditional create probe: second create: %w", err)
}
