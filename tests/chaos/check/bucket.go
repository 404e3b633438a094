package check

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/logging"
)

// Bucket reads (and, for the checker's own tests, writes) the bucket directly with the
// AWS SDK, bypassing the fault injector and streamtier's own S3 layer.
type Bucket struct {
	client *s3.Client
	name   string
}

// Object is one listed object.
type Object struct {
	Key          string
	Size         int64
	ETag         string
	LastModified time.Time
}

// BucketConfig says where the bucket is.
type BucketConfig struct {
	Endpoint, Region, Bucket, AccessKey, SecretKey string
}

// NewBucket returns a client of the bucket c names (path-style addressing, static keys).
func NewBucket(c BucketConfig) *Bucket {
	client := s3.New(s3.Options{
		BaseEndpoint:               aws.String(c.Endpoint),
		Region:                     c.Region,
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(c.AccessKey, c.SecretKey, ""),
		Logger:                     logging.Nop{},
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		Retryer:                    aws.NopRetryer{},
	})
	return &Bucket{client: client, name: c.Bucket}
}

// List lists every object under prefix.
func (b *Bucket) List(ctx context.Context, prefix string) ([]Object, error) {
	var out []Object
	p := s3.NewListObjectsV2Paginator(b.client, &s3.ListObjectsV2Input{Bucket: &b.name, Prefix: &prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list %s/%s: %w", b.name, prefix, err)
		}
		for _, o := range page.Contents {
			out = append(out, Object{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size), ETag: aws.ToString(o.ETag), LastModified: aws.ToTime(o.LastModified)})
		}
	}
	return out, nil
}

// ErrNoSuchKey is returned by Get for a missing object.
var ErrNoSuchKey = errors.New("no such key")

// Get reads a whole object.
func (b *Bucket) Get(ctx context.Context, key string) ([]byte, error) {
	out, err := b.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &b.name, Key: &key})
	if err != nil {
		var nsk *types.NoSuchKey
		if errors.As(err, &nsk) {
			return nil, fmt.Errorf("get %s: %w", key, ErrNoSuchKey)
		}
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	defer out.Body.Close()
	body, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, fmt.Errorf("get %s: read body: %w", key, err)
	}
	return body, nil
}

// Put writes an object (checker tests build broken buckets with it).
func (b *Bucket) Put(ctx context.Context, key string, body []byte) error {
	_, err := b.client.PutObject(ctx, &s3.PutObjectInput{Bucket: &b.name, Key: &key, Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body)))})
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// Delete deletes an object.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	if _, err := b.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &b.name, Key: &key}); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}
