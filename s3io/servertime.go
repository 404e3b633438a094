package s3io

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// ServerTime asks the object store for its clock: the Date header of a listing of one key
// under prefix. Ages that decide what may be deleted (garbage's grace period, recovery's
// "a live cluster may own it") are measured on this clock against objects' LastModified,
// never on the local one. Date has a resolution of one second.
func (s *Store) ServerTime(ctx context.Context, prefix string) (time.Time, error) {
	in := &s3.ListObjectsV2Input{Bucket: aws.String(s.cfg.Bucket), Prefix: aws.String(prefix), MaxKeys: aws.Int32(1), ExpectedBucketOwner: s.cfg.owner()}
	out, err := s.listPage(ctx, in)
	if err != nil {
		return time.Time{}, fmt.Errorf("server time of s3://%s: %w", s.cfg.Bucket, err)
	}
	raw, ok := awsmiddleware.GetRawResponse(out.ResultMetadata).(*smithyhttp.Response)
	if !ok || raw == nil || raw.Response == nil {
		return time.Time{}, fmt.Errorf("server time of s3://%s: no HTTP response to read a Date from", s.cfg.Bucket)
	}
	date := raw.Header.Get("Date")
	t, err := http.ParseTime(date)
	if err != nil {
		return time.Time{}, fmt.Errorf("server time of s3://%s: Date header %q: %w", s.cfg.Bucket, date, err)
	}
	return t.UTC(), nil
}
