package s3io

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// ListDir lists one level under prefix (delimiter "/"): the objects directly under it and
// the sub-prefixes (each ending in "/"), in key order, one page request at a time. It is how
// a tool finds streams (<key-prefix>/<h4>/<stream>/) without listing their objects.
func (s *Store) ListDir(ctx context.Context, prefix string) (objects []ObjectInfo, prefixes []string, err error) {
	in := &s3.ListObjectsV2Input{Bucket: aws.String(s.cfg.Bucket), Prefix: aws.String(prefix), Delimiter: aws.String("/"), ExpectedBucketOwner: s.cfg.owner()}
	if s.cfg.ListPageSize > 0 {
		in.MaxKeys = aws.Int32(s.cfg.ListPageSize)
	}
	for {
		out, err := s.listPage(ctx, in)
		if err != nil {
			return nil, nil, fmt.Errorf("list s3://%s/%s (one level): %w", s.cfg.Bucket, prefix, err)
		}
		for _, o := range out.Contents {
			objects = append(objects, ObjectInfo{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size), ETag: aws.ToString(o.ETag), LastModified: aws.ToTime(o.LastModified)})
		}
		for _, p := range out.CommonPrefixes {
			prefixes = append(prefixes, aws.ToString(p.Prefix))
		}
		if !aws.ToBool(out.IsTruncated) {
			return objects, prefixes, nil
		}
		if aws.ToString(out.NextContinuationToken) == "" {
			return nil, nil, fmt.Errorf("list s3://%s/%s: truncated page without a continuation token", s.cfg.Bucket, prefix)
		}
		in.ContinuationToken = out.NextContinuationToken
	}
}
